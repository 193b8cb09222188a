"""Multi-party dialogues as environments, and the one engine that plays any of them.

A task is data and an environment. The environment knows the task and
nothing about who plays it; the engine (`play`) knows the turn protocol and
nothing about the task; the parties (Party) know only their own
side. So evaluation (e.g. domains/airdialogue/environment.py) and online RL
(cotraining/: rewards for a trained role) run the same dialogues.

An environment defines:

  turn_order     the roles in speaking order; turn t is spoken by
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

The engine adds the endings every task shares: "turn_limit" (max_turns
utterances without an ending) and "<role>_ended" (a party answered None for
a live row, e.g. its context window is full).
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

  Every `respond` call covers all live rows of one role, so a learned party
  decodes the batch at once. `keys` name the rows (default: the scenario
  keys); rows that share a scenario but not a key (a group of rollouts)
  draw different seeds, and a row replays identically in any batch.
  """
  if max_turns < 1:
    raise ValueError(f"max_turns={max_turns} must be >= 1")
  missing = sorted(set(env.turn_order) - set(parties))
  if missing:
    raise ValueError(f"play: no party for roles {missing}")
  batch = len(scenarios)
  keys = [env.scenario_key(s) for s in scenarios] if keys is None else list(keys)
  if len(keys) != batch:
    raise ValueError(f"play: {len(keys)} row keys for {batch} scenarios")
  for role in env.turn_order:
    parties[role].reset([env.context(s, role) for s in scenarios],
                        row_seeds(seed, keys, env.seed_streams[role]))
  histories: list[list[Turn]] = [[] for _ in range(batch)]
  ended: list[Ending | None] = [None] * batch
  for turn in range(max_turns):
    role = env.turn_order[turn % len(env.turn_order)]
    live = [e is None for e in ended]
    if not any(live):
      break
    replies = _check_replies(role, parties[role].respond(
        [h if alive else None for h, alive in zip(histories, live)]), batch)
    for b in np.flatnonzero(live):
      if replies[b] is None:
        ended[b] = Ending(party_ended(role))
        continue
      histories[b].append(Turn(role, replies[b]))
      ended[b] = env.ending(scenarios[b], role, replies[b])
  return [Episode(scenario=s, key=k, turns=tuple(h), end_reason=(e or Ending(TURN_LIMIT)).reason,
                  info=dict((e or Ending(TURN_LIMIT)).info))
          for s, k, h, e in zip(scenarios, keys, histories, ended)]
