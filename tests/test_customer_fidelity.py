"""customer_fidelity reads each intent field back from the customer's turns."""

import json

import pytest

from workflows import customer_fidelity, evaluate as evaluate_lib


def test_a_scripted_customer_states_its_intent_and_a_liar_does_not(tmp_path):
  summary = evaluate_lib.evaluate("scripted_agent:oracle", "scripted:volunteer", num_dialogues=6,
                                  workdir=str(tmp_path), batch_size=6)
  transcripts = customer_fidelity.read_transcripts(summary["transcripts"])
  honest = customer_fidelity.fidelity(transcripts)
  assert honest["dialogues"] == 6 and honest["customer_action_blocks"] == 0
  for field in ("name", "goal"):
    assert honest["fields"][field] == {"n": 6, "stated_correctly": 1.0, "stated_wrong": 0.0,
                                       "never_stated": 0.0}
  # The same dialogues with every customer turn replaced: the name is now wrong or absent.
  for t in transcripts:
    for turn in t["turns"]:
      if turn["speaker"] == "customer":
        turn["text"] = "My name is Zed Quux. Hello."
  liar = customer_fidelity.fidelity(json.loads(json.dumps(transcripts)))
  assert liar["fields"]["name"]["stated_wrong"] == 1.0
  assert liar["fields"]["goal"]["never_stated"] == 1.0
  # One sentence said over and over: one unique utterance; its 8 tokens, 7 of them distinct.
  repeated = liar["diversity"]
  count = honest["diversity"]["utterances"]
  assert repeated["utterances"] == count and repeated["unique_share"] == 1 / count
  assert repeated["distinct_1"] == pytest.approx(7 / (8 * count))
  assert honest["diversity"]["unique_share"] > 0.5 and honest["diversity"]["distinct_2"] > 0.1


def test_it_reads_the_environment_evaluation_transcripts_alike(tmp_path):
  """experiments.evaluate_env writes `key` and [speaker, text] turns: the same dialogues read
  from either file give the same fidelity, and a record naming no scenario is an error."""
  summary = evaluate_lib.evaluate("scripted_agent:oracle", "scripted:volunteer", num_dialogues=4,
                                  workdir=str(tmp_path), batch_size=4)
  ours = customer_fidelity.read_transcripts(summary["transcripts"])
  env_path = tmp_path / "env.jsonl"
  with open(env_path, "w") as f:
    for t in ours:
      f.write(json.dumps({"key": t["scenario_id"],
                          "turns": [[x["speaker"], x["text"]] for x in t["turns"]]}) + "\n")
  assert (customer_fidelity.fidelity(customer_fidelity.read_transcripts(str(env_path)))
          == customer_fidelity.fidelity(ours))
  with open(env_path, "a") as f:
    f.write(json.dumps({"turns": []}) + "\n")
  with pytest.raises(ValueError, match=r"env.jsonl:5: field 'scenario_id' \(or 'key'\)"):
    customer_fidelity.read_transcripts(str(env_path))
