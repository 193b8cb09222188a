"""Implicit Language Q-Learning (Snell et al. 2022) as an Algorithm.

    L = L_Q + L_V + cql_weight * L_CQL + bc_weight * L_BC      (docs/METHODS.md, ILQL)

Batches follow data_pipelines/mdp.py: action token i is chosen in state
h_{i-1}, so Q(h_{i-1}, .) scores input_ids[i]; `next_token_index[i]` is the
hidden-state position of the next decision state (the other speaker's tokens
already skipped), -1 where none is in the window.

Every vocabulary-sized quantity (Q, target Q, policy logits) is evaluated only
at the decision states of action tokens: each row's action positions are
gathered into a static [B, K] index set (K from `action_fraction`), so cost
and memory stay linear in B x T and no state-pairing matrix is ever built.
A row with more than K actions makes the loss NaN (and reports
`actions_over_budget`), which stops the loop: actions are never dropped
silently. V is a scalar head, cheap enough to evaluate at every position, and
V(next state) is a gather of that.

Discounting. `discount="token"`: gamma per action token, as in the paper.
`discount="utterance"`: gamma once per utterance (on the transition out of the
role's <|eot|>, discount 1 inside an utterance), so a long utterance is not
discounted to nothing. Both keep the token-level Bellman backup (each token
bootstraps from the next token's state), so Q still improves on the data
within an utterance; regressing every token to the next utterance's value
(next_utterance_index) would turn within-utterance learning into SARSA.

Terminal vs truncated: only `terminal` transitions stop the bootstrap. A
truncated window's last actions bootstrap from V of the next state when it is
in the window; transitions with no next state and no terminal are left out
of the TD loss (mdp.td_mask) but still train V, CQL and BC.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx

from data_pipelines import mdp
from ilql_dialogue import bc
from ilql_dialogue.algorithm import Batch, Metrics
from ilql_dialogue.models import copy_head
from ilql_dialogue.bc import positions_from_mask
from ilql_dialogue.value_heads import ILQLModel

DISCOUNT_MODES = ("token", "utterance")
CQL_NORMALIZATIONS = ("token", "utterance")


@dataclasses.dataclass(frozen=True)
class ILQLConfig:
  """Hyperparameters; defaults are the paper's typical values (docs/METHODS.md, ILQL)."""

  gamma: float = 0.99
  tau: float = 0.7  # Expectile of V; 0.5 = mean (SARSA-like), -> 1 = max.
  cql_weight: float = 0.1
  bc_weight: float = 1.0
  awac_temperature: float = 0.0  # > 0: BC weighted by exp(A / temperature) (AWAC).
  awac_max_weight: float = 100.0
  polyak_rate: float = 0.005  # Per optimizer step.
  discount: str = "token"  # "token" | "utterance".
  action_fraction: float = 1.0  # K = ceil(action_fraction * (T - 1)), rounded up to 8.
  num_q_heads: int = 2
  head_hidden_dim: int = -1  # -1 = 2 x d_model (the reference's MLP heads); 0 = linear heads.
  separate_policy: bool = False
  target_trunk: bool = False
  # Stop the Q / V losses' gradients at the heads' inputs (the reference's detach flags):
  # with a shared trunk, the trunk then learns from the BC term alone.
  detach_q: bool = False
  detach_v: bool = False
  # "token": CQL averaged over action tokens (the paper). "utterance": each token's term
  # divided by its utterance's length, then averaged over utterances, so a long utterance
  # does not inflate Q by its length (docs/RESULTS.md, the CQL bias of the values).
  cql_normalization: str = "token"

  def __post_init__(self):
    problems = []
    if not 0.0 <= self.gamma <= 1.0:
      problems.append(f"gamma={self.gamma} must be in [0, 1]")
    if not 0.0 < self.tau < 1.0:
      problems.append(f"tau={self.tau} must be in (0, 1)")
    if not 0.0 < self.polyak_rate <= 1.0:
      problems.append(f"polyak_rate={self.polyak_rate} must be in (0, 1]")
    if self.discount not in DISCOUNT_MODES:
      problems.append(f"discount={self.discount!r} not in {DISCOUNT_MODES}")
    if self.cql_normalization not in CQL_NORMALIZATIONS:
      problems.append(f"cql_normalization={self.cql_normalization!r} not in {CQL_NORMALIZATIONS}")
    if self.head_hidden_dim < -1:
      problems.append(f"head_hidden_dim={self.head_hidden_dim}: -1 (2 x d_model), 0 or a width")
    if not 0.0 < self.action_fraction <= 1.0:
      problems.append(f"action_fraction={self.action_fraction} must be in (0, 1]")
    for name in ("cql_weight", "bc_weight", "awac_temperature"):
      if getattr(self, name) < 0:
        problems.append(f"{name}={getattr(self, name)} must be >= 0")
    if self.awac_max_weight <= 0:
      problems.append(f"awac_max_weight={self.awac_max_weight} must be > 0")
    if problems:
      raise ValueError("config.algorithm: " + "; ".join(problems))

  @classmethod
  def from_config(cls, algorithm: ml_collections.ConfigDict) -> "ILQLConfig":
    return dataclass_from_algorithm_config(cls, algorithm)


