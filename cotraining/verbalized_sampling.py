"""Verbalized Sampling (VS) for small models: k candidate replies per turn, one picked per row.

Small models cannot state probabilities for their replies (BRIEF §5), so the
simulator draws k replies from its own model and one is picked: `uniform`
(the paper's main setting), `weighted` by each candidate's sequence
probability under the model (the sum of its sampled tokens' behaviour
log-probs, as LMParty records them), or `tail` (those probabilities capped at
t, then renormalized: the head is flattened, the tail kept).

The k candidates are k replicas of each row inside ONE LMParty of B*k rows,
so a turn is a single batched generate call. After the pick, the picked
replica's cache and records are copied onto its siblings: all k continue the
dialogue that was actually played (the history LMParty checks), each with its
own sampling key. Every random choice comes from the row's seed alone, so a
dialogue replays in any batch.

Spec (`simulators.make_party`): `vs:[k=K,pick=RULE,t=T:]PATH`, PATH a
checkpoint workdir, e.g. `vs:k=5,pick=uniform:/runs/customer`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from data_pipelines.dialogue import Turn
from ilql_dialogue import simulators
from ilql_dialogue.generation import sampler

PICKS = ("uniform", "weighted", "tail")
DEFAULT_K = 5
DEFAULT_TAIL = 0.1  # The VS paper's tail threshold.
_CANDIDATE_STREAM, _PICK_STREAM = 0, 1  # SeedSequence spawn keys under a row's seed.
_SPEC_RE = re.compile(r"^vs:(?:(?P<options>\w+=[^,:]*(?:,\w+=[^,:]*)*):)?(?P<inner>.+)$")


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
  raise ValueError(f"VS pick {rule!r}: expected one of {PICKS}")


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


@functools.partial(jax.jit, donate_argnames=("state",))
def take_rows(state: sampler.DecodeState, src_B: jax.Array) -> sampler.DecodeState:
  """Row b of the result is row src_B[b] of `state` (cache fields name their layout: BxKxSxH)."""
  cache = state.cache
  changes = {}
  for field in dataclasses.fields(cache):
    if field.name != "index":  # One slot index serves every row.
      axis = field.name.split("_", 1)[1].split("x").index("B")
      changes[field.name] = jax.tree.map(lambda a, axis=axis: jnp.take(a, src_B, axis=axis),
                                         getattr(cache, field.name))
  return state.replace(cache=cache.replace(**changes),
                       last_hidden_BxD=state.last_hidden_BxD[src_B],
                       lengths_B=state.lengths_B[src_B])


# LMParty's per-row records besides its cache and keys (simulators.LMParty.reset).
_ROW_FIELDS = ("generated_ids", "token_ids", "sampled", "logprobs",
               "_seen", "_last", "_open", "_ended")


class VSParty:
  """A learned party that answers each turn with one of k candidates it drew (module docstring).

  `candidates[b]` and `picked[b]` are row b's k candidates at its last turn
  and the index picked (None where the row gave no reply), for auditing.
  """

  def __init__(self, party: simulators.LMParty, k: int = DEFAULT_K, pick: str = "uniform",
               t: float = DEFAULT_TAIL):
    if not isinstance(party, simulators.LMParty):
      raise ValueError(f"VS draws its candidates from a learned party (LMParty), "
                       f"got {type(party).__name__}")
    if k < 1:
      raise ValueError(f"VS: k={k} must be >= 1")
    if pick not in PICKS:
      raise ValueError(f"VS pick {pick!r}: expected one of {PICKS}")
    if not 0.0 < t <= 1.0:
      raise ValueError(f"VS: tail threshold t={t} must be in (0, 1]")
    self.party, self.k, self.pick, self.t = party, k, pick, t
    self.role = party.role
    self._rngs: list[np.random.Generator] = []

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    if len(contexts) != len(seeds):
      raise ValueError(f"VSParty.reset: {len(contexts)} contexts and {len(seeds)} seeds")
    k = self.k
    self.party.reset([c for c in contexts for _ in range(k)],
                     [candidate_seed(s, j) for s in seeds for j in range(k)])
    self._rngs = [pick_rng(s) for s in seeds]
    self.candidates: list[list[str | None]] = [[None] * k for _ in seeds]
    self.picked: list[int | None] = [None] * len(seeds)

  def _seq_logprob(self, r: int) -> float:
    """Replica r's reply this turn: the sum of its sampled tokens' log-probs."""
    n = len(self.party.generated_ids[r][-1])
    return float(np.sum(self.party.logprobs[r][len(self.party.logprobs[r]) - n:]))

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    batch, k = len(self._rngs), self.k
    if len(histories) != batch:
      raise ValueError(f"VSParty.respond: {len(histories)} histories for {batch} rows (reset)")
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


def parse_spec(spec: str) -> tuple[dict[str, Any], str]:
  """'vs:k=3,pick=tail,t=0.2:PATH' -> ({'k': 3, 'pick': 'tail', 't': 0.2}, 'PATH')."""
  match = _SPEC_RE.match(spec)
  if match is None:
    raise ValueError(f"party spec {spec!r}: expected vs:[k=K,pick=RULE,t=T:]PATH")
  options = simulators.parse_options(spec, match["options"] or "",
                                     {"k": int, "pick": str, "t": float}, "VS")
  return options, match["inner"]


def from_spec(spec: str, role: str, **lm_options: Any) -> VSParty:
  """The VSParty a `vs:` spec names; `lm_options` go to the inner checkpoint's LMParty."""
  options, inner = parse_spec(spec)
  party = simulators.make_party(inner, role, **lm_options)
  if not isinstance(party, simulators.LMParty):
    raise ValueError(f"party spec {spec!r}: VS needs a checkpoint workdir, {inner!r} is "
                     f"a {type(party).__name__}")
  return VSParty(party, **options)
