"""Start-up checks of training configs, task sections, workdirs and party specs.

They need the core (algorithms, tasks, parties), so they live above it; the
generic flag and path checks they build on are data_pipelines/cli.py's. Each
raises data_pipelines.cli.BadInput, which `cli.run` prints as one line.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Sequence

import ml_collections

from data_pipelines import mdp_dataset
from data_pipelines.cli import (BadInput, check_known_fields, existing_dir, existing_file,
                                mdp_dataset_role, reported_as, same_tokenizer)
from ilql_dialogue import bc, init_from, parties, party_spec, registry, restore
from ilql_dialogue.checkpointing import BEST_DIR, CHECKPOINT_DIR
from ilql_dialogue.models.config import ModelConfig
from workflows.base_config import base_config

# Sections every training config has (workflows/base_config.py + algorithm and model).
TRAIN_SECTIONS = ("algorithm", "model", "train", "optim", "mesh")
VALUE_GUIDED = ("ilql", "mc_value")  # Algorithms whose model has Q and V heads (beta != 0).


def _open_options(spec: str) -> bool:
  """Whether a seed spec ends inside a wrapper's options ("calm:n=4" of "calm:n=4,m=2:RUN"),
  whose commas a list flag split."""
  head, sep, options = spec.rpartition("+")[2].partition(":")
  kind = registry.party_kind(head) if sep else None
  return (kind is not None and kind.target != "none" and "=" in options
          and ":" not in options)


def named_seeds(items: Sequence[str], what: str) -> dict[str, list[str]]:
  """["NAME=A+B+C", ...] (a list flag) -> {NAME: [A, B, C]}: one agent or run, several seeds.
  A wrapper's options ("calm:n=4,m=2:RUN") keep their commas."""
  joined: list[str] = []
  for item in items:
    if joined and _open_options(joined[-1].partition("=")[2]):
      joined[-1] += "," + item
    else:
      joined.append(item)
  named = {}
  for item in joined:
    name, sep, spec = item.partition("=")
    if not (name and sep and spec):
      raise BadInput(f"{what}: {item!r} is not NAME=SPEC[+SPEC...]")
    named[name] = spec.split("+")
  return named


# --- Training workdirs and party specs -----------------------------------------


def training_workdir(path: str, what: str, step: int | None = None) -> ml_collections.ConfigDict:
  """The config of a training workdir (experiments.train) that holds a checkpoint (`step`)."""
  existing_dir(path, what)
  if not os.path.isfile(os.path.join(path, "config.json")):
    raise BadInput(f"{what}={path}: no config.json; not a training workdir (experiments.train)")
  with reported_as(what):
    config = restore.read_config(path)

  def steps(directory: str) -> set[int]:
    directory = os.path.join(path, directory)
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return {int(n) for n in names if n.isdigit()}

  saved = steps(CHECKPOINT_DIR)
  if step is not None and step not in saved:
    raise BadInput(f"{what}={path}: no checkpoint at step {step}; saved: {sorted(saved)}")
  if not saved | steps(BEST_DIR):
    raise BadInput(f"{what}={path}: no checkpoint under {CHECKPOINT_DIR}/ yet")
  return config


def trained_role(path: str, config: ml_collections.ConfigDict, what: str) -> str:
  """The role a training workdir's model plays: its task's, else its dataset's."""
  if config.get("task") is not None:
    check_task(config, f"{what}={path}: config")
    return config.task.role
  dataset = (config.get("data") or {}).get("dataset_dir") or ""
  if not dataset:
    raise BadInput(f"{what}={path}: trained on no task or dataset, so it plays no role")
  return mdp_dataset_role(dataset, f"{what}={path}: its config.data.dataset_dir")


