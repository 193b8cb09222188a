"""GRPO / RLOO: the clipped loss by hand, advantages, the KL at initialization, the registry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cotraining_toy as toy
from cotraining import algorithms, losses, rollouts
from cotraining.policy import PolicyWithReference, Reference
from flax import nnx
from ilql_dialogue import registry


def test_clipped_loss_on_a_hand_computed_example():
  behaviour = np.log([[0.4, 0.2, 0.5], [0.3, 0.6, 0.1]])
  ratio = np.array([[1.5, 0.5, 1.0], [1.5, 0.5, 1.0]])
  logp = jnp.asarray(behaviour + np.log(ratio), jnp.float32)
  logp = logp.at[1, 2].set(-jnp.inf)  # An unsampled position may hold anything.
  ref = logp.at[0, 0].add(np.log(2.0))  # The reference is twice as likely on token (0, 0).
  weights = jnp.asarray([[1, 1, 0], [1, 1, 0]], bool)
  advantage = jnp.asarray([1.0, -1.0])
  args = (jnp.asarray(behaviour, jnp.float32), ref, advantage, weights)
  kwargs = dict(eps_low=0.2, eps_high=0.28, kl_coef=0.005)
  loss, metrics = losses.clipped_policy_loss(logp, *args, **kwargs)
  # Surrogates: min(1.5, 1.28) = 1.28; min(0.5, 0.8) = 0.5; min(-1.5, -1.28) = -1.5;
  # min(-0.5, -0.8) = -0.8. Mean over the 4 sampled tokens: -0.13.
  k3 = 2.0 - np.log(2.0) - 1.0  # exp(log 2) - log 2 - 1 on token (0, 0), 0 elsewhere.
  np.testing.assert_allclose(metrics["policy_loss"], 0.13, rtol=1e-6)
  np.testing.assert_allclose(metrics["kl"], k3 / 4, rtol=1e-6)
  np.testing.assert_allclose(loss, 0.13 + 0.005 * k3 / 4, rtol=1e-6)
  np.testing.assert_allclose(metrics["clip_fraction"], 0.5)  # Tokens (0, 0) and (1, 1).
  grad = jax.grad(lambda lp: losses.clipped_policy_loss(lp, *args, **kwargs)[0])(logp)
  # Clipped tokens get only the KL's gradient, d k3 / d logp = 1 - exp(ref - logp).
  expected = np.array([[0.005 * (1 - 2.0) / 4, -0.5 / 4, 0.0], [1.5 / 4, 0.0, 0.0]])
  np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-8)


def test_advantages_have_zero_mean_in_every_group():
  rewards = np.random.default_rng(0).random((5, 8)).round(1)
  rewards[2] = 0.5  # A group that cannot tell its rollouts apart teaches nothing.
  for kind in losses.ADVANTAGES:
    advantages = losses.advantages(kind, rewards)
    np.testing.assert_allclose(advantages.mean(axis=1), 0.0, atol=1e-6)
    np.testing.assert_array_equal(advantages[2], 0.0)
  np.testing.assert_allclose(losses.group_normalized_advantages([[1, 0, 0, 0]]),
                             [[3 / np.sqrt(3), -1 / np.sqrt(3), -1 / np.sqrt(3), -1 / np.sqrt(3)]],
                             rtol=1e-5)
  np.testing.assert_allclose(losses.leave_one_out_advantages([[1, 0, 0, 0]]),
                             [[1, -1 / 3, -1 / 3, -1 / 3]], rtol=1e-6)
  with pytest.raises(ValueError, match="at least 2"):
    losses.leave_one_out_advantages([[1.0]])


def test_gae_runs_over_the_trained_roles_tokens_only():
  values = jnp.asarray([[9.0, 0.2, 0.5, 9.0, 0.7, 9.0], [9.0] * 6])  # 9: not its tokens.
  mask = jnp.asarray([[0, 1, 1, 0, 1, 0], [0] * 6], bool)
  advantages, returns = losses.gae(values, jnp.asarray([1.0, 1.0]), mask, gamma=1.0, lam=0.5)
  # Last token: 1 - 0.7 = 0.3; then 0.7 - 0.5 + 0.5 * 0.3 = 0.35; then 0.5 - 0.2 + 0.5 * 0.35.
  np.testing.assert_allclose(advantages, [[0, 0.475, 0.35, 0, 0.3, 0], [0] * 6], atol=1e-6)
  np.testing.assert_allclose(returns, [[0, 0.675, 0.85, 0, 1.0, 0], [0] * 6], atol=1e-6)
  monte_carlo, _ = losses.gae(values, jnp.asarray([1.0, 1.0]), mask, gamma=1.0, lam=1.0)
  np.testing.assert_allclose(monte_carlo[0, [1, 2, 4]], [0.8, 0.5, 0.3], atol=1e-6)  # R - V.
  value_loss = losses.clipped_value_loss(jnp.asarray([[1.0, 0.0]]), jnp.asarray([[0.0, 0.0]]),
                                         jnp.asarray([[0.5, 1.0]]), jnp.asarray([[1, 1]]),
                                         clip=0.2)
  # Token 0: max((1 - .5)^2, (.2 - .5)^2) = .25; token 1: 1. Half their mean.
  np.testing.assert_allclose(value_loss, 0.5 * (0.25 + 1.0) / 2, rtol=1e-6)


def test_kl_is_zero_and_the_ratio_one_at_initialization():
  config = toy.config()
  algorithm = registry.make_algorithm(config)
  assert (algorithm.advantage, algorithm.eps_low, algorithm.eps_high, algorithm.kl_coef) == (
      "group_normalized", 0.2, 0.28, 0.005)
  model = PolicyWithReference(toy.make_model(config))
  assert nnx.state(model.reference, nnx.Param) == nnx.State({})  # Frozen: no Params.
  assert jax.tree.leaves(nnx.state(model.reference, Reference))
  played = rollouts.collect(toy.ToyEnv(one_shot=False), "bot", toy.bot(model.policy),
                            {"user": toy.Talker()}, toy.ToyEnv().sample(1, 2), group_size=4,
                            max_turns=4, seed=0, seq_len=64)
  batch = dict(played.arrays, advantage=algorithm.advantages(played.rewards_NxG).reshape(-1))
  batch["ref_logp"] = algorithms.reference_logprobs(model, batch)
  loss, metrics = jax.jit(algorithm.loss)(model, batch, jax.random.key(0))
  assert float(metrics["kl"]) == 0.0
  np.testing.assert_allclose(metrics["ratio"], 1.0, atol=1e-5)
  assert float(metrics["clip_fraction"]) == 0.0 and float(metrics["sampled_tokens"]) > 8
  np.testing.assert_allclose(metrics["reward"], played.rewards_NxG.mean(), rtol=1e-6)
  assert np.isfinite(float(loss))
  # `informative_rows`: the share of rows in a group whose rewards differ.
  informative = (np.abs(batch["advantage"]) > 0).mean()
  np.testing.assert_allclose(metrics["informative_rows"], informative, rtol=1e-6)
  tied = dict(batch, advantage=np.zeros_like(batch["advantage"]))
  assert float(jax.jit(algorithm.loss)(model, tied, jax.random.key(0))[1]["informative_rows"]) == 0
  half = dict(batch, advantage=np.repeat(np.array([0.0, 1.0], np.float32),
                                         len(batch["advantage"]) // 2))
  assert float(jax.jit(algorithm.loss)(model, half, jax.random.key(0))[1]["informative_rows"]) == 0.5


def test_rloo_ppo_and_unknown_fields_through_the_registry():
  config = toy.config()
  config.algorithm.name = "rloo"
  assert registry.make_algorithm(config).advantage == "leave_one_out"
  config.algorithm.update(name="ppo", lam=0.9)
  ppo = registry.make_algorithm(config)
  assert isinstance(ppo, algorithms.PPO) and (ppo.lam, ppo.gamma, ppo.eps_high) == (0.9, 1.0, 0.28)
  config.algorithm.kl_coeff = 0.1
  with pytest.raises(ValueError, match="kl_coeff"):
    registry.make_algorithm(config)
