"""Co-trained simulators' rewards: the P4G zero-sum and the AirDialogue curriculum values."""

import numpy as np
import pytest

from cotraining import sim_rewards


def test_zero_sum_reward_is_what_the_persuader_does_not_get():
  donations = np.array([0.0, 0.5, 1.0, 2.0, 3.5, -1.0])
  np.testing.assert_allclose(sim_rewards.zero_sum_reward(donations),
                             [1.0, 0.75, 0.5, 0.0, 0.0, 1.0])


def test_zero_sum_pays_only_a_stated_donation():
  """A persuadee that never states a donation (or states it unreadably) earns nothing."""
  np.testing.assert_allclose(
      sim_rewards.zero_sum_reward(np.zeros(3), stated=np.array([True, False, False])),
      [1.0, 0.0, 0.0])


def test_curriculum_reward_peaks_when_the_policy_succeeds_half_the_time():
  success = np.array([[1, 0, 1, 0],    # Var 0.25: the peak.
                      [1, 1, 1, 1],    # Var 0: too easy.
                      [0, 0, 0, 0],    # Var 0: too hard.
                      [1, 0, 0, 0]])   # Var 3/16.
  reward = sim_rewards.curriculum_reward(success)
  assert reward.shape == (4, 4)
  assert (reward == reward[:, :1]).all()  # One value per group.
  np.testing.assert_allclose(reward[:, 0], [1.0, np.exp(-3.125), np.exp(-3.125),
                                            np.exp(-(3 / 16 - 0.25) ** 2 / 0.02)])
  assert reward[0, 0] > reward[3, 0] > reward[1, 0]
  np.testing.assert_allclose(reward[1, 0], 0.0439369, rtol=1e-6)


def test_curriculum_reward_needs_groups():
  with pytest.raises(ValueError, match=r"\[N, G\]"):
    sim_rewards.curriculum_reward(np.array([1, 0, 1]))
