"""The guessing game as a task: its corpus, tokenizer and MDP datasets, and `TASK`.

A config names it `examples.guess_city.task:TASK`; the registry imports this
module on first use, so nothing outside this package knows the task. Files
under config.task.root:

    guess_city/{train,eval}/dialogues.jsonl                  corpus.py self-play
    guess_city/tokenizer                                     BPE on the train split
    datasets/guess_city_{role}_{context}_L{max_length}/...   ilql_dialogue.tasks
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import ml_collections

from data_pipelines import tokenization
from data_pipelines.dialogue import read_jsonl
from examples.guess_city import corpus, environment, world
from ilql_dialogue import registry, tasks

NAME = "guess_city"
CONTEXTS = {world.ASKER: ("none",), world.ANSWERER: ("text", "none")}
MARKERS = (world.GUESS_OPEN, world.GUESS_CLOSE)  # One token each: only the asker may write them.


def serialize_context(role: str, context: Mapping[str, Any]) -> str:
  """The answerer's city and facts, e.g. `Lima: americas, coastal, capital, big`."""
  if role != world.ANSWERER or not context:
    return ""
  facts = [context["region"], "coastal" if context["coastal"] else "inland",
           "capital" if context["capital"] else "not capital",
           "big" if context["big"] else "small"]
  return f"{context['name']}: {', '.join(facts)}"


def corpus_paths(root: str) -> dict[str, str]:
  return {split: os.path.join(root, NAME, split, "dialogues.jsonl") for split in tasks.SPLITS}


def build_datasets(task_config: ml_collections.ConfigDict) -> dict[str, str]:
  """The corpus, its tokenizer and the role's datasets, each built when missing; returns the
  dataset path of each split."""
  root, role, context = task_config.root, task_config.role, task_config.context
  paths = corpus_paths(root)
  corpus.write_corpus(paths, {"train": task_config.train_dialogues,
                              "eval": task_config.eval_dialogues})
  tokenizer_dir = os.path.join(root, NAME, "tokenizer")
  if not os.path.exists(os.path.join(tokenizer_dir, "tokenizer.json")):
    train = list(read_jsonl(paths["train"]))
    texts = [t.text for d in train for t in d.turns]
    texts += [serialize_context(r, d.context[r]) for d in train for r in d.roles]
    tokenization.train_tokenizer(texts, world.ROLES, task_config.vocab_size,
                                 markers=MARKERS).save(tokenizer_dir)
  tokenizer = tokenization.load_tokenizer(tokenizer_dir, world.ROLES, MARKERS)
  out_dir = tasks.dataset_dir(root, NAME, role, context, task_config.max_length)
  return tasks.build_role_datasets(out_dir, paths, tokenizer, role, task_config.max_length,
                                   serialize_context=serialize_context,
                                   include_context=context == "text")


def make_task(task_config: ml_collections.ConfigDict) -> tasks.Task:
  tokenizer, datasets = tasks.load_role_datasets(build_datasets(task_config))
  return tasks.Task(name=NAME, role=task_config.role, context=task_config.context,
                    tokenizer=tokenizer, datasets=datasets,
                    dialogue_paths=corpus_paths(task_config.root),
                    serialize_context=serialize_context,
                    include_context=task_config.context == "text")


TASK = registry.TaskSpec(
    name=NAME,
    roles=world.ROLES,
    contexts=CONTEXTS,
    serialize_context=serialize_context,
    make_task=make_task,
    make_env=lambda options: environment.GuessCityEnv(),  # Scenarios come from seeds alone.
    block_markers={world.ASKER: MARKERS},
)
