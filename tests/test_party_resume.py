"""party.resume: a fresh party brought to rows standing at different turns of one batch says
what lockstep `environment.play` said there (same seeds), for scripted parties (replayed), a
learned party at temperature 1 (its histories loaded), the k-sample picker and the CALM
planner; a replay that disagrees with the history names the row and the turn."""

import dataclasses
import functools

import numpy as np
import pytest
from flax import nnx

import cotraining_toy as toy
import test_calm_model as calm_toy
import test_rollout
from calm import model as calm_model, planning
from cotraining.k_sample import KSamplePicker
from data_pipelines.dialogue import Turn
from domains.airdialogue import environment as airdialogue_env
from domains.airdialogue import task as airdialogue
from domains.airdialogue.parties import AGENT, CUSTOMER, ScriptedAgent, ScriptedCustomer
from ilql_dialogue import environment, party
from ilql_dialogue.lm_party import LMParty
from ilql_dialogue.parties import make_party

SEED = 3


def every_turn_of(episodes, role):
  """(episode, turn index) of every turn `role` said: rows at many different turns."""
  return [(e, t) for e in episodes for t, turn in enumerate(e.turns) if turn.speaker == role]


def resumed_replies(env, fresh, role, points, seed=SEED):
  """`fresh` resumed at every point in ONE batch, then asked once: (replies, recorded)."""
  contexts = [env.context(e.scenario, role) for e, _ in points]
  seeds = environment.row_seeds(seed, [e.key for e, _ in points], env.seed_streams[role])
  histories = [list(e.turns[:t]) for e, t in points]
  party.resume(fresh, contexts, seeds, histories)
  return fresh.respond(histories), [e.turns[t].text for e, t in points]


# --- Scripted parties: replayed -----------------------------------------------------------


@functools.cache
def airdialogue_episodes():
  env = airdialogue_env.AirDialogueEnv()
  parties = {AGENT: ScriptedAgent("oracle", "train"), CUSTOMER: make_party("people:partial",
                                                                           CUSTOMER)}
  return env, environment.play(env, parties, env.sample(1000, 4), max_turns=40, seed=SEED)


@pytest.mark.parametrize("role,spec", [(AGENT, "scripted_agent:oracle/train"),
                                       (CUSTOMER, "people:partial")])
def test_replayed_scripted_parties_continue_as_lockstep_play(role, spec):
  env, episodes = airdialogue_episodes()
  points = every_turn_of(episodes, role)
  assert len({t for _, t in points}) > 3  # Rows at many turns (the customer's first: none).
  replies, recorded = resumed_replies(env, make_party(spec, role), role, points)
  assert replies == recorded


def test_a_replay_that_disagrees_with_the_history_names_row_and_turn():
  env, episodes = airdialogue_episodes()
  longest = max(episodes, key=lambda e: len(e.turns))
  t = max(k for k, turn in enumerate(longest.turns) if turn.speaker == AGENT)
  assert t >= 3
  turns = list(longest.turns)
  turns[1] = Turn(AGENT, "Something the agent never said.")
  edited = dataclasses.replace(longest, turns=tuple(turns))
  with pytest.raises(ValueError, match="row 1, turn 1: the party says"):
    resumed_replies(env, ScriptedAgent("oracle", "train"), AGENT, [(episodes[0], 1), (edited, t)])


def test_a_party_without_a_role_replays_every_second_turn_back():
  history = [Turn("a", "1"), Turn("b", "2"), Turn("a", "3"), Turn("b", "4"), Turn("a", "5")]
  assert party.own_turns(history, None) == [1, 3] == party.own_turns(history, "b")
  assert party.own_turns(history[:4], None) == [0, 2]
  assert party.own_turns([], None) == []


# --- Learned parties: histories loaded ------------------------------------------------------


@functools.cache
def toy_model():
  return toy.make_model(toy.config(), std=0.4)


