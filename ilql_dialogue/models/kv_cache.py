"""Key/value cache for incremental decoding: one buffer per layer.

Layout: a tuple of L arrays [B, K, S, H] per keys and values (kv heads before
slots, so attention over a layer's cache is a plain batched matmul; with
slots before heads XLA:CPU would transpose the whole cache every decode step).

One buffer per layer, not one [L, B, K, S, H] array: the trunk's cached path
runs its layers as straight-line code, and each layer reads and updates its
own buffer directly, where a layer scan over a stacked array copies every
layer's slice out of the cache on every decode step (measured in
docs/BENCHMARKS.md). Each layer writes its new slots with one
`dynamic_update_slice` before attending; under `jit` with the cache donated
that write happens in place, so a step costs O(new tokens) in writes. One
scalar `index` serves the whole batch (rows are aligned by slot, padding is
tracked by `valid_BxS`), which keeps every shape static.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
from flax import struct

from ilql_dialogue.models.config import ModelConfig


@struct.dataclass
class KVCache:
  """Per-layer keys/values for slots [0, S); `index` is the next free slot.

  `k_BxKxSxH` / `v_BxKxSxH` are tuples of L arrays (the field name spells each
  array's layout, which lm_party.compact reads).

  Slot s of row b holds a real token iff `valid_BxS[b, s]`; padded tokens are
  written but never attended to. Writing past S is not detectable under
  `jit` (XLA clamps the slice), so callers size `max_len` for the whole
  episode; outside `jit` the model raises instead.
  """

  k_BxKxSxH: tuple[jax.Array, ...]
  v_BxKxSxH: tuple[jax.Array, ...]
  valid_BxS: jax.Array
  index: jax.Array
  # A copy head's entries (models/copy_head.py), None without one: each slot's copy key and
  # its token id (-1: padding, a prefix row or an empty slot).
  copyk_BxSxC: jax.Array | None = None
  ids_BxS: jax.Array | None = None

  @property
  def max_len(self) -> int:
    return self.valid_BxS.shape[1]

  @property
  def batch_size(self) -> int:
    return self.valid_BxS.shape[0]

  @property
  def num_layers(self) -> int:
    return len(self.k_BxKxSxH)

  def window(self, length: int) -> KVCache:
    """The first `length` slots as a cache of their own (a copy; `length` is static).

    A prefill, append or decode loop that will not write past `length`
    attends over the window instead of all S slots: the slots past it are
    empty, so every softmax is the same, and each query reads `length` slots
    instead of S.
    """
    first = lambda x: None if x is None else x[:, :length]
    return self.replace(k_BxKxSxH=tuple(k[:, :, :length] for k in self.k_BxKxSxH),
                        v_BxKxSxH=tuple(v[:, :, :length] for v in self.v_BxKxSxH),
                        valid_BxS=self.valid_BxS[:, :length],
                        copyk_BxSxC=first(self.copyk_BxSxC), ids_BxS=first(self.ids_BxS))

  def write_window(self, window: KVCache) -> KVCache:
    """This cache with `window` (from `window()`, then advanced) written over its first slots."""
    put = lambda full, part: (None if full is None else
                              jax.lax.dynamic_update_slice(full, part, (0,) * full.ndim))
    return KVCache(k_BxKxSxH=tuple(map(put, self.k_BxKxSxH, window.k_BxKxSxH)),
                   v_BxKxSxH=tuple(map(put, self.v_BxKxSxH, window.v_BxKxSxH)),
                   valid_BxS=put(self.valid_BxS, window.valid_BxS), index=window.index,
                   copyk_BxSxC=put(self.copyk_BxSxC, window.copyk_BxSxC),
                   ids_BxS=put(self.ids_BxS, window.ids_BxS))

  def split_layers(self, counts: Sequence[int]) -> list[KVCache]:
    """Consecutive groups of `counts` layers as caches sharing slots (one per stacked trunk)."""
    if sum(counts) != self.num_layers:
      raise ValueError(f"split_layers: {list(counts)} layers for a cache of {self.num_layers}")
    parts, start = [], 0
    for count in counts:
      parts.append(self.replace(k_BxKxSxH=self.k_BxKxSxH[start:start + count],
                                v_BxKxSxH=self.v_BxKxSxH[start:start + count]))
      start += count
    return parts

  @staticmethod
  def join_layers(caches: Sequence[KVCache]) -> KVCache:
    """Inverse of `split_layers`: the caches' layers in order; slots from the first."""
    return caches[0].replace(
        k_BxKxSxH=sum((c.k_BxKxSxH for c in caches), ()),
        v_BxKxSxH=sum((c.v_BxKxSxH for c in caches), ()))


def init_cache(cfg: ModelConfig, batch_size: int, max_len: int,
               dtype: jnp.dtype | str | None = None) -> KVCache:
  """An empty cache; `dtype` defaults to the model's compute dtype."""
  dtype = jnp.dtype(dtype or cfg.dtype)
  shape = (batch_size, cfg.num_kv_heads, max_len, cfg.head_dim)
  return KVCache(
      k_BxKxSxH=tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)),
      v_BxKxSxH=tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)),
      valid_BxS=jnp.zeros((batch_size, max_len), jnp.bool_),
      index=jnp.zeros((), jnp.int32),
      copyk_BxSxC=(jnp.zeros((batch_size, max_len, cfg.copy_dim), jnp.float32)
                   if cfg.copy_dim else None),
      ids_BxS=jnp.full((batch_size, max_len), -1, jnp.int32) if cfg.copy_dim else None,
  )
