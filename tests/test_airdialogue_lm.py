"""The dialogue LM's stream (domains/airdialogue/lm_task.py): every kind of row is a
pure function of its entropy, has static lengths, and marks as targets only what it teaches."""

import numpy as np
import pytest

from data_pipelines import mdp_dataset
from data_pipelines.airdialogue import action_grammar, selfplay, to_dialogue
from data_pipelines.dialogue import write_jsonl
from data_pipelines.tokenization import train_tokenizer
from domains.airdialogue import lm_task as lm

ROWS = 4


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  path = tmp_path_factory.mktemp("lm") / "dialogues.jsonl"
  write_jsonl(str(path), (to_dialogue.sample_to_dialogue(s, f"d{i}")
                          for i, s in enumerate(selfplay.generate_samples(0, 60))))
  return train_tokenizer(mdp_dataset.tokenizer_texts(str(path), to_dialogue.serialize_context),
                         to_dialogue.ROLES, 600,
                         markers=(action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG))


@pytest.mark.parametrize("kind", lm.KINDS)
def test_rows_are_a_function_of_their_entropy_with_static_lengths(kind, tokenizer):
  batch = lm.make_batch(kind, ROWS, (lm.STREAM_TAG, 0, 7, 0), tokenizer, 512, 30)
  again = lm.make_batch(kind, ROWS, (lm.STREAM_TAG, 0, 7, 0), tokenizer, 512, 30)
  other = lm.make_batch(kind, ROWS, (lm.STREAM_TAG, 0, 8, 0), tokenizer, 512, 30)
  assert all(np.array_equal(batch[k], again[k]) for k in batch)
  assert not np.array_equal(batch["input_ids"], other["input_ids"])
  rows, length = batch["input_ids"].shape
  assert rows == ROWS and length % lm.LENGTH_STEP == 0
  targets = batch["action_mask"]
  assert targets.any(axis=1).all() and not (targets & ~batch["attention_mask"]).any()


def test_names_rows_target_each_name_after_the_turn_that_states_it(tokenizer):
  batch = lm.make_batch("names", ROWS, (lm.STREAM_TAG, 0, 3, 0), tokenizer, 512, 30)
  for ids, live, targets in zip(batch["input_ids"], batch["attention_mask"],
                                batch["action_mask"]):
    ids = ids[live]
    text = tokenizer.decode([int(i) for i in ids])
    assert text.count(action_grammar.OPEN_TAG) == lm.NAMES_PER_ROW
    spans = np.split(np.flatnonzero(targets), np.flatnonzero(np.diff(np.flatnonzero(targets)) > 1)
                     + 1)
    for span in spans:
      name = tokenizer.decode([int(i) for i in ids[span]]).replace(action_grammar.CLOSE_TAG,
                                                                     "").strip()
      before = tokenizer.decode([int(i) for i in ids[:span[0]]])
      # The target is a name the customer said just before, never the block's other fields.
      assert name and name.lower() in before.rsplit("<|agent|>", 1)[0].rsplit(
          "<|customer|>", 1)[1].lower()
    assert len(spans) == lm.NAMES_PER_ROW


def test_agent_rows_target_only_agent_turns(tokenizer):
  batch = lm.make_batch("agent", ROWS, (lm.STREAM_TAG, 0, 1, 0), tokenizer, 512, 30)
  agent_id = tokenizer.speaker_token_ids["agent"]
  customer_id = tokenizer.speaker_token_ids["customer"]
  for ids, targets in zip(batch["input_ids"], batch["action_mask"]):
    speaker = None
    for token, target in zip(ids, targets):
      if token in (agent_id, customer_id):
        speaker = token
      assert not target or speaker == agent_id


def test_unknown_kinds_are_refused():
  with pytest.raises(ValueError, match="mixture"):
    lm.parse_mixture("agent,nmaes")
