"""Logits processors: pure functions applied to next-token logits inside the decode loop.

A processor is a pytree (a `flax.struct` dataclass) with a
`__call__(logits_BxV, step) -> logits_BxV`. Its array fields (and any nnx
modules it holds, e.g. ILQL's Q/V heads) are pytree leaves, so the sampler
passes them to `jit` as traced arguments: new values (another beta, another
forbidden set, freshly trained heads) reuse the compiled loop. Only the
processor's type and structure are part of the compiled program.

The filtering primitives (`apply_temperature`, `filter_top_k_top_p`, `filter_min_p`) are the
ones the sampler itself uses, so a processor chain and the sampler's own
parameters mean the same thing.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct

NEG_INF = -jnp.inf


@struct.dataclass
class StepState:
  """What a processor may look at when the token at `step` is chosen.

  `hidden_BxD` is the trunk output the logits came from, so value-guided
  decoding (ILQL: logits + beta * (Q(h) - V(h))) reuses the same forward
  instead of running the trunk again.
  """

  hidden_BxD: jax.Array
  tokens_BxN: jax.Array  # Tokens chosen so far in this `generate` call; pad beyond `step`.
  step: jax.Array  # int32 scalar: index (in tokens_BxN) of the token being chosen.
  position_B: jax.Array  # int32: position id the chosen token will get in its row.
  done_B: jax.Array  # bool: rows that already stopped (their choice is discarded).


class LogitsProcessor(Protocol):

  def __call__(self, logits_BxV: jax.Array, step: StepState) -> jax.Array:
    ...


def apply_temperature(logits_BxV: jax.Array, temperature_B: jax.Array) -> jax.Array:
  """Divides by the per-row temperature; rows at temperature <= 0 (greedy) are left as is.

  Greedy rows keep temperature-1 logits so their log-probs stay informative;
  the sampler takes their argmax, which no positive scaling changes.
  """
  temperature_B = jnp.asarray(temperature_B, logits_BxV.dtype)
  safe_B = jnp.where(temperature_B > 0, temperature_B, 1.0)
  return logits_BxV / safe_B[:, None]


def filter_top_k_top_p(logits_BxV: jax.Array, top_k_B: jax.Array,
                       top_p_B: jax.Array) -> jax.Array:
  """Sets logits outside each row's top-k, then outside its nucleus, to -inf.

  k and p are traced per-row values (`lax.top_k` would need a static k), so
  both thresholds come from one descending sort. top_k <= 0 or >= V disables
  top-k; top_p >= 1 disables top-p. The nucleus is the smallest prefix of the
  top-k tokens whose renormalised mass reaches p (at least one token). Tokens
  tied with a threshold are kept, as in transformers.
  """
  vocab = logits_BxV.shape[-1]
  top_k_B = jnp.asarray(top_k_B, jnp.int32)
  top_p_B = jnp.asarray(top_p_B, jnp.float32)
  k_B = jnp.where((top_k_B <= 0) | (top_k_B > vocab), vocab, top_k_B)
  sorted_BxV = -jnp.sort(-logits_BxV, axis=-1)
  in_top_k_BxV = jnp.arange(vocab)[None, :] < k_B[:, None]
  sorted_BxV = jnp.where(in_top_k_BxV, sorted_BxV, NEG_INF)
  probs_BxV = jax.nn.softmax(sorted_BxV.astype(jnp.float32), axis=-1)
  mass_before_BxV = jnp.cumsum(probs_BxV, axis=-1) - probs_BxV
  keep_B = jnp.sum(in_top_k_BxV & (mass_before_BxV < top_p_B[:, None]), axis=-1)
  keep_B = jnp.maximum(keep_B, 1)
  threshold_B = jnp.take_along_axis(sorted_BxV, keep_B[:, None] - 1, axis=-1)
  return jnp.where(logits_BxV < threshold_B, NEG_INF, logits_BxV)


def filter_min_p(logits_BxV: jax.Array, min_p_B: jax.Array) -> jax.Array:
  """Sets to -inf each token less probable than min_p times its row's most probable one.

  Min-p sampling (Nguyen et al. 2024): the cut scales with the model's
  confidence, so a sampled simulator keeps its many ways of phrasing where the
  distribution is flat and drops the long tail where one token (a name or
  code it copies) dominates; a fixed nucleus keeps that tail. min_p <= 0
  disables it for the row. In logit space the cut is max_logit + log(min_p),
  so no sort is needed.
  """
  min_p_B = jnp.asarray(min_p_B, jnp.float32)
  max_B = jnp.max(logits_BxV, axis=-1)
  cut_B = jnp.where(min_p_B > 0, max_B + jnp.log(jnp.maximum(min_p_B, 1e-30)), NEG_INF)
  return jnp.where(logits_BxV < cut_B[:, None], NEG_INF, logits_BxV)


def row_values(value: Any, batch_size: int, dtype: Any) -> jax.Array:
  """Broadcasts a scalar or per-row sequence to a [B] array, naming the mismatch."""
  array = jnp.asarray(value, dtype)
  if array.ndim == 0:
    return jnp.full((batch_size,), array, dtype)
  if array.shape != (batch_size,):
    raise ValueError(f"expected a scalar or {batch_size} per-row values, got shape {array.shape}")
  return array


@struct.dataclass
class Temperature:
  temperature_B: jax.Array

  def __call__(self, logits_BxV: jax.Array, step: StepState) -> jax.Array:
    return apply_temperature(logits_BxV, self.temperature_B)


@struct.dataclass
class TopK:
  top_k_B: jax.Array

  def __call__(self, logits_BxV: jax.Array, step: StepState) -> jax.Array:
    return filter_top_k_top_p(logits_BxV, self.top_k_B, jnp.ones_like(self.top_k_B, jnp.float32))


@struct.dataclass
class TopP:
  top_p_B: jax.Array

  def __call__(self, logits_BxV: jax.Array, step: StepState) -> jax.Array:
    return filter_top_k_top_p(logits_BxV, jnp.zeros_like(self.top_p_B, jnp.int32), self.top_p_B)


@struct.dataclass
class ForbidTokens:
  """Never emit these ids (speaker-role constraints, e.g. the customer's action token).

  `token_ids_BxK` lists each row's forbidden ids, padded with -1; a [K] array
  forbids the same ids in every row. Different rows can play different roles
  in one batch.
  """

  token_ids_BxK: jax.Array

  @classmethod
  def of(cls, token_ids: Any) -> "ForbidTokens":
    return cls(token_ids_BxK=jnp.asarray(token_ids, jnp.int32))

  def __call__(self, logits_BxV: jax.Array, step: StepState) -> jax.Array:
    batch, vocab = logits_BxV.shape
    ids_BxK = jnp.broadcast_to(
        jnp.atleast_2d(self.token_ids_BxK), (batch, self.token_ids_BxK.shape[-1]))
    ids_BxK = jnp.where(ids_BxK < 0, vocab, ids_BxK)  # Padding -> out of bounds -> dropped.
    rows_Bx1 = jnp.arange(batch)[:, None]
    return logits_BxV.at[rows_Bx1, ids_BxK].set(NEG_INF, mode="drop")


@struct.dataclass
class RankedStart:
  """At a reply's first token row b may say only its `rank_B[b]`-th likeliest token (0: the
  argmax; < 0: any); later tokens are untouched.

  R rows of one prompt ranked 0..R-1 start R different ways, each continued by the model: a
  planner's candidates that differ where sampling, at a peaked first token, repeats the
  likeliest start. Ranks count allowed tokens when a forbidding processor comes first.
  """

  rank_B: jax.Array
  width: int = struct.field(pytree_node=False, default=16)  # Ranks >= width say the last one.

  def __call__(self, logits_BxV: jax.Array, step: StepState) -> jax.Array:
    def only_ranked(x_BxV: jax.Array) -> jax.Array:
      _, ids_BxW = jax.lax.top_k(x_BxV, self.width)
      rank_B = jnp.clip(self.rank_B, 0, self.width - 1)
      keep_B = jnp.take_along_axis(ids_BxW, rank_B[:, None], axis=1)[:, 0]
      only_BxV = jnp.where(jnp.arange(x_BxV.shape[-1])[None, :] == keep_B[:, None], x_BxV,
                           NEG_INF)
      return jnp.where((self.rank_B >= 0)[:, None], only_BxV, x_BxV)

    return jax.lax.cond(step.step == 0, only_ranked, lambda x: x, logits_BxV)


@struct.dataclass
class Compose:
  """Applies processors left to right."""

  processors: tuple[Any, ...]

  def __call__(self, logits_BxV: jax.Array, step: StepState) -> jax.Array:
    for processor in self.processors:
      logits_BxV = processor(logits_BxV, step)
    return logits_BxV


def compose(*processors: LogitsProcessor) -> Compose:
  return Compose(processors=tuple(processors))


@struct.dataclass
class ValueGuidance:
  """ILQL decoding: logits + beta * (min_i Q_i(h) - V(h)), from the decoder's own hidden state.

  `q_heads` map hidden_BxD to BxV and `v_head` maps it to Bx1 or B (any
  callables that are pytrees, e.g. nnx modules). V does not change the
  softmax but it does change what a later top-k/top-p or a logged log-prob
  sees, so it is kept to match the paper's formula.
  """

  q_heads: tuple[Any, ...]
  v_head: Any
  beta_B: jax.Array

  def __call__(self, logits_BxV: jax.Array, step: StepState) -> jax.Array:
    q_BxV = jnp.min(jnp.stack([head(step.hidden_BxD) for head in self.q_heads]), axis=0)
    v_B = jnp.reshape(self.v_head(step.hidden_BxD), (logits_BxV.shape[0],))
    advantage_BxV = (q_BxV - v_B[:, None]).astype(logits_BxV.dtype)
    return logits_BxV + jnp.asarray(self.beta_B, logits_BxV.dtype)[..., None] * advantage_BxV
