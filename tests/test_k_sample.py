"""The k-sample picker: the pick rules, replay, k batched draws, dialogues."""

import jax
import numpy as np
import pytest
from scipy import stats

import cotraining_toy as toy
from cotraining import logprobs, rollouts
from cotraining import k_sample as vs
from ilql_dialogue import party_spec
from ilql_dialogue import environment
from ilql_dialogue.parties import make_party
from ilql_dialogue.generation import sampler

P = np.array([0.5, 0.3, 0.15, 0.05])


def picks(rule, logps, n=20000, seed=0, t=vs.DEFAULT_TAIL):
  rng = vs.pick_rng(seed)
  p = vs.pick_probabilities(rule, logps, t)
  return np.bincount([rng.choice(len(p), p=p) for _ in range(n)], minlength=len(p)), p


@pytest.mark.parametrize("rule, t, expected", [
    ("uniform", 0.1, np.full(4, 0.25)),
    ("weighted", 0.1, P),
    ("tail", 0.2, np.array([0.2, 0.2, 0.15, 0.05]) / 0.6),
])
def test_pick_frequencies_follow_the_rule(rule, t, expected):
  # Sequence log-probs of whole replies are far below 0; only their differences matter.
  counts, p = picks(rule, np.log(P) - 300.0, t=t)
  np.testing.assert_allclose(p, expected, rtol=1e-12)
  assert stats.chisquare(counts, counts.sum() * expected).pvalue > 1e-3


def test_tail_caps_then_renormalizes():
  np.testing.assert_allclose(vs.tail(P, 0.1), [0.1, 0.1, 0.1, 0.05] / np.float64(0.35))
  np.testing.assert_allclose(vs.tail(P, 1.0), P)  # No probability above 1: unchanged.
  np.testing.assert_allclose(vs.tail(np.full(5, 0.2), 0.1), np.full(5, 0.2))


def test_picks_and_candidate_seeds_replay_from_the_row_seed():
  assert (picks("uniform", np.zeros(5), n=50, seed=7)[0]
          == picks("uniform", np.zeros(5), n=50, seed=7)[0]).all()
  seeds = [vs.candidate_seed(7, j) for j in range(5)]
  assert seeds == [vs.candidate_seed(7, j) for j in range(5)] and len(set(seeds)) == 5
  assert vs.candidate_seed(8, 0) not in seeds


def test_bad_options_and_specs_say_what_is_wrong():
  party = toy.bot(toy.make_model(toy.config()))
  with pytest.raises(ValueError, match="pick 'modal'"):
    vs.KSamplePicker(party, pick="modal")
  with pytest.raises(ValueError, match="t=0.0"):
    vs.KSamplePicker(party, pick="tail", t=0.0)
  with pytest.raises(ValueError, match="LMParty"):
    vs.KSamplePicker(toy.Talker())
  spec = party_spec.parse("pick:k=3,pick=tail,t=0.2:/runs/c@20")
  assert (spec.kind, dict(spec.options), spec.inner.kind, spec.inner.target, spec.inner.step) == (
      "pick", {"k": 3, "pick": "tail", "t": 0.2}, "checkpoint", "/runs/c", 20)
  assert spec.checkpoint is spec.inner
  spec = party_spec.parse("pick:/runs/c")
  assert (dict(spec.options), spec.inner.target) == ({}, "/runs/c")
  with pytest.raises(ValueError, match="unknown pick option 'n'"):
    party_spec.parse("pick:n=3:/runs/c")
  with pytest.raises(ValueError, match="no such directory"):  # Inner spec is checked.
    make_party("pick:k=3:/no/such/dir", "customer")
  with pytest.raises(ValueError, match="needs a checkpoint workdir"):
    make_party("pick:k=3:scripted:terse", "customer")


def play(party, scenarios, seed=1):
  return environment.play(toy.ToyEnv(one_shot=False), {"user": toy.Talker(), "bot": party},
                          scenarios, max_turns=6, seed=seed)


@pytest.fixture(scope="module")
def decoder():
  return toy.make_model(toy.config(), seed=2)


def test_k_candidates_are_one_batched_draw_of_k_times_the_rows(decoder, monkeypatch):
  batches = []
  generate = sampler.generate

  def counted(decoder, state, *args, **kwargs):
    batches.append(state.lengths_B.shape[0])
    return generate(decoder, state, *args, **kwargs)

  monkeypatch.setattr(sampler, "generate", counted)
  party = vs.KSamplePicker(toy.bot(decoder, max_new_tokens=6), k=5)
  episodes = play(party, toy.ToyEnv().sample(3, 4))
  assert batches == [4 * 5] * 3  # One generate call per bot turn, all candidates in it.
  for b, episode in enumerate(episodes):
    assert len(set(party.candidates[b])) > 1  # The k draws differ.
    assert episode.turns[-1].text == party.candidates[b][party.picked[b]]


@pytest.mark.parametrize("pick", vs.PICKS)
def test_vs_dialogues_replay_and_keep_the_played_history(decoder, pick):
  scenarios = toy.ToyEnv().sample(5, 3)
  party = vs.KSamplePicker(toy.bot(decoder, temperature=0.7), k=4, pick=pick, t=0.2)
  together = play(party, scenarios)
  assert [len(e.turns) for e in together] == [6] * 3
  # Every replica now holds its row's played dialogue; re-scoring it reproduces the
  # recorded log-probs, so the picked replica's cache really was carried over each turn.
  inner = party.party
  for b in range(3):
    assert all(inner.token_ids[b * 4 + j] == inner.token_ids[b * 4] for j in range(4))
    replies = [t.text for t in together[b].turns if t.speaker == "bot"]
    eot = inner.tokenizer.eot_id
    assert [inner.tokenizer.decode(ids[:-1] if ids[-1] == eot else ids).strip()
            for ids in inner.generated_ids[b * 4]] == replies
  arrays = rollouts.learner_arrays(inner, 64)
  logp_BxT1, _ = jax.jit(logprobs.token_logprobs)(decoder, arrays)
  mask = arrays["action_mask"][:, 1:]
  np.testing.assert_allclose(np.asarray(logp_BxT1)[mask], arrays["behaviour_logp"][:, 1:][mask],
                             atol=1e-5)
  alone = play(vs.KSamplePicker(toy.bot(decoder, temperature=0.7), k=4, pick=pick, t=0.2),
               scenarios[1:])
  assert [e.turns for e in together[1:]] == [e.turns for e in alone]
