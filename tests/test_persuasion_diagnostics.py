"""experiments.persuasion_diagnostics on hand-made transcripts: groups, donations against the
real persuadees', strategy counts, and coverage, where a simulator that always says the same
thing reaches one cluster."""

import json

import numpy as np
import pytest

from data_pipelines import cli
from data_pipelines.dialogue import Turn
from workflows import persuasion_diagnostics as pd


def test_groups_name_files_and_refuse_bad_specs(tmp_path):
  for name in ("a1", "a2", "b1"):
    (tmp_path / f"t_{name}.jsonl").write_text("")
  groups = pd.parse_groups(f"a={tmp_path}/t_a*.jsonl,b={tmp_path}/t_b1.jsonl+{tmp_path}/t_a1.jsonl",
                           "--x")
  assert [p.rsplit("/", 1)[1] for p in groups["a"]] == ["t_a1.jsonl", "t_a2.jsonl"]
  assert len(groups["b"]) == 2
  for bad in ("a", f"human={tmp_path}/t_a1.jsonl", f"a={tmp_path}/none*.jsonl",
              f"a={tmp_path}/t_a1.jsonl,a={tmp_path}/t_a2.jsonl"):
    with pytest.raises(cli.BadInput, match="--x"):
      pd.parse_groups(bad, "--x")


def test_a_bad_transcript_line_names_its_file_and_line(tmp_path):
  path = tmp_path / "t.jsonl"
  path.write_text(json.dumps({"key": "1000:0", "turns": []}) + "\n{not json\n")
  with pytest.raises(cli.BadInput, match=r"t.jsonl:2"):
    pd.read_transcripts([str(path)])


def test_donations_are_compared_with_the_same_personas_real_ones():
  records = [{"key": "1000:0", "info": {"stated": 100.0, "donation": 2.0}, "turns": []},  # "$100"
             {"key": "1000:1", "info": {"stated": 0.0, "donation": 0.0}, "turns": []},
             {"key": "1000:2", "info": {}, "turns": []}]  # No statement.
  row = pd.donation_row(records, {"1000:0": 2.0, "1000:1": 0.0, "1000:2": 1.0})
  assert row["dialogues"] == 3 and row["stated_share"] == pytest.approx(2 / 3)
  assert row["mean_stated"] == 1.0 and row["human_mean"] == 1.0
  assert row["ks"] == pytest.approx(1 / 6)  # ECDFs of {0, 2} and {0, 1, 2}: 1/2 vs 1/3 below 1.
  with pytest.raises(cli.BadInput, match="1000:2"):
    pd.donation_row(records, {"1000:0": 2.0, "1000:1": 0.0})


def test_strategy_row_counts_sentences_without_the_donation_block():
  class FirstWord:
    def predict(self, texts):
      return [t.split()[0].lower() for t in texts]

  row = pd.strategy_row(FirstWord(), ["Hi there. Hi again! Please give.",
                                      "Please [donate] 1 [/donate] help."])
  assert row["sentences"] == 4 and row["labels_used"] == 2
  assert row["top_label"] in ("hi", "please") and row["top_share"] == 0.5
  assert row["label_entropy"] == pytest.approx(np.log(2))


def test_a_simulator_that_says_one_thing_covers_one_cluster():
  words = ["yes", "no", "maybe", "why", "how", "sure"]
  basis = {w: np.eye(len(words))[i] for i, w in enumerate(words)}
  embed = lambda texts: np.stack([basis[t] for t in texts])
  utterances = {pd.HUMAN: words * 5, "varied": words * 5, "collapsed": ["yes"] * 30}
  out = pd.coverage(utterances, embed, per_simulator=30, clusters=6, min_count=2, seed=0)
  assert out["varied"]["human_coverage"] == 1.0 and out["varied"]["coverage"] == 1.0
  assert out["collapsed"]["human_coverage"] == pytest.approx(1 / 6)
  assert out["collapsed"]["cluster_entropy"] == 0.0


def test_persuadee_utterances_drop_the_statement_only():
  records = [{"turns": [Turn("persuader", "give?"), Turn("persuadee", "ok [donate] 1 [/donate]"),
                        Turn("persuadee", "[donate] 2 [/donate]")]}]
  assert pd.persuadee_utterances(records) == ["ok"]


def test_nearest_neighbour_agreement_and_the_embedding_check():
  vectors = np.asarray([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], float)
  assert pd.nearest_neighbour_agreement(vectors, ["a", "a", "b", "b"]) == 1.0
  assert pd.nearest_neighbour_agreement(vectors, ["a", "b", "a", "b"]) == 0.0
  texts = ["i will give", "i will give some", "no thanks", "no thanks at all"]
  check = pd.check_embeddings(lambda t: np.asarray([[len(x), 1.0] for x in t]), texts,
                              ["yes", "yes", "no", "no"])
  assert check["ngram_counts"] == 1.0 and check["chance"] == 0.5 and check["sentences"] == 4
