"""A tiny CALM learns to pick the cheapest valid flight of its table, through the real loop step.

Synthetic scenes: a table of FLIGHTS flights (the real 32-row structured
prefix), each with a class and a price; the customer's one-token turn names
the class it wants; the valid flights are those of that class and the
expected action books the cheapest of them. The agent's turn is `[action]`
then one flight token. Half of the rows are successes (the cheapest valid
flight, reward token 1), half failures (another flight, reward 0), so the
LM conditioned on reward 1 must pick the cheapest valid flight and, on reward
0, must not; the auxiliary head, read at `[action]`, must name it either way.
Chance is 1 / FLIGHTS.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from calm import model as calm_model
from experiments.configs import calm_airdialogue_quick
from ilql_dialogue import bc, sharding, train_loop
from domains.airdialogue import task as airdialogue

PAD, DIALOGUE, CUSTOMER, AGENT, EOT, MARK = range(6)
CLASS_TOKEN = 8  # + class index (0 economy, 1 business).
FLIGHT_TOKEN = 16  # + flight position.
VOCAB = 64
FLIGHTS = 6
BATCH = 64
LENGTH = 8  # DIALOGUE CUSTOMER class EOT AGENT MARK flight EOT.
FIELD = airdialogue.FIELD


def _config():
  c = calm_airdialogue_quick.get_config()
  c.model.update(vocab_size=VOCAB, num_layers=2, d_model=64, num_heads=4, num_kv_heads=2,
                 head_dim=16, mlp_dim=128, max_seq_len=16,
                 prefix_field_vocab_sizes=airdialogue.TABLE_PREFIX.field_vocab_sizes,
                 prefix_num_rows=airdialogue.NUM_ROWS,
                 # At 0.02 this model sits for ~1,000 updates on the plateau where attention
                 # is uniform over the 38 prefix rows and tokens; 0.1 leaves it in ~100.
                 init_std=0.1)
  # The 63-way linear head: these synthetic tables constrain only the class, where the state
  # heads solve real AirDialogue tables (their learning is tested in test_calm_state.py).
  c.algorithm.head = "linear"
  c.calm_data.scene_every = 0
  c.train.update(batch_size=BATCH, steps=350)
  c.optim.update(learning_rate=3e-3, warmup_steps=20)
  return c


def scenes(rng, rows):
  """Tables, requested classes and the expected (cheapest valid) flight of `rows` scenes."""
  fields_BxPxF = np.zeros((rows, airdialogue.NUM_ROWS, len(airdialogue.TABLE_FIELDS)), np.int32)
  fields_BxPxF[:, 0, FIELD["row_type"]] = airdialogue.ROW_NO_FLIGHT
  fields_BxPxF[:, -1, FIELD["row_type"]] = airdialogue.ROW_RESERVATION
  class_BxK = rng.integers(0, 2, (rows, FLIGHTS))
  price_BxK = np.argsort(rng.random((rows, FLIGHTS)), 1)  # Distinct prices, $0 to $599.
  wanted_B = class_BxK[np.arange(rows), rng.integers(0, FLIGHTS, rows)]  # Always one valid.
  for k in range(FLIGHTS):
    fields_BxPxF[:, 1 + k, FIELD["row_type"]] = airdialogue.ROW_FLIGHT
    fields_BxPxF[:, 1 + k, FIELD["flight_slot"]] = k + 1
    fields_BxPxF[:, 1 + k, FIELD["class"]] = class_BxK[:, k] + 1
    fields_BxPxF[:, 1 + k, FIELD["price_bucket"]] = price_BxK[:, k] + 1
  cost_BxK = np.where(class_BxK == wanted_B[:, None], price_BxK, 10**6)
  return fields_BxPxF, wanted_B, np.argmin(cost_BxK, axis=1)


def _batch(rng):
  fields_BxPxF, wanted_B, best_B = scenes(rng, BATCH)
  success_B = rng.random(BATCH) < 0.5
  other_B = (best_B + rng.integers(1, FLIGHTS, BATCH)) % FLIGHTS
  chosen_B = np.where(success_B, best_B, other_B)
  ids_BxT = np.stack([np.full(BATCH, DIALOGUE), np.full(BATCH, CUSTOMER), CLASS_TOKEN + wanted_B,
                      np.full(BATCH, EOT), np.full(BATCH, AGENT), np.full(BATCH, MARK),
                      FLIGHT_TOKEN + chosen_B, np.full(BATCH, EOT)], 1).astype(np.int32)
  speakers_BxT = np.asarray([0, 1, 1, 1, 2, 2, 2, 2], np.int32)[None].repeat(BATCH, 0)
  return {"input_ids": ids_BxT, "attention_mask": np.ones_like(ids_BxT, bool),
          "speaker_ids": speakers_BxT, "action_mask": speakers_BxT == 2,
          bc.PREFIX_FIELDS: fields_BxPxF, calm_model.REWARD: success_B.astype(np.float32),
          calm_model.ACTION_POSITION: np.full(BATCH, 5, np.int32),
          calm_model.EXPECTED_LO: (1 << best_B).astype(np.uint32),
          calm_model.EXPECTED_HI: np.zeros(BATCH, np.uint32)}


def _train(config):
  algorithm = calm_model.CALM.from_config(config)
  mesh = sharding.make_mesh()
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, algorithm, mesh)
    state = training.init()
    rng = np.random.default_rng(0)
    for _ in range(config.train.steps):
      state, metrics = training.step(state, train_loop.place_batch(_batch(rng), config, mesh))
    return nnx.merge(training.graphdef, state).model, jax.device_get(metrics)


@jax.jit
def _picks(model, fields_BxPxF, ids_BxT, reward_B):
  """(the LM's greedy flight after `[action]`, the head's argmax class) per row."""
  mask_BxT = jnp.ones_like(ids_BxT, bool)
  hidden_BxTxD, _ = model(ids_BxT, bc.positions_from_mask(mask_BxT), mask_BxT,
                          prefix_BxPxD=model.embed_prefix(fields_BxPxF, reward_B))
  flight_logits_BxV = model.logits(hidden_BxTxD[:, 5:6])[:, 0]
  flights_BxK = flight_logits_BxV[:, FLIGHT_TOKEN:FLIGHT_TOKEN + FLIGHTS]
  head_BxA = model.action_logits(hidden_BxTxD, mask_BxT, jnp.full(ids_BxT.shape[:1], 5),
                                 fields_BxPxF)
  return jnp.argmax(flights_BxK, -1), jnp.argmax(head_BxA, -1)


def test_tiny_calm_picks_the_cheapest_valid_flight_far_above_chance():
  model, metrics = _train(_config())
  assert np.isfinite(metrics["loss"])
  rows = 512
  fields_BxPxF, wanted_B, best_B = scenes(np.random.default_rng(1), rows)
  ids_BxT = np.stack([np.full(rows, DIALOGUE), np.full(rows, CUSTOMER), CLASS_TOKEN + wanted_B,
                      np.full(rows, EOT), np.full(rows, AGENT), np.full(rows, MARK)],
                     1).astype(np.int32)
  lm_B, head_B = _picks(model, fields_BxPxF, ids_BxT, np.ones(rows))
  lm = np.mean(np.asarray(lm_B) == best_B)
  head = np.mean(np.asarray(head_B) == best_B)  # Class k books flight 1000 + k.
  chance = 1 / FLIGHTS
  assert head > 3 * chance, (head, lm)
  assert lm > 3 * chance, (head, lm)
