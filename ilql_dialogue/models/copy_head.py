"""A pointer head: the next token may be copied from what the context already holds.

Why: a small LM learns to write a rare string it has just read (an email, a zip code, an order
id, an airport code) slowly through its vocabulary, one output row per rare token. A pointer
puts probability on the token that followed an earlier position directly (the pointer
sentinel mixture, Merity et al. 2017; the pointer-generator, See et al. 2017). The query of
token t scores every earlier slot j; entry j proposes the token that came after it, so a
string is copied token by token, as an induction head would copy it.

One softmax over the vocabulary logits and the copy scores, with no gate:

    p(w) ∝ exp(logit_w) + Σ_{j: next(j) = w} exp(score_j)

The mixture's log-probabilities take the place of the logits everywhere (they are
normalized, so a softmax of them is themselves): the loss, the sampler's temperature and
filters, and the log-probs online RL needs. Entry j exists when slot j and a later slot hold
source tokens (`ids >= 0`: not padding, not a structured-prefix row, not an empty slot, and
not the model's own words, `source_mask`); in a cache every such later slot is at or before
the query's own. A [B, N, S] score array is what attention holds already; the scatter into
the vocabulary is [B, N, S] adds (decoding, scoring rollouts), never a [.., S, V] array, and
training needs none (`sequence_score_fn`).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.layers import dense, normal, param


class CopyHead(nnx.Module):
  """Query and key projections of the final hidden states, `cfg.copy_dim` wide."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.dtype = cfg.compute_dtype
    self.width = cfg.copy_dim
    shape = (cfg.d_model, cfg.copy_dim)
    self.query = param(rngs, normal(cfg.init_std), shape, ("embed", "copy"), cfg.weight_dtype)
    self.key = param(rngs, normal(cfg.init_std), shape, ("embed", "copy"), cfg.weight_dtype)

  def keys(self, hidden_BxSxD: jax.Array) -> jax.Array:
    return dense(hidden_BxSxD.astype(self.dtype), self.key[...].astype(self.dtype),
                 preferred_element_type=jnp.float32)

  def scores(self, hidden_BxNxD: jax.Array, keys_BxSxC: jax.Array) -> jax.Array:
    """float32 [B, N, S]: each query against each slot's key, scaled by 1/sqrt(width)."""
    q_BxNxC = dense(hidden_BxNxD.astype(self.dtype), self.query[...].astype(self.dtype),
                    preferred_element_type=jnp.float32)
    return jnp.einsum("bnc,bsc->bns", q_BxNxC, keys_BxSxC.astype(jnp.float32)) / jnp.sqrt(
        jnp.float32(self.width))


def of(model: nnx.Module) -> CopyHead | None:
  """The copy head of a trunk, or of the LM inside a wrapper (a PrefixLM's `trunk`, a
  trained policy's `policy`, a CALM model's `lm`), else None."""
  head = getattr(model, "copy_head", None)
  for inner in ("trunk", "policy", "lm"):
    if head is None and hasattr(model, inner):
      head = of(getattr(model, inner))
  return head


def refuse(cfg: ModelConfig, what: str) -> None:
  """For models whose logits are read without the context (ILQL's and MC value's heads)."""
  if cfg.copy_dim:
    raise ValueError(f"{what} does not support a copy head (config.model.copy_dim="
                     f"{cfg.copy_dim}); train it without one")


def source_mask(mask_BxT: jax.Array, action_mask_BxT: jax.Array) -> jax.Array:
  """The tokens a copy head may copy from: real tokens the trained role did not write (its
  context, the other side's turns, tool results, its own speaker tokens). Copying its own
  words lets a pointer feed on itself ("anya_anya_anya_..."); a pointer-generator copies from
  its input."""
  return mask_BxT.astype(bool) & ~action_mask_BxT.astype(bool)


def forget_slot(cache, slot: jax.Array):
  """The cache with slot `slot` no copy source in any row: a token the model just wrote."""
  return cache.replace(ids_BxS=jax.lax.dynamic_update_slice(
      cache.ids_BxS, jnp.full((cache.ids_BxS.shape[0], 1), -1, jnp.int32), (0, slot)))


