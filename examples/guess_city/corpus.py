"""A self-play corpus: the scripted asker against the scripted answerer, as Dialogue JSON lines.

Splits differ by scenario seed (train 0, eval 1); evaluation plays other seeds
(environment.py), so no split is ever scored on the phrasings it was built from.
"""

from __future__ import annotations

import os

from data_pipelines.dialogue import Dialogue, write_jsonl
from examples.guess_city import environment, parties, world
from ilql_dialogue import environment as engine

SPLIT_SEEDS = {"train": 0, "eval": 1}


def self_play(seed: int, num: int, max_turns: int = environment.DEFAULT_MAX_TURNS
              ) -> list[Dialogue]:
  """`num` games of the scripted pair on env.sample(seed, num)."""
  env = environment.GuessCityEnv()
  scenarios = env.sample(seed, num)
  episodes = engine.play(env, {world.ASKER: parties.Asker(), world.ANSWERER: parties.Answerer()},
                         scenarios, max_turns=max_turns, seed=seed)
  return [Dialogue(dialogue_id=e.key, roles=world.ROLES, turns=e.turns,
                   context={r: env.context(e.scenario, r) for r in world.ROLES},
                   outcome=env.reward(e), meta={"city": e.scenario.city.name, "seed": seed})
          for e in episodes]


def write_corpus(paths: dict[str, str], sizes: dict[str, int]) -> None:
  """Writes each split's dialogues to paths[split] (atomically; kept when present)."""
  for split, path in paths.items():
    if os.path.exists(path):
      continue
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_jsonl(path + ".partial", self_play(SPLIT_SEEDS[split], sizes[split]))
    os.rename(path + ".partial", path)
