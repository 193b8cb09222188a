"""Trains the intent tracker on SmolLM2's frozen states that a CALM agent can close with.

    python -m experiments.frozen_tracker --layers=12 --out=runs/reader12
    python -m experiments.evaluate --customer=people:partial --workdir=runs/reader_eval \
        --agent=calm:n=1,act=head,reader=runs/reader12,blend=1:runs/quickstart/calm_agent

Fits CALM's pooled state head and a name pointer on SmolLM2-135M's first --layers layers over
oracle dialogues (calm/frozen_tracker.py, workflows/tracker_probe.fit_reader), saves them to
--out, and prints their field, joint and name accuracies on validation scenarios (seed 2000).
Needs torch and the SmolLM2 file (`make dev`).
"""

from absl import flags

from data_pipelines import cli, files
from workflows import tracker_probe

_OUT = flags.DEFINE_string("out", None, "Directory the tracker is saved to.", required=True)
_LAYERS = flags.DEFINE_integer("layers", 12, "SmolLM2 layers read (of 30).", lower_bound=1)
_TRAIN = flags.DEFINE_string("train_customer", "scripted:any/train",
                             "The customer spec of the training dialogues.")
_TRAIN_SEED = flags.DEFINE_integer("train_seed", 3000, "Scenario seed of the training dialogues.")
_NUM_TRAIN = flags.DEFINE_integer("num_train", 2048, "Training dialogues.", lower_bound=8)
_CHECK = flags.DEFINE_list("check_customers", ["scripted:any/train", "people:silent"],
                           "Customer specs it is read on afterwards (validation scenarios).")
_CHECK_SEED = flags.DEFINE_integer("check_seed", 2000, "Scenario seed of the check dialogues.")
_NUM_CHECK = flags.DEFINE_integer("num_check", 100, "Check dialogues per customer.",
                                  lower_bound=2)
_STEPS = flags.DEFINE_integer("steps", 1500, "Tracker updates.", lower_bound=1)
_BATCH = flags.DEFINE_integer("batch_size", 32, "Dialogues per update.", lower_bound=1)
_LR = flags.DEFINE_float("learning_rate", 3e-3, "AdamW's learning rate.")
_SEED = flags.DEFINE_integer("seed", 0, "Tracker seed (init, batch order).")


def main(argv):
  del argv
  report = tracker_probe.fit_reader(
      _OUT.value, num_layers=_LAYERS.value, train_customer=_TRAIN.value,
      train_seed=_TRAIN_SEED.value, num_train=_NUM_TRAIN.value, check_customers=_CHECK.value,
      check_seed=_CHECK_SEED.value, num_check=_NUM_CHECK.value, steps=_STEPS.value,
      batch_size=min(_BATCH.value, _NUM_TRAIN.value), learning_rate=_LR.value, seed=_SEED.value)
  files.write_json(f"{_OUT.value}/report.json", report, indent=2)
  for customer in _CHECK.value:
    print(f"{customer}: joint {report[customer]['joint']:.3f}, "
          + ", ".join(f"{k} {v:.2f}" for k, v in report[customer].items()
                      if k not in ("joint", "joint_stderr")))


if __name__ == "__main__":
  cli.run(main)
