"""Collapse diagnostics for a policy and its simulators (docs/METHODS.md, Online RL and Co-Training), as pure functions.

Text diversity (distinct-n, Self-BLEU, pairwise ROUGE-L) lives in
ilql_dialogue/text_metrics.py; these are the other measurements:

  token_entropy        the policy's mean entropy per sampled token (nats): collapse
                       shows as entropy falling while training reward rises.
  label_entropy        entropy (nats) of discrete labels, e.g. the P4G strategies a
                       classifier gives the policy's sentences: a collapsed persuader
                       uses few.
  donation_distances   KS statistic and histogram L1 of a persuadee simulator's
                       donations against the humans'.
  fit_gamma, fit_gamma_from_logprobs
                       simulator sharpness: gamma in p_sim ∝ p_ref^gamma, from sample
                       counts per state or from the simulator's own log-probs.
                       gamma > 1 is a sharpened simulator; the policy gradient against
                       it tends to that of a user who always gives the modal reply.
  behaviour_clusters, cluster_coverage
                       the share of a panel's behaviour clusters (k-means of utterance
                       embeddings) one simulator reaches: a collapsed one covers few.

A measurement with nothing to measure is NaN, as in text_metrics.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize, special, stats
from scipy.cluster import vq

MAX_DONATION = 2.0  # Dollars: the Persuasion for Good task payment.
DONATION_BIN_EDGES = np.linspace(0.0, MAX_DONATION, 9)  # $0.25 bins; $2 is in the last.
MAX_GAMMA = 100.0


def token_entropy(logits_BxTxV: jax.Array, mask_BxT: jax.Array) -> jax.Array:
  """Mean entropy (nats) of softmax(logits) over the positions the mask marks; NaN if none.

  Pass the logits the tokens were sampled from (after temperature and
  forbidden ids): that is the distribution whose collapse matters.
  """
  logp_BxTxV = jax.nn.log_softmax(logits_BxTxV.astype(jnp.float32), axis=-1)
  # 0 * log 0 is 0: a forbidden id (-inf) adds nothing.
  plogp_BxTxV = jnp.where(jnp.isneginf(logp_BxTxV), 0.0, jnp.exp(logp_BxTxV) * logp_BxTxV)
  entropy_BxT = -plogp_BxTxV.sum(axis=-1)
  mask_BxT = mask_BxT.astype(jnp.float32)
  count = mask_BxT.sum()
  return jnp.where(count > 0, (entropy_BxT * mask_BxT).sum() / jnp.maximum(count, 1.0), jnp.nan)


def label_entropy(labels: Sequence[Any]) -> float:
  """Entropy (nats) of the labels' empirical distribution; NaN with no labels."""
  if len(labels) == 0:
    return float("nan")
  _, counts = np.unique(np.asarray(labels), return_counts=True)
  return float(stats.entropy(counts))


def donation_distances(donations: Sequence[float], human_donations: Sequence[float],
                       bin_edges: np.ndarray = DONATION_BIN_EDGES) -> dict[str, float]:
  """{'ks', 'l1'} between simulated and human donations, both clipped to [0, 2] dollars.

  ks in [0, 1] (scipy.stats.ks_2samp's statistic); l1 in [0, 2], the sum of
  |p - q| over the histograms' bins. NaN when either side is empty.
  """
  a = np.clip(np.asarray(donations, np.float64), 0.0, MAX_DONATION)
  b = np.clip(np.asarray(human_donations, np.float64), 0.0, MAX_DONATION)
  if a.size == 0 or b.size == 0:
    return {"ks": float("nan"), "l1": float("nan")}
  p = np.histogram(a, bin_edges)[0] / a.size
  q = np.histogram(b, bin_edges)[0] / b.size
  return {"ks": float(stats.ks_2samp(a, b).statistic), "l1": float(np.abs(p - q).sum())}


def _states(arrays_per_state: Sequence[Sequence[float]], name: str) -> list[np.ndarray]:
  states = [np.asarray(x, np.float64) for x in arrays_per_state]
  if any(x.ndim != 1 for x in states):
    raise ValueError(f"{name}: one 1-D array per state")
  return states


