"""Tool turns in the engine (environment.play with `observe`), the same lockstep play without
them, a learned party reading observation turns, and their place in the token-level MDP."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

import cotraining_toy as toy
from data_pipelines import mdp, tokenization
from data_pipelines.dialogue import Dialogue, Turn
from ilql_dialogue import environment
from ilql_dialogue.lm_party import LMParty


@dataclasses.dataclass
class Counter:
  """A row's own state: how many calls it executed."""

  calls: int = 0


class CalcEnv:
  """The user asks; the bot answers "call" (a tool call) `calls` times, then "done"; the
  user says "bye" after the bot's "done". The tool returns the row's running call count."""

  turn_order = ("user", "bot")
  seed_streams = {"user": 0, "bot": 1}
  OBSERVER = "tool"

  def __init__(self):
    self.started: list[Counter] = []

  def sample(self, seed, num):
    return [f"{seed}:{i}" for i in range(num)]

  def scenario_key(self, scenario):
    return scenario

  def context(self, scenario, role):
    return {"calls": int(scenario.split(":")[1]) % 3} if role == "bot" else {}

  def start(self, scenario, key):
    self.started.append(Counter())
    return self.started[-1]

  def ending(self, row, role, text):
    return environment.Ending("bye") if role == "user" and text == "bye" else None

  def observe(self, row, role, text):
    if role != "bot" or not text.startswith("call"):
      return None
    row.calls += 1
    return f"result {row.calls}"

  def finish(self, row, episode):
    return {"calls": row.calls}

  def reward(self, episode):
    return float(episode.end_reason == "bye")


class Recording:
  """Wraps a party; records which rows each `respond` call asked."""

  def __init__(self, party):
    self.party, self.asked = party, []

  def reset(self, contexts, seeds):
    self.party.reset(contexts, seeds)

  def respond(self, histories):
    self.asked.append([h is not None for h in histories])
    return self.party.respond(histories)


class User:
  def reset(self, contexts, seeds):
    pass

  def respond(self, histories):
    return [None if h is None else ("bye" if h and h[-1].text == "done" else "help")
            for h in histories]


class Bot:
  def reset(self, contexts, seeds):
    self.calls = [c["calls"] for c in contexts]

  def respond(self, histories):
    out = []
    for b, h in enumerate(histories):
      if h is None:
        out.append(None)
        continue
      made = sum(t.speaker == "tool" for t in h)
      out.append("call" if made < self.calls[b] else "done")
    return out


def test_a_tool_call_is_observed_and_the_same_role_speaks_again():
  env = CalcEnv()
  user, bot = Recording(User()), Recording(Bot())
  scenarios = env.sample(0, 3)  # Rows make 0, 1 and 2 calls.
  episodes = environment.play(env, {"user": user, "bot": bot}, scenarios, max_turns=20)
  speakers = [[t.speaker for t in e.turns] for e in episodes]
  assert speakers[0] == ["user", "bot", "user"]
  assert speakers[1] == ["user", "bot", "tool", "bot", "user"]
  assert speakers[2] == ["user", "bot", "tool", "bot", "tool", "bot", "user"]
  assert [t.text for t in episodes[2].turns if t.speaker == "tool"] == ["result 1", "result 2"]
  assert all(e.end_reason == "bye" for e in episodes)
  assert [e.info["calls"] for e in episodes] == [0, 1, 2]  # From `finish`.
  # Each step asks each role once, with only the rows that role must answer.
  assert user.asked == [[True] * 3, [True, False, False], [False, True, False],
                        [False, False, True]]
  assert bot.asked == [[True] * 3, [False, True, True], [False, False, True]]


def test_rows_of_one_scenario_never_share_state():
  env = CalcEnv()
  scenarios = ["0:2"] * 3
  episodes = environment.play(env, {"user": User(), "bot": Bot()}, scenarios, max_turns=20,
                              keys=["a", "b", "c"])
  assert len(env.started) == 3 and len({id(r) for r in env.started}) == 3
  assert [e.info["calls"] for e in episodes] == [2, 2, 2]
  assert all(e.scenario == "0:2" for e in episodes)  # The episode keeps the scenario.


