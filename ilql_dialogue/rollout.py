"""Batched AirDialogue rollouts between an agent party and a customer party, and their score.

B dialogues advance in lockstep: the customer speaks first, then the sides
alternate, each `respond` call covering every live row (simulators.Party).
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

Scenarios are held out from training by construction: scenario i of seed s is
drawn from its own generator `default_rng([s, i])`, while self-play corpora
(data_pipelines/airdialogue/selfplay.py) draw from `SeedSequence(seed).spawn`
streams (experiments/pipeline_lib.py: train seed 0, eval seed 1). The default
evaluation seed is 1000; the first n scenarios of a seed are the same for any
n, any batch size and every agent compared.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Any, Iterator, Sequence

import numpy as np
import tqdm
from absl import logging

from data_pipelines.airdialogue import action_grammar, context, schema, scorer, solver
from data_pipelines.dialogue import Turn
from ilql_dialogue.simulators import AGENT, CUSTOMER, Party

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
    }


def row_seeds(seed: int, scenarios: Sequence[Scenario], stream: int) -> list[int]:
  """One seed per row from (seed, party stream, scenario id): independent of batching."""
  return [int(np.random.SeedSequence([seed, stream, zlib.crc32(s.scenario_id.encode())])
              .generate_state(1, np.uint64)[0]) for s in scenarios]


def _check_replies(role: str, replies: Any, batch: int) -> list[str | None]:
  if not isinstance(replies, (list, tuple)) or len(replies) != batch:
    raise ValueError(f"{role} party: respond must return a list of {batch} replies, got "
                     f"{replies!r:.200}")
  for b, reply in enumerate(replies):
    if reply is not None and not isinstance(reply, str):
      raise ValueError(f"{role} party: reply of row {b} is {type(reply).__name__}, not str or None")
  return list(replies)


def rollout(agent: Party, customer: Party, scenarios: Sequence[Scenario], *,
            max_turns: int = DEFAULT_MAX_TURNS, seed: int = 0) -> list[DialogueResult]:
  """Plays one batch of dialogues to the end (module docstring); one result per scenario."""
  if max_turns < 1:
    raise ValueError(f"max_turns={max_turns} must be >= 1")
  batch = len(scenarios)
  agent.reset([s.context(AGENT) for s in scenarios], row_seeds(seed, scenarios, 0))
  customer.reset([s.context(CUSTOMER) for s in scenarios], row_seeds(seed, scenarios, 1))
  histories: list[list[Turn]] = [[] for _ in range(batch)]
  ended: list[dict[str, Any] | None] = [None] * batch
  violations = [0] * batch
  for turn in range(max_turns):
    role, party = (CUSTOMER, customer) if turn % 2 == 0 else (AGENT, agent)
    live = [ended[b] is None for b in range(batch)]
    if not any(live):
      break
    replies = _check_replies(role, party.respond(
        [h if alive else None for h, alive in zip(histories, live)]), batch)
    for b in np.flatnonzero(live):
      reply = replies[b]
      if reply is None:
        ended[b] = {"end_reason": f"{role}_ended"}
        continue
      histories[b].append(Turn(role, reply))
      if not action_grammar.contains_action(reply):
        continue
      if role == CUSTOMER:
        violations[b] += 1
        continue
      try:
        ended[b] = {"end_reason": "action", "action_text": reply,
                    "action": action_grammar.parse_action(reply)}
      except action_grammar.ActionParseError as e:
        logging.warning("scenario %s: unparsable action (%s): %r", scenarios[b].scenario_id, e,
                        reply)
        ended[b] = {"end_reason": "unparsable_action", "action_text": reply,
                    "parse_error": str(e)}
  return [DialogueResult(scenario_id=s.scenario_id, turns=tuple(h),
                         expected_action=s.expected_action, customer_action_blocks=v,
                         **(e or {"end_reason": "turn_limit"}))
          for s, h, e, v in zip(scenarios, histories, ended, violations)]


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


def summarize(results: Sequence[DialogueResult]) -> dict[str, Any]:
  """Success rate with its standard error sqrt(p (1 - p) / n), field accuracies, turns, endings."""
  n = len(results)
  if n == 0:
    raise ValueError("summarize: no dialogues")
  p = sum(r.success for r in results) / n
  fields = [r.field_correct() for r in results]
  reasons = {reason: 0 for reason in END_REASONS}
  for r in results:
    reasons[r.end_reason] += 1
  return {
      "n": n,
      "success_rate": p,
      "success_stderr": math.sqrt(p * (1 - p) / n),
      "status_acc": sum(f["status"] for f in fields) / n,
      "flight_acc": sum(f["flight"] for f in fields) / n,
      "name_acc": sum(f["name"] for f in fields) / n,
      "mean_turns": sum(len(r.turns) for r in results) / n,
      "end_reasons": reasons,
      "unparsable_actions": reasons["unparsable_action"],
      "customer_action_blocks": sum(r.customer_action_blocks for r in results),
  }
