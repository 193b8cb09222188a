"""The TPU attention path: the Pallas splash-attention kernel that ships with jax.

Splash is flash attention for TPU that also skips the tiles its mask rules
out, so a causal block costs half the full matrix. It knows a static mask
(causal, or causal plus a bidirectional structured prefix) and segment ids;
key padding becomes segment ids (real slots 1, padding 0), so a real query
sees exactly the real keys the reference lets it see. Padding queries see
padding keys and hold junk, as everywhere else; nobody reads them.

Three adaptations, all outside the kernel:
  * the length is padded to a multiple of the block (128 slots, or 512 where
    it divides), the padding given segment 0, and the output sliced back;
  * grouped-query heads use the multi-query kernel once per kv head (vmapped),
    so keys and values are never repeated;
  * under a mesh (`sharding.mesh_context`), a Pallas call is opaque to XLA's
    partitioner, so it runs under `shard_map`, each device on its own rows
    and kv heads, placed by the same logical rules as every other array.

Off TPU the kernel runs in Pallas' interpreter: far too slow to train with,
but exact, which is how the CPU tests check it against the reference.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu.splash_attention import (
    splash_attention_kernel as splash_kernel, splash_attention_mask as splash_mask)

from ilql_dialogue import sharding

BLOCKS = (512, 128)  # Tried largest first: the block must divide the padded length.


def _block_and_length(length: int) -> tuple[int, int]:
  padded = -(-length // BLOCKS[-1]) * BLOCKS[-1]
  return next(block for block in BLOCKS if padded % block == 0), padded


@functools.lru_cache(maxsize=32)
def _kernel(length: int, groups: int, prefix_len: int, prefix_bidirectional: bool,
            interpret: bool):
  """The multi-query kernel for one kv head's G query heads over `length` (padded) slots."""
  block, _ = _block_and_length(length)
  if prefix_bidirectional and prefix_len > 0:
    slots = np.arange(length)
    in_prefix = slots < prefix_len
    head_mask = splash_mask.NumpyMask((slots[:, None] >= slots[None, :])
                                      | (in_prefix[:, None] & in_prefix[None, :]))
  else:
    head_mask = splash_mask.CausalMask((length, length))
  sizes = splash_kernel.BlockSizes(
      block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
      block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block)
  return splash_kernel.make_splash_mqa(
      splash_mask.MultiHeadMask([head_mask] * groups), block_sizes=sizes, head_shards=1,
      q_seq_shards=1, interpret=interpret)


def splash(q_BxTxKxGxH: jax.Array, k_BxTxKxH: jax.Array, v_BxTxKxH: jax.Array,
           valid_BxT: jax.Array, prefix_len: int, prefix_bidirectional: bool) -> jax.Array:
  """out_BxTxKxGxH: causal attention (plus a bidirectional prefix) over the valid keys."""
  b, t, k, g, h = q_BxTxKxGxH.shape
  _, padded = _block_and_length(t)
  pad_slots = lambda x, axis: jnp.pad(x, [(0, padded - t) if a == axis else (0, 0)
                                          for a in range(x.ndim)])
  dtype = q_BxTxKxGxH.dtype
  q_BxKxGxTxH = pad_slots(jnp.transpose(q_BxTxKxGxH, (0, 2, 3, 1, 4))
                          * jnp.asarray(h ** -0.5, dtype), 3)
  k_BxKxTxH = pad_slots(jnp.swapaxes(k_BxTxKxH, 1, 2).astype(dtype), 2)
  v_BxKxTxH = pad_slots(jnp.swapaxes(v_BxTxKxH, 1, 2).astype(dtype), 2)
  segments_BxT = pad_slots(valid_BxT.astype(jnp.int32), 1)
  kernel = _kernel(padded, g, prefix_len, prefix_bidirectional,
                   jax.default_backend() != "tpu")

  def attend(q_BxKxGxTxH, k_BxKxTxH, v_BxKxTxH, segments_BxT):
    one_row = lambda q, k, v, seg: jax.vmap(kernel, in_axes=(0, 0, 0, None))(
        q, k, v, splash_kernel.SegmentIds(q=seg, kv=seg))
    return jax.vmap(one_row)(q_BxKxGxTxH, k_BxKxTxH, v_BxKxTxH, segments_BxT)

  mesh = jax.sharding.get_abstract_mesh()
  if not mesh.empty:
    spec = lambda names, x: sharding.logical_to_spec(names, x.shape, mesh)
    q_spec = spec(("batch", "kv_heads", None, None, None), q_BxKxGxTxH)
    attend = jax.shard_map(
        attend, mesh=mesh, out_specs=q_spec, check_vma=False,
        in_specs=(q_spec, spec(("batch", "kv_heads", None, None), k_BxKxTxH),
                  spec(("batch", "kv_heads", None, None), v_BxKxTxH),
                  spec(("batch", None), segments_BxT)))
  out_BxKxGxTxH = attend(q_BxKxGxTxH, k_BxKxTxH, v_BxKxTxH, segments_BxT)
  return jnp.transpose(out_BxKxGxTxH[:, :, :, :t], (0, 3, 1, 2, 4))
