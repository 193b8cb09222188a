"""Scripted AirDialogue agents: they see the flight table, never the customer's intent.

An agent learns the goal and constraints only from what the customer says
(slot_parser, told what the agent just asked and which airports its table
holds), builds an Intent from what it heard, asks the solver
for the cheapest matching flights, proposes one, and submits the final action
in the action grammar once the customer agrees. A customer may still add a
constraint when a flight is proposed; the agent then searches again. How the
agent words all this is its phrasing family (agent_families); some families
ask the customer to wait while they search, as the real agents do.

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
from typing import Any, Collection, Mapping

import numpy as np

from data_pipelines.airdialogue import action_grammar
from data_pipelines.airdialogue import agent_families
from data_pipelines.airdialogue import customers
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import slot_parser
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

# Agreement to a proposal, in any family's words ("yes", "go for it", "lovely", ...).
_ACCEPT_RE = re.compile(
    r"\b(?:yes|yeah|yep|yup|sure|ok|okay|alright|go ahead|proceed|please do|do it|do that|"
    r"go for it|confirm|sounds good|perfect|that works|that'll do|wonderful|lovely|great|fine)\b",
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
# The customer slot that states each Intent attribute (what extract_slots hears -> what was said).
SLOT_OF_FIELD = {
    "goal": customers.GOAL, "name": customers.NAME,
    "departure_airport": customers.AIRPORTS, "return_airport": customers.AIRPORTS,
    "departure_month": customers.DATES, "departure_day": customers.DATES,
    "return_month": customers.DATES, "return_day": customers.DATES,
    **{f: slot for slot, fs in CONSTRAINT_FIELDS.items() for f in fs},
}


def extract_slots(utterance: str, asked: Collection[str] = (),
                  airports: Collection[str] = ()) -> dict[str, Any]:
  """Every Intent field the utterance states, keyed by Intent attribute name (slot_parser)."""
  return slot_parser.parse(utterance, asked, airports)


# --- Speaking ---------------------------------------------------------------

# Questions that are not named after the one slot they ask about.
_SLOTS_OF_QUESTION = {"preferences": customers.CONSTRAINT_SLOTS,
                      "confirm_name": (customers.NAME,), "confirm_dates": (customers.DATES,)}
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

  def __init__(self, table: schema.FlightTable, skill: AgentSkill | str, rng: np.random.Generator,
               family: agent_families.AgentFamily | str = "template"):
    self.table = table
    self.skill = AGENTS[skill] if isinstance(skill, str) else skill
    if isinstance(family, str) and family not in agent_families.FAMILIES:
      raise ValueError(f"unknown agent phrasing family {family!r}; "
                       f"known: {sorted(agent_families.FAMILIES)}")
    self.family = agent_families.FAMILIES[family] if isinstance(family, str) else family
    self.rng = rng
    self.flaw = self.skill.flaw if rng.random() < self.skill.flaw_rate else None
    self.heard: dict[str, Any] = {}
    self.action: schema.Action | None = None
    self._turn = 0
    self._asked: set[str] = set()
    self._last_asked: frozenset[str] = frozenset()  # Slots of the agent's latest question.
    self._waited = False
    self._airports = frozenset(
        a for f in table.flights for a in (f.departure_airport, f.return_airport))
    self._pending: schema.Action | None = None  # Proposed, awaiting the customer's yes.
    self._last_proposal: schema.Action | None = None
    self._redundant_queue = (
        ["confirm_name", "confirm_dates", *customers.CONSTRAINT_SLOTS]
        if self.flaw == "redundant" else [])
    self._forgotten: str | None = None
    self._cols: solver.FlightColumns | None = None  # The table as arrays, built on first search.

  def _say(self, part: str, **fields: str) -> str:
    return self.family.say(part, self.rng, **fields)

  def respond(self, customer_utterance: str) -> str:
    if self.action is not None:
      raise RuntimeError("the agent has already submitted its final action")
    new = self._listen(customer_utterance)
    text = self._next(customer_utterance, new)
    if self._turn == 0:
      text = f"{self._say('greeting')} {text}"
    self._turn += 1
    return text

  def _listen(self, utterance: str) -> set[str]:
    """Merges what was said into `heard`; returns the fields whose value changed."""
    changed = set()
    heard = extract_slots(utterance, self._last_asked, self._airports)
    self._last_asked = frozenset()
    for key, value in heard.items():
      if key == "goal" and "goal" in self.heard:
        continue  # "Yes, please book it" confirms; it does not change the goal.
      if self.heard.get(key) != value:
        self.heard[key] = value
        changed.add(key)
    return changed

  def _ask(self, key) -> str:
    """Asks for a slot (or a slot pair, "preferences", "confirm_*") in the family's words."""
    self._asked.add(key)
    if isinstance(key, tuple):
      self._last_asked, part = frozenset(key), "ask_trip"
    else:
      self._last_asked = frozenset(_SLOTS_OF_QUESTION.get(key, (key,)))
      part = key if key in _SLOTS_OF_QUESTION and key != "preferences" else f"ask_{key}"
    return self._say(part)

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
    if not self._waited and self.rng.random() < self.family.wait_p:
      self._waited = True
      return self._say("wait")
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
      return self._say("propose_cancel", flight=str(self.table.reservation))
    verb = self._say(f"verb_{action.status}")
    if again:
      return self._say("propose_again", flight=str(action.flights[0]), verb=verb)
    f = next(f for f in self.table.flights if f.flight_number == action.flights[0])
    stops = f"{f.num_connections} connection{'' if f.num_connections == 1 else 's'}"
    return self._say(
        "propose", flight=str(f.flight_number), airline=f.airline,
        dep_date=f"{f.departure_month} {f.departure_day}", dep_hour=str(f.departure_time_num),
        ret_date=f"{f.return_month} {f.return_day}", ret_hour=str(f.return_time_num),
        cls=f.flight_class, stops=stops, price=str(f.price), verb=verb)

  def _submit(self, action: schema.Action) -> str:
    if self.flaw == "wrong_status":
      status = _WRONG_STATUS[action.status]
      flights = action.flights if status in ("book", "change") else ()
      action = dataclasses.replace(action, status=status, flights=flights)
    if self.flaw == "misspell_name":
      action = dataclasses.replace(action, name=_misspell(action.name, self.rng))
    self.action = action
    return f"{self._say(f'done_{action.status}')} {action_grammar.format_action(action)}"
