"""A self-play corpus: generated tasks x the scripted agents of every skill, as Dialogue JSON lines.

Each generated task is played by each agent of `skills` (agents.AGENTS: the oracle and the
degraded ones) against the scripted customer in its profile's style and phrasing family (drawn
from the task's seed among the training families, generate.py), through the engine
(environment.play, tool turns included), so one task's oracle dialogue sits beside its
degraded ones and offline RL has good and bad behaviour to tell apart by their reward. A
dialogue's `outcome` is the environment's reward (τ²'s db x communicate on a proper ending,
else 0); its `meta` holds the skill, the task id and the episode's info (both reward parts,
tool errors, policy breaches).

Splits differ by generator seed (train 0, eval 1); evaluation plays other seeds (1000 reported,
2000 for selection) or the real tasks, which no corpus uses.

The command is make_corpus.py.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from data_pipelines.dialogue import Dialogue, write_jsonl
from domains.tau2_retail import agents, environment, generate, parties, turns
from ilql_dialogue import environment as engine

SPLIT_SEEDS = {"train": 0, "eval": 1}
BATCH_SIZE = 64


def to_dialogue(env: environment.RetailEnv, episode: engine.Episode, skill: str) -> Dialogue:
  return Dialogue(dialogue_id=episode.key, roles=turns.ROLES, turns=episode.turns,
                  context={role: env.context(episode.scenario, role) for role in env.turn_order},
                  outcome=env.reward(episode),
                  meta={"skill": skill, "end_reason": episode.end_reason, **episode.info})


def self_play(env: environment.RetailEnv, seed: int, num: int,
              skills: Sequence[str] = tuple(agents.AGENTS), *,
              max_turns: int = environment.DEFAULT_MAX_TURNS) -> list[Dialogue]:
  """The first `num` generated tasks of `seed`, each played by every skill, task by task."""
  if env.split != generate.SPLIT:
    raise ValueError(f"self_play: a corpus is played on generated tasks, not {env.split!r} "
                     "(the real tasks are for evaluation only)")
  scenarios = env.sample(seed, num)
  out = []
  for start in range(0, num, BATCH_SIZE):
    batch = scenarios[start:start + BATCH_SIZE]
    played = {}
    for skill in skills:
      party = {turns.AGENT: parties.ScriptedAgent(skill),
               turns.CUSTOMER: parties.ScriptedCustomer(parties.PROFILE)}
      played[skill] = engine.play(env, party, batch, max_turns=max_turns, seed=seed,
                                  keys=[f"{s.key}/{skill}" for s in batch])
    for b in range(len(batch)):
      out += [to_dialogue(env, played[skill][b], skill) for skill in skills]
  return out


def write_corpus(paths: Mapping[str, str], sizes: Mapping[str, int],
                 env: environment.RetailEnv,
                 skills: Sequence[str] = tuple(agents.AGENTS)) -> None:
  """Writes each split's dialogues to paths[split] (atomically; kept when present)."""
  for split, path in paths.items():
    if os.path.exists(path):
      continue
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_jsonl(path + ".partial", self_play(env, SPLIT_SEEDS[split], sizes[split], skills))
    os.rename(path + ".partial", path)

