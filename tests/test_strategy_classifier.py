"""The P4G strategy classifier: it learns, round-trips, splits by dialogue, and beats the
majority label on held-out annotated dialogues."""

import os

import numpy as np
import pytest

from cotraining import diagnostics, strategy_classifier as sc
from data_pipelines.persuasion import loader
from workflows import strategy_classifier as main

TOY = [("would you like to donate today", "proposition"), ("please donate to the charity", "proposition"),
       ("hello how are you", "greeting"), ("hi there friend", "greeting"),
       ("the charity saves lives", "info"), ("children in need are helped", "info")]


def test_features_are_stable_hashed_ngrams():
  ids = sc.features("Please donate now")
  assert ids == sc.features("please DONATE now")  # Lower-cased.
  assert len(ids) == 3 + 2 and all(0 <= i < sc.NUM_FEATURES for i in ids)


def test_fit_predict_and_round_trip(tmp_path):
  texts, labels = zip(*TOY)
  model = sc.StrategyClassifier.fit(texts, labels, steps=200)
  assert model.predict(list(texts)) == list(labels)
  model.save(str(tmp_path))
  again = sc.StrategyClassifier.load(str(tmp_path))
  assert again.labels == model.labels and again.predict(["hi there"]) == model.predict(["hi there"])
  assert model.label_utterances(["hello how are you. please donate to the charity."]) == [
      "greeting", "proposition"]  # One label per sentence.
  assert diagnostics.label_entropy(model.label_utterances(["hi there friend."])) == 0.0


def test_split_by_dialogue_keeps_dialogues_whole():
  ids = [f"d{i // 3}" for i in range(30)]
  train, test = sc.split_by_dialogue(ids, 0.2, seed=0)
  assert test.sum() == 6 and not set(np.asarray(ids)[train]) & set(np.asarray(ids)[test])


@pytest.mark.skipif(not os.path.isdir(loader.default_data_dir()),
                    reason="Persuasion for Good is read from ../shared/data")
def test_beats_the_majority_label_on_held_out_dialogues():
  _, metrics = main.train_and_evaluate("persuader", held_out=0.2, seed=0)
  assert metrics["test_dialogues"] == 60
  assert metrics["accuracy"] > 0.45 > 2 * metrics["majority_accuracy"]
