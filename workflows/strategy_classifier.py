"""Trains the P4G strategy classifier (cotraining/strategy_classifier.py) and reports its
held-out accuracy.

    python -m experiments.strategy_classifier --output_dir=runs/strategy_classifier \
        [--role=persuader --held_out=0.2 --seed=0]

Rows are the annotated sentences of `--role` (label_1, the most salient);
`--held_out` of the 300 dialogues are kept out of training. Prints and writes
(metrics.json) accuracy on them, the majority-label baseline, and per-label
recall; the classifier itself is saved next to it for diagnostics.
"""

from __future__ import annotations

import collections
import json
import os

import numpy as np

from cotraining import strategy_classifier
from data_pipelines import cli
from data_pipelines.persuasion import loader


def train_and_evaluate(role: str, held_out: float, seed: int, data_dir: str | None = None
                       ) -> tuple[strategy_classifier.StrategyClassifier, dict]:
  rows = [s for s in loader.load_strategy_labels(data_dir) if s.speaker == role]
  if not rows:
    raise cli.BadInput(f"--role={role}: no annotated sentences of that speaker")
  train_N, test_N = strategy_classifier.split_by_dialogue([r.dialogue_id for r in rows],
                                                          held_out, seed)
  texts = np.asarray([r.text for r in rows], object)
  labels = np.asarray([r.labels[0] for r in rows], object)
  model = strategy_classifier.StrategyClassifier.fit(list(texts[train_N]), list(labels[train_N]),
                                                     seed=seed)
  predicted = np.asarray(model.predict(list(texts[test_N])), object)
  truth = labels[test_N]
  majority = collections.Counter(labels[train_N]).most_common(1)[0][0]
  recall = {label: float(np.mean(predicted[truth == label] == label))
            for label in sorted(set(truth))}
  return model, {
      "role": role, "train_sentences": int(train_N.sum()), "test_sentences": int(test_N.sum()),
      "test_dialogues": len({r.dialogue_id for r, t in zip(rows, test_N) if t}),
      "labels": len(model.labels), "accuracy": float(np.mean(predicted == truth)),
      "majority_label": majority, "majority_accuracy": float(np.mean(truth == majority)),
      "recall": recall}


def run(output_dir: str, role: str = "persuader", held_out: float = 0.2,
        seed: int = 0) -> dict:
  """experiments.strategy_classifier: trains, saves the classifier and metrics.json into
  `output_dir`; returns the metrics."""
  os.makedirs(cli.output_dir(output_dir, "--output_dir"), exist_ok=True)
  model, metrics = train_and_evaluate(role, held_out, seed)
  model.save(output_dir)
  with open(os.path.join(output_dir, "metrics.json"), "w") as out:
    json.dump(metrics, out, indent=1)
  print(json.dumps(metrics, indent=1))
  return metrics
