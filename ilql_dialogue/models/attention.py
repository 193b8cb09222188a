"""Grouped-query attention projections and rotary embeddings.

The softmax itself lives in models/attention_kernels.py (one function,
several implementations).

Query heads are laid out as [K, G] (kv head, group member), which matches
Hugging Face's `repeat_kv` (query head k * G + g uses kv head k): keys and
values are never repeated. q, k and v come out of one fused [D, K, G + 2, H]
kernel (G query heads, one key, one value per kv head), so the projection is
one matmul and tensor-parallel sharding over kv heads keeps each head's
q, k and v on the same device. GPT-2 is the case G = 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.layers import dense, normal, param, zeros


def rope_cos_sin(positions_BxT: jax.Array, head_dim: int, theta: float,
                 ) -> tuple[jax.Array, jax.Array]:
  """cos/sin tables [B, T, H] in float32, halves duplicated as in HF."""
  inv_freq_H2 = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
  angles_BxTxH2 = positions_BxT.astype(jnp.float32)[..., None] * inv_freq_H2
  angles_BxTxH = jnp.concatenate([angles_BxTxH2, angles_BxTxH2], axis=-1)
  return jnp.cos(angles_BxTxH), jnp.sin(angles_BxTxH)


def apply_rope(x_BxTx_xH: jax.Array, cos_BxTxH: jax.Array, sin_BxTxH: jax.Array) -> jax.Array:
  """HF's rotate_half convention; any number of head axes between T and H."""
  extra = x_BxTx_xH.ndim - cos_BxTxH.ndim
  shape = cos_BxTxH.shape[:2] + (1,) * extra + cos_BxTxH.shape[2:]
  cos, sin = cos_BxTxH.reshape(shape), sin_BxTxH.reshape(shape)
  x1, x2 = jnp.split(x_BxTx_xH, 2, axis=-1)
  rotated = jnp.concatenate([-x2, x1], axis=-1)
  out = x_BxTx_xH.astype(jnp.float32) * cos + rotated.astype(jnp.float32) * sin
  return out.astype(x_BxTx_xH.dtype)


class Attention(nnx.Module):
  """Fused-qkv grouped-query attention; the cache write happens in the caller."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.dtype = cfg.compute_dtype
    self.num_groups = cfg.num_groups
    pd = cfg.weight_dtype
    k, g, h, d = cfg.num_kv_heads, cfg.num_groups, cfg.head_dim, cfg.d_model
    self.qkv_kernel = param(rngs, normal(cfg.init_std), (d, k, g + 2, h),
                            ("embed", "kv_heads", None, "head_dim"), pd)
    self.qkv_bias = (param(rngs, zeros, (k, g + 2, h), ("kv_heads", None, "head_dim"), pd)
                     if cfg.qkv_bias else None)
    out_std = cfg.init_std / (2 * cfg.num_layers) ** 0.5
    self.out_kernel = param(rngs, normal(out_std), (cfg.num_heads, h, d),
                            ("heads", "head_dim", "embed"), pd)
    self.out_bias = param(rngs, zeros, (d,), ("embed",), pd) if cfg.attn_out_bias else None

  def qkv(self, x_BxTxD: jax.Array, rope: tuple[jax.Array, jax.Array] | None,
          ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Projects to q [B, T, K, G, H] and k, v [B, T, K, H], rotated if `rope`."""
    qkv_BxTxKxCxH = dense(x_BxTxD, self.qkv_kernel[...].astype(self.dtype))
    if self.qkv_bias is not None:
      qkv_BxTxKxCxH = qkv_BxTxKxCxH + self.qkv_bias[...].astype(self.dtype)
    g = self.num_groups
    q_BxTxKxGxH = qkv_BxTxKxCxH[:, :, :, :g]
    k_BxTxKxH = qkv_BxTxKxCxH[:, :, :, g]
    v_BxTxKxH = qkv_BxTxKxCxH[:, :, :, g + 1]
    if rope is not None:
      q_BxTxKxGxH = apply_rope(q_BxTxKxGxH, *rope)
      k_BxTxKxH = apply_rope(k_BxTxKxH, *rope)
    return q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH

  def out(self, attn_BxTxKxGxH: jax.Array) -> jax.Array:
    b, t, k, g, h = attn_BxTxKxGxH.shape
    y_BxTxD = dense(attn_BxTxKxGxH.reshape(b, t, k * g, h),
                    self.out_kernel[...].astype(self.dtype), n_in=2)
    if self.out_bias is not None:
      y_BxTxD = y_BxTxD + self.out_bias[...].astype(self.dtype)
    return y_BxTxD
