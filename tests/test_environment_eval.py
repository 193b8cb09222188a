"""The online evaluation of a non-AirDialogue environment: the mean reward of fixed held-out
scenarios, the same at every step for the same model."""

import numpy as np

import cotraining_toy as toy
from ilql_dialogue import environment
from workflows import evaluate as evaluate_lib


def test_environment_eval_returns_the_mean_reward_of_fixed_scenarios():
  env = toy.ToyEnv(target="yes")
  model = toy.make_model(toy.config(), std=0.4)
  eval_fn = evaluate_lib.environment_eval_fn(
      env, toy.tokenizer(), "bot", "cotraining_toy:Talker", num_dialogues=6, seed=5,
      batch_size=4, max_turns=2, include_context=False, temperature=0.0, max_new_tokens=2)
  first = eval_fn(model, 0)
  assert eval_fn(model, 10) == first  # Same scenarios, same seeds: steps are comparable.

  scenarios = env.sample(5, 6)
  episodes = []
  for start in (0, 4):
    episodes += environment.play(env, {"user": toy.Talker(), "bot": toy.bot(
        model, max_new_tokens=2, temperature=0.0)}, scenarios[start:start + 4], max_turns=2, seed=5)
  assert first["return"] == np.mean([env.reward(e) for e in episodes])
  assert first["mean_turns"] == np.mean([len(e.turns) for e in episodes])
