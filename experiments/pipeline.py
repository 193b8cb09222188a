"""`python -m experiments.pipeline --workdir=DIR [--config=...] [--config.key=value]`.

The main job behind `make run`: workflows/quickstart.py checks the config (every
stage's section, each run's training config, the evaluated pairs), then runs
its stages.
"""

import signal
import sys

from absl import flags, logging

from data_pipelines import cli
from workflows import quickstart

_CONFIG = cli.define_config_file(
    "config", "experiments/configs/quickstart.py", "Pipeline configuration file.")
_WORKDIR = flags.DEFINE_string("workdir", "runs/quickstart", "Where every stage writes.")


def main(argv):
  del argv
  quickstart.validate(_CONFIG.value, _WORKDIR.value)
  try:
    quickstart.run(_CONFIG.value, _WORKDIR.value)
  except quickstart.Stopped as e:  # Not a failure: exit as a process SIGTERM ended would.
    logging.warning("%s", e)
    sys.exit(128 + signal.SIGTERM)


if __name__ == "__main__":
  cli.run(main)
