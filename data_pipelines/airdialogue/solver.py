"""The ground-truth final action of an AirDialogue context (the official rules).

Constraints are checked on whole columns of the flight table at once, so the
same mask serves the expected action, agents that search the table, and CALM
relabeling (which asks "which flights would this intent accept?").
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import numpy as np

from data_pipelines.airdialogue import schema


class FlightColumns(NamedTuple):
  """The flight table as K-long numpy arrays, one per field the rules compare."""

  flight_number_K: np.ndarray
  price_K: np.ndarray
  num_connections_K: np.ndarray
  departure_segment_K: np.ndarray  # Time of day of departure_time_num.
  return_segment_K: np.ndarray
  airline_cost_K: np.ndarray  # "normal-cost" / "low-cost".
  flight_class_K: np.ndarray
  departure_airport_K: np.ndarray
  return_airport_K: np.ndarray
  departure_month_K: np.ndarray
  departure_day_K: np.ndarray
  return_month_K: np.ndarray
  return_day_K: np.ndarray


# The official segmentation, tabulated once from `schema.time_of_day`.
_SEGMENT_OF_HOUR = np.array([schema.time_of_day(hour) for hour in range(24)])
# Table fields in FlightColumns order, read in one pass per flight.
_READ_FLIGHT = operator.attrgetter(
    "flight_number", "price", "num_connections", "departure_time_num", "return_time_num",
    "airline", "flight_class", "departure_airport", "return_airport", "departure_month",
    "departure_day", "return_month", "return_day")


def day_segments(hour_K: np.ndarray) -> np.ndarray:
  """Vectorized `schema.time_of_day` for hours 0..23."""
  return _SEGMENT_OF_HOUR[np.asarray(hour_K, dtype=np.int64)]


def flight_columns(table: schema.FlightTable) -> FlightColumns:
  """The table as arrays; build it once when one table is searched many times (agents)."""
  (numbers, prices, connections, dep_hours, ret_hours, airlines, classes,
   *exact) = list(zip(*map(_READ_FLIGHT, table.flights))) or [()] * 13
  normal_cost = [airline in schema.NORMAL_COST_AIRLINES for airline in airlines]
  return FlightColumns(
      np.array(numbers, dtype=np.int64),
      np.array(prices, dtype=np.int64),
      np.array(connections, dtype=np.int64),
      day_segments(dep_hours),
      day_segments(ret_hours),
      np.where(np.array(normal_cost, dtype=bool), "normal-cost", "low-cost"),
      np.array(classes, dtype=object),
      *(np.array(column, dtype=object) for column in exact),
  )


def matching_flights(intent: schema.Intent,
                     table: schema.FlightTable | FlightColumns) -> np.ndarray:
  """Bool mask over the table: the flights meeting every constraint the intent states.

  Absent optional constraints (None) accept every flight, as in the toolkit.
  """
  cols = table if isinstance(table, FlightColumns) else flight_columns(table)
  mask_K = (
      (cols.departure_airport_K == intent.departure_airport)
      & (cols.return_airport_K == intent.return_airport)
      & (cols.departure_month_K == intent.departure_month)
      & (cols.departure_day_K == intent.departure_day)
      & (cols.return_month_K == intent.return_month)
      & (cols.return_day_K == intent.return_day)
      & (cols.price_K <= intent.max_price))
  if intent.max_connections is not None:
    mask_K &= cols.num_connections_K <= intent.max_connections
  if intent.departure_time is not None:
    mask_K &= cols.departure_segment_K == intent.departure_time
  if intent.return_time is not None:
    mask_K &= cols.return_segment_K == intent.return_time
  if intent.flight_class is not None:
    mask_K &= cols.flight_class_K == intent.flight_class
  if intent.airline_preference is not None:
    mask_K &= cols.airline_cost_K == intent.airline_preference
  return np.asarray(mask_K, dtype=bool)


def cheapest_matching(intent: schema.Intent,
                      table: schema.FlightTable | FlightColumns) -> tuple[int, ...]:
  """Every matching flight tied at the lowest price, in flight-number order (may be empty)."""
  cols = table if isinstance(table, FlightColumns) else flight_columns(table)
  mask_K = matching_flights(intent, cols)
  if not mask_K.any():
    return ()
  prices = cols.price_K[mask_K]
  numbers = cols.flight_number_K[mask_K]
  return tuple(np.sort(numbers[prices == prices.min()]).tolist())


def standardize_name(name: str) -> str:
  """The toolkit's action-name cleanup: strip, then keep letters and spaces only."""
  return "".join(ch for ch in name.strip() if ch.isalpha() or ch == " ")


def expected_action(intent: schema.Intent, table: schema.FlightTable) -> schema.Action:
  """The official ground truth.

  book, or change with a reservation: the cheapest matching flights (all ties),
  else no_flight. change or cancel without a reservation: no_reservation.
  cancel with one: cancel, with an empty flight list (the toolkit never lists
  the cancelled flight).
  """
  name = standardize_name(intent.name)
  has_reservation = table.reservation != schema.NO_RESERVATION
  if intent.goal == "book" or (intent.goal == "change" and has_reservation):
    flights = cheapest_matching(intent, table)
    if not flights:
      return schema.Action(status="no_flight", name=name)
    return schema.Action(status=intent.goal, name=name, flights=flights)
  if intent.goal in ("change", "cancel"):
    if not has_reservation:
      return schema.Action(status="no_reservation", name=name)
    return schema.Action(status="cancel", name=name)
  raise ValueError(f"unknown goal {intent.goal!r}; expected one of {schema.GOALS}")
