"""Online RL against one training simulator, measured against held-out ones
(workflows/online_report.py).

    python -m experiments.online_report \
        --arms=grpo=runs/p4g/grpo_s0+runs/p4g/grpo_s1+runs/p4g/grpo_s2[,single=...] \
        --output_dir=runs/p4g/report \
        [--tests=runs/p4g/test --opponents=runs/p4g/persuadee_s0,runs/p4g/persuadee_s1,... \
         --num_dialogues=102 --seed=1000 --start=runs/p4g/persuader_bc]

Writes report.md, report.json and curves.png to --output_dir.
"""

from absl import flags

from data_pipelines import cli
from workflows import online_report

_ARMS = flags.DEFINE_list("arms", None, "NAME=RUN[+RUN...] per arm (its seeds).", required=True)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where report.md / .json / curves.png go.",
                                  required=True)
_TESTS = flags.DEFINE_string("tests", "", "experiments.evaluate_env workdir of the test "
                             "evaluations.")
_OPPONENTS = flags.DEFINE_list("opponents", [], "The opponent specs the tests played.")
_NUM = flags.DEFINE_integer("num_dialogues", 102, "The tests' --num_dialogues.")
_SEED = flags.DEFINE_integer("seed", 1000, "The tests' --seed.")
_START = flags.DEFINE_string("start", "", "The arms' starting party (its tests are the first "
                             "row).")
_TEST_STEP = flags.DEFINE_integer("test_step", 0, "Test the runs at this saved step "
                                  "(--party=RUN@STEP) instead of their selected checkpoints.",
                                  lower_bound=0)


def main(argv):
  del argv
  online_report.run(_ARMS.value, _OUTPUT_DIR.value, tests=_TESTS.value,
                    opponents=_OPPONENTS.value, num_dialogues=_NUM.value, seed=_SEED.value,
                    start=_START.value, test_step=_TEST_STEP.value)


if __name__ == "__main__":
  cli.run(main)
