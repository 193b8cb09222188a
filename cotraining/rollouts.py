"""Rollouts for training: G dialogues per scenario, the trained role's tokens recorded as arrays.

The dialogues are played by the task-agnostic engine (ilql_dialogue/
environment.py), all rows in lockstep. The trained role is an
`LMParty`: it keeps its KV cache across turns (each turn appends
only what is new) and records every token it read or sampled, with the
log-prob of each sampled one (its `token_ids`, `sampled`, `logprobs`).
Those records become the rows of the training batch as they are, so the
trainer scores exactly the decoded sequence (cotraining/logprobs.py lists
the arrays).

Rows are scenario-major: row n * G + g is copy g of scenario n, keyed
"<scenario key>/<g>", so its parties' seeds depend only on (seed, key) and
a row replays identically whatever batch it lands in.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from ilql_dialogue import environment
from ilql_dialogue.lm_party import LMParty
from ilql_dialogue.party import Party

FORBIDDEN_WIDTH = 16  # forbidden_ids columns are padded to a multiple of this (one compile).


@dataclasses.dataclass(frozen=True)
class Rollouts:
  """One rollout batch: the episodes, their rewards [N, G] and the training arrays (rows N * G)."""

  episodes: list[environment.Episode]
  rewards_NxG: np.ndarray
  arrays: dict[str, np.ndarray]


def check_learner(learner: LMParty) -> None:
  """The trainer can re-score only a temperature-sampled distribution without extra hooks."""
  sampling = learner.sampling
  if (not sampling["temperature"] > 0 or sampling["top_k"] != 0 or sampling["top_p"] != 1.0
      or sampling["min_p"] != 0.0):
    raise ValueError(f"trained role {learner.role!r}: online RL samples with temperature > 0 "
                     f"and no top-k / top-p / min-p (the loss re-scores that distribution); "
                     f"got {sampling}")
  if learner._hook_factory is not None:
    raise ValueError(f"trained role {learner.role!r}: a decoding hook (e.g. value guidance) "
                     f"changes the sampled distribution; train the plain policy")


def _pad(rows: Sequence[Sequence[Any]], width: int, fill: Any, dtype: Any) -> np.ndarray:
  out = np.full((len(rows), width), fill, dtype)
  for b, row in enumerate(rows):
    out[b, :len(row)] = row
  return out


def learner_arrays(learner: LMParty, seq_len: int) -> dict[str, np.ndarray]:
  """The learner's records since `reset` as [B, seq_len] training arrays (right-padded)."""
  longest = max(map(len, learner.token_ids))
  if longest > seq_len:
    raise ValueError(f"trained role {learner.role!r}: a dialogue holds {longest} tokens, more "
                     f"than the batch's seq_len={seq_len}")
  batch = len(learner.token_ids)
  width = -(-max(1, len(learner.forbidden_ids)) // FORBIDDEN_WIDTH) * FORBIDDEN_WIDTH
  arrays = {
      "input_ids": _pad(learner.token_ids, seq_len, learner.tokenizer.pad_id, np.int32),
      "attention_mask": _pad([[True] * len(t) for t in learner.token_ids], seq_len, False, bool),
      "action_mask": _pad(learner.sampled, seq_len, False, bool),
      "behaviour_logp": _pad(learner.logprobs, seq_len, 0.0, np.float32),
      "forbidden_ids": _pad([learner.forbidden_ids] * batch, width, -1, np.int32),
      "temperature": np.full((batch,), learner.sampling["temperature"], np.float32),
      "num_replies": np.asarray([len(turns) for turns in learner.generated_ids], np.int32),
  }
  if learner.prefix_fields_BxPxF is not None:
    arrays["prefix_fields"] = np.asarray(learner.prefix_fields_BxPxF, np.int32)
  return arrays


def collect(env: environment.Environment, role: str, learner: LMParty,
            others: Mapping[str, Party], scenarios: Sequence[Any], *, group_size: int,
            max_turns: int, seed: int, seq_len: int) -> Rollouts:
  """Plays `group_size` dialogues per scenario with `learner` as `role` (module docstring)."""
  if group_size < 1:
    raise ValueError(f"group_size={group_size} must be >= 1")
  if learner.role != role:
    raise ValueError(f"the learner plays {learner.role!r}, not the trained role {role!r}")
  check_learner(learner)
  rows = [s for s in scenarios for _ in range(group_size)]
  keys = [f"{env.scenario_key(s)}/{g}" for s in scenarios for g in range(group_size)]
  episodes = environment.play(env, {**others, role: learner}, rows, max_turns=max_turns,
                              seed=seed, keys=keys)
  rewards_R = np.asarray([env.reward(e) for e in episodes], np.float32)
  arrays = learner_arrays(learner, seq_len)
  arrays["reward"] = rewards_R
  arrays["num_turns"] = np.asarray([len(e.turns) for e in episodes], np.int32)
  # Whether each dialogue ended with the task's outcome stated (env.OUTCOME: the agent's action,
  # the persuadee's donation); an environment without one counts every ending.
  outcome = getattr(env, "OUTCOME", None)
  arrays["outcome_stated"] = np.asarray([outcome is None or e.end_reason == outcome
                                         for e in episodes], bool)
  return Rollouts(episodes, rewards_R.reshape(len(scenarios), group_size), arrays)
