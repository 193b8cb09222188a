"""The retail corpus as BC / offline-RL datasets of one role (the TaskSpec's `make_task`).

Files under config.task.root:

    tau2_retail/{train,eval}/dialogues.jsonl                   corpus.py self-play (generated
                                                               tasks x every agent skill)
    tau2_retail/{train,eval}/{role}_view.jsonl                 the same as the role's model
                                                               reads it (lm_view.py: tool
                                                               results shortened; the
                                                               customer sees no tool turn)
    tau2_retail/tokenizer                                      BPE on the train split, with
                                                               roles agent, customer, tool and
                                                               the single-id [tool] markers
    datasets/tau2_retail_{role}_{context}_L{max_length}/...    ilql_dialogue.tasks

config.task fields beyond the generic ones: `train_tasks`, `eval_tasks` (generated tasks per
split), `skills` (the agents that play them; default all), `vocab_size`, `data_dir` (the
τ²-bench folder; '' = $TAU2_RETAIL_DATA_DIR). Tool results are turns of speaker "tool": in the
MDP of either role they are dynamics (no action, no loss), as the other side's turns are. The
datasets are built from the role's view (lm_view.py) and the Task's `read_turn` makes a party
playing the model read the environment's turns the same way; the corpus, the environment and
its reward keep the full records.
"""

from __future__ import annotations

import os

import ml_collections

from data_pipelines import tokenization
from data_pipelines.dialogue import read_jsonl, write_jsonl
from domains.tau2_retail import (agents, contexts, corpus, environment, generate, lm_view,
                                 turns)
from ilql_dialogue import tasks

NAME = "tau2_retail"
MARKERS = (turns.OPEN_TAG, turns.CLOSE_TAG)  # One id each: only the agent may write them.


def corpus_paths(root: str) -> dict[str, str]:
  return {split: os.path.join(root, NAME, split, "dialogues.jsonl") for split in tasks.SPLITS}


def view_paths(root: str, role: str) -> dict[str, str]:
  return {split: os.path.join(root, NAME, split, f"{role}_view.jsonl") for split in tasks.SPLITS}


def _write_views(paths: dict[str, str], views: dict[str, str], role: str) -> None:
  for split, path in views.items():
    if not os.path.exists(path):
      write_jsonl(path + ".partial", (lm_view.dialogue_view(d, role)
                                      for d in read_jsonl(paths[split])))
      os.rename(path + ".partial", path)


def _tokenizer(task_config: ml_collections.ConfigDict,
               paths: dict[str, str]) -> tokenization.DialogueTokenizer:
  directory = task_config.get("tokenizer") or os.path.join(task_config.root, NAME, "tokenizer")
  if not os.path.exists(os.path.join(directory, "tokenizer.json")):
    train = list(read_jsonl(paths["train"]))  # As the agent reads it: every turn, shortened.
    texts = [t.text for d in train for t in lm_view.dialogue_view(d, turns.AGENT).turns]
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
  views = view_paths(root, role)
  _write_views(paths, views, role)
  out_dir = tasks.dataset_dir(root, NAME, role, context, task_config.max_length,
                              task_config.get("tokenizer") or None)
  return tasks.build_role_datasets(out_dir, views, tokenizer, role, task_config.max_length,
                                   serialize_context=contexts.serialize_context,
                                   include_context=context != "none")


def make_task(task_config: ml_collections.ConfigDict) -> tasks.Task:
  tokenizer, datasets = tasks.load_role_datasets(build_datasets(task_config))
  return tasks.Task(name=NAME, role=task_config.role, context=task_config.context,
                    tokenizer=tokenizer, datasets=datasets,
                    dialogue_paths=view_paths(task_config.root, task_config.role),
                    serialize_context=contexts.serialize_context,
                    include_context=task_config.context != "none",
                    read_turn=lm_view.READERS[task_config.role])
