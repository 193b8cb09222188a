"""GRPO, RLOO and PPO as `Algorithm`s of the one loop: a model, `prepare` and a loss.

The loop (ilql_dialogue/train_loop.py) is unchanged: each of its steps is one
gradient step on a minibatch of a rollout batch, with the ratio to the
behaviour policy recomputed from the current parameters, so several steps
on one rollout batch are PPO-style epochs. The experience source
(cotraining/experience.py) calls `prepare` once per rollout batch, with the
model that sampled it: the advantages, the frozen reference's log-probs
and, for PPO, the behaviour values and returns.

config.algorithm fields (defaults from docs/METHODS.md, Online RL and Co-Training):
  name: "grpo" (group-normalized advantages), "rloo" (leave-one-out) or
        "ppo" (a value head and GAE over the trained role's tokens)
  eps_low = 0.2, eps_high = 0.28: the clipped ratio's range [1 - eps_low, 1 + eps_high]
  kl_coef = 0.005: weight of the k3 KL to the frozen reference
  PPO only: gamma = 1.0, lam = 0.95, vf_coef = 0.1, value_clip = 0.2

With config.rl.cotrain enabled, grpo / rloo build cotraining/cotrain.py's
CoTraining (the policy and the user simulator trained together).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Mapping

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from cotraining import cotrain, logprobs, losses
from cotraining.policy import PolicyWithReference
from ilql_dialogue import bc
from ilql_dialogue.algorithm import Batch, Metrics
from ilql_dialogue.models.heads import ScalarHead

ESTIMATORS = {"grpo": "group_normalized", "rloo": "leave_one_out"}


@functools.partial(jax.jit, static_argnums=0)
def _reference_logprobs(graphdef, state, batch):
  logp_BxT1, _ = logprobs.token_logprobs(nnx.merge(graphdef, state), batch)
  return logp_BxT1


def reference_logprobs(model: PolicyWithReference, batch: Batch) -> np.ndarray:
  """[B, T] log-probs of each token under the frozen reference (column 0 is 0), on the host."""
  graphdef, state = nnx.split(model.reference)
  logp_BxT1 = np.asarray(jax.device_get(_reference_logprobs(graphdef, state, batch)))
  return np.pad(logp_BxT1, ((0, 0), (1, 0)))


def _rollout_metrics(batch: Batch, weights_BxT1: jax.Array) -> Metrics:
  """Reward mean and s.e., dialogue and reply lengths, and the source's `stat_*` columns."""
  reward_B = batch["reward"].astype(jnp.float32)
  return {"reward": reward_B.mean(),
          "reward_stderr": reward_B.std() / jnp.sqrt(reward_B.shape[0]),
          "dialogue_turns": batch["num_turns"].astype(jnp.float32).mean(),
          "reply_tokens": weights_BxT1.sum() / jnp.maximum(batch["num_replies"].sum(), 1),
          **{k[len("stat_"):]: batch[k].mean() for k in batch if k.startswith("stat_")}}


def _checked_fields(cls: type, config: ml_collections.ConfigDict,
                    ignore: tuple[str, ...] = ()) -> dict:
  fields = dict(config.algorithm)
  fields.pop("name")
  known = {f.name for f in dataclasses.fields(cls)} - set(ignore)
  unknown = sorted(set(fields) - known)
  if unknown:
    raise ValueError(f"config.algorithm: unknown fields {unknown}; known: {sorted(known)}")
  return fields


@dataclasses.dataclass(frozen=True)
class PolicyGradient:
  """GRPO / RLOO: the clipped loss with a KL to the reference, one advantage per dialogue."""

  advantage: str = "group_normalized"
  eps_low: float = 0.2
  eps_high: float = 0.28
  kl_coef: float = 0.005

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> "PolicyGradient":
    """The algorithm config.algorithm names; with config.rl.cotrain on, its co-training of
    the policy and the simulator (cotraining/cotrain.py), so the registry and every
    checkpoint restore build the pair."""
    fields = _checked_fields(cls, config, ignore=("advantage",))
    algorithm = cls(advantage=ESTIMATORS[config.algorithm.name], **fields)
    if cotrain.enabled(config.get("rl")):
      return cotrain.CoTraining.from_config(config, algorithm)
    return algorithm

  def init(self, config: ml_collections.ConfigDict, rngs: nnx.Rngs) -> nnx.Module:
    return PolicyWithReference(bc.lm_from_config(config, rngs))

  def advantages(self, rewards_NxG: np.ndarray) -> np.ndarray:
    return losses.advantages(self.advantage, rewards_NxG)

  def prepare(self, model: PolicyWithReference, arrays: Mapping[str, np.ndarray],
              rewards_NxG: np.ndarray) -> dict[str, np.ndarray]:
    """The rollout batch's arrays with `advantage` [B] and `ref_logp` [B, T] added."""
    arrays = dict(arrays, advantage=self.advantages(rewards_NxG).reshape(-1))
    arrays["ref_logp"] = reference_logprobs(model, arrays)
    return arrays

  def policy_loss(self, logp_BxT1: jax.Array, entropy_BxT1: jax.Array, batch: Batch,
                  advantage: jax.Array) -> tuple[jax.Array, Metrics]:
    weights_BxT1 = batch["action_mask"][:, 1:].astype(bool) & batch["attention_mask"][:, 1:]
    loss, metrics = losses.clipped_policy_loss(
        logp_BxT1, batch["behaviour_logp"][:, 1:], batch["ref_logp"][:, 1:], advantage,
        weights_BxT1, eps_low=self.eps_low, eps_high=self.eps_high, kl_coef=self.kl_coef)
    count = jnp.maximum(weights_BxT1.sum(), 1)
    entropy = jnp.sum(jnp.where(weights_BxT1, jax.lax.stop_gradient(entropy_BxT1), 0.0)) / count
    # The share of rows whose group's rewards differ: the others (a group all solved or all
    # failed) have advantage 0 and teach nothing but the KL.
    informative = jnp.mean((jnp.abs(jnp.reshape(advantage, (advantage.shape[0], -1))) > 0)
                           .any(axis=1).astype(jnp.float32))
    return loss, {**metrics, "entropy": entropy, "informative_rows": informative,
                  **_rollout_metrics(batch, weights_BxT1)}

  def loss(self, model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, Metrics]:
    del rng  # The rollout's randomness is in the batch.
    logp_BxT1, entropy_BxT1 = logprobs.token_logprobs(model.policy, batch)
    return self.policy_loss(logp_BxT1, entropy_BxT1, batch, batch["advantage"])


