r"""Writes the retail self-play corpus (corpus.py): generated tasks x the scripted agents.

    python -m domains.tau2_retail.make_corpus --out_dir=DIR [--train_tasks=1000 \
        --eval_tasks=100 --skills=oracle,no_auth,no_confirm,wrong_item --data_dir=...]

writes DIR/{train,eval}/dialogues.jsonl (train: generator seed 0, eval: seed 1), each task
played once by every skill, and prints per split and skill the mean reward, its db and
communicate parts and the policy breaches per dialogue. The same flags write the same files.
"""

from __future__ import annotations

import collections
import json
import os

from absl import flags

from data_pipelines import cli
from data_pipelines.dialogue import read_jsonl
from domains.tau2_retail import agents, corpus, environment, generate

_OUT_DIR = flags.DEFINE_string("out_dir", None, "Where {train,eval}/dialogues.jsonl go.",
                               required=True)
_TRAIN = flags.DEFINE_integer("train_tasks", 1000, "Generated tasks of the train split (seed 0).",
                              lower_bound=1)
_EVAL = flags.DEFINE_integer("eval_tasks", 100, "Generated tasks of the eval split (seed 1).",
                             lower_bound=1)
_SKILLS = flags.DEFINE_list("skills", list(agents.AGENTS), "The agents that play every task.")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "The τ²-bench retail folder; '' = "
                                "$TAU2_RETAIL_DATA_DIR.")


def _stats(path: str) -> dict[str, dict[str, float]]:
  by_skill = collections.defaultdict(list)
  for dialogue in read_jsonl(path):
    by_skill[dialogue.meta["skill"]].append(dialogue)
  return {skill: {"dialogues": len(ds),
                  "reward": sum(d.outcome for d in ds) / len(ds),
                  "db": sum(d.meta["db"] for d in ds) / len(ds),
                  "communicate": sum(d.meta["communicate"] for d in ds) / len(ds),
                  "breaches": sum(d.meta["breaches"] for d in ds) / len(ds)}
          for skill, ds in by_skill.items()}


def main(argv):
  del argv
  unknown = sorted(set(_SKILLS.value) - set(agents.AGENTS))
  if unknown or not _SKILLS.value:
    raise cli.BadInput(f"--skills={','.join(_SKILLS.value)}: unknown {unknown}; known: "
                       f"{list(agents.AGENTS)}")
  if _DATA_DIR.value:
    cli.existing_dir(_DATA_DIR.value, "--data_dir")
  cli.output_dir(_OUT_DIR.value, "--out_dir")
  with cli.reported_as("--data_dir"):
    env = environment.RetailEnv(generate.SPLIT, _DATA_DIR.value or None)
  paths = {split: os.path.join(_OUT_DIR.value, split, "dialogues.jsonl")
           for split in corpus.SPLIT_SEEDS}
  corpus.write_corpus(paths, {"train": _TRAIN.value, "eval": _EVAL.value}, env, _SKILLS.value)
  print(json.dumps({split: {"path": path, "skills": _stats(path)}
                    for split, path in paths.items()}, indent=2))


if __name__ == "__main__":
  cli.run(main)
