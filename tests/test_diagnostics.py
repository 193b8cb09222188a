"""Collapse diagnostics on hand-checked inputs, and the gamma fit on known sharpening."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from cotraining import diagnostics


def test_token_entropy_of_uniform_and_one_hot_rows_under_the_mask():
  logits = np.zeros((2, 3, 4), np.float32)  # Uniform over 4: entropy log 4.
  logits[1, :, 0] = 1e4  # One-hot: entropy 0.
  mask = np.array([[1, 1, 0], [1, 0, 0]])
  entropy = float(diagnostics.token_entropy(jnp.asarray(logits), jnp.asarray(mask)))
  assert entropy == pytest.approx(2 * math.log(4) / 3, rel=1e-6)
  logits[0, :, 3] = -np.inf  # A forbidden id: uniform over the other 3.
  entropy = float(diagnostics.token_entropy(jnp.asarray(logits), jnp.asarray(mask[:1])))
  assert entropy == pytest.approx(math.log(3), rel=1e-6)
  assert math.isnan(float(diagnostics.token_entropy(jnp.asarray(logits), jnp.zeros((2, 3)))))


def test_label_entropy_on_hand_checked_labels():
  assert diagnostics.label_entropy(["logical-appeal"] * 5) == 0.0
  assert diagnostics.label_entropy(["a", "b", "c", "d"] * 3) == pytest.approx(math.log(4))
  assert diagnostics.label_entropy([0, 0, 0, 1]) == pytest.approx(
      -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
  assert math.isnan(diagnostics.label_entropy([]))


def test_donation_distances_on_hand_checked_samples():
  same = diagnostics.donation_distances([0, 0.5, 2], [2, 0.5, 0])
  assert same == {"ks": 0.0, "l1": 0.0}
  apart = diagnostics.donation_distances([0, 0], [2, 2])
  assert apart == {"ks": 1.0, "l1": 2.0}
  # Sim: half $0, half $1. Humans: all $0. CDFs differ by 1/2 on [0, 1); bins: |.5-1| + |.5-0|.
  half = diagnostics.donation_distances([0, 1, 0, 1], [0, 0, 0])
  assert half == {"ks": 0.5, "l1": 1.0}
  clipped = diagnostics.donation_distances([5.0, -1.0], [2.0, 0.0])  # Out of range: clipped.
  assert clipped == {"ks": 0.0, "l1": 0.0}
  assert all(math.isnan(v) for v in diagnostics.donation_distances([], [1.0]).values())


@pytest.mark.parametrize("gamma", [1.0, 2.5, 0.5])
def test_fit_gamma_recovers_a_known_sharpening(gamma):
  rng = np.random.default_rng(0)
  refs, counts = [], []
  for _ in range(200):  # States.
    p_ref = rng.dirichlet(np.ones(12))
    p_sim = p_ref ** gamma / (p_ref ** gamma).sum()
    refs.append(np.log(p_ref))
    counts.append(rng.multinomial(256, p_sim))  # 256 simulator samples per state.
  assert diagnostics.fit_gamma(refs, counts) == pytest.approx(gamma, rel=0.05)


def test_fit_gamma_from_logprobs_recovers_the_slope_despite_per_state_normalizers():
  rng = np.random.default_rng(1)
  refs = [rng.normal(-20, 5, size=64) for _ in range(10)]
  sims = [1.7 * r - rng.normal(0, 30) + rng.normal(0, 0.5, size=r.size) for r in refs]
  assert diagnostics.fit_gamma_from_logprobs(sims, refs) == pytest.approx(1.7, rel=0.02)
  assert math.isnan(diagnostics.fit_gamma_from_logprobs([[1.0, 2.0]], [[3.0, 3.0]]))


def test_fit_gamma_rejects_mismatched_or_impossible_inputs():
  with pytest.raises(ValueError, match="one count per candidate"):
    diagnostics.fit_gamma([[0.0, -1.0]], [[1, 2, 3]])
  with pytest.raises(ValueError, match="finite"):
    diagnostics.fit_gamma([[0.0, -np.inf]], [[1, 0]])
  assert math.isnan(diagnostics.fit_gamma([[0.0, -1.0]], [[0, 0]]))


def test_cluster_coverage_on_hand_checked_labels():
  coverage = diagnostics.cluster_coverage({"a": [0, 0, 1], "b": [1, 2, 3], "c": [3]})
  assert coverage == {"a": 0.5, "b": 0.75, "c": 0.25}
  assert diagnostics.cluster_coverage({"a": [0, 0, 1], "b": [1, 2, 3]}, min_count=2) == {
      "a": 1 / 4, "b": 0.0}


def test_behaviour_clusters_separate_distinct_behaviours():
  rng = np.random.default_rng(0)
  centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
  points = np.concatenate([c + rng.normal(0, 0.1, size=(20, 2)) for c in centers])
  labels = diagnostics.behaviour_clusters(points, 3, seed=0)
  groups = labels.reshape(3, 20)
  assert all(len(set(g)) == 1 for g in groups) and len({g[0] for g in groups}) == 3
  coverage = diagnostics.cluster_coverage({"collapsed": labels[:20], "panel": labels})
  assert coverage == {"collapsed": 1 / 3, "panel": 1.0}
