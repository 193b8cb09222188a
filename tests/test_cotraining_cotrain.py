"""Co-Training through the one loop: both sides learn from their own rewards, on their own
tokens; references stay; the simulator exports as a workdir of its own."""

import os

import jax
import numpy as np
import pytest
from flax import nnx

import cotraining_toy as toy
from cotraining import cotrain, experience
from ilql_dialogue import metrics, policy_io, registry, train_loop
from ilql_dialogue import restore as restore_lib
from ilql_dialogue.lm_party import LMParty, forbidden_token_ids


def user(decoder):
  tok = toy.tokenizer()
  return LMParty(decoder, tok, "user", max_new_tokens=3, temperature=1.0,
                            include_context=False,
                            forbidden_ids=forbidden_token_ids(tok, "user"))


def cotrain_config(reward="zero_sum"):
  config = toy.config(scenarios=2, group_size=4, epochs=1)  # 8 rows: 2 steps per rollout.
  config.rl.cotrain = dict(enabled=True, simulator_reward=reward, kl_coef=0.005)
  config.train.update(steps=2, batch_size=4, log_every=1, checkpoint_every=1, keep_checkpoints=3)
  return config


def source(config, algorithm, target="yes", **kwargs):
  return experience.RolloutSource(
      config, toy.ToyEnv(target=target), algorithm, "bot",
      make_learner=lambda decoder: toy.bot(decoder, max_new_tokens=1, only_words=True),
      others={}, make_simulator=user, **kwargs)


def pure(module):
  return jax.device_get(nnx.to_pure_dict(nnx.state(module)))


def changed(a, b) -> bool:
  return any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(pure(a)),
                                                      jax.tree.leaves(pure(b))))


def restore(workdir, step):
  return restore_lib.restore_model(workdir, restore_lib.read_config(workdir), step)[0]


def test_the_algorithm_is_the_pair_only_when_cotrain_is_enabled():
  assert isinstance(registry.make_algorithm(cotrain_config()), cotrain.CoTraining)
  off = cotrain_config(); off.rl.cotrain.enabled = False
  assert not isinstance(registry.make_algorithm(off), cotrain.CoTraining)
  assert not isinstance(registry.make_algorithm(toy.config()), cotrain.CoTraining)
  bad = cotrain_config(); bad.rl.cotrain.simulator_reward = "nope"
  with pytest.raises(ValueError, match="simulator_reward"):
    registry.make_algorithm(bad)
  ppo = cotrain_config(); ppo.algorithm.name = "ppo"
  with pytest.raises(ValueError, match="grpo or rloo"):
    registry.make_algorithm(ppo)


def test_both_sides_train_their_references_stay_and_the_simulator_saves_as_a_party(tmp_path):
  config = cotrain_config()
  algorithm = registry.make_algorithm(config)
  workdir = str(tmp_path / "run")
  final = train_loop.train_and_evaluate(config, workdir, algorithm, source(config, algorithm))
  first, last = restore(workdir, 1), final.model
  assert isinstance(last, cotrain.CoTrainedPair)
  assert changed(first.policy, last.policy) and changed(first.simulator, last.simulator)
  assert not changed(first.reference, last.reference)
  assert not changed(first.simulator_reference, last.simulator_reference)
  train = [r for r in metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))
           if r["split"] == "train"]
  # Step 1 trains at the behaviour parameters, which are the references: both KLs are 0.
  assert train[0]["kl"] == 0.0 and train[0]["simulator/kl"] == 0.0
  assert abs(train[0]["simulator/ratio"] - 1.0) < 1e-5 and train[0]["simulator/sampled_tokens"] > 0
  # The simulator half as a workdir of its own: it loads as the user's party.
  toy.tokenizer().save(os.path.join(workdir, "tokenizer"))
  cotrain.save_simulator(last.simulator, config, "user", str(tmp_path / "sim"), 2,
                         os.path.join(workdir, "tokenizer"))
  policy = policy_io.load_policy(str(tmp_path / "sim"), role="user")
  assert not changed(policy.model, last.simulator)
  assert policy_io.lm_party(policy, "user", max_new_tokens=3).role == "user"


def test_the_simulator_reward_reaches_only_the_simulator(tmp_path, monkeypatch):
  # The policy's reward is 0 everywhere (its advantages are 0); the simulator's varies.
  monkeypatch.setitem(cotrain.SIMULATOR_REWARDS, "varying",
                      lambda rewards_NxG, _: np.arange(rewards_NxG.size, dtype=np.float32
                                                       ).reshape(rewards_NxG.shape) % 2)
  config = cotrain_config("varying")
  algorithm = registry.make_algorithm(config)
  workdir = str(tmp_path / "run")
  final = train_loop.train_and_evaluate(config, workdir, algorithm,
                                        source(config, algorithm, target="never")).model
  first = restore(workdir, 1)
  assert not changed(final.policy, final.reference) and not changed(first.policy, final.policy)
  assert changed(final.simulator, final.simulator_reference)


def test_zero_sum_pays_the_simulator_only_for_a_stated_donation():
  algorithm = registry.make_algorithm(cotrain_config("zero_sum"))
  rewards_NxG = np.asarray([[0.0, 0.25, 0.0]], np.float32)  # The persuader's: donation / 2.
  stated_NxG = np.asarray([[True, True, False]])
  np.testing.assert_allclose(algorithm.simulator_rewards(rewards_NxG, stated_NxG),
                             [[1.0, 0.75, 0.0]])


def test_a_per_group_reward_is_baselined_over_the_batch():
  """The curriculum reward is one value per group: over the batch it still ranks the groups."""
  algorithm = registry.make_algorithm(cotrain_config("curriculum"))
  success_NxG = np.asarray([[1, 0, 1, 0], [0, 0, 0, 0]], np.float32)
  rewards_NxG = algorithm.simulator_rewards(success_NxG)
  advantages = algorithm.simulator.advantages(rewards_NxG.reshape(1, -1)).reshape(2, 4)
  assert np.all(advantages[0] > 0) and np.all(advantages[1] < 0)


def test_the_simulator_starts_from_its_own_workdir(tmp_path):
  """model.init_from fills every LM of the pair; simulator_init_from then fills the simulator's."""
  config = cotrain_config()
  config.train.steps = 1
  start = str(tmp_path / "customer")
  customer = toy.make_model(config, seed=7)
  cotrain.save_simulator(customer, config, "user", start, 0)
  algorithm = registry.make_algorithm(config)
  final = train_loop.train_and_evaluate(
      config, str(tmp_path / "run"), algorithm,
      source(config, algorithm, simulator_init_from=start)).model
  jax.tree.map(np.testing.assert_array_equal, pure(final.simulator_reference), pure(customer))
  assert changed(final.simulator, customer)


def test_the_quick_configs_cotrain_and_the_population_variant_pools():
  from experiments.configs import cotrain_airdialogue_quick

  plain, pooled = (cotrain_airdialogue_quick.get_config(v) for v in ("", "population"))
  for config in (plain, pooled):
    assert cotrain.enabled(config.rl) and config.rl.cotrain.simulator_reward == "curriculum"
    assert isinstance(registry.make_algorithm(config), cotrain.CoTraining)
    steps_per_rollout = config.rl.scenarios * config.rl.group_size // config.train.batch_size
    assert config.train.checkpoint_every % steps_per_rollout == 0
  assert not plain.rl.population.enabled
  assert pooled.rl.population.enabled and pooled.rl.population.capacity == 10
  assert pooled.rl.population.add_every == 16
