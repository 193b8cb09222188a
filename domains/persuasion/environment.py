"""Persuasion for Good as an `environment.Environment`: a persuader against a persuadee.

The task's scenarios, contexts, ending and reward for the task-agnostic engine
(environment.play), as AirDialogueEnv gives AirDialogue's:

  scenarios   the two personas of one real dialogue of a split (loader.
              train_test_split, the split domains/persuasion/task.py trains on:
              "train" held in, "eval" held out; "validation", what checkpoint
              selection plays, is the train dialogues that share no person
              and no persona with any eval dialogue, see `persona_disjoint`).
              Scenario i of seed s is the dialogue at position i % n of the
              split's ids (sorted) permuted by default_rng([s, i // n]): the
              first `num` of a seed are the same for any num.
  contexts    each role its own persona only (the loader's traits), which a
              learned party serializes with the task's serialize_persona, so
              a BC party reads at decoding the text it trained on.
  turn order  the persuader first, as in the data.
  ending      a persuadee turn holding a donation statement (`[donate] 0.50
              [/donate]`, the form domains/persuasion/task.py trains the persuadee
              to end with; donation.parse_donation reads its body robustly):
              "donation", or "unparsable_donation" with the reason. Persuader
              turns are never parsed (their blocks are counted). The engine
              adds "turn_limit" and "<role>_ended".
  reward      donation / 2 as the persuadee stated it, in [0, 1]. A dialogue
              without a readable statement (unparsable, turn limit, a party
              ending) earns `no_donation_reward` (default 0: no commitment
              was obtained), and `summarize` / `metrics` count it by reason.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

from data_pipelines.dialogue import Dialogue
from data_pipelines.persuasion import donation as donation_lib
from data_pipelines.persuasion import loader
from ilql_dialogue import environment

PERSUADER, PERSUADEE = loader.ROLES
SPLITS = ("train", "eval", "validation")
DEFAULT_MAX_TURNS = 24  # Utterances of both sides; 95% of the real dialogues have <= 23.
DONATION = "donation"
UNPARSABLE = "unparsable_donation"
END_REASONS = (DONATION, UNPARSABLE, environment.TURN_LIMIT,
               environment.party_ended(PERSUADER), environment.party_ended(PERSUADEE))


@dataclasses.dataclass(frozen=True)
class Scenario:
  """The personas of one real dialogue; `donation` is the real persuadee's (for comparison)."""

  scenario_id: str
  dialogue_id: str
  personas: Mapping[str, Mapping[str, Any]]
  donation: float


class PersuasionEnv:
  """Persuasion for Good for the engine (module docstring)."""

  turn_order = (PERSUADER, PERSUADEE)
  seed_streams = {PERSUADER: 0, PERSUADEE: 1}
  OUTCOME = DONATION  # The end reason of a dialogue whose outcome was stated.

  def __init__(self, dialogues: Sequence[Dialogue], no_donation_reward: float = 0.0):
    if not dialogues:
      raise ValueError("PersuasionEnv: no dialogues to draw scenarios from")
    self.dialogues = sorted(dialogues, key=lambda d: d.dialogue_id)
    for d in self.dialogues:
      missing = [r for r in loader.ROLES if r not in d.context]
      if missing:
        raise ValueError(f"PersuasionEnv: dialogue {d.dialogue_id!r}: field 'context': "
                         f"no persona for {missing}")
    self.no_donation_reward = float(no_donation_reward)

  @classmethod
  def from_corpus(cls, split: str = "train", data_dir: str | None = None,
                  test_fraction: float = 0.1, split_seed: int = 0,
                  no_donation_reward: float = 0.0) -> PersuasionEnv:
    """The scenarios of one split of the real corpus, split as domains/persuasion/task.py splits it;
    "validation" is the part of "train" whose people and personas "eval" never has."""
    if split not in SPLITS:
      raise ValueError(f"PersuasionEnv: split={split!r} not in {SPLITS}")
    dialogues = loader.load_dialogues(data_dir, with_labels=False)
    train, held_out = loader.train_test_split(dialogues, test_fraction, split_seed)
    if split == "validation":
      train = persona_disjoint(train, held_out)
    return cls(held_out if split == "eval" else train, no_donation_reward)

  def sample(self, seed: int, num: int) -> list[Scenario]:
    if num < 0 or seed < 0:
      raise ValueError(f"PersuasionEnv.sample: need seed >= 0 and num >= 0, got seed={seed}, "
                       f"num={num}")
    n, orders, scenarios = len(self.dialogues), {}, []
    for i in range(num):
      rounds, position = divmod(i, n)
      if rounds not in orders:
        orders[rounds] = np.random.default_rng([seed, rounds]).permutation(n)
      d = self.dialogues[orders[rounds][position]]
      scenarios.append(Scenario(f"{seed}:{i}", d.dialogue_id,
                                {r: dict(d.context[r]) for r in loader.ROLES},
                                float(d.meta.get("donation", d.outcome * loader.MAX_DONATION))))
    return scenarios

  def scenario_key(self, scenario: Scenario) -> str:
    return scenario.scenario_id

  def context(self, scenario: Scenario, role: str) -> dict[str, Any]:
    if role not in scenario.personas:
      raise ValueError(f"unknown role {role!r}; expected one of {list(loader.ROLES)}")
    return dict(scenario.personas[role])

  def ending(self, scenario: Scenario, role: str, text: str) -> environment.Ending | None:
    del scenario  # Any persona ends the same way.
    if role != PERSUADEE or not donation_lib.has_statement(text):
      return None
    reading = donation_lib.parse_donation(text)
    if reading.parsed:
      return environment.Ending(DONATION, {"donation": reading.amount,
                                           "stated": reading.stated, "statement": text})
    return environment.Ending(UNPARSABLE, {"statement": text, "parse_error": reading.error})

  def reward(self, episode: environment.Episode) -> float:
    amount = episode.info.get("donation")
    if amount is None:
      return self.no_donation_reward
    return float(amount) / loader.MAX_DONATION

  def metrics(self, episodes: Sequence[environment.Episode]) -> dict[str, float]:
    """`summarize` as flat numbers, for a rollout batch's logged metrics."""
    summary = summarize(episodes)
    flat = {k: float(v) for k, v in summary.items() if k != "end_reasons"}
    flat.update({f"end_reason/{k}": float(v) for k, v in summary["end_reasons"].items()})
    return flat