def dataclass_from_algorithm_config(cls, algorithm: ml_collections.ConfigDict):
  """Reads config.algorithm into a hyperparameter dataclass, rejecting unknown fields.

  Its `name` is the registry key, not a hyperparameter.
  """
  fields = {f.name for f in dataclasses.fields(cls)}
  values = {k: v for k, v in algorithm.to_dict().items() if k != "name"}
  unknown = sorted(set(values) - fields)
  if unknown:
    raise ValueError(f"config.algorithm: unknown fields {unknown}; known: {sorted(fields)}")
  return cls(**values)


def action_budget(length: int, fraction: float) -> int:
  """K, the static number of action slots per row for sequences of `length` tokens."""
  slots = length - 1  # Token 0 is never an action.
  return max(1, min(slots, -(-math.ceil(fraction * slots) // 8) * 8))


class Transitions(NamedTuple):
  """The [B, K] transitions of a batch, K action slots per row in token order."""

  state_BxK: jax.Array  # Hidden-state position of the decision state (action position - 1).
  action_BxK: jax.Array  # Token id chosen there.
  reward_BxK: jax.Array
  discount_BxK: jax.Array  # gamma_t * (1 - terminal_t).
  next_state_BxK: jax.Array  # Hidden-state position of the next decision state, -1 = none.
  mask_BxK: jax.Array  # Real action slots.
  td_mask_BxK: jax.Array  # Slots usable for TD: terminal, or next state in the window.
  overflow_B: jax.Array  # Actions of each row that did not fit into K (0 when all did).
  utterance_share_BxK: jax.Array  # 1 / (action tokens of the slot's utterance); 0 for padding.


def step_discounts(batch: Batch, gamma: float, mode: str) -> jax.Array:
  """gamma_t of every transition [B, T] (before terminal masking)."""
  if mode == "token":
    return jnp.full(batch["rewards"].shape, gamma, jnp.float32)
  if mode == "utterance":
    return jnp.where(batch["utterance_end"], gamma, 1.0).astype(jnp.float32)
  raise ValueError(f"discount={mode!r} not in {DISCOUNT_MODES}")


def action_positions(action_mask_BxT: jax.Array, num_slots: int) -> tuple[jax.Array, jax.Array]:
  """Positions of each row's first `num_slots` actions (0-padded), and their validity."""
  positions_BxK = jax.vmap(lambda m: jnp.nonzero(m, size=num_slots, fill_value=0)[0])(
      action_mask_BxT).astype(jnp.int32)
  count_B = action_mask_BxT.sum(axis=1, dtype=jnp.int32)
  valid_BxK = jnp.arange(num_slots, dtype=jnp.int32)[None, :] < count_B[:, None]
  return positions_BxK, valid_BxK


def gather_transitions(batch: Batch, num_slots: int, gamma: float, mode: str,
                       per_utterance: bool = False) -> Transitions:
  """Collects the transitions of every action token into static [B, K] arrays;
  `per_utterance` fills utterance_share_BxK (else 1 per action)."""
  length = batch["input_ids"].shape[1]
  action_mask_BxT = (batch["action_mask"].astype(bool) & batch["attention_mask"].astype(bool)
                     & (jnp.arange(length) >= 1)[None, :])
  pos_BxK, mask_BxK = action_positions(action_mask_BxT, num_slots)

  def take(name):
    return jnp.take_along_axis(jnp.asarray(batch[name]), pos_BxK, axis=1)

  terminal_BxK = take("terminal").astype(bool) & mask_BxK
  next_BxK = jnp.where(mask_BxK, take("next_token_index"), mdp.NO_STATE)
  gamma_BxK = jnp.take_along_axis(step_discounts(batch, gamma, mode), pos_BxK, axis=1)
  share_BxT = (1.0 / jnp.maximum(utterance_lengths(action_mask_BxT, batch["utterance_end"]), 1)
               if per_utterance else jnp.ones(action_mask_BxT.shape, jnp.float32))
  return Transitions(
      state_BxK=pos_BxK - mask_BxK.astype(jnp.int32),  # 0 for padding slots.
      action_BxK=take("input_ids"),
      reward_BxK=jnp.where(mask_BxK, take("rewards"), 0.0).astype(jnp.float32),
      discount_BxK=jnp.where(terminal_BxK, 0.0, gamma_BxK),
      next_state_BxK=next_BxK,
      mask_BxK=mask_BxK,
      td_mask_BxK=mdp.td_mask(mask_BxK, terminal_BxK, next_BxK),
      overflow_B=jnp.maximum(action_mask_BxT.sum(axis=1, dtype=jnp.int32) - num_slots, 0),
      utterance_share_BxK=jnp.where(mask_BxK, jnp.take_along_axis(share_BxT, pos_BxK, axis=1),
                                    0.0))


def utterance_lengths(action_mask_BxT: jax.Array, utterance_end_BxT: jax.Array) -> jax.Array:
  """For every position, the number of action tokens in its utterance (O(B T), no T x T)."""
  length = action_mask_BxT.shape[1]
  ends_BxT = utterance_end_BxT.astype(jnp.int32)
  utterance_BxT = jnp.cumsum(ends_BxT, axis=1) - ends_BxT  # An utterance's end token is its own.

  def row(utterance_T, actions_T):
    counts = jax.ops.segment_sum(actions_T.astype(jnp.int32), utterance_T, num_segments=length + 1)
    return counts[utterance_T]

  return jax.vmap(row)(utterance_BxT, action_mask_BxT)


def gather_rows(values_BxT: jax.Array, index_BxK: jax.Array) -> jax.Array:
  """values[b, index[b, k]] for [B, T] or [B, T, D] values; negative indices read 0."""
  safe_BxK = jnp.maximum(index_BxK, 0)
  if values_BxT.ndim == 2:
    return jnp.take_along_axis(values_BxT, safe_BxK, axis=1)
  return jnp.take_along_axis(values_BxT, safe_BxK[..., None], axis=1)


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
  mask = mask.astype(jnp.float32)
  return (x * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def taken(values_BxKxV: jax.Array, action_BxK: jax.Array) -> jax.Array:
  """values[b, k, action[b, k]]."""
  return jnp.take_along_axis(values_BxKxV, action_BxK[..., None], axis=-1)[..., 0]


def expectile_weights(diff: jax.Array, tau: float) -> jax.Array:
  """|tau - 1[diff < 0]| for diff = target - prediction."""
  return jnp.where(diff < 0, 1.0 - tau, tau)


def ilql_loss_terms(qs_BxKxV: Sequence[jax.Array], target_qs_BxKxV: Sequence[jax.Array],
                    v_BxK: jax.Array, v_next_BxK: jax.Array, logits_BxKxV: jax.Array,
                    tr: Transitions, cfg: ILQLConfig) -> tuple[jax.Array, Metrics]:
  """The ILQL objective on gathered transitions (pure; see docs/METHODS.md, ILQL).

  `qs_BxKxV` / `target_qs_BxKxV` hold one array per Q head; `v_next_BxK` is V
  at `tr.next_state_BxK` (any value where that is -1).
  """
  q_taken_NxBxK = jnp.stack([taken(q, tr.action_BxK) for q in qs_BxKxV])
  q_hat_BxK = jax.lax.stop_gradient(
      functools.reduce(jnp.minimum, [taken(q, tr.action_BxK) for q in target_qs_BxKxV]))
  v_next_BxK = jnp.where(tr.next_state_BxK >= 0, jax.lax.stop_gradient(v_next_BxK), 0.0)
  td_target_BxK = tr.reward_BxK + tr.discount_BxK * v_next_BxK

  td_error_NxBxK = td_target_BxK[None] - q_taken_NxBxK
  q_loss = sum(masked_mean(jnp.square(e), tr.td_mask_BxK) for e in td_error_NxBxK)

  v_diff_BxK = q_hat_BxK - v_BxK
  v_loss = masked_mean(expectile_weights(v_diff_BxK, cfg.tau) * jnp.square(v_diff_BxK),
                       tr.mask_BxK)

  if cfg.cql_normalization == "utterance":  # Sum per utterance / utterances.
    weights_BxK = tr.utterance_share_BxK
    count = jnp.maximum(weights_BxK.sum(), 1e-6)
  else:
    weights_BxK = tr.mask_BxK.astype(jnp.float32)
    count = jnp.maximum(weights_BxK.sum(), 1.0)
  cql_loss = sum(((jax.nn.logsumexp(q, axis=-1) - q_taken) * weights_BxK).sum() / count
                 for q, q_taken in zip(qs_BxKxV, q_taken_NxBxK))

  advantage_BxK = jax.lax.stop_gradient(v_diff_BxK)
  if cfg.awac_temperature > 0:
    bc_weights_BxK = jnp.minimum(jnp.exp(advantage_BxK / cfg.awac_temperature),
                                 cfg.awac_max_weight)
  else:
    bc_weights_BxK = jnp.ones_like(advantage_BxK)
  ce_BxK = optax.softmax_cross_entropy_with_integer_labels(
      logits_BxKxV.astype(jnp.float32), tr.action_BxK)
  bc_loss = masked_mean(bc_weights_BxK * ce_BxK, tr.mask_BxK)

  loss = q_loss + v_loss + cfg.cql_weight * cql_loss + cfg.bc_weight * bc_loss
  metrics = {
      "q_loss": q_loss,
      "v_loss": v_loss,
      "cql_loss": cql_loss,
      "bc_loss": bc_loss,
      "q_mean": masked_mean(q_taken_NxBxK.mean(axis=0), tr.mask_BxK),
      "target_q_mean": masked_mean(q_hat_BxK, tr.mask_BxK),
      "v_mean": masked_mean(v_BxK, tr.mask_BxK),
      "advantage_mean": masked_mean(advantage_BxK, tr.mask_BxK),
      "td_abs_error": masked_mean(jnp.abs(td_error_NxBxK).mean(axis=0), tr.td_mask_BxK),
      "bc_weight_mean": masked_mean(bc_weights_BxK, tr.mask_BxK),
      "action_tokens": tr.mask_BxK.sum().astype(jnp.float32),
      "td_fraction": masked_mean(tr.td_mask_BxK, tr.mask_BxK),
  }
  return loss, metrics


def head_width(head_hidden_dim: int, d_model: int) -> int:
  """The heads' hidden width: -1 means 2 x d_model, as in the ILQL reference."""
  return 2 * d_model if head_hidden_dim == -1 else head_hidden_dim


def trunk_hidden(trunk: nnx.Module, batch: Batch) -> jax.Array:
  """hidden_BxTxD of a trunk on the batch (with its structured prefix, if any)."""
  mask_BxT = batch["attention_mask"].astype(bool)
  hidden_BxTxD, _ = trunk(batch["input_ids"], positions_from_mask(mask_BxT), mask_BxT,
                          **bc.prefix_kwargs(trunk, batch))
  return hidden_BxTxD


def fail_on_overflow(loss: jax.Array, metrics: Metrics, overflow_B: jax.Array
                     ) -> tuple[jax.Array, Metrics]:
  """NaN loss (which stops the loop with the metrics) if any row's actions overflowed K."""
  over = overflow_B.max()
  metrics = {**metrics, "actions_over_budget": over.astype(jnp.float32)}
  return jnp.where(over > 0, jnp.nan, loss), metrics


class ILQL:
  """ILQL as an `Algorithm`: one trunk forward per step with a shared policy.

  `make_lm(config, rngs)` builds each trunk as BC would (bc.lm_from_config: a
  Transformer, or a PrefixLM for structured context).
  """

  def __init__(self, cfg: ILQLConfig = ILQLConfig(),
               make_lm: bc.ModelFactory = bc.lm_from_config):
    self.cfg = cfg
    self.make_lm = make_lm

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> "ILQL":
    return cls(ILQLConfig.from_config(config.algorithm), bc.lm_from_config)

  def init(self, config: ml_collections.ConfigDict, rngs: nnx.Rngs) -> ILQLModel:
    c = self.cfg
    cfg = bc.model_config(config)
    copy_head.refuse(cfg, "ILQL")
    return ILQLModel(cfg, lambda r: self.make_lm(config, r), rngs=rngs,
                     num_q_heads=c.num_q_heads,
                     head_hidden_dim=head_width(c.head_hidden_dim, cfg.d_model),
                     separate_policy=c.separate_policy, target_trunk=c.target_trunk)

  def loss(self, model: ILQLModel, batch: Batch, rng: jax.Array) -> tuple[jax.Array, Metrics]:
    del rng  # Deterministic.
    c = self.cfg
    tr = gather_transitions(batch, action_budget(batch["input_ids"].shape[1], c.action_fraction),
                            c.gamma, c.discount, c.cql_normalization == "utterance")

    hidden_BxTxD = trunk_hidden(model.trunk, batch)
    state_hidden_BxKxD = gather_rows(hidden_BxTxD, tr.state_BxK)
    if model.target_trunk is None:
      target_hidden_BxKxD = state_hidden_BxKxD
    else:
      target_hidden_BxKxD = gather_rows(trunk_hidden(model.target_trunk, batch), tr.state_BxK)
    target_qs_BxKxV = jax.lax.stop_gradient(
        model.q_values(jax.lax.stop_gradient(target_hidden_BxKxD), target=True))
    detach = jax.lax.stop_gradient
    qs_BxKxV = model.q_values(detach(state_hidden_BxKxD) if c.detach_q else state_hidden_BxKxD)
    v_BxT = model.v_head(detach(hidden_BxTxD) if c.detach_v else hidden_BxTxD)

    if model.policy_trunk is None:
      policy_hidden_BxKxD = state_hidden_BxKxD
    else:
      policy_hidden_BxKxD = gather_rows(trunk_hidden(model.policy_trunk, batch), tr.state_BxK)
    logits_BxKxV = model.policy.logits(policy_hidden_BxKxD)

    loss, metrics = ilql_loss_terms(
        qs_BxKxV, target_qs_BxKxV, gather_rows(v_BxT, tr.state_BxK),
        gather_rows(v_BxT, tr.next_state_BxK), logits_BxKxV, tr, c)
    return fail_on_overflow(loss, metrics, tr.overflow_B)

  def post_update(self, model: ILQLModel) -> None:
    model.update_targets(self.cfg.polyak_rate)
