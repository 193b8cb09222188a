"""Simulator sharpness, measured: gamma in p_sim ∝ p_ref^gamma for a learned simulator (docs/METHODS.md, Online RL and Co-Training).

At each of S states (a dialogue's history up to one of the simulator's
turns, with the scenario's private context) the simulator samples K replies
as it plays them: its own temperature and forbidden ids, its log-probability
of each reply being the one the sampler drew it with. The reference reads
the very token ids the simulator decoded, teacher-forced
(cotraining/logprobs.py, temperature 1, the same forbidden ids), so both
log-probs are of the same sequences. gamma is then
diagnostics.fit_gamma_from_logprobs: log p_sim = gamma log p_ref - log Z_s.

A reference sampled at temperature T is sharpened by exactly gamma = 1/T,
which is how the tests check the measurement; a co-trained simulator's gamma
against its starting checkpoint says whether training sharpened it (gamma >
1: it favours its modal replies more than the reference does; the policy
gradient against it then tends to that of a user who always gives the modal
reply).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import jax.numpy as jnp
import numpy as np
from flax import nnx

from cotraining import diagnostics, logprobs
from data_pipelines.dialogue import Turn
from ilql_dialogue.lm_party import LMParty

WIDTH_BUCKET = 64  # Scoring widths rounded up to this: few compiled shapes.


def sample_replies(party: LMParty, contexts: Sequence[Mapping[str, Any]],
                   histories: Sequence[Sequence[Turn]], k: int, seed: int, max_rows: int = 256
                   ) -> tuple[list[list[int]], list[list[bool]], np.ndarray]:
  """K replies of `party` at every state: (token ids per row, sampled mask per row,
  the party's log-prob of each reply). Rows are state-major: row s * k + j."""
  if len(contexts) != len(histories):
    raise ValueError(f"sample_replies: {len(contexts)} contexts for {len(histories)} histories")
  jobs = [(s, j) for s in range(len(contexts)) for j in range(k)]
  token_ids, sampled, sim_logp = [], [], []
  for start in range(0, len(jobs), max_rows):
    chunk = jobs[start:start + max_rows]
    party.reset([contexts[s] for s, _ in chunk], [seed * 1_000_003 + s * k + j for s, j in chunk])
    party.load_histories([histories[s] for s, _ in chunk])
    party.respond([list(histories[s]) for s, _ in chunk])
    for row in range(len(chunk)):
      mask = party.sampled[row]
      token_ids.append(list(party.token_ids[row]))
      sampled.append(list(mask))
      sim_logp.append(sum(lp for lp, m in zip(party.logprobs[row], mask) if m))
  return token_ids, sampled, np.asarray(sim_logp)


@nnx.jit
def _token_logprobs(lm: nnx.Module, batch: dict[str, jnp.ndarray]) -> jnp.ndarray:
  return logprobs.token_logprobs(lm, batch)[0]


def reference_logprobs(lm: nnx.Module, token_ids: Sequence[Sequence[int]],
                       sampled: Sequence[Sequence[bool]], forbidden_ids: Sequence[int],
                       pad_id: int, batch_rows: int = 64) -> np.ndarray:
  """Each row's summed log-prob, under `lm` at temperature 1, of its sampled tokens."""
  width = -(-max(map(len, token_ids)) // WIDTH_BUCKET) * WIDTH_BUCKET
  forbidden = np.asarray([list(forbidden_ids) or [-1]], np.int32)
  out = []
  for start in range(0, len(token_ids), batch_rows):
    rows = list(range(start, min(start + batch_rows, len(token_ids))))
    rows += [rows[-1]] * (batch_rows - len(rows))  # One compiled shape: repeat the last row.
    ids_BxT = np.full((batch_rows, width), pad_id, np.int32)
    sampled_BxT = np.zeros((batch_rows, width), bool)
    for b, r in enumerate(rows):
      ids_BxT[b, :len(token_ids[r])] = token_ids[r]
      sampled_BxT[b, :len(sampled[r])] = sampled[r]
    lengths_B = np.asarray([len(token_ids[r]) for r in rows])
    batch = {"input_ids": jnp.asarray(ids_BxT),
             "attention_mask": jnp.asarray(np.arange(width) < lengths_B[:, None]),
             "forbidden_ids": jnp.asarray(np.repeat(forbidden, batch_rows, axis=0)),
             "temperature": jnp.ones(batch_rows, jnp.float32)}
    logp_BxT1 = np.asarray(_token_logprobs(lm, batch))
    totals = np.where(sampled_BxT[:, 1:], logp_BxT1, 0.0).sum(axis=1)  # Padding may be -inf.
    out.extend(totals[:min(batch_rows, len(token_ids) - start)].tolist())
  return np.asarray(out)


def simulator_gamma(party: LMParty, reference_lm: nnx.Module,
                    contexts: Sequence[Mapping[str, Any]], histories: Sequence[Sequence[Turn]],
                    k: int = 16, seed: int = 0) -> dict[str, Any]:
  """gamma of `party` (as it samples) against `reference_lm`, from K replies per state."""
  token_ids, sampled, sim_logp = sample_replies(party, contexts, histories, k, seed)
  ref_logp = reference_logprobs(reference_lm, token_ids, sampled, party.forbidden_ids,
                                party.tokenizer.pad_id)
  per_state = lambda x: x.reshape(len(contexts), k)
  gamma = diagnostics.fit_gamma_from_logprobs(per_state(sim_logp), per_state(ref_logp))
  return {"gamma": gamma, "states": len(contexts), "k": k,
          "temperature": float(np.asarray(party.sampling["temperature"]).mean()),
          "mean_sim_logp": float(sim_logp.mean()), "mean_ref_logp": float(ref_logp.mean())}


def transcript_turns(record: Mapping[str, Any]) -> tuple[str, list[Turn]]:
  """(scenario id, turns) of one transcript line, as `evaluate` writes it (scenario_id, turns
  as {speaker, text}) or as `evaluate_environment` does (key, turns as [speaker, text])."""
  scenario_id = record["scenario_id"] if "scenario_id" in record else record["key"]
  turns = [Turn(t["speaker"], t["text"]) if isinstance(t, Mapping) else Turn(*t)
           for t in record["turns"]]
  return scenario_id, turns


def states_from_transcripts(path: str, role: str, scenarios: Mapping[str, Any], env: Any,
                            max_states: int) -> tuple[list[Mapping[str, Any]], list[list[Turn]]]:
  """Up to `max_states` (context, history) pairs: in each transcript of `path`, the history
  before every turn `role` spoke; `scenarios` maps a transcript's scenario id to its scenario."""
  contexts, histories = [], []
  with open(path) as f:
    for line in f:
      scenario_id, turns = transcript_turns(json.loads(line))
      for t, turn in enumerate(turns):
        if turn.speaker == role and len(contexts) < max_states:
          contexts.append(env.context(scenarios[scenario_id], role))
          histories.append(turns[:t])
  return contexts, histories
