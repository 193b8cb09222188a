"""Batched AirDialogue rollouts between an agent party and a customer party, and their score.

B dialogues advance in lockstep: the customer speaks first, then the sides
alternate, each `respond` call covering every live row (Party).
A dialogue ends when

  action             the agent wrote a parsable action block: scored with
                     the official rule against solver.expected_action
  unparsable_action  the agent wrote a block that does not parse: failure,
                     the text and the parse error are kept and counted
  turn_limit         `max_turns` utterances (both sides) passed without an
                     action: failure
  agent_ended /      a party answered None for a live row (e.g. its context
  customer_ended     window is full): failure

Only agent turns are parsed: whatever a customer writes cannot end or score
a dialogue (a customer's action blocks are counted as role violations).

The turn protocol is the task-agnostic engine's (environment.play);
`AirDialogueEnv` is the task: scenarios, contexts, the action ending and the
reward (exact success, or the soft score) that online RL (cotraining/) uses.

Scenarios are held out from training by construction: scenario i of seed s is
drawn from its own generator `default_rng([s, i])`, while self-play corpora
(data_pipelines/airdialogue/selfplay.py) draw from `SeedSequence(seed).spawn`
streams (workflows/quickstart.py: train seed 0, eval seed 1). The default
evaluation seed is 1000; the first n scenarios of a seed are the same for any
n, any batch size and every agent compared.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator, Sequence

import numpy as np
import tqdm
from absl import logging

from data_pipelines.airdialogue import action_grammar, context, customers, schema, scorer, solver
from data_pipelines.dialogue import Turn
from ilql_dialogue import environment
from domains.airdialogue.parties import AGENT, CUSTOMER
from ilql_dialogue.party import Party

DEFAULT_SEED = 1000
DEFAULT_MAX_TURNS = 40  # Utterances of both sides, as selfplay.DEFAULT_MAX_TURNS.
END_REASONS = ("action", "unparsable_action", "turn_limit", "agent_ended", "customer_ended")


@dataclasses.dataclass(frozen=True)
class Scenario:
  """One AirDialogue context; each side is shown only its own half."""

  scenario_id: str
  intent: schema.Intent
  table: schema.FlightTable

  def context(self, role: str) -> dict[str, Any]:
    """What `role` privately knows, as JSON (Dialogue.context[role] in the corpora)."""
    if role == CUSTOMER:
      return self.intent.to_json()
    if role == AGENT:
      return self.table.to_json()
    raise ValueError(f"unknown role {role!r}; expected {CUSTOMER!r} or {AGENT!r}")

  @property
  def expected_action(self) -> schema.Action:
    return solver.expected_action(self.intent, self.table)


def make_scenarios(seed: int, num: int, kb_size: int = 30) -> list[Scenario]:
  """Scenarios `seed:0` .. `seed:num-1`, each from its own generator (module docstring)."""
  if num < 0 or seed < 0:
    raise ValueError(f"make_scenarios: need seed >= 0 and num >= 0, got seed={seed}, num={num}")
  scenarios = []
  for i in range(num):
    intent, table = context.sample_context(np.random.default_rng([seed, i]), kb_size)
    scenarios.append(Scenario(f"{seed}:{i}", intent, table))
  return scenarios


@dataclasses.dataclass(frozen=True)
class DialogueResult:
  """One finished dialogue; `to_json` is its transcript line."""

  scenario_id: str
  turns: tuple[Turn, ...]
  end_reason: str
  expected_action: schema.Action
  action_text: str | None = None  # The agent utterance holding the (first) action block.
  action: schema.Action | None = None
  parse_error: str | None = None
  customer_action_blocks: int = 0  # Customer turns holding an action block (role violations).
  intent: schema.Intent | None = None  # The customer's, for what the agent should have asked.

  @property
  def success(self) -> bool:
    return self.action is not None and scorer.is_success(self.action, self.expected_action)

  def field_correct(self) -> dict[str, bool]:
    """Per-field correctness; a dialogue without a parsed action is wrong on every field."""
    if self.action is None:
      return {"status": False, "flight": False, "name": False}
    return {"status": scorer.status_correct(self.action, self.expected_action),
            "flight": scorer.flight_correct(self.action, self.expected_action),
            "name": scorer.name_correct(self.action, self.expected_action)}

  @property
  def asked_slots(self) -> frozenset[str]:
    """Slot groups the agent asked about (customers.understand) before its closing block."""
    asked: set[str] = set()
    for turn in self.turns:
      if turn.speaker != AGENT:
        continue
      move = customers.understand(turn.text)
      if move.kind == "final":
        break
      if move.kind == "questions":
        asked |= move.slots
    return frozenset(asked)

  @property
  def asked_share(self) -> float | None:
    """The share of the slot groups that matter here (slots_that_matter) the agent asked."""
    if self.intent is None:
      return None
    matter = slots_that_matter(self.intent, self.expected_action)
    return len(self.asked_slots & set(matter)) / len(matter)

  def to_json(self) -> dict[str, Any]:
    return {
        "scenario_id": self.scenario_id,
        "turns": [{"speaker": t.speaker, "text": t.text} for t in self.turns],
        "num_turns": len(self.turns),
        "end_reason": self.end_reason,
        "action_text": self.action_text,
        "action": None if self.action is None else self.action.to_json(),
        "parse_error": self.parse_error,
        "expected_action": self.expected_action.to_json(),
        "success": self.success,
        "correct": self.field_correct(),
        "customer_action_blocks": self.customer_action_blocks,
        "asked_slots": sorted(self.asked_slots),
        "asked_share": self.asked_share,
    }


def slots_that_matter(intent: schema.Intent, expected: schema.Action) -> tuple[str, ...]:
  """What an agent must learn to act: goal and name, and for a flight to search, the trip and
  every constraint the intent restricts (a cancel, or a change without a reservation, needs
  no search)."""
  if intent.goal == "cancel" or expected.status == "no_reservation":
    return (customers.GOAL, customers.NAME)
  return (customers.GOAL, customers.NAME, customers.AIRPORTS, customers.DATES,
          *customers.constraints_of(intent))


def row_seeds(seed: int, scenarios: Sequence[Scenario], stream: int) -> list[int]:
  """One seed per row from (seed, party stream, scenario id): independent of batching."""
  return environment.row_seeds(seed, [s.scenario_id for s in scenarios], stream)


class AirDialogueEnv:
  """AirDialogue as an `environment.Environment`: the customer opens, the agent ends.

  The agent sees the flight table, the customer its intent. Only agent turns
  are parsed (module docstring). `reward` is exact success (1 or 0), or with
  `reward="soft"` the clean soft score of the parsed action (0 without one).
  """

  turn_order = (CUSTOMER, AGENT)
  seed_streams = {AGENT: 0, CUSTOMER: 1}
  OUTCOME = "action"  # The end reason of a dialogue whose outcome was stated.
  REWARDS = ("success", "soft")

  def __init__(self, reward: str = "success", kb_size: int = 30):
    if reward not in self.REWARDS:
      raise ValueError(f"AirDialogueEnv: reward={reward!r} not in {self.REWARDS}")
    self.reward_kind = reward
    self.kb_size = kb_size

  def sample(self, seed: int, num: int) -> list[Scenario]:
    return make_scenarios(seed, num, self.kb_size)

  def scenario_key(self, scenario: Scenario) -> str:
    return scenario.scenario_id

  def context(self, scenario: Scenario, role: str) -> dict[str, Any]:
    return scenario.context(role)

  def ending(self, scenario: Scenario, role: str, text: str) -> environment.Ending | None:
    if role != AGENT or not action_grammar.contains_action(text):
      return None
    try:
      return environment.Ending("action", {"action_text": text,
                                           "action": action_grammar.parse_action(text)})
    except action_grammar.ActionParseError as e:
      logging.warning("scenario %s: unparsable action (%s): %r", scenario.scenario_id, e, text)
      return environment.Ending("unparsable_action", {"action_text": text, "parse_error": str(e)})

  def reward(self, episode: environment.Episode) -> float:
    action = episode.info.get("action")
    if action is None:
      return 0.0
    expected = episode.scenario.expected_action
    if self.reward_kind == "soft":
      return float(scorer.soft_score(action, expected))
    return float(scorer.is_success(action, expected))


def to_result(episode: environment.Episode) -> DialogueResult:
  """An AirDialogue episode as its scored DialogueResult."""
  scenario = episode.scenario
  return DialogueResult(
      scenario_id=scenario.scenario_id, turns=episode.turns, end_reason=episode.end_reason,
      expected_action=scenario.expected_action, intent=scenario.intent,
      customer_action_blocks=sum(t.speaker == CUSTOMER and action_grammar.contains_action(t.text)
                                 for t in episode.turns),
      **episode.info)


def rollout(agent: Party, customer: Party, scenarios: Sequence[Scenario], *,
            max_turns: int = DEFAULT_MAX_TURNS, seed: int = 0) -> list[DialogueResult]:
  """Plays one batch of dialogues to the end (module docstring); one result per scenario."""
  episodes = environment.play(AirDialogueEnv(), {AGENT: agent, CUSTOMER: customer}, scenarios,
                              max_turns=max_turns, seed=seed)
  return [to_result(e) for e in episodes]


def run_dialogues(agent: Party, customer: Party, scenarios: Sequence[Scenario], *,
                  batch_size: int = 16, max_turns: int = DEFAULT_MAX_TURNS, seed: int = 0,
                  progress: bool = False) -> Iterator[DialogueResult]:
  """Every scenario, `batch_size` at a time, results streamed in scenario order.

  A short last batch is filled up with copies of its first scenario (their
  results are dropped), so a learned party sees one batch size and compiles
  its decoder once.
  """
  if batch_size < 1:
    raise ValueError(f"batch_size={batch_size} must be >= 1")
  with tqdm.tqdm(total=len(scenarios), disable=not progress, desc="dialogues",
                 unit="dialogue") as bar:
    for start in range(0, len(scenarios), batch_size):
      chunk = list(scenarios[start:start + batch_size])
      filled = chunk + chunk[:1] * (batch_size - len(chunk)) if start else chunk
      yield from rollout(agent, customer, filled, max_turns=max_turns, seed=seed)[:len(chunk)]
      bar.update(len(chunk))


BOOKING_STATUSES = ("book", "change")  # Expected actions that name a flight.


def summarize(results: Sequence[DialogueResult]) -> dict[str, Any]:
  """Success rate with its standard error sqrt(p (1 - p) / n), field accuracies, turns, endings,
  and success split by the expected action's status.

  `booking_success` is the success over the dialogues whose expected action books or changes
  a flight (`booking_n` of them; None without any): the part of the task that needs the table
  searched. An agent that never finds a flight still scores on the cancel / no_flight /
  no_reservation scenarios (about 0.45 of the generator's), so the success rate alone can hide
  that it never books one (docs/RESULTS.md).

  How the agent behaves: `mean_agent_turns`; `asked_share`, the mean over dialogues of the
  share of the slot groups that matter for each (slots_that_matter) the agent asked about
  before closing; `asked_before_closing`, the fraction of dialogues where it asked about at
  least one slot group (the goal included) before closing. An agent that closes at once
  scores 0 on both, whatever its success.
  """
  n = len(results)
  if n == 0:
    raise ValueError("summarize: no dialogues")
  p = sum(r.success for r in results) / n
  fields = [r.field_correct() for r in results]
  reasons = {reason: 0 for reason in END_REASONS}
  by_status: dict[str, list[int]] = {}
  for r in results:
    reasons[r.end_reason] += 1
    counts = by_status.setdefault(r.expected_action.status, [0, 0])
    counts[0] += r.success
    counts[1] += 1
  shares = [r.asked_share for r in results if r.intent is not None]
  booked, booking_n = (sum(by_status.get(s, (0, 0))[i] for s in BOOKING_STATUSES)
                       for i in (0, 1))
  return {
      "n": n,
      "success_rate": p,
      "success_stderr": math.sqrt(p * (1 - p) / n),
      "status_acc": sum(f["status"] for f in fields) / n,
      "flight_acc": sum(f["flight"] for f in fields) / n,
      "name_acc": sum(f["name"] for f in fields) / n,
      "mean_turns": sum(len(r.turns) for r in results) / n,
      "mean_agent_turns": sum(t.speaker == AGENT for r in results for t in r.turns) / n,
      "asked_share": sum(shares) / len(shares) if shares else None,
      "asked_before_closing": sum(bool(r.asked_slots) for r in results) / n,
      "end_reasons": reasons,
      "unparsable_actions": reasons["unparsable_action"],
      "customer_action_blocks": sum(r.customer_action_blocks for r in results),
      "success_by_expected_status": {k: {"success": v[0], "n": v[1]}
                                     for k, v in sorted(by_status.items())},
      "booking_success": booked / booking_n if booking_n else None,
      "booking_n": booking_n,
  }