def fit_gamma(ref_logprobs_per_state: Sequence[Sequence[float]],
              sim_counts_per_state: Sequence[Sequence[float]]) -> float:
  """gamma of p_sim ∝ p_ref^gamma by maximum likelihood; NaN with no samples.

  At each state, the candidates are discrete replies (or behaviour clusters):
  `ref_logprobs_per_state[s][i]` is log p_ref of candidate i (finite), and
  `sim_counts_per_state[s][i]` how often the simulator, sampled many times
  at that state, produced it (zeros included). The model restricted to the
  candidates is p_sim(i) = softmax(gamma * log p_ref)_i, whose log-likelihood
  is concave in gamma; it is maximized on [0, MAX_GAMMA].
  """
  refs = _states(ref_logprobs_per_state, "fit_gamma")
  counts = _states(sim_counts_per_state, "fit_gamma")
  if len(refs) != len(counts) or any(r.shape != c.shape for r, c in zip(refs, counts)):
    raise ValueError("fit_gamma: one log-prob per candidate and one count per candidate")
  if any(not np.isfinite(r).all() for r in refs):
    raise ValueError("fit_gamma: reference log-probs must be finite (drop p_ref = 0 candidates)")
  if sum(c.sum() for c in counts) == 0:
    return float("nan")

  def negative_log_likelihood(gamma: float) -> float:
    return -sum(float(c @ (gamma * r)) - c.sum() * special.logsumexp(gamma * r)
                for r, c in zip(refs, counts))

  result = optimize.minimize_scalar(negative_log_likelihood, bounds=(0.0, MAX_GAMMA),
                                    method="bounded", options={"xatol": 1e-6})
  return float(result.x)


def fit_gamma_from_logprobs(sim_logprobs_per_state: Sequence[Sequence[float]],
                            ref_logprobs_per_state: Sequence[Sequence[float]]) -> float:
  """gamma from the simulator's and the reference's log-probs of the simulator's samples.

  log p_sim(y) = gamma log p_ref(y) - log Z_s at every state s: least squares
  with one intercept per state (each state's means removed). NaN when the
  reference log-probs do not vary within any state.
  """
  sims = _states(sim_logprobs_per_state, "fit_gamma_from_logprobs")
  refs = _states(ref_logprobs_per_state, "fit_gamma_from_logprobs")
  if len(sims) != len(refs) or any(s.shape != r.shape for s, r in zip(sims, refs)):
    raise ValueError("fit_gamma_from_logprobs: the two log-probs of every sample, per state")
  covariance = sum(float((r - r.mean()) @ (s - s.mean())) for s, r in zip(sims, refs) if r.size)
  variance = sum(float(np.square(r - r.mean()).sum()) for r in refs if r.size)
  return covariance / variance if variance > 0 else float("nan")


def behaviour_clusters(embeddings_NxD: np.ndarray, num_clusters: int, seed: int = 0
                       ) -> np.ndarray:
  """[N] k-means cluster labels (k-means++ start, scipy) of utterance embeddings."""
  embeddings_NxD = np.asarray(embeddings_NxD, np.float64)
  if not 1 <= num_clusters <= len(embeddings_NxD):
    raise ValueError(f"behaviour_clusters: {num_clusters} clusters of "
                     f"{len(embeddings_NxD)} utterances")
  _, labels_N = vq.kmeans2(embeddings_NxD, num_clusters, minit="++", seed=seed)
  return labels_N


def cluster_coverage(labels_per_simulator: Mapping[str, Sequence[int]], min_count: int = 1
                     ) -> dict[str, float]:
  """Per simulator, the share of the panel's clusters holding >= min_count of its utterances.

  The panel's clusters are those any of its simulators' utterances fall in;
  NaN for all when there are none.
  """
  panel = set().union(*map(set, labels_per_simulator.values()))
  coverage = {}
  for name, labels in labels_per_simulator.items():
    values, counts = np.unique(np.asarray(labels, np.int64), return_counts=True)
    reached = len(values[counts >= min_count])
    coverage[name] = reached / len(panel) if panel else float("nan")
  return coverage
