"""Next-token cross-entropy that never holds a large float32 [B, T, V] logits array.

A loss over T positions needs, per position, only the cross-entropy and
whether the argmax is the target. When the full logits would exceed
`max_logits_bytes` (GPT-2's 50k vocabulary at 16 x 1024 tokens is 3.3 GB),
the LM head runs on chunks of positions under `jax.checkpoint`, so the
forward and the backward pass each hold one chunk's logits [B, C, V]. The
price is the LM-head matmul once more in the backward pass, so small logits
(every CPU-sized config here) take the one-shot path, and both paths compute
each position's loss with the same operations.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax

MAX_LOGITS_BYTES = 256 * 2**20


ScoreFn = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]


def token_cross_entropy(logits_fn: Callable[[jax.Array], jax.Array], hidden_BxTxD: jax.Array,
                        targets_BxT: jax.Array, *, max_logits_bytes: int | None = None,
                        score_fn: ScoreFn | None = None) -> tuple[jax.Array, jax.Array]:
  """(ce_BxT, correct_BxT): cross-entropy of each target and whether it is the argmax.

  `logits_fn` maps hidden [B, C, D] to logits [B, C, V] (the model's `logits`);
  `max_logits_bytes` defaults to MAX_LOGITS_BYTES. `score_fn(hidden_BxCxD, targets_BxC,
  t_C) -> (ce_BxC, correct_BxC)`, given the chunk's positions t_C, replaces the plain
  softmax (a copy head's `copy_head.sequence_score_fn`).
  """
  max_logits_bytes = MAX_LOGITS_BYTES if max_logits_bytes is None else max_logits_bytes
  b, t, d = hidden_BxTxD.shape
  vocab = jax.eval_shape(logits_fn, hidden_BxTxD[:, :1]).shape[-1]

  def score(h_BxCxD, y_BxC, t_C):
    if score_fn is not None:
      return score_fn(h_BxCxD, y_BxC, t_C)
    logits_BxCxV = logits_fn(h_BxCxD).astype(jnp.float32)
    ce_BxC = optax.softmax_cross_entropy_with_integer_labels(logits_BxCxV, y_BxC)
    return ce_BxC, jnp.argmax(logits_BxCxV, axis=-1) == y_BxC

  chunk = max(1, max_logits_bytes // (b * vocab * 4))
  if chunk >= t:
    return score(hidden_BxTxD, targets_BxT, jnp.arange(t))
  num_chunks = -(-t // chunk)
  pad = num_chunks * chunk - t
  h_NxBxCxD = jnp.swapaxes(jnp.pad(hidden_BxTxD, ((0, 0), (0, pad), (0, 0)))
                           .reshape(b, num_chunks, chunk, d), 0, 1)
  y_NxBxC = jnp.swapaxes(jnp.pad(targets_BxT, ((0, 0), (0, pad))).reshape(b, num_chunks, chunk),
                         0, 1)
  t_NxC = jnp.arange(num_chunks * chunk).reshape(num_chunks, chunk)
  ce_NxBxC, correct_NxBxC = jax.lax.map(jax.checkpoint(lambda xs: score(*xs)),
                                        (h_NxBxCxD, y_NxBxC, t_NxC))
  unchunk = lambda x_NxBxC: jnp.swapaxes(x_NxBxC, 0, 1).reshape(b, -1)[:, :t]
  return unchunk(ce_NxBxC), unchunk(correct_NxBxC)
