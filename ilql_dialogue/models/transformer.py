"""Decoder-only transformer trunk (GPT-2 and Llama/Qwen2 families).

Contract (shared with generation and training):

  model(tokens_BxT, positions_BxT, token_mask_BxT, *, cache=None, prefix_BxPxD=None)
      -> (hidden_BxTxD, new_cache)
  model.logits(hidden_BxNxD) -> logits_BxNxV

Documented details of that contract:
  * `hidden` is after the final norm and covers the T tokens only (prefix
    rows are dropped), so heads and `logits` apply to it directly.
  * `logits` returns float32 whatever the compute dtype.
  * Prefix rows occupy the P slots before the tokens (in the cache: slots
    [index, index + P), so a cached prefill with a prefix advances `index` by
    P + T). They carry no position of their own: no learned position is added
    (GPT-2) and RoPE sees them at position 0, so token positions stay exactly
    what the caller passes and the prefix is an unordered table whose row
    identity comes from models.prefix.
  * Slots of padded tokens are written to the cache but marked invalid, so
    they are never attended to.

Deviations from the first draft of the contract, kept minimal:
  * KVCache stores [L, B, K, S, H] (`k_LxBxKxSxH`, `v_LxBxKxSxH`), not
    [L, B, S, K, H]: with slots before heads XLA:CPU transposed each layer's
    whole cache on every decode step (see models/kv_cache.py).
  * ModelConfig has a few extra fields with defaults: attn_out_bias and
    mlp_bias (GPT-2; Llama's attention_bias / mlp_bias), remat_policy,
    prefix_field_vocab_sizes / prefix_num_rows (models.prefix), init_std.

The layers are one `Block` module created under `nnx.vmap` (every parameter
has a leading "layers" axis) and run by `jax.lax.scan`, so compile time does
not grow with depth; with `cfg.remat` each layer is recomputed on the backward
pass under the configured `jax.checkpoint_policies` policy ("dots_saveable"
measured ~10% faster than no remat for training on 2 CPU cores, because it
stores less). The cache is read inside the scan and written once after it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ilql_dialogue.models.attention import (Attention, block_mask, dot_product_attention,
                                            rope_cos_sin)
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.kv_cache import KVCache
from ilql_dialogue.models.layers import make_mlp, make_norm, normal, param


class Block(nnx.Module):
  """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.attn_norm = make_norm(cfg, rngs=rngs)
    self.attn = Attention(cfg, rngs=rngs)
    self.mlp_norm = make_norm(cfg, rngs=rngs)
    self.mlp = make_mlp(cfg, rngs=rngs)

  def __call__(self, x_BxTxD: jax.Array, rope: tuple[jax.Array, jax.Array] | None,
               visible_TxT: jax.Array, valid_BxT: jax.Array,
               past: tuple[jax.Array, jax.Array, jax.Array] | None,
               ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Returns the new residual stream and this block's new keys/values [B, T, K, H]."""
    q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH = self.attn.qkv(self.attn_norm(x_BxTxD), rope)
    attn_BxTxKxGxH = dot_product_attention(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, visible_TxT,
                                           valid_BxT, past)
    x_BxTxD = x_BxTxD + self.attn.out(attn_BxTxKxGxH)
    x_BxTxD = x_BxTxD + self.mlp(self.mlp_norm(x_BxTxD))
    return x_BxTxD, (k_BxTxKxH, v_BxTxKxH)


class Transformer(nnx.Module):
  """Token (+ optional structured prefix) -> final hidden states, with optional KV cache."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    pd = cfg.weight_dtype
    self.embed = param(rngs, normal(cfg.init_std), (cfg.vocab_size, cfg.d_model),
                       ("vocab", "embed"), pd)
    self.pos_embed = (param(rngs, normal(cfg.init_std), (cfg.max_seq_len, cfg.d_model),
                            (None, "embed"), pd) if cfg.family == "gpt2" else None)

    @nnx.split_rngs(splits=cfg.num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
    def make_blocks(rngs: nnx.Rngs) -> Block:
      return Block(cfg, rngs=rngs)

    self.blocks = make_blocks(rngs)
    self.final_norm = make_norm(cfg, rngs=rngs)
    self.lm_head = (None if cfg.tie_embeddings else
                    param(rngs, normal(cfg.init_std), (cfg.d_model, cfg.vocab_size),
                          ("embed", "vocab"), pd))

  def __call__(self, tokens_BxT: jax.Array, positions_BxT: jax.Array,
               token_mask_BxT: jax.Array, *, cache: KVCache | None = None,
               prefix_BxPxD: jax.Array | None = None,
               ) -> tuple[jax.Array, KVCache | None]:
    cfg = self.cfg
    dtype = cfg.compute_dtype
    num_tokens = tokens_BxT.shape[1]
    positions_BxT = positions_BxT.astype(jnp.int32)
    x_BxTxD = _lookup(self.embed[...], tokens_BxT, "token id").astype(dtype)
    if self.pos_embed is not None:
      x_BxTxD = x_BxTxD + _lookup(self.pos_embed[...], positions_BxT, "position").astype(dtype)
    valid_BxT = token_mask_BxT.astype(jnp.bool_)

    num_prefix = 0 if prefix_BxPxD is None else prefix_BxPxD.shape[1]
    if num_prefix:
      x_BxTxD = jnp.concatenate([prefix_BxPxD.astype(dtype), x_BxTxD], axis=1)
      positions_BxT = jnp.pad(positions_BxT, ((0, 0), (num_prefix, 0)))
      valid_BxT = jnp.pad(valid_BxT, ((0, 0), (num_prefix, 0)), constant_values=True)
    num_slots = num_prefix + num_tokens
    if cache is not None:
      _check_room(cache, num_slots)
    visible_TxT = block_mask(num_slots, num_prefix, cfg.prefix_bidirectional)
    rope = (rope_cos_sin(positions_BxT, cfg.head_dim, cfg.rope_theta)
            if cfg.family == "llama" else None)
    past_visible_BxS = None if cache is None else cache.visible_BxS()
    graphdef, block_state = nnx.split(self.blocks)

    def layer_step(x_BxTxD, layer_inputs):
      state, past_kv = layer_inputs
      if past_kv is None:  # Training: nothing to cache, so no stacked k/v outputs.
        return nnx.merge(graphdef, state)(x_BxTxD, rope, visible_TxT, valid_BxT, None)[0], None
      past = (*past_kv, past_visible_BxS)
      return nnx.merge(graphdef, state)(x_BxTxD, rope, visible_TxT, valid_BxT, past)

    if cfg.remat:
      layer_step = jax.checkpoint(
          layer_step, policy=getattr(jax.checkpoint_policies, cfg.remat_policy),
          prevent_cse=False)
    past_kv = None if cache is None else (cache.k_LxBxKxSxH, cache.v_LxBxKxSxH)
    x_BxTxD, new_kv = jax.lax.scan(layer_step, x_BxTxD, (block_state, past_kv))
    hidden_BxTxD = self.final_norm(x_BxTxD[:, num_prefix:])
    if cache is not None:
      cache = cache.append(*new_kv, valid_BxT)
    return hidden_BxTxD, cache

  def logits(self, hidden_BxNxD: jax.Array) -> jax.Array:
    """float32 vocabulary logits for hidden states of any leading shape."""
    dtype = self.cfg.compute_dtype
    if self.lm_head is None:
      return jnp.einsum("...d,vd->...v", hidden_BxNxD.astype(dtype),
                        self.embed[...].astype(dtype), preferred_element_type=jnp.float32)
    return jnp.einsum("...d,dv->...v", hidden_BxNxD.astype(dtype),
                      self.lm_head[...].astype(dtype), preferred_element_type=jnp.float32)


def _lookup(table_NxD: jax.Array, ids_BxT: jax.Array, what: str) -> jax.Array:
  """Rows of `table`; an id outside [0, N) raises outside jit and gives NaN rows under it.

  jnp.take alone would wrap negative ids (a -1 pad id would silently read the
  last row).
  """
  num_rows = table_NxD.shape[0]
  if not isinstance(ids_BxT, jax.core.Tracer):
    bad = np.argwhere((np.asarray(ids_BxT) < 0) | (np.asarray(ids_BxT) >= num_rows))
    if bad.size:
      b, t = map(int, bad[0])
      raise ValueError(f"{what} {int(ids_BxT[b, t])} at [{b}, {t}] is outside [0, {num_rows})")
  ids_BxT = jnp.where(ids_BxT < 0, num_rows, ids_BxT)
  return jnp.take(table_NxD, ids_BxT, axis=0, mode="fill", fill_value=jnp.nan)


def _check_room(cache: KVCache, num_slots: int) -> None:
  """Raises when the write would run past the cache (only checkable outside jit)."""
  if isinstance(cache.index, jax.core.Tracer):
    return
  if int(cache.index) + num_slots > cache.max_len:
    raise ValueError(f"KVCache overflow: index {int(cache.index)} + {num_slots} new slots > "
                     f"max_len {cache.max_len}")
