"""Registers Persuasion for Good: the task (persuader and persuadee) and its environment."""

from __future__ import annotations

import os

import ml_collections

from data_pipelines.persuasion import loader
from domains.persuasion import environment, study, task
from ilql_dialogue import registry


def _make_env(options: ml_collections.ConfigDict) -> environment.PersuasionEnv:
  return environment.PersuasionEnv.from_corpus(
      options.get("split", "train"), options.get("data_dir") or None,
      no_donation_reward=options.get("no_donation_reward", 0.0))


def _check_data(task_config: ml_collections.ConfigDict, where: str) -> None:
  """The corpus the task's datasets are built from exists, unless they are built."""
  if all(os.path.isfile(p) for p in task.corpus_paths(task_config.root).values()):
    return
  try:
    data_dir = loader.resolve_data_dir(task_config.get("data_dir") or None)
  except loader.MissingCorpusError as e:
    raise ValueError(f"{where}.task.data_dir: {e}") from None
  for name in (loader.FULL_DIALOG, loader.FULL_INFO):
    if not os.path.isfile(os.path.join(data_dir, name)):
      raise ValueError(f"{where}.task.data_dir={data_dir}: {name} missing; not a Persuasion "
                       "for Good folder")


TASK = registry.register_task(registry.TaskSpec(
    name=task.NAME,
    roles=loader.ROLES,
    contexts={role: task.CONTEXTS for role in loader.ROLES},
    serialize_context=task.serialize_persona,
    make_task=task.make_task,
    make_env=_make_env,
    block_markers={loader.ROLES[1]: task.MARKERS},
    check_data=_check_data,
    study=study.STUDY,
))
