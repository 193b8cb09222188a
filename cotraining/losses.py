"""Policy-gradient losses for dialogue RL, as pure functions of arrays (jit-friendly).

Advantages are per dialogue (one scalar reward per rollout) and every token
the trained role sampled in that dialogue shares its dialogue's advantage.
Rollouts come in groups of G on the same scenario ([N, G] rewards):

  GRPO  (r - mean_group) / (std_group + eps), std over the group (ddof 0)
  RLOO  r - mean of the other G - 1 rewards of the group
  PPO   per token, generalized advantage estimation (`gae`) over the trained
        role's tokens with a learned value, the reward on its last token

GRPO's and RLOO's have zero mean within each group; a group whose rewards are all equal
has zero advantages, so it teaches nothing, as it should.

The surrogate (DAPO's "clip-higher" GRPO objective) per sampled token, with
ratio = pi / pi_behaviour:

  -min(ratio A, clip(ratio, 1 - eps_low, 1 + eps_high) A) + kl_coef * k3

k3 = exp(ref - logp) - (ref - logp) - 1 is the low-variance, non-negative
estimator of KL(pi || pi_ref) from tokens sampled by pi (zero where the
policy equals the reference). The loss is a token-level mean: the sum over
every sampled token of the microbatch divided by their number, so long
replies are not down-weighted against short ones.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

ADVANTAGES = ("group_normalized", "leave_one_out")


def group_normalized_advantages(rewards_NxG: np.ndarray, eps: float = 1e-6) -> np.ndarray:
  """GRPO: each reward standardized within its group of G rollouts."""
  rewards_NxG = np.asarray(rewards_NxG, np.float64)
  mean_Nx1 = rewards_NxG.mean(axis=1, keepdims=True)
  std_Nx1 = rewards_NxG.std(axis=1, keepdims=True)
  return ((rewards_NxG - mean_Nx1) / (std_Nx1 + eps)).astype(np.float32)


def leave_one_out_advantages(rewards_NxG: np.ndarray) -> np.ndarray:
  """RLOO: each reward minus the mean of the other G - 1 rewards of its group."""
  rewards_NxG = np.asarray(rewards_NxG, np.float64)
  g = rewards_NxG.shape[1]
  if g < 2:
    raise ValueError(f"leave-one-out needs groups of at least 2 rollouts, got {g}")
  others_NxG = (rewards_NxG.sum(axis=1, keepdims=True) - rewards_NxG) / (g - 1)
  return (rewards_NxG - others_NxG).astype(np.float32)


def advantages(kind: str, rewards_NxG: np.ndarray) -> np.ndarray:
  if kind == "group_normalized":
    return group_normalized_advantages(rewards_NxG)
  if kind == "leave_one_out":
    return leave_one_out_advantages(rewards_NxG)
  raise ValueError(f"advantage estimator {kind!r} not in {ADVANTAGES}")


def k3_kl(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
  """Per-token k3 estimate of KL(pi || pi_ref) for tokens drawn from pi."""
  log_ratio = ref_logp - logp
  return jnp.exp(log_ratio) - log_ratio - 1.0


def clipped_policy_loss(logp_BxT: jax.Array, behaviour_logp_BxT: jax.Array,
                        ref_logp_BxT: jax.Array, advantage_B: jax.Array, weights_BxT: jax.Array,
                        *, eps_low: float, eps_high: float, kl_coef: float
                        ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Token-level mean of the clipped surrogate plus kl_coef * k3 (module docstring).

  `weights_BxT` marks the trained role's sampled tokens; every other entry
  of the [B, T] arrays is ignored (-inf included). `advantage_B` is one per
  row [B] or one per token [B, T].
  """
  weights_BxT = weights_BxT.astype(jnp.float32)
  count = jnp.maximum(weights_BxT.sum(), 1.0)
  mean = lambda x_BxT: jnp.sum(x_BxT * weights_BxT) / count
  # Unsampled positions may hold -inf (a forbidden id read in the other side's turn): zero them
  # first, so neither the forward nor the backward pass ever sees them.
  sampled_BxT = weights_BxT > 0
  logp_BxT, behaviour_logp_BxT, ref_logp_BxT = (
      jnp.where(sampled_BxT, x, 0.0) for x in (logp_BxT, behaviour_logp_BxT, ref_logp_BxT))
  ratio_BxT = jnp.exp(logp_BxT - behaviour_logp_BxT)
  advantage_Bx1 = (advantage_B if advantage_B.ndim == 2 else advantage_B[:, None]
                   ).astype(jnp.float32)  # Per dialogue (GRPO, RLOO) or per token (PPO).
  clipped_BxT = jnp.clip(ratio_BxT, 1.0 - eps_low, 1.0 + eps_high)
  surrogate_BxT = jnp.minimum(ratio_BxT * advantage_Bx1, clipped_BxT * advantage_Bx1)
  kl_BxT = k3_kl(logp_BxT, ref_logp_BxT)
  policy_loss = -mean(surrogate_BxT)
  kl = mean(kl_BxT)
  loss = policy_loss + kl_coef * kl
  clipped = (ratio_BxT * advantage_Bx1 != surrogate_BxT).astype(jnp.float32)
  return loss, {"policy_loss": policy_loss, "kl": kl, "clip_fraction": mean(clipped),
                "ratio": mean(ratio_BxT), "sampled_tokens": weights_BxT.sum()}


