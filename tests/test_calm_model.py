"""CALM's model pieces on hand-made cases: the action head's set loss and accuracy, the class
sets calm/data.py writes, and the reward token; and a model conditioned on the reward token
says what successful dialogues say under reward 1 and what failed ones say under reward 0."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from calm import actions, data, model as calm_model
from data_pipelines.airdialogue import schema
from experiments.configs import calm_airdialogue_quick
from ilql_dialogue import bc, sharding, train_loop
from ilql_dialogue.models import copy_head
from domains.airdialogue import task as airdialogue


def test_head_loss_is_minus_log_of_the_summed_probability_of_the_tied_classes():
  logits_BxA = jnp.zeros((3, actions.NUM_ACTIONS)).at[0, 5].set(2.0).at[1, 7].set(3.0)
  target_BxA = jnp.zeros((3, actions.NUM_ACTIONS), bool)
  target_BxA = target_BxA.at[0, jnp.array([5, 40])].set(True).at[1, 6].set(True)
  target_BxA = target_BxA.at[2, 0].set(True)
  valid_B = jnp.array([True, True, False])  # Row 2 has no decision state: not counted.
  loss, metrics = calm_model.action_head_metrics(logits_BxA, target_BxA, valid_B)
  p_B = jax.nn.softmax(logits_BxA, axis=-1)
  expected = -(np.log(p_B[0, 5] + p_B[0, 40]) + np.log(p_B[1, 6])) / 2
  np.testing.assert_allclose(loss, expected, rtol=1e-5)
  assert float(metrics["action_head/accuracy"]) == 0.5  # Row 0's argmax (5) is in its set.
  assert float(metrics["action_head/rows"]) == 2
  _, empty = calm_model.action_head_metrics(logits_BxA, jnp.zeros_like(target_BxA), valid_B)
  assert float(empty["action_head/rows"]) == 0  # An empty set (no expected action) is skipped.


def test_class_sets_round_trip_through_the_batch_mask():
  tied = {"status": "book", "name": "A B", "flight": [1000, 1005, 1029]}
  lo, hi = data.class_sets(tied)
  mask = np.asarray(calm_model.expected_set(jnp.asarray([lo], jnp.uint32),
                                            jnp.asarray([hi], jnp.uint32)))[0]
  assert set(np.flatnonzero(mask)) == {0, 5, 29}
  for action in (schema.Action("change", "A B", (1029,)), schema.Action("no_reservation", "A B")):
    lo, hi = data.class_sets(action.to_json())
    mask = np.asarray(calm_model.expected_set(jnp.asarray([lo], jnp.uint32),
                                              jnp.asarray([hi], jnp.uint32)))[0]
    assert list(np.flatnonzero(mask)) == [actions.action_class(action)]
  assert data.class_sets(None) == (0, 0)


def _tiny_config(vocab=16, steps=60):
  c = calm_airdialogue_quick.get_config()
  c.model.update(vocab_size=vocab, num_layers=1, d_model=32, num_heads=2, num_kv_heads=1,
                 head_dim=16, mlp_dim=64, max_seq_len=16,
                 prefix_field_vocab_sizes=airdialogue.TABLE_PREFIX.field_vocab_sizes,
                 prefix_num_rows=airdialogue.NUM_ROWS,
                 init_std=0.1)  # At 0.02 attention stays uniform for hundreds of updates.
  c.train.update(batch_size=32, steps=steps)
  c.optim.update(learning_rate=1e-2, warmup_steps=10)
  return c


def test_reward_token_is_an_offset_of_every_prefix_row_and_defaults_to_success():
  c = _tiny_config()
  model = calm_model.CALM.from_config(c).init(c, nnx.Rngs(0))
  fields_BxPxF = np.zeros((2, airdialogue.NUM_ROWS, len(airdialogue.TABLE_FIELDS)), np.int32)
  one = model.embed_prefix(fields_BxPxF, jnp.ones(2))
  zero = model.embed_prefix(fields_BxPxF, jnp.zeros(2))
  np.testing.assert_allclose(model.embed_prefix(fields_BxPxF), one)
  np.testing.assert_allclose(one - zero, jnp.broadcast_to(
      model.reward_embed[1] - model.reward_embed[0], one.shape), atol=1e-6)


PAD, DIALOGUE, CUSTOMER, AGENT, EOT, HELLO, GOOD, BAD = range(8)


def reward_batch(rng, rows=32):
  """[DIALOGUE CUSTOMER HELLO EOT AGENT reply EOT]: reply GOOD in successes, BAD in failures."""
  success_B = rng.random(rows) < 0.5
  ids_BxT = np.tile(np.asarray([DIALOGUE, CUSTOMER, HELLO, EOT, AGENT, GOOD, EOT], np.int32),
                    (rows, 1))
  ids_BxT[:, 5] = np.where(success_B, GOOD, BAD)
  speakers_BxT = np.tile(np.asarray([0, 1, 1, 1, 2, 2, 2], np.int32), (rows, 1))
  fields_BxPxF = np.zeros((rows, airdialogue.NUM_ROWS, len(airdialogue.TABLE_FIELDS)), np.int32)
  return {"input_ids": ids_BxT, "attention_mask": np.ones_like(ids_BxT, bool),
          "speaker_ids": speakers_BxT, "action_mask": speakers_BxT == 2,
          bc.PREFIX_FIELDS: fields_BxPxF, calm_model.REWARD: success_B.astype(np.float32),
          calm_model.ACTION_POSITION: np.full(rows, -1, np.int32),
          calm_model.EXPECTED_LO: np.zeros(rows, np.uint32),
          calm_model.EXPECTED_HI: np.zeros(rows, np.uint32)}


def train_on(make_batch, c=None):
  """A tiny CALM trained on `make_batch(rng)` batches through the loop's jitted step."""
  c = c or _tiny_config()
  algorithm = calm_model.CALM.from_config(c)
  mesh = sharding.make_mesh()
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(c, algorithm, mesh)
    state = training.init()
    rng = np.random.default_rng(0)
    for _ in range(c.train.steps):
      state, _ = training.step(state, train_loop.place_batch(make_batch(rng), c, mesh))
    return nnx.merge(training.graphdef, state).model