def test_observation_turns_count_toward_max_turns():
  env = CalcEnv()
  episodes = environment.play(env, {"user": User(), "bot": Bot()}, ["0:2"], max_turns=3)
  # user, bot's call, its observation: three turns, the limit.
  assert [t.speaker for t in episodes[0].turns] == ["user", "bot", "tool"]
  assert episodes[0].end_reason == environment.TURN_LIMIT
  # A call as the last allowed turn keeps its observation.
  episodes = environment.play(env, {"user": User(), "bot": Bot()}, ["0:2"], max_turns=4)
  assert [t.speaker for t in episodes[0].turns] == ["user", "bot", "tool", "bot", "tool"]


def test_an_observer_must_be_named_apart_from_the_roles():
  env = CalcEnv()
  env.OBSERVER = "bot"
  with pytest.raises(ValueError, match="OBSERVER"):
    environment.play(env, {"user": User(), "bot": Bot()}, ["0:1"], max_turns=4)


def _lockstep(env, parties, scenarios, *, max_turns, seed=0, keys=None):
  """The engine as it was before tool turns: one role per step, turn_order[t % n]."""
  keys = [env.scenario_key(s) for s in scenarios] if keys is None else list(keys)
  for role in env.turn_order:
    parties[role].reset([env.context(s, role) for s in scenarios],
                        environment.row_seeds(seed, keys, env.seed_streams[role]))
  histories = [[] for _ in scenarios]
  ended = [None] * len(scenarios)
  for turn in range(max_turns):
    role = env.turn_order[turn % len(env.turn_order)]
    live = [e is None for e in ended]
    if not any(live):
      break
    replies = parties[role].respond([h if a else None for h, a in zip(histories, live)])
    for b in np.flatnonzero(live):
      if replies[b] is None:
        ended[b] = environment.Ending(environment.party_ended(role))
        continue
      histories[b].append(Turn(role, replies[b]))
      ended[b] = env.ending(scenarios[b], role, replies[b])
  return [environment.Episode(s, k, tuple(h), (e or environment.Ending("turn_limit")).reason,
                              dict((e or environment.Ending("turn_limit")).info))
          for s, k, h, e in zip(scenarios, keys, histories, ended)]


class Chatty:
  """Says "end" (an ending) or answers None (the party ends the row) at turns drawn from each
  row's seed, so rows end apart; otherwise a line numbered by the history's length."""

  def reset(self, contexts, seeds):
    rngs = [np.random.default_rng(s) for s in seeds]
    self.last = [(int(r.integers(1, 12)), bool(r.integers(2))) for r in rngs]

  def respond(self, histories):
    out = []
    for b, h in enumerate(histories):
      last, quits = self.last[b]
      out.append(None if h is None or (quits and len(h) >= last) else
                 "end" if len(h) >= last else f"turn {len(h)}")
    return out


class ThreeWay:
  """Three roles in turn; a turn saying "end" ends the row, noting who said it."""

  turn_order = ("a", "b", "c")
  seed_streams = {"a": 0, "b": 1, "c": 2}

  def sample(self, seed, num):
    return [f"{seed}:{i}" for i in range(num)]

  def scenario_key(self, scenario):
    return scenario

  def context(self, scenario, role):
    return {"role": role}

  def ending(self, scenario, role, text):
    return environment.Ending("said_end", {"by": role}) if text == "end" else None

  def reward(self, episode):
    return float(episode.end_reason == "said_end")


