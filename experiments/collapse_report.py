"""The simulator-collapse comparison's report (workflows/collapse_report.py).

    python -m experiments.collapse_report --compare=runs/collapse/compare \
        --arms=single=runs/collapse/single_s0+runs/collapse/single_s1,temperature=...,cotrain=... \
        --training_simulator=runs/panel_airdialogue/customer_seed0 --start=start \
        --output_dir=runs/collapse/report

Writes collapse.md, collapse.json and collapse_curves.png to --output_dir.
"""

from absl import flags

from data_pipelines import cli
from workflows import collapse_report

_COMPARE = flags.DEFINE_string("compare", None, "experiments.compare_agents workdir.",
                               required=True)
_ARMS = flags.DEFINE_list("arms", None, "NAME=WORKDIR[+WORKDIR...] per arm, named as in the "
                          "comparison's --agents.", required=True)
_TRAINING_SIMULATOR = flags.DEFINE_string("training_simulator", None, "The arms' training "
                                          "simulator spec.", required=True)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where collapse.md / .json / _curves.png "
                                  "go.", required=True)
_START = flags.DEFINE_string("start", "", "The comparison's name for the arms' starting agent: "
                             "its held-out success is step 0 of the plot.")


def main(argv):
  del argv
  collapse_report.run(_ARMS.value, _COMPARE.value, _TRAINING_SIMULATOR.value, _OUTPUT_DIR.value,
                      start=_START.value)


if __name__ == "__main__":
  cli.run(main)
