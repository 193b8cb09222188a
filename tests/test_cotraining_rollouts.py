"""Rollouts for RL: recorded log-probs, kept vs re-prefilled caches, replay, the AirDialogue env."""

import jax
import numpy as np
import pytest

import cotraining_toy as toy
from cotraining import logprobs, reprefill, rollouts
from data_pipelines.airdialogue import schema
from ilql_dialogue import bc, environment
from domains.airdialogue.parties import ScriptedAgent, ScriptedCustomer
from domains.airdialogue import environment as airdialogue_env

GROUP = 2


def model(seed=0):
  return toy.make_model(toy.config(), seed=seed)


def collect(decoder, scenarios, **kwargs):
  learner = toy.bot(decoder, temperature=kwargs.pop("temperature", 0.7))
  return rollouts.collect(toy.ToyEnv(one_shot=False), "bot", learner, {"user": toy.Talker()},
                          scenarios, group_size=GROUP, max_turns=6, seed=3, seq_len=64, **kwargs)


def test_recorded_logprobs_equal_the_trainers_recomputation():
  decoder = model()
  played = collect(decoder, toy.ToyEnv().sample(5, 3))
  arrays = played.arrays
  mask_BxT = arrays["action_mask"]
  assert mask_BxT.sum() >= 3 * GROUP * 3 * 2  # Three bot turns per dialogue, several tokens.
  assert (arrays["num_turns"] == 6).all() and (arrays["num_replies"] == 3).all()
  logp_BxT1, entropy_BxT1 = jax.jit(logprobs.token_logprobs)(decoder, arrays)
  recorded = arrays["behaviour_logp"][:, 1:][mask_BxT[:, 1:]]
  recomputed = np.asarray(logp_BxT1)[mask_BxT[:, 1:]]
  # float32 sums in another order (decode step against full pass): a few ulps of |logp|.
  np.testing.assert_allclose(recomputed, recorded, atol=1e-5, rtol=1e-5)
  assert (recorded < 0).all() and np.isfinite(np.asarray(entropy_BxT1)[mask_BxT[:, 1:]]).all()
  # The chunked path (small logits budget) scores the same.
  chunked, _ = logprobs.token_logprobs(decoder, arrays, max_logits_bytes=64 * 305 * 4 * 3)
  np.testing.assert_allclose(np.asarray(chunked), np.asarray(logp_BxT1), atol=1e-5)


def test_rows_replay_identically_whatever_batch_they_land_in():
  decoder = model()
  scenarios = toy.ToyEnv().sample(6, 3)
  together = collect(decoder, scenarios)
  alone = collect(decoder, scenarios[2:])
  assert [e.turns for e in together.episodes[2 * GROUP:]] == [e.turns for e in alone.episodes]
  np.testing.assert_array_equal(together.arrays["input_ids"][2 * GROUP:],
                                alone.arrays["input_ids"])
  # Copies of one scenario are different dialogues (their own seeds).
  assert together.episodes[0].turns != together.episodes[1].turns


def test_kept_cache_equals_reprefilling_the_history_under_greedy_decoding():
  decoder = model(seed=1)
  env, scenarios = toy.ToyEnv(one_shot=False), toy.ToyEnv().sample(7, 4)
  kept, again = (toy.bot(decoder, temperature=0.0, chunk=8) for _ in range(2))
  results = [environment.play(env, {"user": toy.Talker(), "bot": party}, scenarios,
                              max_turns=10, seed=1)
             for party in (kept, reprefill.RePrefill(again))]
  assert [e.turns for e in results[0]] == [e.turns for e in results[1]]
  assert kept.token_ids == again.token_ids
  assert sum(map(len, kept.token_ids)) > 4 * 30


def test_greedy_or_filtered_sampling_cannot_be_trained_on():
  decoder = model()
  with pytest.raises(ValueError, match="temperature > 0"):
    collect(decoder, toy.ToyEnv().sample(5, 1), temperature=0.0)


def test_airdialogue_environment_rewards_success_or_soft_score():
  scenarios = airdialogue_env.make_scenarios(21, 4, kb_size=3)
  env = airdialogue_env.AirDialogueEnv()
  episodes = environment.play(env, {"agent": ScriptedAgent("oracle"),
                                    "customer": ScriptedCustomer("volunteer")},
                              scenarios, max_turns=40)
  assert [env.reward(e) for e in episodes] == [1.0] * 4
  assert [airdialogue_env.AirDialogueEnv("soft").reward(e) for e in episodes] == [1.0] * 4
  wrong = environment.Episode(episodes[0].scenario, "k", episodes[0].turns, "action", {
      "action": schema.Action(status="no_flight", name="Nobody")})
  assert env.reward(wrong) == 0.0
  assert 0.0 <= airdialogue_env.AirDialogueEnv("soft").reward(wrong) < 1.0
  assert env.reward(environment.Episode(scenarios[0], "k", (), environment.TURN_LIMIT)) == 0.0


@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(top_k=5), dict(top_p=0.9),
                                      dict(min_p=0.1)])
def test_the_learner_must_sample_the_distribution_the_loss_rescores(sampling):
  learner = toy.bot(model(), **{"temperature": 1.0, **sampling})
  with pytest.raises(ValueError, match="online RL samples with temperature > 0"):
    rollouts.check_learner(learner)
  rollouts.check_learner(toy.bot(model()))
