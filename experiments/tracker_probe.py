"""A fresh intent tracker on frozen trunk states, read on each kind of customer.

    python -m experiments.tracker_probe --trunks=ours:runs/quickstart/dialogue_lm,smollm2:30
    python -m experiments.tracker_probe --trunks=calm:runs/quickstart/calm_agent

Prints, per trunk, the joint and mean field accuracy (mean +- s.e. over tracker seeds) on
new scenarios in the training families, the held-out families and the people-like customers,
and the trunk's cost per 1,000 tokens (workflows/tracker_probe.py); writes the report to
--output after each trunk.
"""

from absl import flags

from data_pipelines import cli, files
from workflows import tracker_probe

_TRUNKS = flags.DEFINE_list(
    "trunks", None, "ours:WORKDIR, calm:WORKDIR (its own tracker, read as is) or "
    "smollm2:LAYERS, each.", required=True)
_TRAIN = flags.DEFINE_string("train_customer", "scripted:any/train",
                             "The customer spec of the tracker's training dialogues.")
# Apart from the corpora (0, 1), checkpoint selection (2000) and reported evaluations (1000).
_TRAIN_SEED = flags.DEFINE_integer("train_seed", 3000, "Scenario seed of the training dialogues.")
_NUM_TRAIN = flags.DEFINE_integer("num_train", 2048, "Training dialogues.", lower_bound=8)
_TESTS = flags.DEFINE_list(
    "test_customers",
    ["scripted:any/train", "scripted:any/held_out", "people:silent", "people:partial"],
    "Customer specs the tracker is read on.")
_TEST_SEED = flags.DEFINE_integer("test_seed", 1000, "Scenario seed of the test dialogues.")
_NUM_TEST = flags.DEFINE_integer("num_test", 200, "Test dialogues per customer.", lower_bound=2)
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Tracker seeds (init, batch order).")
_STEPS = flags.DEFINE_integer("steps", 1500, "Tracker updates.", lower_bound=1)
_BATCH = flags.DEFINE_integer("batch_size", 32, "Dialogues per update.", lower_bound=1)
_LR = flags.DEFINE_float("learning_rate", 3e-3, "AdamW's learning rate.")
_OUTPUT = flags.DEFINE_string("output", "", "Where to write the JSON report.")


def main(argv):
  del argv
  report = {}
  for spec, result in tracker_probe.probe(
      _TRUNKS.value, train_customer=_TRAIN.value, train_seed=_TRAIN_SEED.value,
      num_train=_NUM_TRAIN.value, test_customers=_TESTS.value, test_seed=_TEST_SEED.value,
      num_test=_NUM_TEST.value, seeds=[int(s) for s in _SEEDS.value], steps=_STEPS.value,
      batch_size=min(_BATCH.value, _NUM_TRAIN.value), learning_rate=_LR.value):
    report[spec] = result
    if _OUTPUT.value:  # After each trunk: a long run keeps what it measured.
      files.write_json(_OUTPUT.value, report, indent=2)
    print(tracker_probe.format_table({spec: result}), flush=True)
  print(tracker_probe.format_table(report))


if __name__ == "__main__":
  cli.run(main)
