"""Softmax attention kernels behind one function, chosen by `ModelConfig.attention_impl`.

    reference  Full [T, S] scores, masked: the numerics every path is tested against.
    blocked    Query blocks of `attention_block` rows; block i scores only the keys
               it can see (the causal triangle rounded up to whole blocks), so the
               masked half of the matrix is neither computed nor differentiated;
               differentiated as flash attention is (no pass over the scores to
               form the softmax's row sums).
    xla        jax.nn.dot_product_attention(implementation="xla").
    cudnn      jax.nn.dot_product_attention(implementation="cudnn"): cuDNN flash
               attention on NVIDIA GPUs (float16/bfloat16 only), which skips the
               masked tiles of a causal mask.
    splash     The Pallas splash-attention kernel on TPU (models/splash_attention.py),
               which also skips masked tiles; off TPU it runs interpreted (tests).
    auto       blocked on CPU; cudnn on GPU in 16-bit compute at even lengths, else
               xla; splash on TPU.

`attend_block` is the cache-free path (training, scoring): a block of T slots
over itself. `attend_cache` is the decoding path: new queries over a layer's
whole cache buffer, into which their own keys were already written, so one
softmax covers past and new slots. Masked logits get the most negative finite
float, not -inf: a query with no visible key (a padding slot) yields finite
junk instead of NaN, and callers never read it.

Query heads are [K, G] (kv head, group member), as in Hugging Face's
`repeat_kv` and jax.nn's grouped-query layout; keys and values are never
repeated. The reference moves heads in front once and merges a kv head's G
query rows (M = G * T), so every product is a plain [M, H] x [H, S] batched
matmul (measured faster on CPU than the 5-D einsum form).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

IMPLEMENTATIONS = ("auto", "reference", "blocked", "xla", "cudnn", "splash")


def resolve(impl: str, compute_dtype: jnp.dtype, length: int = 0) -> str:
  """The concrete kernel `impl` means on the default backend for `length` slots.

  cuDNN's flash kernel differentiates a masked block only when its length is
  even (jax raises "Unsupported sequence length" in the gradient otherwise),
  so `auto` takes xla for odd lengths.
  """
  if impl != "auto":
    return impl
  platform = jax.default_backend()
  if platform == "cpu":
    return "blocked"
  if platform == "gpu" and jnp.dtype(compute_dtype).itemsize == 2 and length % 2 == 0:
    return "cudnn"
  if platform == "tpu":
    return "splash"
  return "xla"


def visible_mask(num_queries: int, num_keys: int, first_query_slot: jax.Array | int,
                 prefix_start: jax.Array | int, prefix_len: int,
                 prefix_bidirectional: bool) -> jax.Array:
  """visible_TxS: the query at slot `first_query_slot + t` may see key slot s.

  Causal by slot; the `prefix_len` slots from `prefix_start` (a structured
  prefix) also see each other when bidirectional. Keys are slots [0, S), so
  with both starts at the cache index this is also the decoding mask. Built
  from iotas, so XLA folds or fuses it; never materialized per batch row.
  """
  query_slot_Tx1 = first_query_slot + jnp.arange(num_queries)[:, None]
  key_slot_1xS = jnp.arange(num_keys)[None, :]
  visible_TxS = key_slot_1xS <= query_slot_Tx1
  if prefix_bidirectional and prefix_len > 0:
    in_prefix = lambda slot: (slot >= prefix_start) & (slot < prefix_start + prefix_len)
    visible_TxS = visible_TxS | (in_prefix(query_slot_Tx1) & in_prefix(key_slot_1xS))
  return visible_TxS


def _where_visible(s_BxKxMxS: jax.Array, visible_TxS: jax.Array, valid_BxS: jax.Array,
                   fill: float) -> jax.Array:
  """Scores with `fill` wherever a query may not see a key: M = G * T query rows per kv head."""
  b, k, m, n = s_BxKxMxS.shape
  t = visible_TxS.shape[0]
  mask_Bx1x1xTxS = visible_TxS[None, None, None] & valid_BxS[:, None, None, None, :]
  return jnp.where(mask_Bx1x1xTxS, s_BxKxMxS.reshape(b, k, m // t, t, n), fill).reshape(b, k, m, n)


def _softmax_attention(q_BxKxMxH: jax.Array, k_BxKxSxH: jax.Array, v_BxKxSxH: jax.Array,
                       visible_TxS: jax.Array, valid_BxS: jax.Array,
                       ) -> tuple[jax.Array, jax.Array]:
  """(out_BxKxMxH, p_BxKxMxS) for scaled queries, the softmax in float32.

  A row without a key it may see (a padding query) gets a uniform p over
  junk and an output nobody reads.
  """
  s_BxKxMxS = jnp.einsum("bkmh,bksh->bkms", q_BxKxMxH, k_BxKxSxH,
                         preferred_element_type=jnp.float32)
  s_BxKxMxS = _where_visible(s_BxKxMxS, visible_TxS, valid_BxS, jnp.finfo(jnp.float32).min)
  p_BxKxMxS = jax.nn.softmax(s_BxKxMxS, axis=-1).astype(q_BxKxMxH.dtype)
  return jnp.einsum("bkms,bksh->bkmh", p_BxKxMxS, v_BxKxSxH), p_BxKxMxS


@jax.custom_vjp
def _softmax_attention_fused_grad(q_BxKxMxH, k_BxKxSxH, v_BxKxSxH, visible_TxS, valid_BxS):
  """`_softmax_attention`'s output, differentiated as flash attention's backward pass does.

  The softmax's backward needs each query row's sum_s p_s dp_s, which is
  do . out: a [M, H] product instead of a pass over the [M, S] scores; and
  the mask is not read again, since p is exactly 0 wherever a row that sees
  some key was masked: faster for the whole attention, forward and backward,
  on CPU (measured in docs/BENCHMARKS.md). The gradient is the reference's for
  any cotangent that is zero on rows that see no key at all (padding queries,
  whose junk output nobody reads); those rows are not zeroed here, which would
  cost time for nothing.
  """
  return _softmax_attention(q_BxKxMxH, k_BxKxSxH, v_BxKxSxH, visible_TxS, valid_BxS)[0]


def _fused_grad_forward(q_BxKxMxH, k_BxKxSxH, v_BxKxSxH, visible_TxS, valid_BxS):
  out_BxKxMxH, p_BxKxMxS = _softmax_attention(q_BxKxMxH, k_BxKxSxH, v_BxKxSxH, visible_TxS,
                                              valid_BxS)
  return out_BxKxMxH, (q_BxKxMxH, k_BxKxSxH, v_BxKxSxH, p_BxKxMxS, out_BxKxMxH)


def _fused_grad_backward(residuals, dout_BxKxMxH):
  q_BxKxMxH, k_BxKxSxH, v_BxKxSxH, p_BxKxMxS, out_BxKxMxH = residuals
  dv_BxKxSxH = jnp.einsum("bkms,bkmh->bksh", p_BxKxMxS, dout_BxKxMxH)
  dp_BxKxMxS = jnp.einsum("bkmh,bksh->bkms", dout_BxKxMxH, v_BxKxSxH,
                          preferred_element_type=jnp.float32)
  row_BxKxMx1 = jnp.sum(dout_BxKxMxH.astype(jnp.float32) * out_BxKxMxH.astype(jnp.float32),
                        axis=-1, keepdims=True)
  ds_BxKxMxS = (p_BxKxMxS.astype(jnp.float32) * (dp_BxKxMxS - row_BxKxMx1)
                ).astype(q_BxKxMxH.dtype)
  dq_BxKxMxH = jnp.einsum("bkms,bksh->bkmh", ds_BxKxMxS, k_BxKxSxH)
  dk_BxKxSxH = jnp.einsum("bkms,bkmh->bksh", ds_BxKxMxS, q_BxKxMxH)
  return dq_BxKxMxH, dk_BxKxSxH, dv_BxKxSxH, None, None


_softmax_attention_fused_grad.defvjp(_fused_grad_forward, _fused_grad_backward)


def reference(q_BxTxKxGxH: jax.Array, k_BxKxSxH: jax.Array, v_BxKxSxH: jax.Array,
              visible_TxS: jax.Array, valid_BxS: jax.Array, fused_grad: bool = False,
              ) -> jax.Array:
  """out_BxTxKxGxH: softmax over the S keys a query may see (visible and valid), in float32.

  Differentiated by plain autodiff, the numerics every path is tested
  against, unless `fused_grad` (the blocked kernel's backward).
  """
  b, t, k, g, h = q_BxTxKxGxH.shape
  dtype = q_BxTxKxGxH.dtype
  q_BxKxMxH = (jnp.transpose(q_BxTxKxGxH, (0, 2, 3, 1, 4)).reshape(b, k, g * t, h)
               * jnp.asarray(h ** -0.5, dtype))
  args = (q_BxKxMxH, k_BxKxSxH.astype(dtype), v_BxKxSxH.astype(dtype), visible_TxS, valid_BxS)
  out_BxKxMxH = (_softmax_attention_fused_grad(*args) if fused_grad
                 else _softmax_attention(*args)[0])
  return jnp.transpose(out_BxKxMxH.reshape(b, k, g, t, h), (0, 3, 1, 2, 4))


def blocked(q_BxTxKxGxH: jax.Array, k_BxKxTxH: jax.Array, v_BxKxTxH: jax.Array,
            valid_BxT: jax.Array, prefix_len: int, prefix_bidirectional: bool,
            block: int) -> jax.Array:
  """The reference, one query block at a time, over only the keys that block can see.

  Block [s, e) sees keys [0, e), or [0, P) when it holds bidirectional
  prefix rows beyond e. Work and score memory fall to (n + 1) / 2n of the
  full matrix for n blocks; each block's softmax is exact, so this is the
  reference's arithmetic, not an approximation.
  """
  t = q_BxTxKxGxH.shape[1]
  outs = []
  for start in range(0, t, block):
    end = min(start + block, t)
    num_keys = max(end, prefix_len) if prefix_bidirectional and start < prefix_len else end
    visible_TxS = visible_mask(end - start, num_keys, start, 0, prefix_len,
                               prefix_bidirectional)
    outs.append(reference(q_BxTxKxGxH[:, start:end], k_BxKxTxH[:, :, :num_keys],
                          v_BxKxTxH[:, :, :num_keys], visible_TxS, valid_BxT[:, :num_keys],
                          fused_grad=True))
  return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=1)


def jax_nn(q_BxTxKxGxH: jax.Array, k_BxTxKxH: jax.Array, v_BxTxKxH: jax.Array,
           valid_BxT: jax.Array, prefix_len: int, prefix_bidirectional: bool,
           implementation: str) -> jax.Array:
  """jax.nn.dot_product_attention with our mask: causal (kernel-side) plus key padding.

  A bidirectional prefix is not causal, so it goes in as a full boolean mask.
  cuDNN takes a mask as an additive bias of the full [T, S] shape, so the
  mask is broadcast to [B, 1, T, T] there (B * T * T, never (B T)^2).
  """
  b, t, k, g, h = q_BxTxKxGxH.shape
  q_BxTxNxH = q_BxTxKxGxH.reshape(b, t, k * g, h)
  valid_Bx1x1xT = valid_BxT[:, None, None, :]
  if prefix_bidirectional and prefix_len > 0:
    mask, causal = visible_mask(t, t, 0, 0, prefix_len, True)[None, None] & valid_Bx1x1xT, False
  else:
    mask, causal = valid_Bx1x1xT, True
  if implementation == "cudnn":
    mask = jnp.broadcast_to(mask, (b, 1, t, t))
  out_BxTxNxH = jax.nn.dot_product_attention(
      q_BxTxNxH, k_BxTxKxH.astype(q_BxTxNxH.dtype), v_BxTxKxH.astype(q_BxTxNxH.dtype),
      mask=mask, is_causal=causal, implementation=implementation)
  return out_BxTxNxH.reshape(b, t, k, g, h)


def attend_block(impl: str, q_BxTxKxGxH: jax.Array, k_BxTxKxH: jax.Array,
                 v_BxTxKxH: jax.Array, valid_BxT: jax.Array, *, prefix_len: int,
                 prefix_bidirectional: bool, block: int) -> jax.Array:
  """A block of T slots attending over itself (causal, key padding, optional prefix)."""
  impl = resolve(impl, q_BxTxKxGxH.dtype, q_BxTxKxGxH.shape[1])
  if impl in ("xla", "cudnn"):
    return jax_nn(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, valid_BxT, prefix_len,
                  prefix_bidirectional, impl)
  if impl == "splash":  # Imported on use: the Pallas TPU modules are no dependency elsewhere.
    from ilql_dialogue.models import splash_attention
    return splash_attention.splash(q_BxTxKxGxH, k_BxTxKxH, v_BxTxKxH, valid_BxT, prefix_len,
                                   prefix_bidirectional)
  k_BxKxTxH, v_BxKxTxH = jnp.swapaxes(k_BxTxKxH, 1, 2), jnp.swapaxes(v_BxTxKxH, 1, 2)
  if impl == "blocked":
    return blocked(q_BxTxKxGxH, k_BxKxTxH, v_BxKxTxH, valid_BxT, prefix_len,
                   prefix_bidirectional, block)
  if impl == "reference":
    t = q_BxTxKxGxH.shape[1]
    return reference(q_BxTxKxGxH, k_BxKxTxH, v_BxKxTxH,
                     visible_mask(t, t, 0, 0, prefix_len, prefix_bidirectional), valid_BxT)
  raise ValueError(f"attention_impl={impl!r} not in {IMPLEMENTATIONS}")


def attend_cache(q_BxTxKxGxH: jax.Array, k_BxKxSxH: jax.Array, v_BxKxSxH: jax.Array,
                 visible_TxS: jax.Array, valid_BxS: jax.Array) -> jax.Array:
  """New queries over a cache buffer that already holds their own keys (decoding).

  The reference kernel on every backend: during decoding T is a few slots and
  the cost is reading the cache, which no fused kernel reduces.
  """
  return reference(q_BxTxKxGxH, k_BxKxSxH, v_BxKxSxH, visible_TxS, valid_BxS)
