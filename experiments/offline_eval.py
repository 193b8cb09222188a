"""Offline evaluation of a trained role on held-out dialogues (workflows/offline_eval.py).

    python -m experiments.offline_eval --workdir=RUN_DIR [--split=eval] [--step=N]
        [--max_dialogues=N] [--output_dir=DIR]

Writes {output_dir or RUN_DIR}/offline_eval_{split}_step{N}.json and prints it.
"""

import json

from absl import flags

from data_pipelines import cli
from ilql_dialogue import tasks
from workflows import config_checks, offline_eval

_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory of experiments.train.",
                               required=True)
_SPLIT = flags.DEFINE_enum("split", "eval", tasks.SPLITS, "Which split to evaluate on.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the selected best, else "
                             "the latest).")
_MAX_DIALOGUES = flags.DEFINE_integer("max_dialogues", None, "Held-out dialogues to decode "
                                      "(default: the config's).", lower_bound=0)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where the JSON goes (default: --workdir).")


def main(argv):
  del argv
  config_checks.task_workdir(_WORKDIR.value, "--workdir", _STEP.value)
  overrides = {} if _MAX_DIALOGUES.value is None else {"max_dialogues": _MAX_DIALOGUES.value}
  print(json.dumps(offline_eval.evaluate_run(_WORKDIR.value, _SPLIT.value, _STEP.value, overrides,
                                             _OUTPUT_DIR.value), indent=2))


if __name__ == "__main__":
  cli.run(main)
