"""Prints one JSON object describing Persuasion for Good exactly as the loader hands it to training.

  python -m data_pipelines.persuasion.stats [--data_dir=DIR] [--test_fraction=0.1] [--seed=0]

Donation rate and mean are given twice because the choice matters: over the persuadees whose
recorded donation is in [0, 2] (the published figures, ~52% and ~$0.35), and over all of them
after clipping (what `Dialogue.outcome` is made of).
"""

from __future__ import annotations

import collections
import json
import os
from typing import Any, Sequence

from absl import flags
import numpy as np

from data_pipelines import dialogue as dialogue_lib
from data_pipelines import cli
from data_pipelines.persuasion import loader

_DATA_DIR = flags.DEFINE_string(
    "data_dir", None, "Persuasion for Good folder; default $P4G_DATA_DIR")
_TEST_FRACTION = flags.DEFINE_float("test_fraction", 0.1, "Share of dialogue ids held out.",
                                    lower_bound=0.0, upper_bound=1.0)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the train/test split.")


def corpus_stats(dialogues: Sequence[dialogue_lib.Dialogue], test_fraction: float = 0.1,
                 seed: int = 0) -> dict[str, Any]:
  raw = np.array([d.meta["donation_raw"] for d in dialogues])
  clipped = np.array([d.meta["donation"] for d in dialogues])
  in_range = raw[(raw >= 0.0) & (raw <= loader.MAX_DONATION)]
  words = np.array([sum(len(t.text.split()) for t in d.turns) for d in dialogues])
  annotated = [d for d in dialogues if d.meta.get("annotated", False)]
  label_counts = {role: collections.Counter() for role in loader.ROLES}
  for d in annotated:
    for sentence in d.meta["strategy_labels"]:
      label_counts[sentence["speaker"]][sentence["labels"][0]] += 1
  train, test = loader.split_ids((d.dialogue_id for d in dialogues), test_fraction, seed)
  return {
      "dialogues": len(dialogues),
      "turns": sum(len(d.turns) for d in dialogues),
      "turns_per_dialogue": {"mean": float(np.mean([len(d.turns) for d in dialogues])),
                             "max": max(len(d.turns) for d in dialogues)},
      "words_per_dialogue": {"mean": float(words.mean()), "max": int(words.max())},
      "donation_rate": float(np.mean(in_range > 0.0)),
      "mean_donation": float(in_range.mean()),
      "in_range_donations": int(in_range.size),
      "out_of_range_donations": int(raw.size - in_range.size),
      "donation_rate_clipped": float(np.mean(clipped > 0.0)),
      "mean_donation_clipped": float(clipped.mean()),
      "mean_outcome": float(np.mean([d.outcome for d in dialogues])),
      "annotated_dialogues": len(annotated),
      "annotated_sentences": sum(len(d.meta["strategy_labels"]) for d in annotated),
      "label_counts": {role: dict(counts.most_common()) for role, counts in label_counts.items()},
      "split": {"seed": seed, "test_fraction": test_fraction, "train": len(train),
                "test": len(test)},
  }


def main(argv: Sequence[str]) -> None:
  del argv
  with cli.reported_as():  # Neither --data_dir nor $P4G_DATA_DIR: what to set, in one line.
    data_dir = loader.resolve_data_dir(_DATA_DIR.value)
  data_dir = cli.existing_dir(data_dir, "--data_dir")
  for name in (loader.FULL_DIALOG, loader.FULL_INFO, loader.ANNOTATED_DIALOG):
    if not os.path.isfile(os.path.join(data_dir, name)):
      raise cli.BadInput(f"--data_dir={data_dir}: {name} missing; not a Persuasion for Good folder")
  try:
    dialogues = loader.load_dialogues(data_dir)
  except loader.PersuasionFormatError as e:  # FILE:LINE: field 'F': reason.
    raise cli.BadInput(str(e)) from None
  print(json.dumps(corpus_stats(dialogues, _TEST_FRACTION.value, _SEED.value), indent=2))


if __name__ == "__main__":
  cli.run(main)
