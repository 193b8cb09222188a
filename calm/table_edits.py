"""Constructive edits of a flight table that make a chosen final action the expected one.

CALM's task relabeling gives a dialogue a table under which what the agent
submitted is correct. The reference draws whole tables until the solver
agrees (hundreds of tries, often failing for `change`); here the table is
edited directly, as little as the official rules require:

  book / change [f]  every other flight the intent accepts that is cheaper
                     than f is made to violate a constraint or to cost more
                     than f; flights tied with f stay (ties are all expected).
                     change needs a reservation: one is set if there is none.
  no_flight          every flight the intent accepts is made to violate one
                     of its constraints (a price above the cap counts).
                     change needs a reservation: one is set if there is none.
  cancel             a reservation is set if there is none.
  no_reservation     the reservation is cleared.

The submitted flight's row is never edited, so whatever the dialogue said
about it (price, times, airline) stays true. Only flights that compete are
touched; flights the intent already rejects keep their rows. Edits change one
field each, to a value the generator could have drawn, and the caller's rng
decides which, so a seed fixes the result. Nothing here reads a clock or a
time zone.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import numpy as np

from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import solver

_HOURS = np.arange(24)
_SEGMENT_OF_HOUR = solver.day_segments(_HOURS)
_MAX_CONNECTIONS = max(schema.CONNECTION_LIMITS)  # The most connections a generated flight has.
_PRICE_STEP = 100  # Generated prices are multiples of 100, at least 100.


class EditedTable(NamedTuple):
  """A relabeled table and the flight numbers whose rows were changed, in table order."""

  table: schema.FlightTable
  edited_flights: tuple[int, ...]


def _price_above(floor: int, rng: np.random.Generator) -> int:
  """A generator-like price (a multiple of 100) strictly above `floor`."""
  return (floor // _PRICE_STEP + 1 + int(rng.integers(0, 3))) * _PRICE_STEP


def _hour_in(segment: str, wanted: bool, rng: np.random.Generator) -> int:
  """An hour of the day inside (wanted) or outside `segment`."""
  hours = _HOURS[(_SEGMENT_OF_HOUR == segment) == wanted]
  return int(hours[rng.integers(len(hours))])


def _other_airports(field: str, flight: schema.Flight, intent: schema.Intent,
                    airports: Sequence[str]) -> list[str]:
  """Airports for `field` of `flight` that the intent rejects, keeping origin != destination."""
  other_end = flight.return_airport if field == "departure_airport" else flight.departure_airport
  return [a for a in airports if a != getattr(intent, field) and a != other_end]


def displaced(flight: schema.Flight, intent: schema.Intent, price_floor: int,
              rng: np.random.Generator, airports: Sequence[str]) -> schema.Flight:
  """A copy of `flight` with one field changed so that it no longer competes.

  Either its price rises above `price_floor` (the submitted flight's price,
  or the intent's cap when no flight may match), or one constraint the
  intent states fails: an airport of the table's others, more connections
  than allowed, an hour outside the wanted time of day, the other class, or
  a low-cost airline. The kind is drawn uniformly among those available.
  """
  edits = {"price": lambda: {"price": _price_above(price_floor, rng)}}
  for field in ("departure_airport", "return_airport"):
    choices = _other_airports(field, flight, intent, airports)
    if choices:
      edits[field] = lambda field=field, choices=choices: {
          field: choices[rng.integers(len(choices))]}
  if intent.max_connections is not None and intent.max_connections < _MAX_CONNECTIONS:
    edits["num_connections"] = lambda: {
        "num_connections": int(rng.integers(intent.max_connections + 1, _MAX_CONNECTIONS + 1))}
  if intent.departure_time is not None:
    edits["departure_time_num"] = lambda: {
        "departure_time_num": _hour_in(intent.departure_time, False, rng)}
  if intent.return_time is not None:
    edits["return_time_num"] = lambda: {"return_time_num": _hour_in(intent.return_time, False, rng)}
  if intent.flight_class is not None:
    edits["flight_class"] = lambda: {
        "flight_class": next(c for c in schema.CLASSES if c != intent.flight_class)}
  if intent.airline_preference is not None:
    edits["airline"] = lambda: {
        "airline": schema.LOW_COST_AIRLINES[rng.integers(len(schema.LOW_COST_AIRLINES))]}
  kinds = list(edits)
  return dataclasses.replace(flight, **edits[kinds[rng.integers(len(kinds))]]())


def conforming(flight: schema.Flight, intent: schema.Intent,
               rng: np.random.Generator) -> schema.Flight:
  """A copy of `flight` that meets every constraint of `intent`, changing only what fails.

  Used for the submitted flight when no kb gives its row: the trip becomes the
  intent's, and a price, connection count, hour, class or airline the intent
  rejects is redrawn among the values it accepts.
  """
  changes = {field: getattr(intent, field) for field in (
      "departure_airport", "return_airport", "departure_month", "departure_day", "return_month",
      "return_day")}
  if flight.price > intent.max_price:
    top = intent.max_price // _PRICE_STEP
    changes["price"] = (int(rng.integers(1, top + 1)) * _PRICE_STEP if top >= 1
                        else intent.max_price)
  if intent.max_connections is not None and flight.num_connections > intent.max_connections:
    changes["num_connections"] = int(rng.integers(0, intent.max_connections + 1))
  for pref, field in ((intent.departure_time, "departure_time_num"),
                      (intent.return_time, "return_time_num")):
    if pref is not None and schema.time_of_day(getattr(flight, field)) != pref:
      changes[field] = _hour_in(pref, True, rng)
  if intent.flight_class is not None:
    changes["flight_class"] = intent.flight_class
  if (intent.airline_preference is not None
      and schema.airline_cost_type(flight.airline) != intent.airline_preference):
    changes["airline"] = schema.NORMAL_COST_AIRLINES[rng.integers(len(schema.NORMAL_COST_AIRLINES))]
  return dataclasses.replace(flight, **changes)


def needs_reservation(status: str, goal: str) -> bool:
  """Whether the solver gives `status` for `goal` only when the customer holds a reservation."""
  return status == "cancel" or (goal == "change" and status in ("change", "no_flight"))


def _reservation_for(status: str, goal: str, table: schema.FlightTable, submitted: int | None,
                     rng: np.random.Generator) -> int:
  """The reservation under which `status` is expected for `goal`: kept when it already fits."""
  if status == "no_reservation":
    return schema.NO_RESERVATION
  if not needs_reservation(status, goal) or table.reservation != schema.NO_RESERVATION:
    return table.reservation
  # A change moves an existing booking to the submitted flight, so the booking is another one.
  choices = [f.flight_number for f in table.flights if f.flight_number != submitted]
  choices = choices or [f.flight_number for f in table.flights]
  return choices[rng.integers(len(choices))]


def table_for_action(intent: schema.Intent, table: schema.FlightTable, action: schema.Action,
                     rng: np.random.Generator) -> EditedTable:
  """`table` edited so that `solver.expected_action(intent, table)` accepts `action`.

  `action` must be reachable for the intent (relabel.unreachable_reason is
  None): its status one the goal can lead to, a flight for book and change
  only, and that flight's row one the intent accepts. Its name is not read.
  """
  submitted = action.flights[0] if action.flights else None
  cols = solver.flight_columns(table)
  if action.status in ("book", "change"):
    price_floor = int(cols.price_K[cols.flight_number_K == submitted][0])
    competing_K = (solver.matching_flights(intent, cols) & (cols.price_K < price_floor)
                   & (cols.flight_number_K != submitted))
  elif action.status == "no_flight":
    price_floor = intent.max_price
    competing_K = solver.matching_flights(intent, cols)
  else:
    price_floor, competing_K = 0, np.zeros(len(table.flights), dtype=bool)
  flights = list(table.flights)
  if competing_K.any():
    airports = sorted(set(cols.departure_airport_K.tolist()) | set(cols.return_airport_K.tolist()))
    for k in np.flatnonzero(competing_K).tolist():
      flights[k] = displaced(flights[k], intent, price_floor, rng, airports)
  reservation = _reservation_for(action.status, intent.goal, table, submitted, rng)
  edited = tuple(cols.flight_number_K[competing_K].tolist())
  return EditedTable(
      dataclasses.replace(table, flights=tuple(flights), reservation=reservation), edited)