def persona_keys(d: Dialogue) -> set[tuple[str, str]]:
  """Who takes part in `d`: ("user", id) of each participant (the loader's meta["user_ids"]),
  and ("persuadee", traits): a simulated persuadee reads nothing but its persona, so other
  people with the very same traits (in the corpus: none recorded) are the same persuadee."""
  users = {("user", str(u)) for u in d.meta.get("user_ids", {}).values()}
  return users | {(PERSUADEE, repr(sorted(d.context.get(PERSUADEE, {}).items())))}


def persona_disjoint(dialogues: Sequence[Dialogue],
                     held_out: Sequence[Dialogue]) -> list[Dialogue]:
  """The `dialogues` that share no person and no persona (`persona_keys`) with any of
  `held_out`. The corpus's people took part in up to 16 dialogues each, 177 of them in both
  roles, so the dialogue-id split puts the same people on both sides (40 persuaders and 33
  persuadees of the eval split also have train dialogues); scenarios that must not see the
  held-out personas (checkpoint selection) come from what is left (577 of the 915)."""
  taken = set().union(*(persona_keys(d) for d in held_out)) if held_out else set()
  kept = [d for d in dialogues if not persona_keys(d) & taken]
  if not kept:
    raise ValueError("PersuasionEnv: every dialogue shares a persona with the held-out split")
  return kept


def summarize(episodes: Sequence[environment.Episode]) -> dict[str, Any]:
  """Mean stated donation ± s.e. over the stated ones, and every other outcome counted."""
  n = len(episodes)
  if n == 0:
    raise ValueError("summarize: no dialogues")
  reasons = {reason: 0 for reason in END_REASONS}
  for e in episodes:
    reasons[e.end_reason] = reasons.get(e.end_reason, 0) + 1
  stated = np.asarray([e.info["donation"] for e in episodes if e.end_reason == DONATION],
                      np.float64)
  k = len(stated)
  return {
      "n": n,
      "donation/mean": float(stated.mean()) if k else math.nan,
      "donation/stderr": float(stated.std(ddof=1) / math.sqrt(k)) if k > 1 else math.nan,
      "donation/stated": k,
      "donation/unparsable": reasons[UNPARSABLE],
      "donation/no_statement": n - k - reasons[UNPARSABLE],
      "mean_turns": sum(len(e.turns) for e in episodes) / n,
      "end_reasons": reasons,
      "persuader_donation_blocks": sum(t.speaker == PERSUADER and donation_lib.has_statement(t.text)
                                       for e in episodes for t in e.turns),
  }
