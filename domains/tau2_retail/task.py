"""The retail corpus as BC / offline-RL datasets of one role (the TaskSpec's `make_task`).

Files under config.task.root:

    tau2_retail/{train,eval}/dialogues.jsonl                   corpus.py self-play (generated
                                                               tasks x every agent skill)
    tau2_retail/tokenizer                                      BPE on the train split, with
                                                               roles agent, customer, tool and
                                                               the single-id [tool] markers
    datasets/tau2_retail_{role}_{context}_L{max_length}/...    ilql_dialogue.tasks

config.task fields beyond the generic ones: `train_tasks`, `eval_tasks` (generated tasks per
split), `skills` (the agents that play them; default all), `vocab_size`, `data_dir` (the
τ²-bench folder; '' = $TAU2_RETAIL_DATA_DIR). Tool results are turns of speaker "tool": in the
MDP of either role they are dynamics (no action, no loss), as the other side's turns are.
"""

from __future__ import annotations

import os

import ml_collections

from data_pipelines import tokenization
from data_pipelines.dialogue import read_jsonl
from domains.tau2_retail import agents, contexts, corpus, environment, generate, turns
from ilql_dialogue import tasks

NAME = "tau2_retail"
MARKERS = (turns.OPEN_TAG, turns.CLOSE_TAG)  # One id each: only the agent may write them.


def corpus_paths(root: str) -> dict[str, str]:
  return {split: os.path.join(root, NAME, split, "dialogues.jsonl") for split in tasks.SPLITS}


def _tokenizer(task_config: ml_collections.ConfigDict,
               paths: dict[str, str]) -> tokenization.DialogueTokenizer:
  directory = task_config.get("tokenizer") or os.path.join(task_config.root, NAME, "tokenizer")
  if not os.path.exists(os.path.join(directory, "tokenizer.json")):
    train = list(read_jsonl(paths["train"]))
    texts = [t.text for d in train for t in d.turns]
    texts += [contexts.serialize_context(r, d.context[r]) for d in train for r in d.context]
    tokenization.train_tokenizer(texts, turns.ROLES, task_config.get("vocab_size", 4096),
                                 markers=MARKERS).save(directory)
  return tokenization.load_tokenizer(directory, turns.ROLES, MARKERS)


def build_datasets(task_config: ml_collections.ConfigDict) -> dict[str, str]:
  """The corpus, its tokenizer and the role's datasets, each built when missing; returns the
  dataset path of each split."""
  root, role, context = task_config.root, task_config.role, task_config.context
  paths = corpus_paths(root)
  if not all(os.path.exists(p) for p in paths.values()):
    env = environment.RetailEnv(generate.SPLIT, task_config.get("data_dir") or None)
    skills = tuple(task_config.get("skills") or agents.AGENTS)
    corpus.write_corpus(paths, {"train": task_config.train_tasks,
                                "eval": task_config.eval_tasks}, env, skills)
  tokenizer = _tokenizer(task_config, paths)
  out_dir = tasks.dataset_dir(root, NAME, role, context, task_config.max_length,
                              task_config.get("tokenizer") or None)
  return tasks.build_role_datasets(out_dir, paths, tokenizer, role, task_config.max_length,
                                   serialize_context=contexts.serialize_context,
                                   include_context=context != "none")


def make_task(task_config: ml_collections.ConfigDict) -> tasks.Task:
  tokenizer, datasets = tasks.load_role_datasets(build_datasets(task_config))
  return tasks.Task(name=NAME, role=task_config.role, context=task_config.context,
                    tokenizer=tokenizer, datasets=datasets,
                    dialogue_paths=corpus_paths(task_config.root),
                    serialize_context=contexts.serialize_context,
                    include_context=task_config.context != "none")
