"""Multi-party dialogues as environments, and the one engine that plays any of them.

A task is data and an environment. The environment knows the task and
nothing about who plays it; the engine (`play`) knows the turn protocol and
nothing about the task; the parties (Party) know only their own
side. So evaluation (e.g. domains/airdialogue/environment.py) and online RL
(cotraining/: rewards for a trained role) run the same dialogues.

An environment defines:

  turn_order     the roles in speaking order; without tool turns, turn t is spoken by
                 turn_order[t % len(turn_order)]
  seed_streams   role -> an int: each party draws its row seeds from its own
                 stream (`row_seeds`), so adding a party changes no other's
  sample         the scenario sampler: (seed, num) -> the first `num`
                 scenarios of that seed, the same prefix for any num
  scenario_key   a scenario's stable name (row seeds are derived from it)
  context        (scenario, role) -> that role's PRIVATE context as JSON
  ending         (scenario, role, text) -> an Ending when that turn ends the
                 dialogue (e.g. an action block), else None
  reward         Episode -> float, the return of the whole dialogue
  OUTCOME        (optional) the end reason of a dialogue that ended with the task's outcome
                 stated (AirDialogue "action", P4G "donation"); co-training's zero-sum
                 simulator reward pays only those

Tool turns and per-row state, each optional (`observe` needs OBSERVER):

  OBSERVER       the speaker name of observation turns (e.g. "tool"); never a role of
                 turn_order, so no party plays it
  start          (scenario, key) -> the row's own state, made once per row before its first
                 turn (e.g. a fresh copy of a database): `ending`, `observe` and `finish` get
                 it in place of the scenario, so rows never share state, even rows of one
                 scenario (a group of rollouts); the Episode keeps the scenario
  observe        (row, role, text) -> str | None: when a turn of `role` holds a tool call,
                 the environment executes it on that row's state and returns the
                 observation text; the engine appends it as a turn of OBSERVER and the same
                 role speaks again (None: an ordinary turn, the next role speaks)
  finish         (row, Episode) -> info added to the episode's (e.g. the reward's parts read
                 off the row's final database, its counts of failed tool calls)

So rows need not share a speaker at a step: the engine keeps, per row, who speaks
next, and at each step calls each role's party once with the rows it must answer
(None for the others), roles in turn order, skipping a role with none. Without
`observe` every live row has the same speaker at every step and play is exactly the
alternation of turn_order. A turn that ends the dialogue is not observed.

The engine adds the endings every task shares: "turn_limit" (max_turns turns
without an ending; observation turns count, and the observation of a row's last
tool call is kept even past the limit) and "<role>_ended" (a party answered None
for a live row, e.g. its context window is full).
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from data_pipelines.dialogue import Turn
from ilql_dialogue.party import Party

TURN_LIMIT = "turn_limit"


def party_ended(role: str) -> str:
  """End reason of a dialogue that `role`'s party ended by answering None."""
  return f"{role}_ended"


@dataclasses.dataclass(frozen=True)
class Ending:
  """A turn that ended its dialogue: why, and what the environment read from it."""

  reason: str
  info: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Episode:
  """One finished dialogue; `key` names its row (the scenario's key, or key/copy)."""

  scenario: Any
  key: str
  turns: tuple[Turn, ...]
  end_reason: str
  info: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class Environment(Protocol):
  """What a task defines for a rollout (see the module docstring)."""

  turn_order: tuple[str, ...]
  seed_streams: Mapping[str, int]

  def sample(self, seed: int, num: int) -> list[Any]:
    ...

  def scenario_key(self, scenario: Any) -> str:
    ...

  def context(self, scenario: Any, role: str) -> Mapping[str, Any]:
    ...

  def ending(self, scenario: Any, role: str, text: str) -> Ending | None:
    ...

  def reward(self, episode: Episode) -> float:
    ...


def _tool_hooks(env: Environment) -> tuple[Any, str | None]:
  """(observe, OBSERVER) of an environment with tool turns, else (None, None)."""
  observe = getattr(env, "observe", None)
  if observe is None:
    return None, None
  observer = getattr(env, "OBSERVER", None)
  if not isinstance(observer, str) or not observer or observer in env.turn_order:
    raise ValueError(f"play: an environment with `observe` needs OBSERVER, a speaker name "
                     f"outside turn_order {list(env.turn_order)}; got {observer!r}")
  return observe, observer


