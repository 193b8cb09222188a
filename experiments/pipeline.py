"""`python -m experiments.pipeline --workdir=DIR [--config=...] [--config.key=value]`.

The main job behind `make run`: it hands the config to `pipeline_lib.run`.
"""

from absl import app, flags
from ml_collections import config_flags

from experiments import pipeline_lib

_CONFIG = config_flags.DEFINE_config_file(
    "config", "experiments/configs/quickstart.py", "Pipeline configuration file.")
_WORKDIR = flags.DEFINE_string("workdir", "runs/quickstart", "Where every stage writes.")


def main(argv):
  del argv
  pipeline_lib.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
