"""Co-Training learns on the simulator's side: the simulator's own reward rises.

A persuadee-like toy: the co-trained simulator (the user) speaks first, one word, and decides
the outcome, as a persuadee decides what it gives; the policy (the bot) earns 1 unless the
user refuses ("no"). With the zero-sum simulator reward (cotraining/sim_rewards.py, the one
P4G co-training uses) the simulator earns 1 - that, i.e. 1 exactly when it refuses, so its
reward can only rise through its own update: with the simulator's update off, the played
simulator stays its start and its reward stays where it began.
"""

import numpy as np

import cotraining_toy as toy
from cotraining import experience
from ilql_dialogue import environment, registry, train_loop
from ilql_dialogue.lm_party import LMParty

REFUSAL = "no"
EVAL_SEED, EVAL_BATCHES = 7, 2  # Fixed scenarios and sampling seeds; batches of the rollout size.


class RefusableEnv(toy.ToyEnv):
  """The user's first word decides: the bot earns 1 unless it is a refusal."""

  def reward(self, episode):
    user = [t.text.strip() for t in episode.turns if t.speaker == "user"]
    return float(not user or user[0] != REFUSAL)


def one_word_user(decoder):
  """The simulator: one of toy.WORDS per turn, sampled as in training."""
  allowed = set(toy.word_ids())
  return LMParty(decoder, toy.tokenizer(), "user", max_new_tokens=1, temperature=1.0,
                 include_context=False,
                 forbidden_ids=[i for i in range(decoder.cfg.vocab_size) if i not in allowed])


def one_word_bot(decoder):
  return toy.bot(decoder, max_new_tokens=1, only_words=True)


def simulator_reward(algorithm, env, policy, simulator, rows):
  """The simulator's own reward (what co-training optimizes for it), averaged over a fixed
  eval batch: the same scenarios and sampling seeds for every pair of models."""
  rewards = []
  for batch in range(EVAL_BATCHES):
    scenarios = env.sample(EVAL_SEED + batch, rows)
    episodes = environment.play(env, {"user": one_word_user(simulator),
                                      "bot": one_word_bot(policy)},
                                scenarios, max_turns=2, seed=EVAL_SEED)
    policy_rewards = np.asarray([[env.reward(e) for e in episodes]], np.float32)
    rewards.append(algorithm.simulator_rewards(policy_rewards))
  return float(np.mean(rewards))


def test_the_cotrained_simulators_own_reward_rises(tmp_path):
  config = toy.config(scenarios=4, group_size=8, epochs=1)  # 32 rows: one update per rollout.
  config.rl.cotrain = dict(enabled=True, simulator_reward="zero_sum", kl_coef=0.005)
  config.train.update(steps=10, batch_size=32, checkpoint_every=10)
  rows = config.rl.scenarios * config.rl.group_size
  algorithm = registry.make_algorithm(config)
  env = RefusableEnv()
  data = experience.RolloutSource(config, env, algorithm, "bot", make_learner=one_word_bot,
                                  others={}, make_simulator=one_word_user)
  pair = train_loop.train_and_evaluate(config, str(tmp_path), algorithm, data).model
  # The references are the start: the same pair, before any update.
  before = simulator_reward(algorithm, env, pair.reference, pair.simulator_reference, rows)
  after = simulator_reward(algorithm, env, pair.policy, pair.simulator, rows)
  assert before < 0.5, before  # A random start refuses about one time in four.
  assert after > before + 0.35 and after > 0.75, (before, after)
