"""A training workdir -> a sampling-ready policy: model, tokenizer, config and layout.

What a workdir holds (ilql_dialogue/train_loop.py): `config.json` (the
resolved config) and `checkpoints/<step>/state` (the whole train state:
model, optimizer, rng). Only the `model` subtree is read, straight into
single-device arrays, so evaluation never allocates optimizer moments.

Layout (role, tokenizer, how the private context reaches the model) comes
from what the run trained on, so decoding reproduces it instead of assuming:

  * a task run (config.task, experiments/configs/bc_*.py): the Task
    (ilql_dialogue/tasks) gives the role, the dataset's tokenizer, the context
    serialization, and the structured-prefix fields of a `context=prefix` run;
  * a plain dataset run (config.data.dataset_dir): the tokenizer is
    `<workdir>/tokenizer` if present, else `<dataset_dir>/tokenizer`; the
    role, whether a context prefix was used, and which serialization made it
    are read off the dataset's first example (each candidate serialization is
    re-encoded and compared with the stored tokens).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any, Callable

import ml_collections
from flax import nnx

from data_pipelines import mdp
from data_pipelines.tokenization import DialogueTokenizer, load_tokenizer
from ilql_dialogue import registry, tasks, value_guidance
from ilql_dialogue.lm_party import LMParty
from ilql_dialogue.restore import read_config, restore_model
from ilql_dialogue.value_heads import ILQLModel


@dataclasses.dataclass(frozen=True)
class Policy:
  """A restored model and everything needed to decode with it as in training.

  `model` is what the algorithm trained (BC: the Transformer; ILQL: the
  ILQLModel); `decoder` is the module the sampler runs. `role` is None when
  the training data could not be read (then the caller names the role).
  """

  model: nnx.Module
  decoder: nnx.Module
  tokenizer: DialogueTokenizer
  config: ml_collections.ConfigDict
  role: str | None
  include_context: bool
  serialize_context: mdp.SerializeContext
  step: int
  workdir: str
  prefix_fields: Callable[[Any, str], Any] | None = None  # Structured-prefix runs only.
  read_turn: Callable[[Any], str | None] | None = None  # Task.read_turn of a task run.

  def hook(self, batch_size: int, beta: float = 0.0) -> Any | None:
    """ILQL value guidance (logits + beta (Q - V)) for ILQL models with beta != 0."""
    if beta == 0.0:
      return None
    if not isinstance(self.model, ILQLModel):
      raise ValueError(f"{self.workdir}: beta={beta} needs an ILQL checkpoint, this one is "
                       f"{self.config.algorithm.name!r}")
    return value_guidance.value_guidance(self.model, beta, batch_size)


def find_tokenizer_dir(workdir: str, config: ml_collections.ConfigDict) -> str:
  candidates = [os.path.join(workdir, "tokenizer")]
  dataset_dir = config.get("data", {}).get("dataset_dir") or ""
  if dataset_dir:
    candidates.append(os.path.join(dataset_dir, "tokenizer"))
  for directory in candidates:
    if os.path.exists(os.path.join(directory, "tokenizer.json")):
      return directory
  raise ValueError(f"{workdir}: no tokenizer in {candidates}; save the training tokenizer to "
                   f"{candidates[0]}")


def training_layout(dataset_dir: str, tokenizer: DialogueTokenizer
                    ) -> tuple[str, bool, mdp.SerializeContext]:
  """(role, include_context, serialize_context) of the dataset's first example."""
  from data_pipelines.mdp_dataset import load_mdp_dataset  # datasets: only when needed.

  example = load_mdp_dataset(dataset_dir)[0]
  role, ids = example["role"], example["input_ids"][:example["length"]]
  if ids[0] != tokenizer.context_id:
    return role, False, mdp.json_context
  context = json.loads(example["context_json"])
  stored = ids[1:ids.index(tokenizer.dialogue_id)] if tokenizer.dialogue_id in ids else ids[1:]
  serializations = registry.serializations()
  for serialize in serializations.values():
    try:
      encoded = tokenizer.encode(serialize(role, context))
    except (ValueError, KeyError):
      continue
    if encoded[:len(stored)] == stored:
      return role, True, serialize
  raise ValueError(f"{dataset_dir}: field 'input_ids': the context tokens of example 0 match "
                   f"none of the serializations {sorted(serializations)}")


def _task_layout(config: ml_collections.ConfigDict) -> dict[str, Any]:
  task = tasks.make_task(config)
  return dict(role=task.role, tokenizer=task.tokenizer, include_context=task.include_context,
              serialize_context=task.serialize_context,
              prefix_fields=None if task.prefix is None else task.prefix.fields,
              read_turn=task.read_turn)


def _dataset_layout(workdir: str, config: ml_collections.ConfigDict, role: str | None,
                    tokenizer_dir: str | None) -> dict[str, Any]:
  tokenizer = load_tokenizer(tokenizer_dir or find_tokenizer_dir(workdir, config))
  dataset_dir = config.get("data", {}).get("dataset_dir") or ""
  if dataset_dir and os.path.isdir(dataset_dir):
    data_role, include_context, serialize = training_layout(dataset_dir, tokenizer)
  elif role is None:
    raise ValueError(f"{workdir}: training dataset {dataset_dir!r} not found; pass role= "
                     f"(and check the context layout)")
  else:
    data_role, include_context, serialize = None, True, mdp.json_context
  return dict(role=data_role, tokenizer=tokenizer, include_context=include_context,
              serialize_context=serialize)


def load_policy(workdir: str, *, step: int | None = None, role: str | None = None,
                tokenizer_dir: str | None = None) -> Policy:
  """Restores a workdir's checkpoint as a Policy (see the module docstring).

  `role` / `tokenizer_dir` override what the workdir and its data say.
  """
  workdir = os.path.abspath(workdir)
  config = read_config(workdir)
  model, step = restore_model(workdir, config, step)
  if config.get("task") is not None:
    layout = _task_layout(config)
    if tokenizer_dir:
      layout["tokenizer"] = load_tokenizer(tokenizer_dir)
  else:
    layout = _dataset_layout(workdir, config, role, tokenizer_dir)
  layout["role"] = role or layout["role"]
  if layout["tokenizer"].vocab_size > config.model.vocab_size:
    raise ValueError(f"{workdir}: tokenizer has {layout['tokenizer'].vocab_size} ids, the model "
                     f"embeds only {config.model.vocab_size}")
  decoder = value_guidance.decoding_model(model) if isinstance(model, ILQLModel) else model
  return Policy(model=model, decoder=decoder, config=config, step=step, workdir=workdir,
                **layout)


def lm_party(policy: Policy, role: str, *, beta: float = 0.0,
             **options: Any) -> LMParty:
  """An LMParty playing `role` with `policy`; `options` are LMParty's sampling keywords."""
  if policy.role is not None and policy.role != role:
    raise ValueError(f"{policy.workdir}: trained to play {policy.role!r}, asked to play {role!r}")
  hook = None if beta == 0.0 else functools.partial(policy.hook, beta=beta)
  task = policy.config.get("task")
  markers = registry.block_markers(task.name) if task is not None else None
  return LMParty(policy.decoder, policy.tokenizer, role, include_context=policy.include_context,
                 serialize_context=policy.serialize_context, prefix_fields=policy.prefix_fields,
                 block_markers=markers, hook=hook, read_turn=policy.read_turn, **options)
