"""Decoder-only transformer trunk (GPT-2 and Llama/Qwen2 families).

Contract (shared with generation and training):

  model(tokens_BxT, positions_BxT, token_mask_BxT, *, cache=None, prefix_BxPxD=None)
      -> (hidden_BxTxD, new_cache)
  model.logits(hidden_BxNxD) -> logits_BxNxV

With `cfg.copy_dim` the trunk has a pointer head (models/copy_head.py): the next token's
distribution then also depends on the context, so callers take it from
`copy_head.sequence_logits_fn` (training, scoring) or `copy_head.next_token_logits` (decoding
from a cache, whose copy entries this trunk writes), not from `logits` alone.

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

KVCache holds one [B, K, S, H] buffer per layer (`k_BxKxSxH`, `v_BxKxSxH` are
tuples), not one [L, B, S, K, H] array: see models/kv_cache.py.

The layers are one `Block` module created under `nnx.vmap` (every parameter
has a leading "layers" axis). Without a cache (training, scoring) they run
under `jax.lax.scan`, unrolled by default (`cfg.unroll_layers`): the scan
keeps one trace of the body, and unrolling lets XLA give each layer its own
activation buffers instead of stacking them and slicing them back out in the
backward pass. With `cfg.remat` each layer is recomputed on the backward pass
under the configured `jax.checkpoint_policies` policy ("dots_saveable" stores
less, and trains faster than no remat on CPU). With a cache
(prefill, append, decode) the layers are a Python loop: each updates its own
cache buffer in place, which a scan over stacked layers cannot do without
copying every layer's slice out on every step.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ilql_dialogue.models import attention_kernels
from ilql_dialogue.models.attention import Attention, rope_cos_sin
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.copy_head import CopyHead
from ilql_dialogue.models.kv_cache import KVCache
from ilql_dialogue.models.layers import dense, make_mlp, make_norm, normal, param


Attend = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, Any]]
# Per-layer Blocks of the trunks inside `hoisted_layers`, by id(trunk).
_HOISTED: contextvars.ContextVar[dict[int, list["Block"]]] = contextvars.ContextVar(
    "hoisted_layers", default={})


class Block(nnx.Module):
  """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.attn_norm = make_norm(cfg, rngs=rngs)
    self.attn = Attention(cfg, rngs=rngs)
    self.mlp_norm = make_norm(cfg, rngs=rngs)
    self.mlp = make_mlp(cfg, rngs=rngs)

  def __call__(self, x_BxTxD: jax.Array, rope: tuple[jax.Array, jax.Array] | None,
               attend: Attend) -> tuple[jax.Array, Any]:
    """`attend(q, k, v) -> (out, extra)` is the softmax of the caller's mode; `extra` is returned."""
    q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH = self.attn.qkv(self.attn_norm(x_BxTxD), rope)
    attn_BxTxKxGxH, extra = attend(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH)
    x_BxTxD = x_BxTxD + self.attn.out(attn_BxTxKxGxH)
    x_BxTxD = x_BxTxD + self.mlp(self.mlp_norm(x_BxTxD))
    return x_BxTxD, extra


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
    self.copy_head = CopyHead(cfg, rngs=rngs) if cfg.copy_dim else None

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
    rope = (rope_cos_sin(positions_BxT, cfg.head_dim, cfg.rope_theta)
            if cfg.family == "llama" else None)
    if cache is None:
      x_BxTxD = self._layers(x_BxTxD, rope, valid_BxT, num_prefix)
      return self.final_norm(x_BxTxD[:, num_prefix:]), None
    start = cache.index + num_prefix
    x_BxTxD, cache = self._cached_layers(x_BxTxD, rope, valid_BxT, num_prefix, cache)
    hidden_BxTxD = self.final_norm(x_BxTxD[:, num_prefix:])
    if self.copy_head is not None:
      cache = _write_copy_entries(cache, start, self.copy_head.keys(hidden_BxTxD),
                                  jnp.where(token_mask_BxT.astype(jnp.bool_), tokens_BxT, -1))
    return hidden_BxTxD, cache

  def _layers(self, x_BxTxD: jax.Array, rope: tuple[jax.Array, jax.Array] | None,
              valid_BxT: jax.Array, num_prefix: int) -> jax.Array:
    """The cache-free path: every slot attends within this block, layers scanned."""
    cfg = self.cfg
    graphdef, block_state = nnx.split(self.blocks)

    def attend(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH):
      return attention_kernels.attend_block(
          cfg.attention_impl, q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, valid_BxT,
          prefix_len=num_prefix, prefix_bidirectional=cfg.prefix_bidirectional,
          block=cfg.attention_block), None

    def layer_step(x_BxTxD, state):
      return nnx.merge(graphdef, state)(x_BxTxD, rope, attend)[0], None

    if cfg.remat:
      layer_step = jax.checkpoint(
          layer_step, policy=getattr(jax.checkpoint_policies, cfg.remat_policy),
          prevent_cse=False)
    x_BxTxD, _ = jax.lax.scan(layer_step, x_BxTxD, block_state, unroll=cfg.unroll_layers)
    return x_BxTxD

  def _cached_layers(self, x_BxTxD: jax.Array, rope: tuple[jax.Array, jax.Array] | None,
                     valid_BxT: jax.Array, num_prefix: int, cache: KVCache,
                     ) -> tuple[jax.Array, KVCache]:
    """Writes this block's keys/values into each layer's buffer at [index, index + T), then
    attends over the whole buffer: past slots by validity, new slots causally."""
    cfg = self.cfg
    num_slots = x_BxTxD.shape[1]
    _check_room(cache, num_slots)
    if cache.num_layers != cfg.num_layers:
      raise ValueError(f"KVCache has {cache.num_layers} layers, the model {cfg.num_layers}")
    index = cache.index
    valid_BxS = jax.lax.dynamic_update_slice(cache.valid_BxS, valid_BxT, (0, index))
    visible_TxS = attention_kernels.visible_mask(num_slots, cache.max_len, index, index,
                                                 num_prefix, cfg.prefix_bidirectional)
    new_k, new_v = [], []
    blocks = _HOISTED.get().get(id(self)) or self.layer_blocks()
    for layer, (k_BxKxSxH, v_BxKxSxH) in enumerate(zip(cache.k_BxKxSxH, cache.v_BxKxSxH)):

      def attend(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, k_BxKxSxH=k_BxKxSxH, v_BxKxSxH=v_BxKxSxH):
        k_BxKxSxH = jax.lax.dynamic_update_slice(
            k_BxKxSxH, jnp.swapaxes(k_BxTxKxH, 1, 2).astype(k_BxKxSxH.dtype), (0, 0, index, 0))
        v_BxKxSxH = jax.lax.dynamic_update_slice(
            v_BxKxSxH, jnp.swapaxes(v_BxTxKxH, 1, 2).astype(v_BxKxSxH.dtype), (0, 0, index, 0))
        out = attention_kernels.attend_cache(q_BxTxKxGxH, k_BxKxSxH, v_BxKxSxH, visible_TxS,
                                             valid_BxS)
        return out, (k_BxKxSxH, v_BxKxSxH)

      x_BxTxD, (k_BxKxSxH, v_BxKxSxH) = blocks[layer](x_BxTxD, rope, attend)
      new_k.append(k_BxKxSxH)
      new_v.append(v_BxKxSxH)
    return x_BxTxD, cache.replace(k_BxKxSxH=tuple(new_k), v_BxKxSxH=tuple(new_v),
                                  valid_BxS=valid_BxS, index=index + num_slots)

  def layer_blocks(self) -> list[Block]:
    """One Block per layer, its parameters sliced out of the stacked [L, ...] tree."""
    graphdef, block_state = nnx.split(self.blocks)
    return [nnx.merge(graphdef, jax.tree.map(lambda p, layer=layer: p[layer], block_state))
            for layer in range(self.cfg.num_layers)]

  def logits(self, hidden_BxNxD: jax.Array) -> jax.Array:
    """float32 vocabulary logits for hidden states of any leading shape."""
    dtype = self.cfg.compute_dtype
    if self.lm_head is None:
      return dense(hidden_BxNxD.astype(dtype), self.embed[...].astype(dtype), transposed=True,
                   preferred_element_type=jnp.float32)
    return dense(hidden_BxNxD.astype(dtype), self.lm_head[...].astype(dtype),
                 preferred_element_type=jnp.float32)


