"""Simulator sharpness measured end to end: a simulator sampled at temperature T against its own
model at temperature 1 has gamma = 1/T, and against itself gamma = 1."""

import numpy as np
import pytest

import cotraining_toy as toy
from cotraining import sharpness
from data_pipelines.dialogue import Turn

STATES = [[Turn("user", line)] for line in toy.LINES[:3]] + [
    [Turn("user", "hi there"), Turn("bot", "yes"), Turn("user", "maybe not")]]  # Its own turn too.


@pytest.fixture(scope="module")
def model():
  return toy.make_model(toy.config(), std=0.4)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_one_token_replies_give_exactly_one_over_temperature(model, temperature):
  party = toy.bot(model, max_new_tokens=1, temperature=temperature, only_words=True)
  result = sharpness.simulator_gamma(party, model, [{}] * len(STATES), STATES, k=12, seed=3)
  assert result["gamma"] == pytest.approx(1 / temperature, rel=1e-3)
  assert result["states"] == 4 and result["k"] == 12


def test_whole_replies_at_temperature_one_give_one(model):
  party = toy.bot(model, max_new_tokens=4, temperature=1.0)
  token_ids, sampled, sim_logp = sharpness.sample_replies(party, [{}] * 4, STATES, k=6, seed=0)
  assert len(token_ids) == 24 and all(any(m) for m in sampled)
  ref_logp = sharpness.reference_logprobs(model, token_ids, sampled, party.forbidden_ids,
                                          party.tokenizer.pad_id, batch_rows=16)
  np.testing.assert_allclose(ref_logp, sim_logp, atol=1e-4)  # Teacher forcing = the sampler.
  result = sharpness.simulator_gamma(party, model, [{}] * 4, STATES, k=6, seed=0)
  assert result["gamma"] == pytest.approx(1.0, abs=1e-3)


def test_states_from_transcripts(tmp_path):
  path = tmp_path / "t.jsonl"
  path.write_text('{"scenario_id": "s0", "turns": [{"speaker": "user", "text": "a"}, '
                  '{"speaker": "bot", "text": "b"}, {"speaker": "user", "text": "c"}, '
                  '{"speaker": "bot", "text": "d"}]}\n')
  contexts, histories = sharpness.states_from_transcripts(
      str(path), "bot", {"s0": "S0"}, toy.ToyEnv(), max_states=5)
  assert [[t.text for t in h] for h in histories] == [["a"], ["a", "b", "c"]]
  assert contexts == [{}, {}]
  # evaluate_environment's format: "key" and [speaker, text] pairs; the same states.
  path.write_text('{"key": "s0", "turns": [["user", "a"], ["bot", "b"], ["user", "c"], '
                  '["bot", "d"]]}\n')
  _, same = sharpness.states_from_transcripts(str(path), "bot", {"s0": "S0"}, toy.ToyEnv(), 5)
  assert same == histories


def test_a_loaded_history_continues_as_the_played_one(model):
  """LMParty.load_histories: a fresh party given a dialogue (its own turns included) holds the
  same tokens as the party that played it, and says the same next (greedy) reply."""
  played = toy.bot(model, max_new_tokens=1, temperature=0.0, only_words=True)  # Words round-trip.
  played.reset([{}], [7])
  first = played.respond([[Turn("user", "hi there")]])[0]
  history = [Turn("user", "hi there"), Turn("bot", first), Turn("user", "maybe not")]
  second = played.respond([history])[0]

  fresh = toy.bot(model, max_new_tokens=1, temperature=0.0, only_words=True)
  fresh.reset([{}], [7])
  fresh.load_histories([history])
  assert fresh.respond([history])[0] == second
  assert fresh.token_ids == played.token_ids
  assert not any(fresh.sampled[0][:-len(fresh.generated_ids[0][-1])])  # Loaded = read.
