"""Where a CALM state head's tracked intent comes from (workflows/state_probe.py).

    python -m experiments.state_probe --workdir=runs/tablehead/scenes_state [--step=1500]

Prints each tracked field's accuracy with the scenes' tables and with the tables blanked.
"""

import json

from absl import flags

from data_pipelines import cli
from workflows import config_checks, state_probe

_WORKDIR = flags.DEFINE_string("workdir", None, "A CALM run with algorithm.head=state.",
                               required=True)
_STEP = flags.DEFINE_integer("step", None, "Its checkpoint (default: the selected one).")
_ROWS = flags.DEFINE_integer("rows", 128, "Scenes played.", lower_bound=1)


def main(argv):
  del argv
  config_checks.training_workdir(_WORKDIR.value, "--workdir", _STEP.value)
  print(json.dumps(state_probe.probe(_WORKDIR.value, _STEP.value, _ROWS.value), indent=1))


if __name__ == "__main__":
  cli.run(main)
