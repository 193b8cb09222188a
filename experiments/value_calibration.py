"""Held-out value calibration of a value-learning run (workflows/value_calibration.py).

    python -m experiments.value_calibration --workdir=runs/ilql_persuasion_quick [--split=eval]

Writes value_calibration_<split>.json and .png into the workdir and prints the JSON.
"""

import json

from absl import flags

from data_pipelines import cli
from ilql_dialogue import tasks
from workflows import config_checks, value_calibration

_WORKDIR = flags.DEFINE_string("workdir", None, "A training workdir of a value-learning run.",
                               required=True)
_SPLIT = flags.DEFINE_enum("split", "eval", tasks.SPLITS, "Held-out split.")
_BINS = flags.DEFINE_integer("bins", 10, "Quantile bins of the calibration curve.",
                             lower_bound=1)


def main(argv):
  del argv
  config = config_checks.task_workdir(_WORKDIR.value, "--workdir")
  if config.algorithm.name not in config_checks.VALUE_GUIDED:
    raise cli.BadInput(f"--workdir={_WORKDIR.value}: trained with {config.algorithm.name!r}, "
                       f"which has no value head {config_checks.VALUE_GUIDED}")
  print(json.dumps(value_calibration.calibrate(_WORKDIR.value, _SPLIT.value, _BINS.value),
                   indent=2))


if __name__ == "__main__":
  cli.run(main)