def row_seeds(seed: int, keys: Sequence[str], stream: int) -> list[int]:
  """One seed per row from (seed, party stream, row key): independent of batching."""
  return [int(np.random.SeedSequence([seed, stream, zlib.crc32(k.encode())])
              .generate_state(1, np.uint64)[0]) for k in keys]


def _check_replies(role: str, replies: Any, batch: int) -> list[str | None]:
  if not isinstance(replies, (list, tuple)) or len(replies) != batch:
    raise ValueError(f"{role} party: respond must return a list of {batch} replies, got "
                     f"{replies!r:.200}")
  for b, reply in enumerate(replies):
    if reply is not None and not isinstance(reply, str):
      raise ValueError(f"{role} party: reply of row {b} is {type(reply).__name__}, not str or None")
  return list(replies)


def play(env: Environment, parties: Mapping[str, Party], scenarios: Sequence[Any], *,
         max_turns: int, seed: int = 0, keys: Sequence[str] | None = None) -> list[Episode]:
  """Plays one batch of dialogues in lockstep to the end; one Episode per row.

  Every `respond` call covers all live rows a role must answer at that step, so a
  learned party decodes them at once. `keys` name the rows (default: the scenario
  keys); rows that share a scenario but not a key (a group of rollouts) draw
  different seeds, and a row replays identically in any batch. Tool turns: see the
  module docstring.
  """
  if max_turns < 1:
    raise ValueError(f"max_turns={max_turns} must be >= 1")
  missing = sorted(set(env.turn_order) - set(parties))
  if missing:
    raise ValueError(f"play: no party for roles {missing}")
  observe, observer = _tool_hooks(env)
  batch = len(scenarios)
  keys = [env.scenario_key(s) for s in scenarios] if keys is None else list(keys)
  if len(keys) != batch:
    raise ValueError(f"play: {len(keys)} row keys for {batch} scenarios")
  start = getattr(env, "start", None)
  rows = [start(s, k) for s, k in zip(scenarios, keys)] if start else list(scenarios)
  for role in env.turn_order:
    parties[role].reset([env.context(s, role) for s in scenarios],
                        row_seeds(seed, keys, env.seed_streams[role]))
  histories: list[list[Turn]] = [[] for _ in range(batch)]
  ended: list[Ending | None] = [None] * batch
  speaker = [0] * batch  # Per row, the index in turn_order of who speaks next.
  while True:
    for b, history in enumerate(histories):
      if ended[b] is None and len(history) >= max_turns:
        ended[b] = Ending(TURN_LIMIT)
    if all(e is not None for e in ended):
      break
    # Who answers at this step is fixed before anyone does: a row whose turn passes to the
    # next role here is answered by that role at the next step, never twice in one step.
    asked = [speaker[b] if ended[b] is None else None for b in range(batch)]
    for index, role in enumerate(env.turn_order):
      answering = [a == index for a in asked]
      if not any(answering):
        continue
      replies = _check_replies(role, parties[role].respond(
          [h if ask else None for h, ask in zip(histories, answering)]), batch)
      for b in np.flatnonzero(answering):
        if replies[b] is None:
          ended[b] = Ending(party_ended(role))
          continue
        histories[b].append(Turn(role, replies[b]))
        ended[b] = env.ending(rows[b], role, replies[b])
        observation = None if ended[b] or observe is None else observe(rows[b], role, replies[b])
        if observation is None:
          speaker[b] = (index + 1) % len(env.turn_order)
        elif isinstance(observation, str):
          histories[b].append(Turn(observer, observation))
        else:
          raise ValueError(f"play: observe gave row {b} a {type(observation).__name__}, "
                           "not str or None")
  episodes = [Episode(scenario=s, key=k, turns=tuple(h), end_reason=e.reason, info=dict(e.info))
              for s, k, h, e in zip(scenarios, keys, histories, ended)]
  finish = getattr(env, "finish", None)
  if finish is None:
    return episodes
  return [dataclasses.replace(e, info={**e.info, **finish(row, e)})
          for row, e in zip(rows, episodes)]
