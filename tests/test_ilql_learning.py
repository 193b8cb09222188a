"""ILQL learns to prefer a rare high-reward reply that BC, imitating the data, rarely picks.

The task: the user says X or Y; the agent answers X with A (reward 0) or B
(reward 1) and Y with C (reward 0) or D (reward 1). The data picks the
low-reward reply 80% of the time, so BC sampling (beta = 0, the policy head
trained by ILQL's BC term) is right about 20% of the time, while
value-guided sampling (beta > 0) of the same model must be right far more
often, and must not answer with the other context's reply. Trained through the real jitted train step (Polyak
targets updated inside it) and decoded through the real sampler and hook.
"""

import jax
import numpy as np
from flax import nnx

from experiments.configs import ilql_airdialogue_quick
from ilql_dialogue import ilql, sharding, train_loop, value_guidance
from ilql_dialogue.generation import sampler

PAD, DIALOGUE, USER, AGENT, EOT, X, Y, A, B, C, D = range(11)
VOCAB = 16
WRONG_RATE = 0.8
BATCH = 32


def _config():
  c = ilql_airdialogue_quick.get_config()
  c.model.update(family="gpt2", vocab_size=VOCAB, num_layers=1, d_model=32, num_heads=2,
                 num_kv_heads=2, head_dim=16, mlp_dim=64, max_seq_len=16)
  c.algorithm.update(cql_weight=0.1, polyak_rate=0.05, discount="token")
  c.train.update(batch_size=BATCH, steps=300)
  c.optim.update(learning_rate=3e-3, warmup_steps=10)
  return c


def _batch(rng):
  """[DIALOGUE USER u EOT AGENT reply EOT PAD]: actions are the reply and its EOT."""
  user_B = rng.choice([X, Y], BATCH)
  low_B, high_B = np.where(user_B == X, A, C), np.where(user_B == X, B, D)
  reply_B = np.where(rng.random(BATCH) < WRONG_RATE, low_B, high_B)
  ids = np.zeros((BATCH, 8), np.int32)
  ids[:, :7] = np.stack([np.full(BATCH, DIALOGUE), np.full(BATCH, USER), user_B,
                         np.full(BATCH, EOT), np.full(BATCH, AGENT), reply_B,
                         np.full(BATCH, EOT)], 1)
  mask = ids != PAD
  action = np.zeros_like(mask)
  action[:, 5:7] = True
  end = np.zeros_like(mask)
  end[:, 6] = True
  rewards = np.zeros((BATCH, 8), np.float32)
  rewards[:, 6] = (reply_B == high_B).astype(np.float32)
  next_token = np.full((BATCH, 8), -1, np.int32)
  next_token[:, 5] = 5  # The reply's next decision state is h_5, which emits the EOT.
  return {"input_ids": ids, "attention_mask": mask, "action_mask": action,
          "utterance_end": end, "rewards": rewards, "terminal": end.copy(),
          "next_token_index": next_token, "next_utterance_index": np.full_like(next_token, -1)}


def _train(config):
  algorithm = ilql.ILQL.from_config(config)
  mesh = sharding.make_mesh()
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, algorithm, mesh)
    state = training.init()
    rng = np.random.default_rng(0)
    for _ in range(config.train.steps):
      state, metrics = training.step(state, train_loop.place_batch(_batch(rng), config, mesh))
    return nnx.merge(training.graphdef, state).model, jax.device_get(metrics)


def _reply_rates(model, beta, key):
  """Shares of sampled replies that are the high- and the low-reward reply of their context."""
  rows = 512
  user_B = np.where(np.arange(rows) % 2 == 0, X, Y)
  prompt = np.stack([np.full(rows, DIALOGUE), np.full(rows, USER), user_B, np.full(rows, EOT),
                     np.full(rows, AGENT)], 1).astype(np.int32)
  lm = value_guidance.decoding_model(model)
  state = sampler.prefill(lm, prompt, np.ones_like(prompt, bool), max_len=8)
  params = sampler.SamplingParams.make(rows, max_new_tokens=1, temperature=1.0)
  hook = value_guidance.value_guidance(model, beta, rows)
  _, tokens, _, _ = sampler.generate(lm, state, params, key, max_new_tokens=1, hook=hook)
  reply_B = np.asarray(tokens[:, 0])
  high = np.mean(reply_B == np.where(user_B == X, B, D))
  low = np.mean(reply_B == np.where(user_B == X, A, C))
  return float(high), float(low)


def test_ilql_decoding_prefers_the_rare_high_reward_reply():
  model, metrics = _train(_config())
  assert np.isfinite(metrics["loss"])
  key = jax.random.key(1)
  bc_high, bc_low = _reply_rates(model, 0.0, key)
  ilql_high, ilql_low = _reply_rates(model, 8.0, key)
  # BC imitates the data (high reward 20% of the time); ILQL's advantage overrides it.
  assert 0.1 < bc_high < 0.3 and bc_low > 0.6, (bc_high, bc_low)
  assert ilql_high > 0.9, (bc_high, ilql_high)
  assert ilql_high + ilql_low > 0.95, (ilql_high, ilql_low)
