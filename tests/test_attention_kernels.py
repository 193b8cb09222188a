"""Every attention path that runs on CPU computes the reference softmax (float32, 1e-5)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ilql_dialogue.models import ModelConfig, Transformer
from ilql_dialogue.models import attention_kernels as ak

TOL = 1e-5
ON_GPU = jax.default_backend() == "gpu"
# splash runs in Pallas' interpreter off TPU: the TPU kernel's own arithmetic, slowly.
CPU_PATHS = [("blocked", 4), ("blocked", 5), ("blocked", 64), ("xla", 128), ("reference", 128),
             ("splash", 128)]


def _qkv(key, batch, slots, kv_heads, groups, head_dim=8):
  kq, kk, kv = jax.random.split(key, 3)
  return (jax.random.normal(kq, (batch, slots, kv_heads, groups, head_dim)),
          jax.random.normal(kk, (batch, slots, kv_heads, head_dim)),
          jax.random.normal(kv, (batch, slots, kv_heads, head_dim)))


def _valid(slots):
  """Row 0 unpadded, row 1 left-padded, row 2 with padding in the middle."""
  valid = np.ones((3, slots), bool)
  valid[1, :5] = False
  valid[2, 6:9] = False
  return jnp.asarray(valid)


def _reference(q, k, v, valid, prefix_len, bidirectional):
  t = q.shape[1]
  visible = ak.visible_mask(t, t, 0, 0, prefix_len, bidirectional)
  return ak.reference(q, jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2), visible, valid)


def _close_at_valid(valid, got, want):
  """Padding queries see no key and hold junk nobody reads; compare the rest."""
  diff = jnp.where(valid[:, :, None, None, None], jnp.abs(got - want), 0.0)
  assert float(diff.max()) < TOL, float(diff.max())


@pytest.mark.parametrize("impl,block", CPU_PATHS)
@pytest.mark.parametrize("prefix_len,bidirectional", [(0, False), (6, True), (6, False)])
@pytest.mark.parametrize("groups", [1, 3])
def test_attend_block_matches_reference(impl, block, prefix_len, bidirectional, groups):
  q, k, v = _qkv(jax.random.key(groups), 3, 19, 2, groups)
  valid = _valid(19)
  got = ak.attend_block(impl, q, k, v, valid, prefix_len=prefix_len,
                        prefix_bidirectional=bidirectional, block=block)
  _close_at_valid(valid, got, _reference(q, k, v, valid, prefix_len, bidirectional))


@pytest.mark.parametrize("impl,block", CPU_PATHS[:2] + CPU_PATHS[3:4] + CPU_PATHS[5:])
def test_attend_block_gradients_match_reference(impl, block):
  """The blocked path skips masked work in the backward pass too, with the same gradient."""
  q, k, v = _qkv(jax.random.key(7), 3, 13, 2, 2)
  valid = _valid(13)
  weights = jnp.where(valid, 1.0, 0.0)[:, :, None, None, None]

  def loss(fn, q, k, v):
    return jnp.sum(jnp.sin(fn(q, k, v)) * weights)

  path = lambda q, k, v: ak.attend_block(impl, q, k, v, valid, prefix_len=4,
                                         prefix_bidirectional=True, block=block)
  ref = lambda q, k, v: _reference(q, k, v, valid, 4, True)
  for got, want in zip(jax.grad(functools.partial(loss, path), argnums=(0, 1, 2))(q, k, v),
                       jax.grad(functools.partial(loss, ref), argnums=(0, 1, 2))(q, k, v)):
    np.testing.assert_allclose(got, want, atol=TOL)


@pytest.mark.parametrize("block", [4, 64])
@pytest.mark.parametrize("prefix_len,bidirectional", [(0, False), (4, True)])
def test_blocked_gradient_is_exact_wherever_a_query_sees_a_key(block, prefix_len, bidirectional):
  """The fused backward equals autodiff of the reference for a cotangent on every row, padding
  queries that see earlier keys included; only rows that see no key at all are left out."""
  q, k, v = _qkv(jax.random.key(3), 3, 13, 2, 2)
  valid = _valid(13)
  visible = ak.visible_mask(13, 13, 0, 0, prefix_len, bidirectional)
  sees_BxT = jnp.any(visible[None] & valid[:, None, :], axis=-1)
  assert not bool(sees_BxT[1, 0]) and bool(sees_BxT[2, 7])  # Blind rows and padding that sees.
  cotangent = jax.random.normal(jax.random.key(4), q.shape) * sees_BxT[:, :, None, None, None]

  def grads(fn):
    out, vjp = jax.vjp(fn, q, k, v)
    return vjp(cotangent)

  path = lambda q, k, v: ak.attend_block("blocked", q, k, v, valid, prefix_len=prefix_len,
                                         prefix_bidirectional=bidirectional, block=block)
  ref = lambda q, k, v: _reference(q, k, v, valid, prefix_len, bidirectional)
  for got, want in zip(grads(path), grads(ref)):
    np.testing.assert_allclose(got, want, atol=TOL)


@pytest.mark.skipif(ON_GPU, reason="`auto` is cuDNN or xla on a GPU (tested below)")
def test_auto_is_blocked_on_cpu():
  assert ak.resolve("auto", jnp.float32) == "blocked"
  assert ModelConfig().attention_impl == "auto"


@functools.cache
def _trunk(family, impl, block):
  common = dict(vocab_size=50, num_layers=2, d_model=32, num_heads=4, max_seq_len=64,
                prefix_bidirectional=True, attention_impl=impl, attention_block=block)
  cfg = (ModelConfig.gpt2(**common) if family == "gpt2"
         else ModelConfig.llama(num_kv_heads=2, mlp_dim=64, **common))
  return Transformer(cfg, rngs=nnx.Rngs(0))


@nnx.jit
def _hidden(model, tokens, mask, prefix):
  positions = jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0)
  return model(tokens, positions, mask, prefix_BxPxD=prefix)[0]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("impl,block", CPU_PATHS[:3] + CPU_PATHS[3:4] + CPU_PATHS[5:])
@pytest.mark.parametrize("with_prefix", [False, True])
def test_trunk_paths_match_reference_trunk(family, impl, block, with_prefix):
  """Same parameters (the tree does not depend on the path), same hidden states."""
  tokens = jax.random.randint(jax.random.key(1), (3, 15), 0, 50)
  mask = _valid(15)
  prefix = jax.random.normal(jax.random.key(2), (3, 4, 32)) if with_prefix else None
  ref_model, model = _trunk(family, "reference", 128), _trunk(family, impl, block)
  ref_state, state = nnx.state(ref_model, nnx.Param), nnx.state(model, nnx.Param)
  assert jax.tree.structure(ref_state) == jax.tree.structure(state)
  for a, b in zip(jax.tree.leaves(ref_state), jax.tree.leaves(state)):
    np.testing.assert_array_equal(a, b)
  got, want = _hidden(model, tokens, mask, prefix), _hidden(ref_model, tokens, mask, prefix)
  diff = jnp.where(mask[..., None], jnp.abs(got - want), 0.0)
  assert float(diff.max()) < TOL, float(diff.max())


def test_unrolled_and_scanned_layers_agree():
  tokens = jax.random.randint(jax.random.key(3), (3, 15), 0, 50)
  mask = _valid(15)
  unrolled = _trunk("llama", "reference", 128)
  scanned = Transformer(unrolled.cfg.replace(unroll_layers=False), rngs=nnx.Rngs(0))
  np.testing.assert_allclose(_hidden(unrolled, tokens, mask, None),
                             _hidden(scanned, tokens, mask, None), atol=TOL)


# --- cuDNN flash attention: only where an NVIDIA GPU is the default backend ---------------------

needs_gpu = pytest.mark.skipif(not ON_GPU, reason="cuDNN flash attention needs an NVIDIA GPU")
BF16_TOL = 2e-2  # bfloat16 keeps 8 bits of mantissa: outputs of size ~1 round by ~4e-3.


def _bf16_qkv(key, batch, slots, kv_heads, groups, head_dim=64):
  return tuple(x.astype(jnp.bfloat16) for x in _qkv(key, batch, slots, kv_heads, groups, head_dim))


def _reference_f32(q, k, v, valid, prefix_len, bidirectional):
  """The float32 reference on the same bfloat16-rounded inputs."""
  return _reference(*(x.astype(jnp.float32) for x in (q, k, v)), valid, prefix_len,
                    bidirectional)


@needs_gpu
def test_auto_is_cudnn_on_gpu_in_16_bit_at_even_lengths():
  assert ak.resolve("auto", jnp.bfloat16, 38) == "cudnn"
  assert ak.resolve("auto", jnp.bfloat16, 37) == "xla"  # cuDNN's gradient needs even lengths.
  assert ak.resolve("auto", jnp.float32, 38) == "xla"


@needs_gpu
@pytest.mark.parametrize("slots", [19, 128])
@pytest.mark.parametrize("prefix_len,bidirectional", [(0, False), (6, True), (6, False)])
@pytest.mark.parametrize("groups", [1, 3])
def test_cudnn_matches_reference_in_bfloat16(slots, prefix_len, bidirectional, groups):
  """Padding (left and in the middle), a bidirectional prefix and grouped queries, as the
  trunk calls it; odd lengths too, since `auto` picks cuDNN for every bfloat16 run."""
  q, k, v = _bf16_qkv(jax.random.key(groups), 3, slots, 2, groups)
  valid = _valid(slots)
  got = ak.attend_block("cudnn", q, k, v, valid, prefix_len=prefix_len,
                        prefix_bidirectional=bidirectional, block=128).astype(jnp.float32)
  want = _reference_f32(q, k, v, valid, prefix_len, bidirectional)
  diff = jnp.where(valid[:, :, None, None, None], jnp.abs(got - want), 0.0)
  assert float(diff.max()) < BF16_TOL, float(diff.max())


@needs_gpu
@pytest.mark.parametrize("impl,slots", [("cudnn", 38), ("auto", 37)])
def test_cudnn_gradients_match_reference_in_bfloat16(impl, slots):
  """Finite everywhere (padding queries included: their junk must not poison the trunk's
  gradient) and close to the float32 reference's where it is read; `auto` differentiates
  odd lengths too."""
  q, k, v = _bf16_qkv(jax.random.key(7), 3, slots, 2, 2)
  valid = _valid(slots)
  weights = jnp.where(valid, 1.0, 0.0)[:, :, None, None, None]

  def loss(fn, q, k, v):
    return jnp.sum(jnp.sin(fn(q, k, v).astype(jnp.float32)) * weights)

  path = lambda q, k, v: ak.attend_block(impl, q, k, v, valid, prefix_len=4,
                                         prefix_bidirectional=True, block=128)
  ref = lambda q, k, v: _reference(q, k, v, valid, 4, True)
  got = jax.grad(functools.partial(loss, path), argnums=(0, 1, 2))(q, k, v)
  want = jax.grad(functools.partial(loss, ref), argnums=(0, 1, 2))(
      *(x.astype(jnp.float32) for x in (q, k, v)))
  for g, w in zip(got, want):
    g = g.astype(jnp.float32)
    assert bool(jnp.isfinite(g).all())
    scale = float(jnp.abs(w).max())
    assert float(jnp.abs(g - w).max()) < 4 * BF16_TOL * scale, (float(jnp.abs(g - w).max()), scale)


@needs_gpu
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_cudnn_trunk_matches_reference_trunk_in_bfloat16(family):
  common = dict(vocab_size=50, num_layers=2, d_model=128, num_heads=2, max_seq_len=64,
                prefix_bidirectional=True, dtype="bfloat16")
  make = lambda impl: Transformer(
      (ModelConfig.gpt2(attention_impl=impl, **common) if family == "gpt2"
       else ModelConfig.llama(num_kv_heads=1, mlp_dim=256, attention_impl=impl, **common)),
      rngs=nnx.Rngs(0))
  tokens = jax.random.randint(jax.random.key(1), (3, 15), 0, 50)
  mask = _valid(15)
  prefix = jax.random.normal(jax.random.key(2), (3, 4, 128))
  got = _hidden(make("cudnn"), tokens, mask, prefix).astype(jnp.float32)
  want = _hidden(make("reference"), tokens, mask, prefix).astype(jnp.float32)
  diff = jnp.where(mask[..., None], jnp.abs(got - want), 0.0)
  assert float(diff.max()) < 4 * BF16_TOL * float(jnp.abs(want).max()), float(diff.max())