def task_workdir(path: str, what: str, step: int | None = None) -> ml_collections.ConfigDict:
  """A training workdir of a task run (config.task) whose task data is still there."""
  config = training_workdir(path, what, step)
  if config.get("task") is None:
    raise BadInput(f"{what}={path}: trained without a task (config.task), which this needs "
                   "(experiments/configs/bc_*.py, ilql_*.py)")
  check_task(config, f"{what}={path}: config")
  return config


def other_role(config: ml_collections.ConfigDict, where: str = "config") -> str:
  """The role an online evaluation's opponent plays: the trained role's opponent in its task."""
  with reported_as(f"{where}.task"):
    return registry.task(config.task.name).other_role(config.task.role)


def check_party(spec: str, role: str, what: str) -> ml_collections.ConfigDict | None:
  """A party spec (ilql_dialogue/party_spec.py) that can play `role`, checked without
  loading weights; returns the config of the training workdir it plays through, if any."""
  with reported_as(what):
    parsed = party_spec.parse(spec)
  checkpoint = parsed.checkpoint
  if checkpoint is not None and not os.path.isdir(checkpoint.target):
    raise BadInput(f"{what}={spec}: no such directory {checkpoint.target} (a party is "
                   f"{party_spec.usage()})")
  with reported_as(what):
    parties.check(parsed, role)
  if checkpoint is None:
    return None
  config = training_workdir(checkpoint.target, what, checkpoint.step)
  trained = trained_role(checkpoint.target, config, what)
  if trained != role:
    raise BadInput(f"{what}={spec}: trained to play {trained!r}, not the {role}")
  return config


# --- Training configs ----------------------------------------------------------


def validate_train_config(config: ml_collections.ConfigDict, where: str = "config") -> None:
  """Everything a training run reads from `config` (workflows/train.run), checked
  before anything is built: its fields, then the paths it names."""
  check_train_fields(config, where)
  check_train_paths(config, where)


def check_train_fields(config: ml_collections.ConfigDict, where: str = "config") -> None:
  """Sections, field names and values that need no file: the algorithm (by its own
  `from_config`), the model architecture (ModelConfig), the task's role and context."""

  missing = [s for s in TRAIN_SECTIONS if config.get(s) is None]
  if missing:
    raise BadInput(f"{where}: section(s) {missing} missing")
  base = base_config()
  for section in ("mesh", "train", "optim", "selection"):
    if config.get(section) is not None:
      check_known_fields(config[section], base[section], f"{where}.{section}")
  model_fields = {f.name for f in dataclasses.fields(ModelConfig)} | set(bc.NOT_ARCHITECTURE)
  check_known_fields(config.model, model_fields, f"{where}.model")
  name = config.algorithm.get("name")
  if name not in registry.algorithm_names():
    raise BadInput(f"{where}.algorithm.name={name!r}: unknown algorithm; known: "
                   f"{registry.algorithm_names()}")
  probe = copy.deepcopy(config)
  with probe.unlocked():
    probe.model.vocab_size = max(probe.model.get("vocab_size", 1), 1)  # 0 = from the data.
  try:
    registry.make_algorithm(probe, where)
  except ValueError as e:
    raise BadInput(str(e)) from None
  except (KeyError, AttributeError) as e:  # ConfigDict: a field the algorithm reads is missing.
    raise BadInput(f"{where}.algorithm: field {e} missing") from None
  if not config.model.get("init_from"):  # Else a Hugging Face or GGUF source may decide it.
    with reported_as(f"{where}.model"):
      bc.model_config(probe)
  if config.get("task") is not None:
    check_task(config, where, paths=False)
    with reported_as(f"{where}.data.train_part"):
      mdp_dataset.parse_part((config.get("data") or {}).get("train_part", ""))
  elif config.get("data") is None:
    raise BadInput(f"{where}: section 'task' or 'data' missing")
  elif not config.data.get("synthetic") and not config.data.get("dataset_dir"):
    raise BadInput(f"{where}.data: set dataset_dir=DIR (python -m data_pipelines.build_dataset) "
                   "or synthetic=True")