@contextlib.contextmanager
def hoisted_layers(model: nnx.Module) -> Iterator[None]:
  """Inside this context, every Transformer in `model` decodes from per-layer parameters
  sliced once, here.

  For a `lax.while_loop` traced inside it: XLA:CPU does not hoist the slices
  out of the loop, so without this each decode step copies every layer's
  weights out of the stacked tree.
  """
  hoisted = {id(node): node.layer_blocks() for _, node in nnx.iter_graph(model)
             if isinstance(node, Transformer)}
  token = _HOISTED.set({**_HOISTED.get(), **hoisted})
  try:
    yield
  finally:
    _HOISTED.reset(token)


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


def _write_copy_entries(cache: KVCache, start: jax.Array, keys_BxTxC: jax.Array,
                        ids_BxT: jax.Array) -> KVCache:
  """The block's copy keys and token ids into the cache's slots [start, start + T)."""
  if cache.ids_BxS is None:
    raise ValueError("the model has a copy head but its KV cache has no copy entries; "
                     "make the cache with init_cache of the model's config")
  return cache.replace(
      copyk_BxSxC=jax.lax.dynamic_update_slice(
          cache.copyk_BxSxC, keys_BxTxC.astype(cache.copyk_BxSxC.dtype), (0, start, 0)),
      ids_BxS=jax.lax.dynamic_update_slice(cache.ids_BxS, ids_BxT.astype(jnp.int32),
                                           (0, start)))


def _check_room(cache: KVCache, num_slots: int) -> None:
  """Raises when the write would run past the cache (only checkable outside jit)."""
  if isinstance(cache.index, jax.core.Tracer):
    return
  if int(cache.index) + num_slots > cache.max_len:
    raise ValueError(f"KVCache overflow: index {int(cache.index)} + {num_slots} new slots > "
                     f"max_len {cache.max_len}")
