"""Baselines that ILQL must beat, as Algorithms of the same loop.

* BC: ilql_dialogue/bc.py.
* Filtered BC: BC on the top fraction of dialogues by return. The filter is
  a dataset-level selection (`FilteredBC.filter_dataset`), so no compute is
  spent on the discarded dialogues.
* Monte-Carlo regression / value-weighted BC (`MCValue`): Q and V regressed
  to the discounted return-to-go of the data, with the same discounting as
  ILQL, and BC optionally weighted by exp((G - V) / temperature) (AWR). Its Q
  and V heads plug into the same value-guided decoding
  (value_guidance.value_guidance(..., q_source="online")).

Returns-to-go of a truncated window miss the rewards past the window, so
MCValue trains its value heads only on complete episodes (rows whose
`truncated` is false); `mc_rows` / `mc_truncated_rows` report both counts.
"""

from __future__ import annotations

import dataclasses
import math

import datasets
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from ilql_dialogue import bc, ilql
from ilql_dialogue.algorithm import Batch, Metrics
from ilql_dialogue.models import copy_head
from ilql_dialogue.value_heads import ILQLModel

RETURN_COLUMNS = ("rewards", "outcome", "truncated")


def dialogue_returns(dataset: datasets.Dataset, batch_size: int = 4096) -> np.ndarray:
  """Undiscounted return of every example: its rewards, plus the outcome for a
  truncated window (whose terminal reward, which carries the outcome, fell
  outside it). Read from Arrow batch by batch."""
  missing = [c for c in RETURN_COLUMNS if c not in dataset.column_names]
  if missing:
    raise ValueError(f"dataset field(s) {missing} missing: returns need {list(RETURN_COLUMNS)}")
  returns = []
  for table in dataset.with_format("arrow").iter(batch_size=batch_size):
    rewards = table.column("rewards").combine_chunks()
    offsets = rewards.offsets.to_numpy()
    cumulative = np.concatenate([[0.0], np.cumsum(rewards.flatten().to_numpy(), dtype=np.float64)])
    sums = cumulative[offsets[1:]] - cumulative[offsets[:-1]]
    truncated = table.column("truncated").to_numpy(zero_copy_only=False).astype(bool)
    returns.append(sums + truncated * table.column("outcome").to_numpy().astype(np.float64))
  return np.concatenate(returns) if returns else np.zeros(0)


def top_fraction(returns: np.ndarray, fraction: float) -> np.ndarray:
  """Sorted indices of the ceil(fraction * N) highest returns; ties at the cut
  go to the earlier example, so the kept count is exact and reproducible."""
  if not 0.0 < fraction <= 1.0:
    raise ValueError(f"top_fraction={fraction} must be in (0, 1]")
  keep = math.ceil(fraction * len(returns))
  return np.sort(np.argsort(-returns, kind="stable")[:keep])


class FilteredBC(bc.BC):
  """BC on the top `fraction` of dialogues by return (a dataset-level filter)."""

  def __init__(self, fraction: float, make_model: bc.ModelFactory = bc.lm_from_config):
    super().__init__(make_model)
    if not 0.0 < fraction <= 1.0:
      raise ValueError(f"config.algorithm.top_fraction={fraction} must be in (0, 1]")
    self.fraction = fraction

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> "FilteredBC":
    return cls(config.algorithm.top_fraction, bc.lm_from_config)

  def filter_dataset(self, dataset: datasets.Dataset) -> datasets.Dataset:
    """The examples to train on; call before batching."""
    return dataset.select(top_fraction(dialogue_returns(dataset), self.fraction))


def returns_to_go(batch: Batch, gamma: float, mode: str) -> jax.Array:
  """G_BxT: at each action token, r + gamma_t * G(next action), zero after a terminal.

  The linear recurrence G_t = b_t + a_t G_{t+1} (a = gamma_t (1 - terminal),
  b = r at actions; a = 1, b = 0 elsewhere, so the other speaker's tokens pass
  the next action's return through) runs as a reverse associative scan:
  O(log T) depth, no T x T matrix, no powers of gamma that could underflow.
  """
  action_BxT = batch["action_mask"].astype(bool) & batch["attention_mask"].astype(bool)
  step_BxT = ilql.step_discounts(batch, gamma, mode)
  a_BxT = jnp.where(action_BxT, jnp.where(batch["terminal"], 0.0, step_BxT), 1.0)
  b_BxT = jnp.where(action_BxT, batch["rewards"], 0.0).astype(jnp.float32)

  def then(later, current):  # current o later: G -> b_c + a_c (b_l + a_l G).
    return current[0] * later[0], current[1] + current[0] * later[1]

  _, g_BxT = jax.lax.associative_scan(then, (a_BxT, b_BxT), reverse=True, axis=1)
  return jnp.where(action_BxT, g_BxT, 0.0)