def toy_bot(**kwargs):
  """One word per reply, drawn at temperature 1: its text re-encodes to the id it sampled."""
  return toy.bot(toy_model(), max_new_tokens=1, temperature=1.0, only_words=True, **kwargs)


@pytest.mark.parametrize("wrap", ["lm", "pick"])
def test_a_learned_party_at_temperature_one_continues_as_lockstep_play(wrap):
  make = (toy_bot if wrap == "lm" else
          lambda: KSamplePicker(toy_bot(), k=3, pick="weighted"))
  env = toy.ToyEnv(one_shot=False)
  played = make()
  episodes = environment.play(env, {"user": toy.Talker(), "bot": played}, env.sample(5, 3),
                              max_turns=10, seed=SEED)
  points = every_turn_of(episodes, "bot")
  fresh = make()
  replies, recorded = resumed_replies(env, fresh, "bot", points)
  assert len(set(recorded)) > 1  # Sampled, not one modal word.
  assert replies == recorded
  inner = fresh if wrap == "lm" else fresh.party
  own = [sum(turn.speaker == "bot" for turn in e.turns[:t]) + 1 for e, t in points]
  k = 1 if wrap == "lm" else 3
  assert inner._calls.tolist() == np.repeat(own, k).tolist()  # Per-row sampling counters.


def test_a_row_samples_with_its_own_count_whatever_other_rows_did():
  """A row's n-th reply uses its own key folded with n: row 0 says in a pair what it says
  alone, and row 1, joining a turn late, says first what it says first alone."""
  history = [Turn("user", "hi there")]
  alone = toy_bot()
  alone.reset([{}], [11])
  first = alone.respond([history])[0]
  later = history + [Turn("bot", first), Turn("user", "yes or no")]
  second = alone.respond([later])[0]
  late = toy_bot()
  late.reset([{}], [12])
  late_first = late.respond([history])[0]
  pair = toy_bot()
  pair.reset([{}, {}], [11, 12])
  assert pair.respond([history, None]) == [first, None]
  assert pair.respond([later, history]) == [second, late_first]
  assert pair._calls.tolist() == [2, 1]


# --- CALM planning ----------------------------------------------------------------------------


def round_trip_ids(tok, count=8):
  """Plain ids whose text re-encodes to themselves (no markers, no special tokens)."""
  special = set(tok.special_ids) | set(tok.marker_ids.values())
  ids = [i for i in range(tok.vocab_size) if i not in special
         and tok.decode([i]).strip() and tok.encode(tok.decode([i]).strip()) == [i]]
  return ids[100:100 + count]


@functools.cache
def calm_agent_model():
  tok = test_rollout.marker_tokenizer()
  c = calm_toy._tiny_config(vocab=-(-tok.vocab_size // 128) * 128)
  c.model.max_seq_len = 256
  return calm_model.CALM.from_config(c).init(c, nnx.Rngs(0))


def calm_planner():
  tok = test_rollout.marker_tokenizer()
  model = calm_agent_model()
  allowed = set(round_trip_ids(tok)) | {tok.eot_id}
  lm = LMParty(model, tok, AGENT, include_context=False, prefix_fields=airdialogue.table_fields,
               max_new_tokens=1, max_positions=256, temperature=1.0,
               forbidden_ids=[i for i in range(model.cfg.vocab_size) if i not in allowed])
  return planning.CALMPlanner(lm, n=1)


def test_the_calm_planner_continues_as_lockstep_play():
  env = airdialogue_env.AirDialogueEnv()
  episodes = environment.play(env, {AGENT: calm_planner(), CUSTOMER: ScriptedCustomer("chatty")},
                              env.sample(1000, 2), max_turns=12, seed=SEED)
  points = every_turn_of(episodes, AGENT)
  fresh = calm_planner()
  replies, recorded = resumed_replies(env, fresh, AGENT, points)
  assert len(set(recorded)) > 1
  assert replies == recorded
  assert fresh._turns.tolist() == [sum(turn.speaker == AGENT for turn in e.turns[:t]) + 1
                                   for e, t in points]
