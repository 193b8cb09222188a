"""Population Co-Training in the one loop: the co-trained simulator joins the pool on schedule,
a drawn member plays the user, and a run resumed with a pool equals an uninterrupted one;
a pool of given simulators without co-training; the held-out refusal of selection."""

import json
import os
import types

import jax
import numpy as np
import pytest
from flax import nnx

import cotraining_toy as toy
from cotraining import cotrain, experience, launch, population
from cotraining.policy import PolicyWithReference
from ilql_dialogue import registry, train_loop
from test_cotraining_cotrain import cotrain_config, restore, user
from test_cotraining_learning import Crashing


def pooled_source(config, algorithm, workdir):
  pool = population.Population(os.path.join(workdir, population.DIRECTORY), capacity=1,
                               add_every=2, seed=config.seed, retain=1)
  return experience.RolloutSource(
      config, toy.ToyEnv(target="yes"), algorithm, "bot",
      make_learner=lambda decoder: toy.bot(decoder, max_new_tokens=1, only_words=True),
      others={}, store_dir=os.path.join(workdir, "rollouts"), make_simulator=user,
      population=pool, load_member=lambda path: user(cotrain.load_simulator(path)),
      save_simulator=lambda model, path: cotrain.save_simulator(model.simulator, config,
                                                                "user", path, 0))


def manifest(workdir):
  with open(os.path.join(workdir, population.DIRECTORY, population.MANIFEST)) as f:
    return json.load(f)["steps"]


def test_a_run_resumed_with_a_pool_equals_an_uninterrupted_run(tmp_path):
  config = cotrain_config()  # 2 steps per rollout batch; a member joins every 2 steps.
  config.train.update(steps=4)
  algorithm = registry.make_algorithm(config)
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  straight = train_loop.train_and_evaluate(config, a, algorithm, pooled_source(config, algorithm, a))
  assert manifest(a) == [0, 2]  # Batches 0 and 1 each added the simulator they started with.
  crashing = pooled_source(config, algorithm, b)
  crashing.__class__, crashing.crash_at = Crashing, 4
  with pytest.raises(RuntimeError, match="simulated crash"):
    train_loop.train_and_evaluate(config, b, algorithm, crashing)
  resumed = train_loop.train_and_evaluate(config, b, algorithm, pooled_source(config, algorithm, b))
  pure = lambda state: jax.device_get(nnx.to_pure_dict(nnx.state(state)))
  jax.tree.map(np.testing.assert_array_equal, pure(straight), pure(resumed))
  assert manifest(b) == [0, 2]
  # The pool's member is the simulator as of step 2, the one that played batch 1.
  member = cotrain.load_simulator(population.Population(
      os.path.join(b, population.DIRECTORY), capacity=1).members[0])
  jax.tree.map(np.testing.assert_array_equal, pure(member), pure(restore(b, 2).simulator))


class Named(toy.Talker):
  def __init__(self, name, played):
    self.name, self.played = name, played

  def reset(self, contexts, seeds):
    self.played.append(self.name)
    super().reset(contexts, seeds)


def _fixed_pool_source(config, members, played):
  data = experience.RolloutSource(
      config, toy.ToyEnv(), registry.make_algorithm(config), "bot",
      make_learner=lambda decoder: toy.bot(decoder, max_new_tokens=1, only_words=True),
      others={}, population=population.FixedPool(members, seed=config.seed),
      load_member=lambda spec: Named(spec, played))
  data.bind_model(lambda: PolicyWithReference(toy.make_model(config)))
  return data


def test_a_given_pool_plays_every_member_each_round_and_a_resume_draws_the_same():
  config = toy.config(scenarios=1, group_size=4, epochs=1)
  config.train.batch_size = 4
  played, members = [], ["runs/sim_a", "runs/sim_b", "runs/sim_c"]
  data = _fixed_pool_source(config, members, played)
  for index in range(9):
    data.rollout(index)
  assert played == [members[population.draw(config.seed, i, 3)] for i in range(9)]
  for start in range(0, 9, 3):  # Every member once in each round of three batches.
    assert sorted(played[start:start + 3]) == sorted(members)
  assert played[:3] != played[3:6] or played[3:6] != played[6:9]  # Rounds are reshuffled.
  resumed = []  # A fresh source (a restarted run) from batch 4 draws what the first one did.
  data = _fixed_pool_source(config, members, resumed)
  for index in range(4, 9):
    data.rollout(index)
  assert resumed == played[4:9]


def test_selection_against_a_held_out_simulator_is_refused_at_start_up():
  config = toy.config()
  config.rl.update(env="airdialogue", opponent="scripted:volunteer", panel=dict(
      training=["scripted:volunteer"], held_out=["scripted:terse"]))
  config.online_eval = dict(num_dialogues=8, opponent="scripted:terse/held_out")
  config.selection.metric = "return"
  task = types.SimpleNamespace(role="agent")
  with pytest.raises(ValueError, match="online_eval.opponent.*held out"):
    launch.rollout_source(config, registry.make_algorithm(config), task, "/nonexistent")
  config.selection.metric = ""  # Measured against it, never selected by it: allowed.
  launch.panels.refuse_held_out_selection(config)
  config.selection.metric, config.online_eval.opponent = "return", "scripted:volunteer"
  launch.panels.refuse_held_out_selection(config)
