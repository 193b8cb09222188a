"""Rewards for a co-trained simulator (docs/METHODS.md, Online RL and Co-Training), as pure functions of the played outcomes.

The user simulator is trained on its own turns of the same conversations as
the policy, so its reward is a function of how the policy did:

  Persuasion for Good, zero-sum: 1 - donation / 2. The persuader earns
    donation / 2 (donations in [0, 2] dollars, out-of-range ones clipped as the
    loader does), the persuadee the rest, so a simulator cannot learn to be a
    pushover.
  AirDialogue, curriculum: exp(-(Var - 0.25)^2 / 0.02), Var the variance
    (ddof 0) of the policy's 0/1 success over the G rollouts of a scenario.
    Var peaks at 0.25 when the policy succeeds half the time, so the
    simulator is paid for being neither trivial nor impossible; every rollout
    of a group shares the group's reward.
"""

from __future__ import annotations

import numpy as np

MAX_DONATION = 2.0  # Dollars: the Persuasion for Good task payment.
CURRICULUM_TARGET_VAR = 0.25  # A 0/1 success's largest variance, at success rate 1/2.
CURRICULUM_WIDTH = 0.02


def zero_sum_reward(donation: np.ndarray, stated: np.ndarray | None = None) -> np.ndarray:
  """The persuadee simulator's reward 1 - donation / 2 for donations in dollars.

  Only a stated donation earns it: where `stated` is False (no statement, an
  unparsable one, the turn limit) the reward is 0, or a simulator would learn
  that never answering is worth as much as refusing to give.
  """
  reward = 1.0 - np.clip(np.asarray(donation, np.float64), 0.0, MAX_DONATION) / MAX_DONATION
  return reward if stated is None else np.where(np.asarray(stated, bool), reward, 0.0)


def curriculum_reward(success_NxG: np.ndarray) -> np.ndarray:
  """[N, G] simulator rewards from the policy's [N, G] successes: one value per group."""
  success_NxG = np.asarray(success_NxG, np.float64)
  if success_NxG.ndim != 2:
    raise ValueError(f"curriculum_reward: successes must be [N, G], got {success_NxG.shape}")
  var_Nx1 = success_NxG.var(axis=1, keepdims=True)
  reward_Nx1 = np.exp(-np.square(var_Nx1 - CURRICULUM_TARGET_VAR) / CURRICULUM_WIDTH)
  return np.broadcast_to(reward_Nx1, success_NxG.shape).copy()