def train_reward_model():
  return train_on(reward_batch)


@pytest.fixture(scope="module")
def reward_model():
  return train_reward_model()


def test_the_reward_token_decides_what_the_agent_says(reward_model):
  batch = reward_batch(np.random.default_rng(1), rows=2)
  ids_BxT = jnp.asarray(batch["input_ids"][:, :5])
  mask_BxT = jnp.ones_like(ids_BxT, bool)
  for reward, said in ((1.0, GOOD), (0.0, BAD)):
    prefix = reward_model.embed_prefix(batch[bc.PREFIX_FIELDS], jnp.full(2, reward))
    hidden, _ = reward_model(ids_BxT, bc.positions_from_mask(mask_BxT), mask_BxT,
                             prefix_BxPxD=prefix)
    probs_BxV = jax.nn.softmax(reward_model.logits(hidden[:, -1:])[:, 0], axis=-1)
    assert float(probs_BxV[:, said].min()) > 0.9, (reward, probs_BxV[:, [GOOD, BAD]])


STEPS = 30
NAMES = 8  # Name ids: [NAMES, 40) in training, [40, 64) never trained on.


def name_batch(rng, rows=32, low=NAMES, high=40):
  """[DIALOGUE CUSTOMER name EOT AGENT name EOT]: the agent says back the customer's name."""
  names_B = rng.integers(low, high, rows)
  ids_BxT = np.tile(np.asarray([DIALOGUE, CUSTOMER, 0, EOT, AGENT, 0, EOT], np.int32), (rows, 1))
  ids_BxT[:, 2] = ids_BxT[:, 5] = names_B
  return {**reward_batch(rng, rows), "input_ids": ids_BxT,
          calm_model.REWARD: np.ones(rows, np.float32)}


def name_accuracy_after_training(copy_dim):
  """How often the agent's name is the argmax on names it was never trained on."""
  c = _tiny_config(vocab=64, steps=STEPS)
  c.model.copy_dim = copy_dim
  model = train_on(name_batch, c)
  batch = name_batch(np.random.default_rng(1), rows=64, low=40, high=64)
  tokens_BxT = jnp.asarray(batch["input_ids"])
  mask_BxT = jnp.ones(tokens_BxT.shape, bool)
  hidden_BxTxD, _ = model(tokens_BxT, bc.positions_from_mask(mask_BxT), mask_BxT,
                          prefix_BxPxD=model.embed_prefix(batch[bc.PREFIX_FIELDS]))
  if copy_dim:
    source_BxT = copy_head.source_mask(mask_BxT, jnp.asarray(batch["action_mask"]))
    logp_BxV = copy_head.sequence_logits_fn(model, hidden_BxTxD, tokens_BxT, source_BxT)(
        hidden_BxTxD[:, 4:5], jnp.arange(4, 5))[:, 0]
  else:
    logp_BxV = model.logits(hidden_BxTxD[:, 4:5])[:, 0]
  return float(jnp.mean(jnp.argmax(logp_BxV, -1) == tokens_BxT[:, 5])), model


def test_with_a_copy_head_the_agent_says_back_names_it_never_saw():
  """The closing block's name comes from the customer's words: a tiny CALM copies names it was
  never trained on with the head (measured 1.00 after 25-80 updates) and not without (0.00)."""
  with_head, model = name_accuracy_after_training(copy_dim=8)
  without, _ = name_accuracy_after_training(copy_dim=0)
  assert copy_head.of(model) is not None
  assert with_head >= 0.9 and with_head > without + 0.5, (with_head, without)
