"""The k-sample picker: k candidate replies per turn from one model, one picked per row.

This is not Verbalized Sampling: nothing is verbalized. Small models cannot
state probabilities for their replies, so the party draws k replies from its
own model and one is picked: `uniform` (in distribution, one ordinary sample
at the same temperature), `weighted` by each candidate's sequence probability
under the model (the sum of its sampled tokens' behaviour log-probs, as
LMParty records them), or `tail` (those probabilities capped at t, then
renormalized: the head is flattened, the tail kept). Verbalized Sampling
proper, an LLM asked to state k candidates with probabilities, is
cotraining/vs_llm.py.

The k candidates are k replicas of each row inside ONE LMParty of B*k rows,
so a turn is a single batched generate call. After the pick, the picked
replica's cache and records are copied onto its siblings: all k continue the
dialogue that was actually played (the history LMParty checks), each with its
own sampling key. Every random choice comes from the row's seed alone, so a
dialogue replays in any batch, and `load_histories` resumes one at any turn
(ilql_dialogue/party.resume).

Spec: `pick:[k=K,pick=RULE,t=T:]PATH`, PATH a checkpoint workdir, e.g.
`pick:k=5,pick=uniform:/runs/customer`.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from data_pipelines.dialogue import Turn
from ilql_dialogue.lm_party import LMParty, take_rows
from ilql_dialogue.parties import make_party
from ilql_dialogue.party_spec import PartySpec

PICKS = ("uniform", "weighted", "tail")
DEFAULT_K = 5
DEFAULT_TAIL = 0.1  # The Verbalized Sampling paper's tail threshold.
_CANDIDATE_STREAM, _PICK_STREAM = 0, 1  # SeedSequence spawn keys under a row's seed.
OPTIONS = {"k": int, "pick": str, "t": float}


def pick_probabilities(rule: str, seq_logprobs_K: Sequence[float],
                       t: float = DEFAULT_TAIL) -> np.ndarray:
  """The distribution one row's pick is drawn from, given its k candidates' sequence log-probs."""
  k = len(seq_logprobs_K)
  if rule == "uniform":
    return np.full(k, 1.0 / k)
  z = np.asarray(seq_logprobs_K, np.float64)
  p = np.exp(z - z.max())  # Shifted: whole replies' probabilities underflow float64.
  p /= p.sum()
  if rule == "weighted":
    return p
  if rule == "tail":
    return tail(p, t)
  raise ValueError(f"k-sample pick {rule!r}: expected one of {PICKS}")


def tail(p_K: np.ndarray, t: float) -> np.ndarray:
  """Each probability capped at t, then renormalized."""
  capped = np.minimum(np.asarray(p_K, np.float64), t)
  return capped / capped.sum()


def candidate_seed(seed: int, j: int) -> int:
  """Replica j's seed: from the row's seed alone, different for every j."""
  ss = np.random.SeedSequence(int(seed), spawn_key=(_CANDIDATE_STREAM, j))
  return int(ss.generate_state(1, np.uint64)[0])


def pick_rng(seed: int) -> np.random.Generator:
  """The row's generator for its picks, apart from its candidates' sampling keys."""
  return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(_PICK_STREAM,)))


# LMParty's per-row records besides its cache and keys (LMParty.reset).
_ROW_FIELDS = ("generated_ids", "token_ids", "sampled", "logprobs",
               "_seen", "_last", "_open", "_ended")


class KSamplePicker:
  """A learned party that answers each turn with one of k candidates it drew (module docstring).

  `candidates[b]` and `picked[b]` are row b's k candidates at its last turn
  and the index picked (None where the row gave no reply), for auditing.
  """

  def __init__(self, party: LMParty, k: int = DEFAULT_K, pick: str = "uniform",
               t: float = DEFAULT_TAIL):
    if not isinstance(party, LMParty):
      raise ValueError(f"the k-sample picker draws its candidates from a learned party (LMParty), "
                       f"got {type(party).__name__}")
    if k < 1:
      raise ValueError(f"k-sample picker: k={k} must be >= 1")
    if pick not in PICKS:
      raise ValueError(f"k-sample pick {pick!r}: expected one of {PICKS}")
    if not 0.0 < t <= 1.0:
      raise ValueError(f"k-sample picker: tail threshold t={t} must be in (0, 1]")
    self.party, self.k, self.pick, self.t = party, k, pick, t
    self.role = party.role
    self._rngs: list[np.random.Generator] = []

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    if len(contexts) != len(seeds):
      raise ValueError(f"KSamplePicker.reset: {len(contexts)} contexts and {len(seeds)} seeds")
    k = self.k
    self.party.reset([c for c in contexts for _ in range(k)],
                     [candidate_seed(s, j) for s in seeds for j in range(k)])
    self._rngs = [pick_rng(s) for s in seeds]
    self.candidates: list[list[str | None]] = [[None] * k for _ in seeds]
    self.picked: list[int | None] = [None] * len(seeds)

  def load_histories(self, histories: Sequence[Sequence[Turn]]) -> None:
    """After `reset`: every row's k replicas take in its history as if they had played it
    (LMParty.load_histories), and its pick generator skips the one pick each of its own
    turns drew, so the next `respond` picks as lockstep play would there."""
    batch, k = len(self._rngs), self.k
    if len(histories) != batch:
      raise ValueError(f"KSamplePicker.load_histories: {len(histories)} histories for "
                       f"{batch} rows (reset)")
    self.party.load_histories([h for h in histories for _ in range(k)])
    for rng, history in zip(self._rngs, histories):
      for _ in range(sum(turn.speaker == self.role for turn in history)):
        rng.choice(k, p=np.full(k, 1.0 / k))  # One uniform draw, whatever the rule's p.

  def _seq_logprob(self, r: int) -> float:
    """Replica r's reply this turn: the sum of its sampled tokens' log-probs."""
    n = len(self.party.generated_ids[r][-1])
    return float(np.sum(self.party.logprobs[r][len(self.party.logprobs[r]) - n:]))

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    batch, k = len(self._rngs), self.k
    if len(histories) != batch:
      raise ValueError(f"KSamplePicker.respond: {len(histories)} histories for {batch} rows (reset)")
    replies_BK = self.party.respond([h for h in histories for _ in range(k)])
    src = np.arange(batch * k)
    replies: list[str | None] = [None] * batch
    for b in range(batch):
      cands = replies_BK[b * k:(b + 1) * k]
      self.candidates[b], self.picked[b] = cands, None
      if None in cands:  # Siblings share history and cache, so they end together.
        continue
      logps = (np.zeros(k) if self.pick == "uniform"
               else [self._seq_logprob(b * k + j) for j in range(k)])
      j = int(self._rngs[b].choice(k, p=pick_probabilities(self.pick, logps, self.t)))
      src[b * k:(b + 1) * k] = b * k + j
      self.picked[b], replies[b] = j, cands[j]
    if (src != np.arange(batch * k)).any():
      self._sync(src)
    return replies

  def _sync(self, src: np.ndarray) -> None:
    """Every replica takes over its row's picked replica: cache, positions and records."""
    party = self.party
    party._state = take_rows(party._state, jnp.asarray(src, jnp.int32))
    for name in _ROW_FIELDS:
      rows = getattr(party, name)
      setattr(party, name, [copy.deepcopy(rows[s]) for s in src])


def from_spec(spec: PartySpec, role: str, **lm_options: Any) -> KSamplePicker:
  """The picker a `pick:` spec names; `lm_options` go to the inner checkpoint's LMParty."""
  party = make_party(spec.inner, role, **lm_options)
  if not isinstance(party, LMParty):
    raise ValueError(f"party spec {spec}: the k-sample picker needs a checkpoint workdir, "
                     f"{spec.inner} is a {type(party).__name__}")
  return KSamplePicker(party, **spec.options)
