"""Trains the P4G strategy classifier and reports its held-out accuracy
(workflows/strategy_classifier.py).

    python -m experiments.strategy_classifier --output_dir=runs/strategy_classifier \
        [--role=persuader --held_out=0.2 --seed=0]
"""

from absl import flags

from data_pipelines import cli
from workflows import strategy_classifier

_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where the classifier and metrics.json go.",
                                  required=True)
_ROLE = flags.DEFINE_enum("role", "persuader", ["persuader", "persuadee"], "Whose sentences.")
_HELD_OUT = flags.DEFINE_float("held_out", 0.2, "Share of the dialogues held out.",
                               lower_bound=0.05, upper_bound=0.5)
_SEED = flags.DEFINE_integer("seed", 0, "Split and initialization seed.")


def main(argv):
  del argv
  strategy_classifier.run(_OUTPUT_DIR.value, _ROLE.value, _HELD_OUT.value, _SEED.value)


if __name__ == "__main__":
  cli.run(main)
