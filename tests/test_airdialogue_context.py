"""The context generator reproduces the official priors and their expected-status mix."""

import collections
import datetime
import os
import time

import numpy as np
import pytest

from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import solver

N_CONTEXTS = 20_000


@pytest.fixture(scope="module")
def contexts():
  return context.sample_contexts(np.random.default_rng(1234), N_CONTEXTS)


def test_expected_status_mix_matches_official(contexts):
  statuses = collections.Counter(solver.expected_action(i, t).status for i, t in contexts)
  share = {k: 100 * v / N_CONTEXTS for k, v in statuses.items()}
  for status, official in (("book", 54), ("no_flight", 26), ("no_reservation", 18.5),
                           ("cancel", 1.0), ("change", 0.6)):
    assert abs(share.get(status, 0.0) - official) <= (2 if official > 5 else 0.5), (status, share)


def test_cheapest_set_is_usually_one_flight(contexts):
  flights = [solver.expected_action(i, t).flights for i, t in contexts[:5000]]
  booked = [f for f in flights if f]
  assert 0.64 <= sum(len(f) == 1 for f in booked) / len(booked) <= 0.74


def test_intent_priors(contexts):
  intents = [i for i, _ in contexts]
  goals = collections.Counter(i.goal for i in intents)
  assert abs(goals["book"] / N_CONTEXTS - 0.8) < 0.015
  assert abs(goals["change"] / N_CONTEXTS - 0.1) < 0.01
  no_time_pref = sum(i.departure_time is None for i in intents) / N_CONTEXTS
  assert abs(no_time_pref - 0.9) < 0.01
  assert abs(sum(i.max_connections == 1 for i in intents) / N_CONTEXTS - 0.9) < 0.01
  assert abs(sum(i.max_connections is None for i in intents) / N_CONTEXTS - 0.03) < 0.005
  assert abs(sum(i.airline_preference is not None for i in intents) / N_CONTEXTS - 0.05) < 0.007
  for i in intents:
    assert i.departure_airport != i.return_airport
    if i.flight_class == "economy":
      assert i.max_price in (200, 500, 1000)
    elif i.flight_class == "business":
      assert i.max_price in (500, 1000, 5000)
    else:
      assert i.max_price in schema.MAX_PRICES
  assert len({i.name for i in intents}) > 2000


def _plus_two_days(month: str, day: str, year: int) -> tuple[str, str] | None:
  try:
    date = datetime.date(year, schema.MONTHS.index(month) + 1, int(day))
  except ValueError:  # Feb 29 in a non-leap year.
    return None
  later = date + datetime.timedelta(days=2)
  return schema.MONTHS[later.month - 1], str(later.day)


def test_return_two_days_after_departure(contexts):
  for intent, _ in contexts[:2000]:
    # Departures fall in 2011-03..2012-03; the year is not in the intent.
    returns = {_plus_two_days(intent.departure_month, intent.departure_day, year)
               for year in (2011, 2012)}
    assert (intent.return_month, intent.return_day) in returns, intent


def test_flight_table_priors(contexts):
  flights = [f for _, t in contexts[:3000] for f in t.flights]
  for intent, table in contexts[:3000]:
    assert [f.flight_number for f in table.flights] == list(range(1000, 1030))
    assert table.reservation == 0 or 1000 <= table.reservation < 1030
    airports = {intent.departure_airport, intent.return_airport}
    for f in table.flights:
      airports |= {f.departure_airport, f.return_airport}
      assert f.departure_airport != f.return_airport
    assert len(airports) <= 3
  prices = np.array([f.price for f in flights])
  assert (prices % 100 == 0).all() and prices.min() == 100
  assert abs(np.mean([f.flight_class == "economy" for f in flights]) - 0.9) < 0.01
  assert abs(np.mean([f.num_connections == 1 for f in flights]) - 0.9) < 0.01
  assert collections.Counter(f.airline for f in flights).keys() == set(schema.AIRLINES)
  assert all(0 <= f.departure_time_num <= 23 for f in flights)
  econ_direct = [f.price for f in flights if f.flight_class == "economy" and f.num_connections == 0]
  # Floor of N(210, 42) to hundreds: mostly 200, sometimes 100.
  assert 0.5 < np.mean(np.array(econ_direct) == 200) < 0.65
  reserved = np.mean([t.reservation != 0 for _, t in contexts])
  assert abs(reserved - 0.1) < 0.01


def test_same_seed_same_contexts_and_single_equals_batch():
  a = context.sample_contexts(np.random.default_rng(7), 20, kb_size=5)
  b = context.sample_contexts(np.random.default_rng(7), 20, kb_size=5)
  c = context.sample_contexts(np.random.default_rng(8), 20, kb_size=5)
  assert a == b and a != c
  assert context.sample_context(np.random.default_rng(7), kb_size=5) == \
      context.sample_contexts(np.random.default_rng(7), 1, kb_size=5)[0]
  assert all(len(t.flights) == 5 for _, t in a)


def test_dates_and_hours_are_utc_whatever_the_local_zone():
  epoch_s = np.random.default_rng(0).integers(1_300_000_000, 1_400_000_000, 500)
  months, days, hours = context._utc_month_day_hour(epoch_s)
  for t, m, d, h in zip(epoch_s.tolist(), months, days, hours):
    utc = datetime.datetime.fromtimestamp(t, datetime.timezone.utc)
    assert (utc.month - 1, utc.day, utc.hour) == (m, d, h)
  old = os.environ.get("TZ")
  try:
    os.environ["TZ"] = "Pacific/Kiritimati"
    time.tzset()
    shifted = context.sample_contexts(np.random.default_rng(3), 10)
  finally:
    if old is None:
      del os.environ["TZ"]
    else:
      os.environ["TZ"] = old
    time.tzset()
  assert shifted == context.sample_contexts(np.random.default_rng(3), 10)


def test_airport_pool_argument():
  intent, table = context.sample_context(np.random.default_rng(0), airports=("SFO", "JFK", "ORD"))
  used = {intent.departure_airport, intent.return_airport}
  used |= {a for f in table.flights for a in (f.departure_airport, f.return_airport)}
  assert used <= {"SFO", "JFK", "ORD"}
  with pytest.raises(ValueError, match="airports"):
    context.sample_context(np.random.default_rng(0), airports=("SFO", "JFK"))
  assert len(context.AIRPORTS) >= 30
  assert len(context.FIRST_NAMES) >= 50 and len(context.LAST_NAMES) >= 50
