"""Launches a training run from a config file.

    python -m experiments.train --config=experiments/configs/bc_tiny.py \
        --workdir=runs/bc_tiny [--config.train.steps=500 ...]

A config with a `task` section (e.g. bc_airdialogue_quick.py) gets its data
from ilql_dialogue/tasks (datasets built on first use, structured prefix).

Re-running the same command in the same workdir resumes from its latest
checkpoint. Multi-host: pass --jax_distributed on every host (coordinator
flags, or auto-detection on TPU / SLURM / Kubernetes).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Callable, Iterator

import jax
import ml_collections
import numpy as np
import tokenizers
from absl import app, flags, logging
from ml_collections import config_flags

from ilql_dialogue import baselines, bc, ilql, train_loop

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints, metrics and plots go here.",
                               required=True)
_DISTRIBUTED = flags.DEFINE_bool("jax_distributed", False,
                                 "Call jax.distributed.initialize() (multi-host runs).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "host:port of process 0 (omit to auto-detect).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")

SYNTHETIC_VOCAB = 128  # model.vocab_size for synthetic data when the config leaves it at 0.

# Algorithm name (config.algorithm.name) -> constructor from the config.
ALGORITHMS: dict[str, Callable[[ml_collections.ConfigDict], object]] = {
    "bc": lambda config: bc.BC(bc.lm_factory(config)),
    "ilql": ilql.ILQL.from_config,
    "filtered_bc": baselines.FilteredBC.from_config,
    "mc_value": baselines.MCValue.from_config,
}


def synthetic_batches(config: ml_collections.ConfigDict) -> train_loop.TrainData:
  """Rows of arithmetic progressions mod vocab with random left padding; the
  second half of each row is the 'actions'. Learnable only by reading the
  context (start and stride differ per row), so falling loss means attention
  works. Each batch is a pure function of (seed, step)."""
  vocab, length = config.model.vocab_size, config.data.synthetic_length
  rows = config.train.batch_size // jax.process_count()

  def from_step(start: int) -> Iterator[dict[str, np.ndarray]]:
    step = start
    while True:
      rng = np.random.default_rng((config.seed, step, jax.process_index()))
      first, stride = rng.integers(0, vocab, (rows, 1)), rng.integers(1, 4, (rows, 1))
      pad = rng.integers(0, length // 4, (rows, 1))
      t_T = np.arange(length)
      mask_BxT = t_T >= pad
      yield {
          "input_ids": np.where(mask_BxT, (first + stride * (t_T - pad)) % vocab, 0
                                ).astype(np.int32),
          "attention_mask": mask_BxT,
          "action_mask": mask_BxT & (t_T - pad >= (length - pad) // 2),
      }
      step += 1

  return from_step


def mdp_batches(dataset, config: ml_collections.ConfigDict) -> train_loop.TrainData:
  """Length-bucketed batches of an MDP dataset, resumable by step.

  Every host plans the same global batch (the plan reads only lengths) and
  keeps its own slice of rows, so bucket lengths agree across hosts.
  """
  from data_pipelines import batching

  rows = config.train.batch_size // jax.process_count()
  lo = jax.process_index() * rows

  def from_step(start: int) -> Iterator[dict[str, np.ndarray]]:
    for batch in batching.stream(dataset, config.train.batch_size, config.seed, start,
                                 boundaries=tuple(config.data.bucket_boundaries) or None):
      yield {k: v[lo:lo + rows] for k, v in batch.items()}

  return from_step


def loss_eval(algorithm, dataset, config: ml_collections.ConfigDict) -> train_loop.EvalFn:
  """Mean of the algorithm's loss metrics over the first eval batches."""
  from data_pipelines import batching

  batches = []
  for batch in batching.batches(dataset, config.train.batch_size, config.seed, epoch=0,
                                boundaries=tuple(config.data.bucket_boundaries) or None):
    batches.append(batch)
    if len(batches) == config.data.eval_batches:
      break
  return train_loop.loss_evaluator(algorithm, batches)


def _resolve_vocab(config: ml_collections.ConfigDict) -> None:
  """The model must embed every id of the dataset's tokenizer (saved next to
  it); model.vocab_size=0 takes that size, rounded up to a multiple of 128 so
  the "vocab" axis divides over tensor-parallel devices."""
  path = os.path.join(config.data.dataset_dir, "tokenizer", "tokenizer.json")
  vocab = tokenizers.Tokenizer.from_file(path).get_vocab_size(with_added_tokens=True)
  if config.model.vocab_size <= 0:
    config.model.vocab_size = -(-vocab // 128) * 128
  elif config.model.vocab_size < vocab:
    raise ValueError(f"config.model.vocab_size={config.model.vocab_size} is smaller than the "
                     f"tokenizer of {config.data.dataset_dir} ({vocab} ids)")


def run(config: ml_collections.ConfigDict, workdir: str):
  """Builds the algorithm and data named by `config` and trains."""
  config = copy.deepcopy(config)  # Resolved fields (vocab size) must not leak to the caller.
  if config.algorithm.name not in ALGORITHMS:
    raise ValueError(f"config.algorithm.name={config.algorithm.name!r}; known: "
                     f"{sorted(ALGORITHMS)}")
  algorithm = ALGORITHMS[config.algorithm.name](config)
  eval_fn = None
  if config.get("task") is not None:  # A dataset role with its own data plumbing (tasks/).
    from ilql_dialogue import tasks
    task = tasks.make_task(config)
    tasks.configure_model(config, task)
    if hasattr(algorithm, "filter_dataset"):  # Filtered BC trains on its top dialogues only.
      task = dataclasses.replace(task, datasets={
          **task.datasets, "train": algorithm.filter_dataset(task.datasets["train"])})
    train_data = tasks.train_data(task, config)
    eval_fn = train_loop.loss_evaluator(algorithm, tasks.eval_batches(task, config))
  elif config.data.synthetic:
    if config.model.vocab_size <= 0:
      config.model.vocab_size = SYNTHETIC_VOCAB
    train_data = synthetic_batches(config)
  elif config.data.dataset_dir:
    from data_pipelines.mdp_dataset import load_mdp_dataset
    _resolve_vocab(config)
    train_set = load_mdp_dataset(config.data.dataset_dir)
    if hasattr(algorithm, "filter_dataset"):
      train_set = algorithm.filter_dataset(train_set)
    train_data = mdp_batches(train_set, config)
    if config.data.eval_dataset_dir:
      eval_fn = loss_eval(algorithm, load_mdp_dataset(config.data.eval_dataset_dir), config)
  else:
    raise ValueError("config.data: set dataset_dir=DIR (python -m data_pipelines.build_dataset) "
                     "or synthetic=True")
  return train_loop.train_and_evaluate(config, workdir, algorithm, train_data, eval_fn)


def main(argv):
  del argv
  if _DISTRIBUTED.value:
    jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  logging.info("JAX %s: process %d/%d, %d devices.", jax.__version__, jax.process_index(),
               jax.process_count(), jax.device_count())
  run(_CONFIG.value, os.path.abspath(_WORKDIR.value))


if __name__ == "__main__":
  app.run(main)