def check_train_paths(config: ml_collections.ConfigDict, where: str = "config") -> None:
  """The files and directories the config names exist and fit together: datasets of one role
  and one tokenizer, which is also that of the `model.init_from` source."""
  with reported_as():  # Its messages name config.model.borrow*.
    init_from.check_borrow(config.model, where)
  spec = config.model.get("init_from") or ""
  source, source_tokenizer, source_what = None, None, f"{where}.model.init_from={spec}"
  if spec:
    with reported_as():  # Its messages name config.model.init_from.
      source = init_from.parse(spec)
    if source.kind == "workdir":
      training_workdir(source.path, f"{where}.model.init_from", source.step)
    # What the data must share: a workdir's tokenizer exactly, an HF model's extended by the
    # dialogue tokens (a GGUF file keeps its tokenizer inside; the launcher checks it).
    source_tokenizer = {"workdir": os.path.join(source.path, init_from.TOKENIZER_DIR),
                        "hf": source.path}.get(source.kind)
  if config.get("task") is not None:
    check_task(config, where)
    if source is not None and source.kind != "workdir" and not config.task.get("tokenizer"):
      raise BadInput(f"{source_what} needs the data in its own vocabulary: set "
                     f"{where}.task.tokenizer to its tokenizer directory")
    if source is not None and source.kind == "hf":
      same_tokenizer(config.task.tokenizer, f"{where}.task.tokenizer={config.task.tokenizer}",
                     source.path, source_what, extends=True)
    online = config.get("online_eval")
    if online is not None and online.get("num_dialogues", 0) > 0:
      check_party(online.opponent, other_role(config, where), f"{where}.online_eval.opponent")
    return
  data = config.data
  if not data.get("dataset_dir"):
    return  # Synthetic data.
  what = f"{where}.data.dataset_dir"
  role = mdp_dataset_role(data.dataset_dir, what)
  tokenizer = os.path.join(data.dataset_dir, "tokenizer")
  if source_tokenizer:
    same_tokenizer(tokenizer, f"{what}={data.dataset_dir}", source_tokenizer, source_what,
                   extends=source.kind == "hf")
  if data.get("eval_dataset_dir"):
    eval_what = f"{where}.data.eval_dataset_dir"
    eval_role = mdp_dataset_role(data.eval_dataset_dir, eval_what)
    if eval_role != role:
      raise BadInput(f"{eval_what}={data.eval_dataset_dir}: built for role {eval_role!r}, but "
                     f"{what}={data.dataset_dir} for {role!r}")
    same_tokenizer(os.path.join(data.eval_dataset_dir, "tokenizer"),
                   f"{eval_what}={data.eval_dataset_dir}", tokenizer,
                   f"{what}={data.dataset_dir}")


def check_task(config: ml_collections.ConfigDict, where: str = "config", *,
               paths: bool = True) -> None:
  """config.task names a registered task, one of its roles and a context that role reads;
  with `paths`, the data its datasets are built from exists (registry.TaskSpec.check_data)."""
  task = config.task
  try:
    spec = registry.task(task.get("name") or "")
  except ValueError as e:
    raise BadInput(f"{where}.task.name={task.get('name')!r}: {e}") from None
  if task.get("role") not in spec.contexts:
    raise BadInput(f"{where}.task.role={task.get('role')!r}: {spec.name} roles are "
                   f"{list(spec.contexts)}")
  if task.get("context") not in spec.contexts[task.role]:
    raise BadInput(f"{where}.task.context={task.get('context')!r}: the {task.role} reads "
                   f"{list(spec.contexts[task.role])}")
  if not paths:
    return
  if task.get("tokenizer"):
    existing_dir(task.tokenizer, f"{where}.task.tokenizer")
    existing_file(os.path.join(task.tokenizer, "tokenizer.json"),
                  f"{where}.task.tokenizer: its file")
  if spec.check_data is not None:
    with reported_as():
      spec.check_data(task, where)