def gae(values_BxT: jax.Array, reward_B: jax.Array, mask_BxT: jax.Array, *, gamma: float,
        lam: float) -> tuple[jax.Array, jax.Array]:
  """(advantages_BxT, returns_BxT) over each row's sampled tokens (PPO).

  The trained role's tokens are the steps of its MDP, in order; the tokens
  between them (the other side's turns) are the environment's, so they are
  skipped, not discounted. The dialogue's reward arrives after its last
  sampled token, which is terminal (the next value is 0):
  delta_k = r_k + gamma V_{k+1} - V_k, A_k = delta_k + gamma lam A_{k+1},
  returns A_k + V_k. Entries off the mask are 0.
  """
  mask_BxT = mask_BxT.astype(bool)
  values_BxT = jnp.where(mask_BxT, values_BxT.astype(jnp.float32), 0.0)
  batch = values_BxT.shape[0]

  def step(carry, inputs):
    next_value_B, next_advantage_B, seen_B = carry
    value_B, sampled_B = inputs
    reward_now_B = jnp.where(seen_B, 0.0, reward_B)  # The last sampled token gets the reward.
    delta_B = reward_now_B + gamma * next_value_B - value_B
    advantage_B = delta_B + gamma * lam * next_advantage_B
    carry = (jnp.where(sampled_B, value_B, next_value_B),
             jnp.where(sampled_B, advantage_B, next_advantage_B), seen_B | sampled_B)
    return carry, jnp.where(sampled_B, advantage_B, 0.0)

  zeros_B = jnp.zeros((batch,), jnp.float32)
  _, advantages_TxB = jax.lax.scan(
      step, (zeros_B, zeros_B, jnp.zeros((batch,), bool)),
      (values_BxT.T, mask_BxT.T), reverse=True)
  advantages_BxT = advantages_TxB.T
  return advantages_BxT, jnp.where(mask_BxT, advantages_BxT + values_BxT, 0.0)


def clipped_value_loss(values_BxT: jax.Array, old_values_BxT: jax.Array, returns_BxT: jax.Array,
                       weights_BxT: jax.Array, *, clip: float) -> jax.Array:
  """PPO's value loss: token mean of 0.5 max((V - R)^2, (clip(V, V_old +- clip) - R)^2)."""
  weights_BxT = weights_BxT.astype(jnp.float32)
  clipped_BxT = old_values_BxT + jnp.clip(values_BxT - old_values_BxT, -clip, clip)
  loss_BxT = 0.5 * jnp.maximum(jnp.square(values_BxT - returns_BxT),
                               jnp.square(clipped_BxT - returns_BxT))
  return jnp.sum(loss_BxT * weights_BxT) / jnp.maximum(weights_BxT.sum(), 1.0)
