"""Launches a training run from a config file.

    python -m experiments.train --config=experiments/configs/bc_tiny.py \
        --workdir=runs/bc_tiny [--config.train.steps=500 ...]

Re-running the same command in the same workdir resumes from its latest
checkpoint. Multi-host: pass --jax_distributed on every host (coordinator
flags, or auto-detection on TPU / SLURM / Kubernetes); docs/SCALING.md has the
launch recipes.
"""

import os

import jax
from absl import flags, logging

from data_pipelines import cli
from ilql_dialogue import multihost
from workflows import config_checks, train

_CONFIG = cli.define_config_file("config", None, "Experiment config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints, metrics and plots go here.",
                               required=True)
_DISTRIBUTED = flags.DEFINE_bool("jax_distributed", False,
                                 "Call jax.distributed.initialize() (multi-host runs).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "host:port of process 0 (omit to auto-detect).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")


def main(argv):
  del argv
  config_checks.validate_train_config(_CONFIG.value)
  cli.output_dir(_WORKDIR.value, "--workdir")
  if _DISTRIBUTED.value:
    multihost.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
  logging.info("JAX %s: process %d/%d, %d devices.", jax.__version__, jax.process_index(),
               jax.process_count(), jax.device_count())
  train.run(_CONFIG.value, os.path.abspath(_WORKDIR.value))


if __name__ == "__main__":
  cli.run(main)