def forget_own(cache, first_slot: int, own_rows: list[list[bool]]):
  """The cache with every own token no copy source: row b's token k at slot first_slot + k is
  the model's own when own_rows[b][k] (a history loaded with its own turns)."""
  own_BxS = np.zeros(cache.ids_BxS.shape, bool)
  for b, row in enumerate(own_rows):
    own_BxS[b, first_slot:first_slot + len(row)] = row
  return cache.replace(ids_BxS=jnp.where(jnp.asarray(own_BxS), -1, cache.ids_BxS))


def entries(ids_BxS: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(next_BxS, after_BxS, exists_BxS): the token entry j proposes, the slot it is in, and
  whether entry j exists.

  "Next" is the next slot holding a real token, not the adjacent slot: a cache pads between
  turns until it is compacted, and entry j must propose the same token either way.
  """
  num_slots = ids_BxS.shape[1]
  real_slot_BxS = jnp.where(ids_BxS >= 0, jnp.arange(num_slots), num_slots)
  later_BxS = jnp.pad(real_slot_BxS[:, 1:], ((0, 0), (0, 1)), constant_values=num_slots)
  after_BxS = jax.lax.cummin(later_BxS, axis=1, reverse=True)
  exists_BxS = (ids_BxS >= 0) & (after_BxS < num_slots)
  next_BxS = jnp.where(exists_BxS, jnp.take_along_axis(
      ids_BxS, jnp.minimum(after_BxS, num_slots - 1), axis=1), -1)
  return next_BxS, after_BxS, exists_BxS


def mix(logits_BxNxV: jax.Array, scores_BxNxS: jax.Array, next_BxS: jax.Array,
        allowed_BxNxS: jax.Array) -> jax.Array:
  """float32 log-probabilities [B, N, V] of the vocabulary-and-copy mixture."""
  logits_BxNxV = logits_BxNxV.astype(jnp.float32)
  scores_BxNxS = jnp.where(allowed_BxNxS, scores_BxNxS, -jnp.inf)
  top_BxNx1 = jax.lax.stop_gradient(jnp.maximum(
      jnp.max(logits_BxNxV, axis=-1, keepdims=True),
      jnp.max(scores_BxNxS, axis=-1, keepdims=True)))
  weights_BxNxS = jnp.exp(scores_BxNxS - top_BxNx1)  # 0 where not allowed.
  ids_BxS = jnp.maximum(next_BxS, 0)

  def scatter(w_NxS, ids_S):
    return jnp.zeros((w_NxS.shape[0], logits_BxNxV.shape[-1]), jnp.float32).at[:, ids_S].add(w_NxS)

  copied_BxNxV = jax.vmap(scatter)(weights_BxNxS, ids_BxS)
  has_copy_BxNxV = copied_BxNxV > 0
  log_copied_BxNxV = jnp.where(has_copy_BxNxV,
                               jnp.log(jnp.where(has_copy_BxNxV, copied_BxNxV, 1.0)) + top_BxNx1,
                               -jnp.inf)
  joint_BxNxV = jnp.logaddexp(logits_BxNxV, log_copied_BxNxV)
  return joint_BxNxV - jax.nn.logsumexp(joint_BxNxV, axis=-1, keepdims=True)


def sequence_logits_fn(model: nnx.Module, hidden_BxTxD: jax.Array, tokens_BxT: jax.Array,
                       source_BxT: jax.Array) -> Callable[[jax.Array, jax.Array], jax.Array]:
  """`fn(hidden_BxCxD, t_C) -> log-probs [B, C, V]` for queries at token positions t_C of a
  whole sequence (training, scoring): the copy entries are its earlier `source` tokens (real
  tokens the model did not write itself: `source_mask`)."""
  head = of(model)
  keys_BxTxC = head.keys(hidden_BxTxD)
  next_BxT, after_BxT, exists_BxT = entries(jnp.where(source_BxT, tokens_BxT, -1))

  def logits_fn(h_BxCxD: jax.Array, t_C: jax.Array) -> jax.Array:
    # The query at t may use an entry whose proposed token is at or before t.
    allowed_BxCxT = exists_BxT[:, None, :] & (after_BxT[:, None, :] <= t_C[None, :, None])
    return mix(model.logits(h_BxCxD), head.scores(h_BxCxD, keys_BxTxC), next_BxT,
               allowed_BxCxT)

  return logits_fn


def sequence_score_fn(model: nnx.Module, hidden_BxTxD: jax.Array, tokens_BxT: jax.Array,
                      source_BxT: jax.Array):
  """`fn(hidden_BxCxD, targets_BxC, t_C) -> (ce_BxC, correct_BxC)` for `token_cross_entropy`
  with a copy head (None without one): the loss of the mixture without its [B, C, V] scatter.

  The target's probability is its vocabulary part plus the copy entries that propose it; the
  normalizer is every logit and every allowed entry. `correct` is a lower bound of argmax
  accuracy: the target's probability exceeds the best other token's vocabulary part plus all
  the copy mass on other tokens (exact when one of the two decides).
  """
  head = of(model)
  if head is None:
    return None
  keys_BxTxC = head.keys(hidden_BxTxD)
  next_BxT, after_BxT, exists_BxT = entries(jnp.where(source_BxT, tokens_BxT, -1))

  def score_fn(h_BxCxD, y_BxC, t_C):
    logits_BxCxV = model.logits(h_BxCxD).astype(jnp.float32)
    allowed_BxCxT = exists_BxT[:, None, :] & (after_BxT[:, None, :] <= t_C[None, :, None])
    scores_BxCxT = jnp.where(allowed_BxCxT, head.scores(h_BxCxD, keys_BxTxC), -jnp.inf)
    top_BxCx1 = jax.lax.stop_gradient(jnp.maximum(
        jnp.max(logits_BxCxV, axis=-1, keepdims=True),
        jnp.max(scores_BxCxT, axis=-1, keepdims=True)))
    vocab_BxCxV = jnp.exp(logits_BxCxV - top_BxCx1)
    copy_BxCxT = jnp.where(allowed_BxCxT, jnp.exp(scores_BxCxT - top_BxCx1), 0.0)
    is_target_BxCxT = next_BxT[:, None, :] == y_BxC[:, :, None]
    copied_BxC = jnp.sum(jnp.where(is_target_BxCxT, copy_BxCxT, 0.0), axis=-1)
    log_copied_BxC = jnp.where(copied_BxC > 0, jnp.log(jnp.where(copied_BxC > 0, copied_BxC,
                                                                 1.0)), -jnp.inf)
    target_logit_BxC = jnp.take_along_axis(logits_BxCxV, y_BxC[..., None], axis=-1)[..., 0]
    log_target_BxC = jnp.logaddexp(target_logit_BxC - top_BxCx1[..., 0], log_copied_BxC)
    total_BxC = vocab_BxCxV.sum(-1) + copy_BxCxT.sum(-1)
    ce_BxC = jnp.log(total_BxC) - log_target_BxC
    is_y_BxCxV = jnp.arange(logits_BxCxV.shape[-1]) == y_BxC[..., None]
    rival_BxC = (jnp.max(jnp.where(is_y_BxCxV, 0.0, vocab_BxCxV), axis=-1)
                 + jnp.sum(jnp.where(is_target_BxCxT, 0.0, copy_BxCxT), axis=-1))
    return ce_BxC, jnp.exp(log_target_BxC) > rival_BxC

  return score_fn


def next_token_logits(model: nnx.Module, last_hidden_BxD: jax.Array, cache) -> jax.Array:
  """[B, V] logits of every row's next token from its last hidden state: the model's logits,
  or, with a copy head, the mixture over the cache's copy entries."""
  logits_BxV = model.logits(last_hidden_BxD[:, None, :])[:, 0].astype(jnp.float32)
  head = of(model)
  if head is None:
    return logits_BxV
  if cache.ids_BxS is None:
    raise ValueError("the model has a copy head but its KV cache holds no copy entries; "
                     "make the cache with init_cache(cfg, ...) of the same config")
  next_BxS, _, exists_BxS = entries(cache.ids_BxS)
  scores_BxS = head.scores(last_hidden_BxD[:, None, :], cache.copyk_BxSxC)[:, 0]
  return mix(logits_BxV[:, None], scores_BxS[:, None], next_BxS, exists_BxS[:, None])[:, 0]
