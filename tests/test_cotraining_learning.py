"""GRPO and PPO through the one train loop: they learn the rewarded reply; resume is exact."""

import os

import jax
import numpy as np
import pytest
from flax import nnx

import cotraining_toy as toy
from cotraining import experience, logprobs
from cotraining.policy import PolicyWithReference
from ilql_dialogue import init_from, registry, train_loop


def reply_probability(lm, word: str) -> float:
  """Mean over the user's lines of p(bot replies `word` | the line), as the bot samples it."""
  tok = toy.tokenizer()
  rows = [[tok.dialogue_id, tok.speaker_token_ids["user"], *tok.encode(line), tok.eot_id,
           tok.speaker_token_ids["bot"], tok.encode(word)[0]] for line in toy.LINES]
  width = max(map(len, rows))
  allowed = set(toy.word_ids())
  forbidden = [i for i in range(lm.cfg.vocab_size) if i not in allowed]
  batch = {"input_ids": np.asarray([r + [0] * (width - len(r)) for r in rows], np.int32),
           "attention_mask": np.asarray([[1] * len(r) + [0] * (width - len(r)) for r in rows],
                                        bool),
           "forbidden_ids": np.asarray([forbidden] * len(rows), np.int32),
           "temperature": np.ones(len(rows), np.float32)}
  logp_BxT1, _ = logprobs.token_logprobs(lm, batch)
  last = [len(r) - 2 for r in rows]
  return float(np.mean(np.exp(np.asarray(logp_BxT1)[np.arange(len(rows)), last])))


def source(config, algorithm, store_dir=None):
  return experience.RolloutSource(
      config, toy.ToyEnv(target="yes"), algorithm, "bot",
      make_learner=lambda decoder: toy.bot(decoder, max_new_tokens=1, only_words=True),
      others={"user": toy.Talker()}, store_dir=store_dir)


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_the_rewarded_reply_goes_from_rare_to_nearly_certain(name, tmp_path):
  config = toy.config(scenarios=4, group_size=8, epochs=2)
  config.algorithm.name = name
  config.train.steps = 12
  algorithm = registry.make_algorithm(config)
  data = source(config, algorithm)
  trained = train_loop.train_and_evaluate(config, str(tmp_path), algorithm, data)
  start = reply_probability(trained.model.reference, "yes")  # The frozen start policy.
  end = reply_probability(trained.model.policy, "yes")
  assert start < 0.3, start
  assert end > 0.9, end


class Crashing(experience.RolloutSource):
  """Fails when it is asked for the batch of update `crash_at` (1-based)."""

  crash_at = None

  def __call__(self, start):
    for index, batch in enumerate(super().__call__(start), start):
      if index + 1 == self.crash_at:
        raise RuntimeError("simulated crash")
      yield batch


def test_a_run_resumed_inside_a_rollout_batch_equals_an_uninterrupted_run(tmp_path):
  """Three runs of the same programs: the session's compilation cache (conftest.py) compiles
  them once."""
  config = toy.config(scenarios=2, group_size=4, epochs=1)  # 8 rows: 2 steps per rollout.
  config.train.update(steps=4, batch_size=4, checkpoint_every=1)
  algorithm = registry.make_algorithm(config)
  straight = train_loop.train_and_evaluate(config, str(tmp_path / "a"), algorithm,
                                           source(config, algorithm))
  store = str(tmp_path / "b" / "rollouts")
  crashing = source(config, algorithm, store)
  crashing.__class__, crashing.crash_at = Crashing, 4
  with pytest.raises(RuntimeError, match="simulated crash"):
    train_loop.train_and_evaluate(config, str(tmp_path / "b"), algorithm, crashing)
  # The latest checkpoint (step 3) is inside rollout batch 1, sampled at step 2's parameters.
  assert sorted(os.listdir(store)) == ["rollout_0.npz", "rollout_1.npz"]
  resumed = train_loop.train_and_evaluate(config, str(tmp_path / "b"), algorithm,
                                          source(config, algorithm, store))
  pure = lambda state: jax.device_get(nnx.to_pure_dict(nnx.state(state)))
  jax.tree.map(np.testing.assert_array_equal, pure(straight), pure(resumed))
  assert int(pure(resumed)["optimizer"]["step"]) == 4
  # A GRPO workdir is a starting point (model.init_from) like a BC one: its policy, never its
  # reference, goes into every LM of the new model, the new reference included.
  target = PolicyWithReference(toy.make_model(config, seed=5))
  init_from.load_into(target, str(tmp_path / "a"))
  for lm in (target.policy, target.reference):
    jax.tree.map(np.testing.assert_array_equal, pure(lm), pure(straight.model.policy))