@dataclasses.dataclass(frozen=True)
class MCConfig:
  gamma: float = 0.99
  discount: str = "token"  # As ILQLConfig.discount.
  value_weight: float = 1.0
  awr_temperature: float = 0.0  # > 0: BC weighted by exp((G - V) / temperature).
  awr_max_weight: float = 20.0
  action_fraction: float = 1.0
  head_hidden_dim: int = 0

  def __post_init__(self):
    problems = []
    if not 0.0 <= self.gamma <= 1.0:
      problems.append(f"gamma={self.gamma} must be in [0, 1]")
    if self.discount not in ilql.DISCOUNT_MODES:
      problems.append(f"discount={self.discount!r} not in {ilql.DISCOUNT_MODES}")
    if self.value_weight < 0 or self.awr_temperature < 0 or self.awr_max_weight <= 0:
      problems.append(f"value_weight={self.value_weight}, awr_temperature={self.awr_temperature}"
                      f" must be >= 0 and awr_max_weight={self.awr_max_weight} > 0")
    if not 0.0 < self.action_fraction <= 1.0:
      problems.append(f"action_fraction={self.action_fraction} must be in (0, 1]")
    if problems:
      raise ValueError("config.algorithm: " + "; ".join(problems))

  @classmethod
  def from_config(cls, algorithm: ml_collections.ConfigDict) -> "MCConfig":
    return ilql.dataclass_from_algorithm_config(cls, algorithm)


def mc_loss_terms(q_BxK: jax.Array, v_BxK: jax.Array, logits_BxKxV: jax.Array,
                  action_BxK: jax.Array, return_BxK: jax.Array, bc_mask_BxK: jax.Array,
                  value_mask_BxK: jax.Array, cfg: MCConfig) -> tuple[jax.Array, Metrics]:
  """bc + value_weight * (MSE(Q, G) + MSE(V, G)) on gathered action slots (pure)."""
  q_loss = ilql.masked_mean(jnp.square(return_BxK - q_BxK), value_mask_BxK)
  v_loss = ilql.masked_mean(jnp.square(return_BxK - v_BxK), value_mask_BxK)
  advantage_BxK = jax.lax.stop_gradient(return_BxK - v_BxK)
  if cfg.awr_temperature > 0:
    # Rows without a complete return get weight 1: plain BC, never a guess.
    weights_BxK = jnp.where(value_mask_BxK, jnp.minimum(
        jnp.exp(advantage_BxK / cfg.awr_temperature), cfg.awr_max_weight), 1.0)
  else:
    weights_BxK = jnp.ones_like(advantage_BxK)
  ce_BxK = optax.softmax_cross_entropy_with_integer_labels(
      logits_BxKxV.astype(jnp.float32), action_BxK)
  bc_loss = ilql.masked_mean(weights_BxK * ce_BxK, bc_mask_BxK)
  loss = bc_loss + cfg.value_weight * (q_loss + v_loss)
  return loss, {"bc_loss": bc_loss, "q_loss": q_loss, "v_loss": v_loss,
                "return_mean": ilql.masked_mean(return_BxK, value_mask_BxK),
                "advantage_mean": ilql.masked_mean(advantage_BxK, value_mask_BxK),
                "bc_weight_mean": ilql.masked_mean(weights_BxK, bc_mask_BxK)}


class MCValue:
  """Monte-Carlo return regression with (optionally AWR-weighted) BC, one trunk forward."""

  def __init__(self, cfg: MCConfig = MCConfig(), make_lm: bc.ModelFactory = bc.lm_from_config):
    self.cfg = cfg
    self.make_lm = make_lm

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> "MCValue":
    return cls(MCConfig.from_config(config.algorithm), bc.lm_from_config)

  def init(self, config: ml_collections.ConfigDict, rngs: nnx.Rngs) -> ILQLModel:
    copy_head.refuse(bc.model_config(config), "MC value")
    return ILQLModel(bc.model_config(config), lambda r: self.make_lm(config, r), rngs=rngs,
                     num_q_heads=1, head_hidden_dim=self.cfg.head_hidden_dim, target_q=False)

  def loss(self, model: ILQLModel, batch: Batch, rng: jax.Array) -> tuple[jax.Array, Metrics]:
    del rng
    c = self.cfg
    if "truncated" not in batch:
      raise ValueError("MCValue: batch field 'truncated' missing (per-row bool, from the MDP "
                       "dataset): returns-to-go of truncated windows are incomplete")
    tr = ilql.gather_transitions(
        batch, ilql.action_budget(batch["input_ids"].shape[1], c.action_fraction), c.gamma,
        c.discount)
    state_BxK = tr.state_BxK
    return_BxK = ilql.gather_rows(returns_to_go(batch, c.gamma, c.discount), state_BxK + 1)
    complete_B = ~batch["truncated"].astype(bool)
    value_mask_BxK = tr.mask_BxK & complete_B[:, None]

    hidden_BxKxD = ilql.gather_rows(ilql.trunk_hidden(model.trunk, batch), state_BxK)
    q_BxK = ilql.taken(model.q_values(hidden_BxKxD)[0], tr.action_BxK)
    loss, metrics = mc_loss_terms(q_BxK, model.v_head(hidden_BxKxD), model.trunk.logits(hidden_BxKxD),
                                  tr.action_BxK, return_BxK, tr.mask_BxK, value_mask_BxK, c)
    rows_B = tr.mask_BxK.any(axis=1)
    metrics = {**metrics, "mc_rows": (rows_B & complete_B).sum().astype(jnp.float32),
               "mc_truncated_rows": (rows_B & ~complete_B).sum().astype(jnp.float32)}
    return ilql.fail_on_overflow(loss, metrics, tr.overflow_B)
