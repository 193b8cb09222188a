"""Key/value cache for incremental decoding, stacked over layers.

Layout [L, B, K, S, H] (kv heads before slots; the shared contract first said
[L, B, S, K, H]): each (row, kv head) then owns a contiguous [S, H] matrix,
so attention over the cache is a plain batched matmul. With slots before
heads XLA:CPU transposed every layer's whole cache on every decode step,
which made decoding 2-3x slower at a few hundred slots.

The layer scan only reads the cache; the new entries of all layers are
written once, after the scan, with one `dynamic_update_slice` per array.
Under `jit` with the cache donated that write happens in place, so a decode
step costs O(new tokens) in writes, not a copy of the cache. One scalar
`index` serves the whole batch (rows are aligned by slot, padding is tracked
by `valid_BxS`), which keeps every shape static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ilql_dialogue.models.config import ModelConfig


@struct.dataclass
class KVCache:
  """Per-layer keys/values for slots [0, S); `index` is the next free slot.

  Slot s of row b holds a real token iff `valid_BxS[b, s]`; padded tokens are
  written but never attended to. Writing past S is not detectable under
  `jit` (XLA clamps the slice), so callers size `max_len` for the whole
  episode; outside `jit` the model raises instead.
  """

  k_LxBxKxSxH: jax.Array
  v_LxBxKxSxH: jax.Array
  valid_BxS: jax.Array
  index: jax.Array

  @property
  def max_len(self) -> int:
    return self.valid_BxS.shape[1]

  @property
  def batch_size(self) -> int:
    return self.valid_BxS.shape[0]

  def visible_BxS(self) -> jax.Array:
    """Slots a new token may attend to: written (slot < index) and real."""
    return self.valid_BxS & (jnp.arange(self.max_len) < self.index)

  def append(self, k_LxBxTxKxH: jax.Array, v_LxBxTxKxH: jax.Array,
             valid_BxT: jax.Array) -> KVCache:
    """Writes T new slots for every layer at [index, index + T) and advances index."""
    start = (0, 0, 0, self.index, 0)
    return KVCache(
        k_LxBxKxSxH=jax.lax.dynamic_update_slice(
            self.k_LxBxKxSxH, jnp.swapaxes(k_LxBxTxKxH, 2, 3).astype(self.k_LxBxKxSxH.dtype),
            start),
        v_LxBxKxSxH=jax.lax.dynamic_update_slice(
            self.v_LxBxKxSxH, jnp.swapaxes(v_LxBxTxKxH, 2, 3).astype(self.v_LxBxKxSxH.dtype),
            start),
        valid_BxS=jax.lax.dynamic_update_slice(self.valid_BxS, valid_BxT, (0, self.index)),
        index=self.index + valid_BxT.shape[1],
    )


def init_cache(cfg: ModelConfig, batch_size: int, max_len: int,
               dtype: jnp.dtype | str | None = None) -> KVCache:
  """An empty cache; `dtype` defaults to the model's compute dtype."""
  dtype = jnp.dtype(dtype or cfg.dtype)
  shape = (cfg.num_layers, batch_size, cfg.num_kv_heads, max_len, cfg.head_dim)
  return KVCache(
      k_LxBxKxSxH=jnp.zeros(shape, dtype),
      v_LxBxKxSxH=jnp.zeros(shape, dtype),
      valid_BxS=jnp.zeros((batch_size, max_len), jnp.bool_),
      index=jnp.zeros((), jnp.int32),
  )
