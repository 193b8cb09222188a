"""CALM's scene batches carry the head's targets for the action their block writes, and mixing
them into the corpus stream keeps a resumed run on the batches of an uninterrupted one."""

import ml_collections
import numpy as np
import pytest

from calm import actions, model as calm_model, scenes, state
from data_pipelines.airdialogue import action_grammar
from ilql_dialogue import bc
from domains.airdialogue import task as airdialogue
from test_calm_planning import tokenizer  # noqa: F401 (a fixture: tiny corpora's tokenizer)


def test_scene_rows_target_the_action_their_block_writes(tokenizer):
  batch = scenes.scene_batch(6, (1, 2, 3), tokenizer, max_length=512, kb_size=30)
  again = scenes.scene_batch(6, (1, 2, 3), tokenizer, max_length=512, kb_size=30)
  for name, array in batch.items():
    np.testing.assert_array_equal(array, again[name], err_msg=name)  # A pure function.
  expected_BxA = np.asarray(calm_model.expected_set(batch[calm_model.EXPECTED_LO],
                                                    batch[calm_model.EXPECTED_HI]))
  marker = tokenizer.marker_ids[action_grammar.OPEN_TAG]
  assert batch[bc.PREFIX_FIELDS].shape == (6, airdialogue.NUM_ROWS, len(airdialogue.TABLE_FIELDS))
  np.testing.assert_array_equal(batch[calm_model.REWARD], 1.0)
  for b in range(6):
    ids = batch["input_ids"][b][batch["attention_mask"][b]]
    position = batch[calm_model.ACTION_POSITION][b]
    assert ids[position] == marker
    said = action_grammar.parse_action(tokenizer.decode(ids[position:]))
    assert expected_BxA[b, actions.action_class(said)]  # The block's action is a target.
    agent = batch["action_mask"][b] & batch["attention_mask"][b]
    assert agent[position] and not agent[:2].any()  # The agent's turn, not the customer's.


@pytest.mark.parametrize("every,start", [(3, 0), (3, 4), (3, 5), (1, 2)])
def test_scenes_every_kth_batch_and_resume_exactly(tokenizer, monkeypatch, every, start):
  monkeypatch.setattr(scenes, "scene_batch", lambda rows, entropy, *_: {"scene": entropy[2]})
  corpus = lambda first: iter({"corpus": k} for k in range(first, 10**6))
  config = ml_collections.ConfigDict(dict(
      seed=0, train=dict(batch_size=4), task=dict(max_length=512),
      calm_data=dict(scene_every=every)))
  from_step = scenes.with_scenes(corpus, config, tokenizer)
  uninterrupted = [next(b) for b in [from_step(0)] for _ in range(12)]
  resumed = [next(b) for b in [from_step(start)] for _ in range(12 - start)]
  assert resumed == uninterrupted[start:]
  kinds = ["scene" if "scene" in b else "corpus" for b in uninterrupted]
  assert kinds == ["scene" if s % every == every - 1 else "corpus" for s in range(12)]
  if every > 1:  # The corpus's batches in order, none skipped or repeated.
    corpus_steps = [b["corpus"] for b in uninterrupted if "corpus" in b]
    assert corpus_steps == list(range(kinds.count("corpus")))


def test_no_scenes_is_the_corpus_stream(tokenizer):
  corpus = lambda first: iter(())
  config = ml_collections.ConfigDict(dict(calm_data=dict(scene_every=0)))
  assert scenes.with_scenes(corpus, config, tokenizer) is corpus
  config.calm_data.scene_every = -1
  with pytest.raises(ValueError, match="scene_every=-1"):
    scenes.with_scenes(corpus, config, tokenizer)


def test_swapped_tables_are_the_next_rows_and_their_actions_are_solved_again(tokenizer):
  plain = scenes.scene_batch(6, (4, 5), tokenizer, max_length=512, kb_size=30)
  swapped = scenes.scene_batch(6, (4, 5), tokenizer, max_length=512, kb_size=30, table_swap=1.0)
  np.testing.assert_array_equal(swapped[bc.PREFIX_FIELDS],
                                np.roll(plain[bc.PREFIX_FIELDS], -1, axis=0))
  np.testing.assert_array_equal(state.batch_codes(swapped), state.batch_codes(plain))
  samples = list(scenes.selfplay.generate_samples([4, 5, 0], 6, 30))
  expected_BxA = np.asarray(calm_model.expected_set(swapped[calm_model.EXPECTED_LO],
                                                    swapped[calm_model.EXPECTED_HI]))
  for b, sample in enumerate(samples):
    action = scenes.solver.expected_action(sample.intent, samples[(b + 1) % 6].table)
    assert set(np.flatnonzero(expected_BxA[b])) == set(actions.action_classes(action))
