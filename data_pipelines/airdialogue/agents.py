"""Scripted AirDialogue agents: they see the flight table, never the customer's intent.

An agent learns the goal and constraints only from what the customer says
(regex slot extraction), builds an Intent from what it heard, asks the solver
for the cheapest matching flights, proposes one, and submits the final action
in the action grammar once the customer agrees. A customer may still add a
constraint when a flight is proposed; the agent then searches again.

Degraded agents carry one flaw each, so a corpus mixes good and bad behaviour
the way human data does:

  forget_constraint  ignores one constraint it heard when searching
  not_cheapest       books a matching flight that is not among the cheapest
  wrong_status       submits the wrong status (e.g. book for change)
  misspell_name      submits the name with a typo
  give_up            says there is no flight right after hearing the trip
  redundant          asks every constraint one by one and re-asks known facts;
                     still correct, just slower
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

import numpy as np

from data_pipelines.airdialogue import action_grammar
from data_pipelines.airdialogue import customers
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import solver

FLAWS = (
    "forget_constraint", "not_cheapest", "wrong_status", "misspell_name", "give_up", "redundant")


@dataclasses.dataclass(frozen=True)
class AgentSkill:
  name: str
  flaw: str | None = None
  flaw_rate: float = 1.0  # Chance per dialogue that the flaw shows.

  def __post_init__(self):
    if self.flaw is not None and self.flaw not in FLAWS:
      raise ValueError(f"agent {self.name!r}: flaw {self.flaw!r} not in {FLAWS}")
    if not 0.0 <= self.flaw_rate <= 1.0:
      raise ValueError(f"agent {self.name!r}: flaw_rate {self.flaw_rate} not in [0, 1]")


AGENTS: Mapping[str, AgentSkill] = {
    s.name: s for s in [AgentSkill("oracle")] + [AgentSkill(f, f) for f in FLAWS]
}

# --- Hearing the customer ---------------------------------------------------

_MONTHS_RE = "|".join(schema.MONTHS)
_DATE_RE = re.compile(rf"\b({_MONTHS_RE})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b")
_FROM_RE = re.compile(r"(?:\b[Ff]rom|\bout of|\bleaving)\s+([A-Z]{3})\b")
_TO_RE = re.compile(r"(?:\b[Tt]o|\binto)\s+([A-Z]{3})\b")
_PAIR_RE = re.compile(r"\b([A-Z]{3})\s+(?:to|-)\s+([A-Z]{3})\b")
_NAME_WORDS = r"([A-Z][a-z'-]+(?: [A-Z][a-z'-]+)+)"
_NAME_RE = re.compile(rf"(?i:name is|it's|i'm|i am|this is|under)\s+{_NAME_WORDS}")
_BARE_NAME_RE = re.compile(rf"\s*{_NAME_WORDS}\s*")
_CHUNK_RE = re.compile(r"[.!?]")
_CLAUSE_RE = re.compile(r"[.,;:!?]|\band\b|\bbut\b")
_TIME_RE = re.compile(r"\b(morning|afternoon|evening)\b", re.IGNORECASE)
_RETURN_RE = re.compile(r"\breturn|\bback\b", re.IGNORECASE)
_CLASS_RE = re.compile(r"\b(economy|business)\b", re.IGNORECASE)
_PRICE_RE = re.compile(r"\$\s?(\d+)|\b(\d+) dollars\b")
_DIRECT_RE = re.compile(r"\bdirect\b|non-?stop|no connections|no stops", re.IGNORECASE)
_ONE_STOP_RE = re.compile(r"\b(?:one|1) (?:connection|stop)", re.IGNORECASE)
_AIRLINE_RE = re.compile(r"normal[- ]cost", re.IGNORECASE)
_GOAL_RES = (
    ("cancel", re.compile(r"cancel", re.IGNORECASE)),
    ("change", re.compile(r"\bchange|modify|reschedule", re.IGNORECASE)),
    ("book", re.compile(r"\bbook|reserve|ticket", re.IGNORECASE)),
)
_ACCEPT_RE = re.compile(
    r"\b(?:yes|yeah|sure|ok|okay|go ahead|sounds good|please do|perfect|that works|wonderful)\b",
    re.IGNORECASE)

# The Intent attributes each constraint slot sets.
CONSTRAINT_FIELDS = {
    customers.TIME: ("departure_time", "return_time"),
    customers.CLASS: ("flight_class",),
    customers.PRICE: ("max_price",),
    customers.CONNECTIONS: ("max_connections",),
    customers.AIRLINE: ("airline_preference",),
}
_TRIP_FIELDS = ("departure_airport", "return_airport", "departure_month", "departure_day",
                "return_month", "return_day")


def extract_slots(utterance: str) -> dict[str, Any]:
  """Every Intent field the utterance states, keyed by Intent attribute name."""
  out: dict[str, Any] = {}
  for goal, r in _GOAL_RES:
    if r.search(utterance):
      out["goal"] = goal
      break
  m = _NAME_RE.search(utterance)
  if m is None:
    m = next(filter(None, (_BARE_NAME_RE.fullmatch(c) for c in _CHUNK_RE.split(utterance))), None)
  if m is not None:
    out["name"] = m[1]
  if m := _PAIR_RE.search(utterance):
    out["departure_airport"], out["return_airport"] = m[1], m[2]
  if m := _FROM_RE.search(utterance):
    out["departure_airport"] = m[1]
  if m := _TO_RE.search(utterance):
    out["return_airport"] = m[1]
  dates = _DATE_RE.findall(utterance)
  if len(dates) >= 2:
    out["departure_month"], out["departure_day"] = dates[0]
    out["return_month"], out["return_day"] = dates[1]
  for clause in _CLAUSE_RE.split(utterance):
    if m := _TIME_RE.search(clause):
      out["return_time" if _RETURN_RE.search(clause) else "departure_time"] = m[1].lower()
  if m := _CLASS_RE.search(utterance):
    out["flight_class"] = m[1].lower()
  if m := _PRICE_RE.search(utterance):
    out["max_price"] = int(m[1] or m[2])
  if _DIRECT_RE.search(utterance):
    out["max_connections"] = 0
  elif _ONE_STOP_RE.search(utterance):
    out["max_connections"] = 1
  if _AIRLINE_RE.search(utterance):
    out["airline_preference"] = "normal-cost"
  for key in ("departure_day", "return_day"):
    if key in out:
      out[key] = str(int(out[key]))
  return out


# --- Speaking ---------------------------------------------------------------

_ASK = {
    customers.GOAL: ("How can I help you?", "How may I help you today?", "What can I do for you?"),
    customers.NAME: ("May I have your name, please?", "Could you tell me your name?",
                     "Can I get your full name?"),
    (customers.AIRPORTS, customers.DATES): (
        "Where are you flying from and to, and what are your travel dates?",
        "Could you give me your origin and destination airports and your travel dates?"),
    customers.AIRPORTS: ("Which airports are you flying from and to?",
                         "What are your origin and destination airports?"),
    customers.DATES: ("What are your travel dates?", "When would you like to leave and come back?"),
    "preferences": (
        "Do you have any preferences on departure or return time, class, budget, number of "
        "connections or airline?",
        "Any requirements for time of travel, class, price, connections or airline?"),
    customers.TIME: ("What time of day would you like to fly?",),
    customers.CLASS: ("Do you prefer economy or business class?",),
    customers.PRICE: ("What is your budget for this trip?",),
    customers.CONNECTIONS: ("How many connections can you accept?",),
    customers.AIRLINE: ("Do you have an airline preference?",),
    "confirm_name": ("Sorry, could you confirm your name once more?",),
    "confirm_dates": ("Could you confirm your travel dates again?",),
}
_VERB = {"book": "book it", "change": "change your reservation to it"}
_DONE = {
    "book": ("Your ticket is booked.", "Done, your flight is booked."),
    "change": ("Your reservation has been changed.", "Done, I changed your reservation."),
    "cancel": ("Your reservation has been cancelled.", "Done, your reservation is cancelled."),
    "no_flight": ("Sorry, there are no flights matching your requirements.",
                  "Unfortunately I could not find a flight that meets your needs."),
    "no_reservation": ("Sorry, I could not find a reservation under your name.",
                       "Unfortunately there is no reservation under your name."),
}
_WRONG_STATUS = {"book": "change", "change": "book", "cancel": "no_reservation",
                 "no_flight": "no_reservation", "no_reservation": "no_flight"}


def _misspell(name: str, rng: np.random.Generator) -> str:
  """One typo (drop, double or swap a letter) that changes the normalized name."""
  letters = [i for i, ch in enumerate(name) if ch.isalpha()]
  while True:
    i = letters[rng.integers(len(letters))]
    kind = rng.integers(3)
    if kind == 0:
      typo = name[:i] + name[i + 1:]
    elif kind == 1:
      typo = name[:i] + name[i] + name[i:]
    else:
      j = min(i + 1, len(name) - 1)
      typo = name[:i] + name[j] + name[i] + name[j + 1:] if j > i else name
    if typo.lower() != name.lower() and typo.strip():
      return typo


class ScriptedAgent:
  """A rule-based agent; `respond()` to each customer turn until `action` is set."""

  def __init__(self, table: schema.FlightTable, skill: AgentSkill | str, rng: np.random.Generator):
    self.table = table
    self.skill = AGENTS[skill] if isinstance(skill, str) else skill
    self.rng = rng
    self.flaw = self.skill.flaw if rng.random() < self.skill.flaw_rate else None
    self.heard: dict[str, Any] = {}
    self.action: schema.Action | None = None
    self._turn = 0
    self._asked: set[str] = set()
    self._pending: schema.Action | None = None  # Proposed, awaiting the customer's yes.
    self._last_proposal: schema.Action | None = None
    self._redundant_queue = (
        ["confirm_name", "confirm_dates", *customers.CONSTRAINT_SLOTS]
        if self.flaw == "redundant" else [])
    self._forgotten: str | None = None
    self._cols: solver.FlightColumns | None = None  # The table as arrays, built on first search.

  def _pick(self, options) -> str:
    return options[self.rng.integers(len(options))]

  def respond(self, customer_utterance: str) -> str:
    if self.action is not None:
      raise RuntimeError("the agent has already submitted its final action")
    new = self._listen(customer_utterance)
    text = self._next(customer_utterance, new)
    if self._turn == 0:
      text = f"{self._pick(('Hello.', 'Hi there.', 'Good day.'))} {text}"
    self._turn += 1
    return text

  def _listen(self, utterance: str) -> set[str]:
    """Merges what was said into `heard`; returns the fields whose value changed."""
    changed = set()
    for key, value in extract_slots(utterance).items():
      if key == "goal" and "goal" in self.heard:
        continue  # "Yes, please book it" confirms; it does not change the goal.
      if self.heard.get(key) != value:
        self.heard[key] = value
        changed.add(key)
    return changed

  def _ask(self, key) -> str:
    self._asked.add(key)
    return self._pick(_ASK[key])

  def _next(self, utterance: str, new: set[str]) -> str:
    if self._pending is not None:
      if new - {"name", "goal"}:
        self._pending = None  # New facts: search again.
      elif _ACCEPT_RE.search(utterance):
        return self._submit(self._pending)
      else:
        return self._propose(self._pending)
    heard = self.heard
    if "goal" not in heard:
      return self._ask(customers.GOAL)
    if "name" not in heard:
      return self._ask(customers.NAME)
    goal, has_reservation = heard["goal"], self.table.reservation != schema.NO_RESERVATION
    if goal in ("change", "cancel") and not has_reservation:
      return self._submit(self._action("no_reservation"))
    if goal == "cancel":
      return self._propose(self._action("cancel"))
    trip = ((customers.AIRPORTS, _TRIP_FIELDS[:2]), (customers.DATES, _TRIP_FIELDS[2:]))
    missing = [slot for slot, fields in trip if not all(f in heard for f in fields)]
    if missing:
      return self._ask(tuple(missing) if len(missing) == 2 else missing[0])
    if self.flaw == "give_up":
      return self._submit(self._action("no_flight"))
    if self._redundant_queue:
      return self._ask(self._redundant_queue.pop(0))
    volunteered = any(f in heard for fs in CONSTRAINT_FIELDS.values() for f in fs)
    if "preferences" not in self._asked and not volunteered:
      return self._ask("preferences")
    return self._decide()

  def _heard_intent(self) -> schema.Intent:
    """The intent as far as the agent knows it; unheard constraints are absent."""
    fields = dict(self.heard)
    fields.setdefault("max_price", max(schema.MAX_PRICES))
    fields.setdefault("max_connections", None)
    if self.flaw == "forget_constraint":
      heard_slots = [s for s, fs in CONSTRAINT_FIELDS.items() if any(f in self.heard for f in fs)]
      if self._forgotten is None and heard_slots:
        self._forgotten = heard_slots[self.rng.integers(len(heard_slots))]
      for f in CONSTRAINT_FIELDS.get(self._forgotten, ()):
        fields[f] = max(schema.MAX_PRICES) if f == "max_price" else None
    return schema.Intent(**fields)

  def _decide(self) -> str:
    intent = self._heard_intent()
    if self._cols is None:
      self._cols = solver.flight_columns(self.table)
    cols = self._cols
    cheapest = solver.cheapest_matching(intent, cols)
    if not cheapest:
      return self._submit(self._action("no_flight"))
    choice = cheapest[self.rng.integers(len(cheapest))]
    if self.flaw == "not_cheapest":
      mask_K = solver.matching_flights(intent, cols)
      others = [n for n in cols.flight_number_K[mask_K].tolist() if n not in cheapest]
      if others:
        choice = others[self.rng.integers(len(others))]
    return self._propose(self._action(intent.goal, (choice,)))

  def _action(self, status: str, flights: tuple[int, ...] = ()) -> schema.Action:
    return schema.Action(status=status, name=self.heard["name"], flights=flights)

  def _propose(self, action: schema.Action) -> str:
    again = self._last_proposal == action
    self._pending = self._last_proposal = action
    if action.status == "cancel":
      return f"I found your reservation, flight {self.table.reservation}. Shall I cancel it?"
    if again:
      return (f"Flight {action.flights[0]} still meets all your requirements. "
              f"Shall I {_VERB[action.status]}?")
    f = next(f for f in self.table.flights if f.flight_number == action.flights[0])
    stops = f"{f.num_connections} connection{'' if f.num_connections == 1 else 's'}"
    return (f"I found flight {f.flight_number} on {f.airline}, leaving {f.departure_month} "
            f"{f.departure_day} at {f.departure_time_num}:00 and returning {f.return_month} "
            f"{f.return_day} at {f.return_time_num}:00, {f.flight_class} class, {stops}, "
            f"${f.price}. "
            f"Shall I {_VERB[action.status]}?")

  def _submit(self, action: schema.Action) -> str:
    if self.flaw == "wrong_status":
      status = _WRONG_STATUS[action.status]
      flights = action.flights if status in ("book", "change") else ()
      action = dataclasses.replace(action, status=status, flights=flights)
    if self.flaw == "misspell_name":
      action = dataclasses.replace(action, name=_misspell(action.name, self.rng))
    self.action = action
    return f"{self._pick(_DONE[action.status])} {action_grammar.format_action(action)}"
