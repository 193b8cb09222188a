"""The expected action follows the official rules, edge cases included."""

import dataclasses

import numpy as np
import pytest

from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import solver

INTENT = schema.Intent(
    name="Jane Doe", goal="book", departure_airport="SFO", return_airport="JFK",
    departure_month="May", departure_day="4", return_month="May", return_day="6",
    max_price=500, max_connections=1)


def _flight(number: int, **changes) -> schema.Flight:
  """A flight that meets every constraint of INTENT unless `changes` say otherwise."""
  base = schema.Flight(
      flight_number=number, airline="UA", departure_airport="SFO", return_airport="JFK",
      departure_month="May", departure_day="4", return_month="May", return_day="6",
      departure_time_num=8, return_time_num=14, flight_class="economy", num_connections=1,
      price=300)
  return dataclasses.replace(base, **changes)


def _table(*flights: schema.Flight, reservation: int = 0) -> schema.FlightTable:
  return schema.FlightTable(flights=flights, reservation=reservation)


@pytest.mark.parametrize("leg", ["departure", "return"])
def test_time_of_day_boundaries(leg):
  hours = (2, 3, 11, 12, 19, 20)
  table = _table(*(_flight(1000 + i, **{f"{leg}_time_num": h}) for i, h in enumerate(hours)))
  expect = {"evening": [2, 20], "morning": [3, 11], "afternoon": [12, 19]}
  for segment, ok_hours in expect.items():
    intent = dataclasses.replace(INTENT, **{f"{leg}_time": segment})
    mask = solver.matching_flights(intent, table)
    assert [h for h, m in zip(hours, mask) if m] == ok_hours, segment
    assert all(schema.time_of_day(h) == segment for h in ok_hours)


def test_price_equal_to_max_is_accepted():
  table = _table(_flight(1000, price=600), _flight(1001, price=500))
  assert solver.matching_flights(INTENT, table).tolist() == [False, True]
  assert solver.expected_action(INTENT, table).flights == (1001,)


def test_ties_return_every_cheapest_flight_in_number_order():
  table = _table(_flight(1003, price=200), _flight(1000, price=300), _flight(1001, price=200),
                 _flight(1002, price=100, num_connections=2), _flight(1004, price=200))
  action = solver.expected_action(INTENT, table)
  assert action == schema.Action(status="book", name="Jane Doe", flights=(1001, 1003, 1004))


@pytest.mark.parametrize("field,value", [
    ("departure_airport", "LAX"), ("return_airport", "LAX"), ("departure_month", "June"),
    ("departure_day", "5"), ("return_month", "Apr"), ("return_day", "7"),
    ("num_connections", 2), ("price", 1000),
])
def test_each_exact_constraint_excludes(field, value):
  table = _table(_flight(1000), _flight(1001, **{field: value}))
  assert solver.matching_flights(INTENT, table).tolist() == [True, False]


def test_optional_constraints():
  table = _table(_flight(1000, airline="Spirit", flight_class="business", num_connections=2),
                 _flight(1001, airline="Delta"))
  no_cap = dataclasses.replace(INTENT, max_connections=None)
  assert solver.matching_flights(no_cap, table).tolist() == [True, True]
  assert solver.matching_flights(
      dataclasses.replace(no_cap, airline_preference="normal-cost"),
      table).tolist() == [False, True]
  assert solver.matching_flights(
      dataclasses.replace(no_cap, flight_class="business"), table).tolist() == [True, False]
  assert solver.matching_flights(
      dataclasses.replace(INTENT, max_connections=0), table).tolist() == [False, False]


def test_goals_with_and_without_reservation():
  table = _table(_flight(1000, price=400), _flight(1001, price=300))
  reserved = dataclasses.replace(table, reservation=1000)
  change = dataclasses.replace(INTENT, goal="change")
  cancel = dataclasses.replace(INTENT, goal="cancel")
  assert solver.expected_action(change, reserved) == schema.Action("change", "Jane Doe", (1001,))
  assert solver.expected_action(change, table) == schema.Action("no_reservation", "Jane Doe")
  assert solver.expected_action(cancel, reserved) == schema.Action("cancel", "Jane Doe")
  assert solver.expected_action(cancel, table) == schema.Action("no_reservation", "Jane Doe")
  # A reservation does not matter for booking.
  assert solver.expected_action(INTENT, reserved) == schema.Action("book", "Jane Doe", (1001,))
  expensive = _table(_flight(1000, price=900), reservation=1000)
  assert solver.expected_action(INTENT, expensive) == schema.Action("no_flight", "Jane Doe")
  assert solver.expected_action(change, expensive) == schema.Action("no_flight", "Jane Doe")


def test_name_cleanup_matches_toolkit():
  intent = dataclasses.replace(INTENT, name="  Mary O'Neil. ")
  assert solver.expected_action(intent, _table(_flight(1000))).name == "Mary ONeil"


def test_unknown_goal_raises():
  with pytest.raises(ValueError, match="goal"):
    solver.expected_action(dataclasses.replace(INTENT, goal="upgrade"), _table(_flight(1000)))


def _reference_match(intent: schema.Intent, f: schema.Flight) -> bool:
  """The toolkit's per-flight check, written out field by field."""
  return (f.departure_airport == intent.departure_airport
          and f.return_airport == intent.return_airport
          and f.departure_month == intent.departure_month
          and f.departure_day == intent.departure_day
          and f.return_month == intent.return_month
          and f.return_day == intent.return_day
          and f.price <= intent.max_price
          and (intent.max_connections is None or f.num_connections <= intent.max_connections)
          and intent.departure_time in (None, schema.time_of_day(f.departure_time_num))
          and intent.return_time in (None, schema.time_of_day(f.return_time_num))
          and intent.flight_class in (None, f.flight_class)
          and intent.airline_preference in (None, schema.airline_cost_type(f.airline)))


def test_vectorized_mask_equals_per_flight_reference():
  rng = np.random.default_rng(5)
  n_matches = 0
  for intent, table in context.sample_contexts(rng, 400):
    # Widen the intent so that optional constraints are exercised often.
    intent = dataclasses.replace(
        intent, departure_time=rng.choice([None, *schema.TIMES_OF_DAY]),
        flight_class=rng.choice([None, *schema.CLASSES]),
        airline_preference=rng.choice([None, "normal-cost"]))
    mask = solver.matching_flights(intent, table)
    assert mask.tolist() == [_reference_match(intent, f) for f in table.flights]
    n_matches += mask.sum()
  assert n_matches > 100


def test_empty_table():
  assert solver.matching_flights(INTENT, _table()).shape == (0,)
  assert solver.expected_action(INTENT, _table()) == schema.Action("no_flight", "Jane Doe")