@functools.partial(jax.jit, static_argnums=0)
def _values(graphdef, state, batch):
  model = nnx.merge(graphdef, state)
  return model.value_head(logprobs.hidden_states(model.policy, batch))


@dataclasses.dataclass(frozen=True)
class PPO(PolicyGradient):
  """PPO: the same clipped loss and KL, per-token GAE advantages from a value head.

  Advantages are whitened over the rollout batch's sampled tokens. The value
  head reads the policy's hidden states: V of the state a token is chosen in.
  """

  gamma: float = 1.0
  lam: float = 0.95
  vf_coef: float = 0.1
  value_clip: float = 0.2

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> "PPO":
    if cotrain.enabled(config.get("rl")):
      raise ValueError("config.rl.cotrain: co-training trains both sides with grpo or rloo; "
                       "ppo's value head is the policy's only")
    return cls(**_checked_fields(cls, config, ignore=("advantage",)))

  def init(self, config: ml_collections.ConfigDict, rngs: nnx.Rngs) -> nnx.Module:
    policy = bc.lm_from_config(config, rngs)
    return PolicyWithReference(policy, ScalarHead(policy.cfg, rngs=rngs))

  def prepare(self, model: PolicyWithReference, arrays: Mapping[str, np.ndarray],
              rewards_NxG: np.ndarray) -> dict[str, np.ndarray]:
    """Adds `value_old`, `return`, whitened per-token `advantage` [B, T] and `ref_logp`."""
    arrays = dict(arrays)
    graphdef, state = nnx.split(model)
    values_BxT1 = _values(graphdef, state, arrays)
    mask_BxT1 = arrays["action_mask"][:, 1:]
    advantages_BxT1, returns_BxT1 = losses.gae(values_BxT1, arrays["reward"], mask_BxT1,
                                               gamma=self.gamma, lam=self.lam)
    advantages_BxT1, values_BxT1, returns_BxT1 = (
        np.asarray(jax.device_get(x)) for x in (advantages_BxT1, values_BxT1, returns_BxT1))
    sampled = advantages_BxT1[mask_BxT1]
    if sampled.size:
      advantages_BxT1 = np.where(mask_BxT1, (advantages_BxT1 - sampled.mean())
                                 / (sampled.std() + 1e-6), 0.0)
    pad = lambda x_BxT1: np.pad(x_BxT1, ((0, 0), (1, 0))).astype(np.float32)
    arrays.update(advantage=pad(advantages_BxT1), value_old=pad(values_BxT1),
                  **{"return": pad(returns_BxT1)})
    arrays["ref_logp"] = reference_logprobs(model, arrays)
    return arrays

  def loss(self, model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, Metrics]:
    del rng
    hidden_BxT1xD = logprobs.hidden_states(model.policy, batch)
    logp_BxT1, entropy_BxT1 = logprobs.scores(model.policy, hidden_BxT1xD, batch)
    loss, metrics = self.policy_loss(logp_BxT1, entropy_BxT1, batch, batch["advantage"][:, 1:])
    weights_BxT1 = batch["action_mask"][:, 1:].astype(bool) & batch["attention_mask"][:, 1:]
    value_loss = losses.clipped_value_loss(
        model.value_head(hidden_BxT1xD), batch["value_old"][:, 1:], batch["return"][:, 1:],
        weights_BxT1, clip=self.value_clip)
    return loss + self.vf_coef * value_loss, {**metrics, "value_loss": value_loss}
