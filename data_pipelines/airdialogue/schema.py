"""Typed AirDialogue records, exactly as the official `data.json` / `kb.json` hold them.

The official files mix ints (prices, flight numbers, connections) and strings
(days, months); optional intent keys are *absent*, never null. These types keep
that distinction so that writing a record back produces the same JSON, and
unknown keys (`search_info`, `timestamps`, anything a future release adds) are
carried in `extra` instead of being dropped.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "June", "July", "Aug", "Sept", "Oct", "Nov", "Dec")
TIMES_OF_DAY = ("morning", "afternoon", "evening")
CLASSES = ("economy", "business")
GOALS = ("book", "change", "cancel")
STATUSES = ("book", "change", "cancel", "no_flight", "no_reservation")
MAX_PRICES = (200, 500, 1000, 5000)
CONNECTION_LIMITS = (0, 1, 2)  # 2 = "any number", i.e. no constraint in practice.
NORMAL_COST_AIRLINES = ("UA", "AA", "Delta", "Hawaiian")
LOW_COST_AIRLINES = ("Southwest", "Frontier", "JetBlue", "Spirit")
AIRLINES = NORMAL_COST_AIRLINES + LOW_COST_AIRLINES
AIRLINE_PREFERENCES = ("normal-cost",)
NO_RESERVATION = 0
FIRST_FLIGHT_NUMBER = 1000


def time_of_day(hour: int) -> str:
  """Official segmentation: hour < 3 or > 19 evening, 3..11 morning, 12..19 afternoon."""
  if hour < 3 or hour > 19:
    return "evening"
  if hour <= 11:
    return "morning"
  return "afternoon"


def airline_cost_type(airline: str) -> str:
  return "normal-cost" if airline in NORMAL_COST_AIRLINES else "low-cost"


@dataclasses.dataclass(frozen=True)
class Intent:
  """The customer's private goal. `None` means the key is absent (no constraint)."""

  name: str
  goal: str
  departure_airport: str
  return_airport: str
  departure_month: str
  departure_day: str
  return_month: str
  return_day: str
  max_price: int
  # Absent in the official files when the customer accepts any number of
  # connections (the toolkit drops the prior's value 2), hence optional.
  max_connections: int | None = None
  departure_time: str | None = None
  return_time: str | None = None
  flight_class: str | None = None  # JSON key "class".
  airline_preference: str | None = None
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(self):
      if f.name == "extra":
        continue
      value = getattr(self, f.name)
      if value is not None:
        out["class" if f.name == "flight_class" else f.name] = value
    out.update(self.extra)
    return out


@dataclasses.dataclass(frozen=True)
class Flight:
  """One row of the flight table (kb)."""

  flight_number: int
  airline: str
  departure_airport: str
  return_airport: str
  departure_month: str
  departure_day: str
  return_month: str
  return_day: str
  departure_time_num: int  # Hour of day, 0..23.
  return_time_num: int
  flight_class: str  # JSON key "class".
  num_connections: int
  price: int
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict[str, Any]:
    out = {
        "departure_airport": self.departure_airport,
        "return_airport": self.return_airport,
        "departure_month": self.departure_month,
        "return_month": self.return_month,
        "departure_day": self.departure_day,
        "return_day": self.return_day,
        "departure_time_num": self.departure_time_num,
        "return_time_num": self.return_time_num,
        "class": self.flight_class,
        "num_connections": self.num_connections,
        "price": self.price,
        "flight_number": self.flight_number,
        "airline": self.airline,
    }
    out.update(self.extra)
    return out


@dataclasses.dataclass(frozen=True)
class FlightTable:
  """One line of kb.json: the flights the agent can see and the customer's reservation."""

  flights: tuple[Flight, ...]
  reservation: int = NO_RESERVATION  # A flight number of `flights`, or 0.
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict[str, Any]:
    out = {"kb": [f.to_json() for f in self.flights], "reservation": self.reservation}
    out.update(self.extra)
    return out


@dataclasses.dataclass(frozen=True)
class Action:
  """A final action: `{"status", "name", "flight": [n] or []}`."""

  status: str
  name: str
  flights: tuple[int, ...] = ()  # JSON key "flight".
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict[str, Any]:
    out = {"status": self.status, "name": self.name, "flight": list(self.flights)}
    out.update(self.extra)
    return out


@dataclasses.dataclass(frozen=True)
class Sample:
  """One line of data.json together with its aligned kb.json line."""

  intent: Intent
  table: FlightTable | None  # None only when a reader was given no kb.json.
  dialogue: tuple[str, ...]  # "customer: ..." / "agent: ..." strings.
  action: Action | None = None
  expected_action: Action | None = None
  correct_sample: bool | None = None
  extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # timestamps, search_info, ...

  def data_json(self) -> dict[str, Any]:
    out: dict[str, Any] = {"intent": self.intent.to_json()}
    if self.action is not None:
      out["action"] = self.action.to_json()
    if self.expected_action is not None:
      out["expected_action"] = self.expected_action.to_json()
    out["dialogue"] = list(self.dialogue)
    if self.correct_sample is not None:
      out["correct_sample"] = self.correct_sample
    out.update(self.extra)
    return out
