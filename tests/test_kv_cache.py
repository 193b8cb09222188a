"""Cached incremental decoding gives the logits of one full forward pass."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ilql_dialogue.models import ModelConfig, StructuredPrefix, Transformer, init_cache

VOCAB = 97
TOL = 2e-5
CONFIGS = {
    "gpt2": ModelConfig.gpt2(vocab_size=VOCAB, num_layers=2, d_model=32, num_heads=4,
                             max_seq_len=64),
    "llama": ModelConfig.llama(vocab_size=VOCAB, num_layers=2, d_model=32, num_heads=4,
                               num_kv_heads=2, mlp_dim=64, qkv_bias=True),
}


def _positions(mask_BxT):
  return jnp.maximum(jnp.cumsum(mask_BxT, axis=1) - 1, 0)


def _left_padded(key, lengths, total):
  tokens = jax.random.randint(key, (len(lengths), total), 0, VOCAB)
  mask = jnp.arange(total)[None, :] >= total - jnp.asarray(lengths)[:, None]
  return tokens, mask


@functools.partial(nnx.jit, donate_argnames="cache")
def _step(model, tokens, positions, mask, cache, prefix=None):
  hidden, cache = model(tokens, positions, mask, cache=cache, prefix_BxPxD=prefix)
  return model.logits(hidden), cache


@nnx.jit
def _full_logits(model, tokens, mask, prefix=None):
  hidden, _ = model(tokens, _positions(mask), mask, prefix_BxPxD=prefix)
  return model.logits(hidden)


def _assert_close_at(mask, a, b):
  diff = float(jnp.max(jnp.where(mask[..., None], jnp.abs(a - b), 0.0)))
  assert diff < TOL, diff


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_prefill_then_single_token_steps(family):
  model = Transformer(CONFIGS[family], rngs=nnx.Rngs(0))
  tokens, mask = _left_padded(jax.random.key(1), [10, 6, 3], total=10)
  positions = _positions(mask)
  prompt = 6
  cache = init_cache(CONFIGS[family], batch_size=3, max_len=16)
  logits, cache = _step(model, tokens[:, :prompt], positions[:, :prompt], mask[:, :prompt], cache)
  pieces = [logits]
  for t in range(prompt, 10):
    old_k = cache.k_BxKxSxH[0]
    logits, cache = _step(model, tokens[:, t:t + 1], positions[:, t:t + 1], mask[:, t:t + 1],
                          cache)
    assert old_k.is_deleted()  # Donated: updated in place, not copied.
    pieces.append(logits)
  assert int(cache.index) == 10
  np.testing.assert_array_equal(cache.valid_BxS[:, :10], mask)
  assert not cache.valid_BxS[:, 10:].any()
  _assert_close_at(mask, jnp.concatenate(pieces, axis=1), _full_logits(model, tokens, mask))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_appended_turns_with_internal_padding(family):
  """Multi-turn: each new turn block is right-padded per row, so pads sit mid-history."""
  model = Transformer(CONFIGS[family], rngs=nnx.Rngs(2))
  key1, key2, key3 = jax.random.split(jax.random.key(3), 3)
  history, history_mask = _left_padded(key1, [7, 4], total=7)
  turn1 = jax.random.randint(key2, (2, 5), 0, VOCAB)
  turn1_mask = jnp.arange(5)[None, :] < jnp.array([[2], [5]])
  turn2 = jax.random.randint(key3, (2, 3), 0, VOCAB)
  turn2_mask = jnp.arange(3)[None, :] < jnp.array([[3], [1]])
  tokens = jnp.concatenate([history, turn1, turn2], axis=1)
  mask = jnp.concatenate([history_mask, turn1_mask, turn2_mask], axis=1)
  positions = _positions(mask)

  cache = init_cache(CONFIGS[family], batch_size=2, max_len=20)
  pieces = []
  for lo, hi in [(0, 7), (7, 12), (12, 13), (13, 15)]:
    logits, cache = _step(model, tokens[:, lo:hi], positions[:, lo:hi], mask[:, lo:hi], cache)
    pieces.append(logits)
  _assert_close_at(mask, jnp.concatenate(pieces, axis=1), _full_logits(model, tokens, mask))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_prefix_consumed_at_prefill(family):
  cfg = CONFIGS[family].replace(prefix_bidirectional=True, prefix_field_vocab_sizes=(5, 7),
                                prefix_num_rows=4)
  model = Transformer(cfg, rngs=nnx.Rngs(4))
  prefix = StructuredPrefix(cfg, rngs=nnx.Rngs(5))(
      jax.random.randint(jax.random.key(6), (2, 4, 2), 0, 5))
  tokens, mask = _left_padded(jax.random.key(7), [6, 3], total=6)
  positions = _positions(mask)
  cache = init_cache(cfg, batch_size=2, max_len=12)
  logits, cache = _step(model, tokens[:, :4], positions[:, :4], mask[:, :4], cache, prefix)
  assert int(cache.index) == 4 + 4
  pieces = [logits]
  for t in range(4, 6):
    logits, cache = _step(model, tokens[:, t:t + 1], positions[:, t:t + 1], mask[:, t:t + 1],
                          cache)
    pieces.append(logits)
  _assert_close_at(mask, jnp.concatenate(pieces, axis=1),
                   _full_logits(model, tokens, mask, prefix=prefix))


def test_overflow_outside_jit_raises():
  cfg = CONFIGS["llama"]
  model = Transformer(cfg, rngs=nnx.Rngs(0))
  cache = init_cache(cfg, batch_size=1, max_len=4)
  tokens = jnp.zeros((1, 5), jnp.int32)
  with pytest.raises(ValueError, match="overflow"):
    model(tokens, jnp.arange(5)[None], jnp.ones((1, 5), bool), cache=cache)


def test_cache_in_bfloat16():
  cfg = CONFIGS["llama"]
  model = Transformer(cfg, rngs=nnx.Rngs(0))
  tokens, mask = _left_padded(jax.random.key(8), [5, 2], total=5)
  cache = init_cache(cfg, batch_size=2, max_len=8, dtype=jnp.bfloat16)
  logits, cache = _step(model, tokens, _positions(mask), mask, cache)
  assert cache.k_BxKxSxH[0].dtype == jnp.bfloat16
  full = _full_logits(model, tokens, mask)
  assert float(jnp.max(jnp.where(mask[..., None], jnp.abs(logits - full), 0.0))) < 0.05
