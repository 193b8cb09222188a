"""The trainer's view of what the sampler drew: per-token log-probs of a recorded dialogue.

A rollout batch (cotraining/rollouts.py) holds, per row, the trained role's
whole sequence as its model read it, aligned by token index t:

  input_ids       int32 [B, T]   every token, right-padded
  attention_mask  bool  [B, T]   real tokens
  action_mask     bool  [B, T]   tokens the trained role sampled (its own turns)
  behaviour_logp  f32   [B, T]   the log-prob each sampled token was drawn with
  forbidden_ids   int32 [B, K]   ids the sampler masked for that role (-1 padding)
  temperature     f32   [B]      its sampling temperature
  prefix_fields   int32 [B, P, F] (structured-prefix models only)

As everywhere in this project (data_pipelines/mdp.py), token t is chosen
from the hidden state at t - 1, so every [B, T - 1] array here scores
tokens 1..T-1. The sampler draws from softmax((logits with the forbidden ids
at -inf) / temperature) (generation/sampler.py); `token_logprobs` applies
exactly that processing, so at the behaviour parameters it reproduces the
recorded log-probs. Top-k / top-p are not re-applied: online RL samples with
temperature only.

Logits are computed per chunk of positions under `jax.checkpoint` when the
float32 [B, T, V] array would be large, as models/lm_loss.py does for BC.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ilql_dialogue import bc
from ilql_dialogue.algorithm import Batch
from ilql_dialogue.models import copy_head
from ilql_dialogue.models.lm_loss import MAX_LOGITS_BYTES


def forbidden_mask(forbidden_BxK: jax.Array, vocab: int) -> jax.Array:
  """bool [B, V]: True at each row's forbidden ids (-1 padding dropped)."""
  ids_BxK = jnp.where(forbidden_BxK < 0, vocab, forbidden_BxK)
  rows_Bx1 = jnp.arange(forbidden_BxK.shape[0])[:, None]
  return jnp.zeros((forbidden_BxK.shape[0], vocab), bool).at[rows_Bx1, ids_BxK].set(
      True, mode="drop")


def _score(logits_fn, hidden_BxCxD, targets_BxC, t_C, forbidden_BxV, temperature_B):
  """(logp_BxC, entropy_BxC) under the sampler's processed distribution."""
  logits_BxCxV = logits_fn(hidden_BxCxD, t_C).astype(jnp.float32)
  logits_BxCxV = jnp.where(forbidden_BxV[:, None, :], -jnp.inf, logits_BxCxV)
  logits_BxCxV = logits_BxCxV / temperature_B[:, None, None]
  logp_BxCxV = jax.nn.log_softmax(logits_BxCxV, axis=-1)
  logp_BxC = jnp.take_along_axis(logp_BxCxV, targets_BxC[..., None], axis=-1)[..., 0]
  plogp_BxCxV = jnp.where(forbidden_BxV[:, None, :], 0.0, jnp.exp(logp_BxCxV) * logp_BxCxV)
  return logp_BxC, -jnp.sum(plogp_BxCxV, axis=-1)


def hidden_states(lm: nnx.Module, batch: Batch) -> jax.Array:
  """hidden_BxT1xD: the states tokens 1..T-1 are chosen from (what a value head reads too)."""
  mask_BxT = batch["attention_mask"].astype(bool)
  hidden_BxTxD, _ = lm(batch["input_ids"], bc.positions_from_mask(mask_BxT), mask_BxT,
                       **bc.prefix_kwargs(lm, batch))
  return hidden_BxTxD[:, :-1]


def scores(lm: nnx.Module, hidden_BxT1xD: jax.Array, batch: Batch, *,
           max_logits_bytes: int | None = None) -> tuple[jax.Array, jax.Array]:
  """(logp_BxT1, entropy_BxT1) of tokens 1..T-1 from their hidden states."""
  targets_BxT1 = batch["input_ids"][:, 1:]
  b, t, d = hidden_BxT1xD.shape
  vocab = lm.cfg.vocab_size
  forbidden_BxV = forbidden_mask(batch["forbidden_ids"], vocab)
  temperature_B = batch["temperature"].astype(jnp.float32)
  max_logits_bytes = MAX_LOGITS_BYTES if max_logits_bytes is None else max_logits_bytes
  if copy_head.of(lm) is None:
    logits_fn = lambda h_BxCxD, t_C: lm.logits(h_BxCxD)
  else:  # The mixture over the sequence's earlier source tokens.
    logits_fn = copy_head.sequence_logits_fn(
        lm, hidden_BxT1xD, batch["input_ids"][:, :-1],
        copy_head.source_mask(batch["attention_mask"][:, :-1], batch["action_mask"][:, :-1]))
  chunk = max(1, max_logits_bytes // (b * vocab * 4))
  if chunk >= t:
    return _score(logits_fn, hidden_BxT1xD, targets_BxT1, jnp.arange(t), forbidden_BxV,
                  temperature_B)
  num_chunks = -(-t // chunk)
  pad = num_chunks * chunk - t
  h_NxBxCxD = jnp.swapaxes(jnp.pad(hidden_BxT1xD, ((0, 0), (0, pad), (0, 0)))
                           .reshape(b, num_chunks, chunk, d), 0, 1)
  y_NxBxC = jnp.swapaxes(jnp.pad(targets_BxT1, ((0, 0), (0, pad)))
                         .reshape(b, num_chunks, chunk), 0, 1)
  t_NxC = jnp.arange(num_chunks * chunk).reshape(num_chunks, chunk)
  score = jax.checkpoint(lambda xs: _score(logits_fn, *xs, forbidden_BxV, temperature_B))
  logp_NxBxC, entropy_NxBxC = jax.lax.map(score, (h_NxBxCxD, y_NxBxC, t_NxC))
  unchunk = lambda x_NxBxC: jnp.swapaxes(x_NxBxC, 0, 1).reshape(b, -1)[:, :t]
  return unchunk(logp_NxBxC), unchunk(entropy_NxBxC)


def token_logprobs(lm: nnx.Module, batch: Batch, *, max_logits_bytes: int | None = None
                   ) -> tuple[jax.Array, jax.Array]:
  """(logp_BxT1, entropy_BxT1) of tokens 1..T-1 under `lm` (T1 = T - 1)."""
  return scores(lm, hidden_states(lm, batch), batch, max_logits_bytes=max_logits_bytes)