@pytest.mark.parametrize("max_turns", [1, 5, 30])
def test_without_observe_play_is_the_old_lockstep(max_turns):
  env = ThreeWay()
  scenarios = env.sample(3, 32)
  make = lambda: {role: Chatty() for role in env.turn_order}  # noqa: E731
  new = environment.play(env, make(), scenarios, max_turns=max_turns, seed=7)
  old = _lockstep(env, make(), scenarios, max_turns=max_turns, seed=7)
  assert new == old
  if max_turns == 30:  # Every way of ending is in the batch.
    assert {e.end_reason for e in new} >= {"said_end", "a_ended", "b_ended", "c_ended"}


# A learned party reading observation turns.

ROLES = ("user", "bot", "tool")


@functools.cache
def tool_tokenizer() -> tokenization.DialogueTokenizer:
  texts = list(toy.LINES) * 20 + ["call done result 1 2 bye help"] * 50
  return tokenization.train_tokenizer(texts, ROLES, vocab_size=330)


class CallingEnv(CalcEnv):
  """Every bot turn that is not after an observation is a tool call (whatever it says)."""

  def observe(self, row, role, text):
    if role != "bot" or row.calls % 2:
      row.calls += role == "bot"
      return None
    row.calls += 1
    return f"result {row.calls}"


def test_a_learned_party_reads_observations_like_the_other_side():
  tok = tool_tokenizer()
  config = toy.config()
  config.model.vocab_size = -(-tok.vocab_size // 64) * 64
  config.model.max_seq_len = 128
  model = toy.make_model(config)
  bot = LMParty(model, tok, "bot", max_new_tokens=3, temperature=0.0, include_context=False)
  env = CallingEnv()
  episodes = environment.play(env, {"user": User(), "bot": bot}, env.sample(0, 2), max_turns=7)
  speakers = [t.speaker for t in episodes[0].turns]
  assert speakers[:5] == ["user", "bot", "tool", "bot", "user"]
  tool_id = tok.speaker_token_ids["tool"]
  for b in range(2):
    at = bot.token_ids[b].index(tool_id)
    observed = tok.encode(episodes[b].turns[2].text)
    assert bot.token_ids[b][at + 1:at + 1 + len(observed)] == observed
    assert not any(bot.sampled[b][at:at + 2 + len(observed)])  # Read, never sampled.
    assert bot.token_ids[b][at + 2 + len(observed)] == tok.speaker_token_ids["bot"]
  assert tool_id in bot.forbidden_ids  # The bot cannot write an observation itself.

  no_tool = toy.tokenizer()  # Roles user and bot only.
  bot = LMParty(toy.make_model(toy.config()), no_tool, "bot", max_new_tokens=2,
                include_context=False)
  with pytest.raises(ValueError, match="'tool' is not another role"):
    environment.play(CallingEnv(), {"user": User(), "bot": bot}, ["0:0"], max_turns=5)


def test_observation_tokens_are_dynamics_in_the_mdp():
  tok = tool_tokenizer()
  turns = (Turn("user", "help"), Turn("bot", "call"), Turn("tool", "result 1"),
           Turn("bot", "done"), Turn("user", "bye"))
  ex = mdp.dialogue_to_example(Dialogue("d", ROLES, turns, outcome=1.0), tok, "bot", 64,
                               include_context=False)
  ids, action = list(ex["input_ids"]), ex["action_mask"]
  tool_at = ids.index(tok.speaker_token_ids["tool"])
  second_bot = ids.index(tok.speaker_token_ids["bot"], tool_at)
  assert not action[tool_at:second_bot + 1].any()  # The observation and the forced speaker.
  assert action[tool_at - 1] and action[second_bot + 1]  # The call's <|eot|>; the next turn.
  assert set(ex["speaker_ids"][tool_at:second_bot]) == {ROLES.index("tool") + 1}
  # After the call's <|eot|> the next decision state skips the observation.
  assert ex["next_token_index"][tool_at - 1] == second_bot
  assert ex["terminal"].sum() == 1 and ex["rewards"][ex["terminal"]][0] == 1.0
  user = mdp.dialogue_to_example(Dialogue("d", ROLES, turns), tok, "user", 64,
                                 include_context=False)
  assert not user["action_mask"][tool_at:second_bot].any()
