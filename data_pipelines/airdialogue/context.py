"""Samples AirDialogue contexts (customer intent + flight table) with the official priors.

The priors and sampling procedure follow the official AirDialogue context
generator (docs/METHODS.md, AirDialogue rules), so the expected-status mix of a generated corpus
(book ~54%, no_flight ~26%, no_reservation ~18.5%) matches the real dataset.
All draws for a batch of contexts are made as numpy arrays from one seeded
Generator: 5,000 contexts x 30 flights is a handful of vectorized draws, and
the same seed always yields the same contexts.

Times are epoch seconds converted with numpy datetime64 arithmetic, which is
UTC by construction: the host's time zone never changes a month, day or hour.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from data_pipelines.airdialogue import schema

AIRPORTS = (
    "ATL", "AUS", "BNA", "BOS", "BWI", "CLE", "CLT", "DCA", "DEN", "DFW",
    "DTW", "EWR", "HNL", "HOU", "IAD", "IAH", "JFK", "LAS", "LAX", "LGA",
    "MCO", "MDW", "MIA", "MSP", "MSY", "OAK", "ORD", "PDX", "PHL", "PHX",
    "PIT", "SAN", "SEA", "SFO", "SJC", "SLC", "STL", "TPA",
)
FIRST_NAMES = (
    "Aaron", "Abigail", "Adam", "Alexander", "Alice", "Amanda", "Amy", "Andrew",
    "Angela", "Anna", "Anthony", "Ashley", "Benjamin", "Betty", "Brandon",
    "Brian", "Carol", "Catherine", "Charles", "Christopher", "Daniel", "David",
    "Deborah", "Dennis", "Donald", "Donna", "Dorothy", "Edward", "Elizabeth",
    "Emily", "Emma", "Eric", "Frank", "Gary", "George", "Gregory", "Hannah",
    "Helen", "Jacob", "James", "Janet", "Jason", "Jennifer", "Jessica", "John",
    "Joseph", "Joshua", "Karen", "Kenneth", "Kevin", "Kimberly", "Laura",
    "Linda", "Lisa", "Mark", "Mary", "Matthew", "Melissa", "Michael", "Nancy",
    "Nicholas", "Olivia", "Patricia", "Paul", "Rachel", "Raymond", "Rebecca",
    "Richard", "Robert", "Ronald", "Ruth", "Samuel", "Sandra", "Sarah",
    "Sharon", "Sophia", "Stephanie", "Steven", "Susan", "Thomas", "Timothy",
    "William",
)
LAST_NAMES = (
    "Adams", "Allen", "Anderson", "Baker", "Bennett", "Brooks", "Brown",
    "Campbell", "Carter", "Clark", "Collins", "Cook", "Cooper", "Cruz", "Davis",
    "Edwards", "Evans", "Flores", "Garcia", "Gomez", "Gonzalez", "Gray",
    "Green", "Hall", "Harris", "Hernandez", "Hill", "Hughes", "Jackson",
    "James", "Johnson", "Jones", "Kelly", "King", "Lee", "Lewis", "Lopez",
    "Martin", "Martinez", "Miller", "Mitchell", "Moore", "Morgan", "Morris",
    "Murphy", "Nelson", "Nguyen", "Parker", "Perez", "Peterson", "Phillips",
    "Price", "Ramirez", "Reed", "Rivera", "Roberts", "Robinson", "Rodriguez",
    "Rogers", "Ross", "Sanchez", "Scott", "Smith", "Stewart", "Taylor",
    "Thomas", "Thompson", "Torres", "Turner", "Walker", "Ward", "White",
    "Williams", "Wilson", "Wood", "Wright", "Young",
)

NUM_CANDIDATE_AIRPORTS = 3
_BASE_EPOCH_S = 1_300_000_000  # The toolkit's earliest departure (March 2011).
_YEAR_S = 365 * 24 * 3600
_RETURN_AFTER_S = 2 * 24 * 3600
_FLIGHT_TIME_STD_S = 12 * 3600

# Intent priors; None = the customer has no preference (the key is absent).
_TIME_PREFS = (None, "morning", "afternoon", "evening")
_TIME_PREF_P = (0.90, 0.03, 0.04, 0.03)
_CLASS_PREFS = (None, "economy", "business")
_CLASS_PREF_P = (0.90, 0.07, 0.03)
_CONNECTIONS_P = (0.07, 0.90, 0.03)  # For 0, 1, 2 connections (intent and kb).
_AIRLINE_PREF_P = 0.05
_GOAL_P = (0.80, 0.10, 0.10)

# Flight-table priors.
_FLIGHT_CLASS_P = (0.9, 0.1)  # schema.CLASSES order.
_BASE_PRICE = np.array([210.0, 650.0])  # Economy, business.
_PRICE_REL_STD = np.array([0.2, 0.4, 0.6])  # For 0, 1, 2 connections.
_MIN_PRICE = 100
_RESERVATION_P = 0.10
_DAY_STRINGS = tuple(str(day) for day in range(32))  # Unpadded, as the official files write days.


def _lookup(names: Sequence[Any], codes: np.ndarray) -> list:
  """`names[code]` for every code, as (nested) Python lists."""
  return np.asarray(names, dtype=object)[codes].tolist()


def _utc_month_day_hour(epoch_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Month index (0..11), day of month (1..31) and hour (0..23) of UTC epoch seconds."""
  seconds = epoch_s.astype("datetime64[s]")
  months = seconds.astype("datetime64[M]")
  month_idx = months.astype(np.int64) % 12
  day = (seconds.astype("datetime64[D]") - months.astype("datetime64[D]")).astype(np.int64) + 1
  hour = (epoch_s // 3600) % 24
  return month_idx, day, hour


def _airport_pairs(rng: np.random.Generator,
                   shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
  """Indices into the candidate airports, origin != destination, as the toolkit draws them.

  The toolkit shifts a colliding destination to the next candidate rather than
  redrawing, which skews destinations; kept because it sets how often a flight's
  airports match the customer's.
  """
  origin = rng.integers(0, NUM_CANDIDATE_AIRPORTS, shape)
  dest = rng.integers(0, NUM_CANDIDATE_AIRPORTS, shape)
  dest = np.where(dest == origin, (dest + 1) % NUM_CANDIDATE_AIRPORTS, dest)
  return origin, dest


def _price(rng: np.random.Generator, class_idx: np.ndarray, connections: np.ndarray) -> np.ndarray:
  base = _BASE_PRICE[class_idx]
  raw = rng.normal(base, base * _PRICE_REL_STD[connections])
  # int() truncates toward zero twice in the toolkit; for the positive prices
  # that survive the floor of 100 this is flooring to a multiple of 100.
  hundreds = np.trunc(np.trunc(raw) / 100).astype(np.int64)
  return np.maximum(_MIN_PRICE, hundreds * 100)


def sample_contexts(
    rng: np.random.Generator,
    n: int,
    kb_size: int = 30,
    airports: Sequence[str] | None = None,
) -> list[tuple[schema.Intent, schema.FlightTable]]:
  """Draws `n` independent contexts; `airports` is the pool the 3 candidates come from."""
  codes = list(AIRPORTS if airports is None else airports)
  if len(set(codes)) != len(codes) or len(codes) < NUM_CANDIDATE_AIRPORTS:
    raise ValueError(f"airports must hold >= {NUM_CANDIDATE_AIRPORTS} distinct codes, got {codes}")
  pool = np.asarray(codes, dtype=object)
  if kb_size < 1:
    raise ValueError(f"kb_size must be >= 1, got {kb_size}")
  if n < 0:
    raise ValueError(f"n must be >= 0, got {n}")

  # Customer: candidate airports, trip, preferences, goal, name.
  candidates_Nx3 = pool[rng.random((n, len(pool))).argsort(axis=1)[:, :NUM_CANDIDATE_AIRPORTS]]
  origin_N, dest_N = _airport_pairs(rng, (n,))
  departure_s_N = _BASE_EPOCH_S + rng.integers(0, _YEAR_S, n, endpoint=True)
  return_s_N = departure_s_N + _RETURN_AFTER_S
  dep_time_N = rng.choice(len(_TIME_PREFS), n, p=_TIME_PREF_P)
  ret_time_N = rng.choice(len(_TIME_PREFS), n, p=_TIME_PREF_P)
  class_pref_N = rng.choice(len(_CLASS_PREFS), n, p=_CLASS_PREF_P)
  # Economy customers never cap at 5000, business ones never at 200.
  price_lo_N = np.where(class_pref_N == 2, 1, 0)
  price_hi_N = np.where(class_pref_N == 1, 3, 4)
  max_price_N = np.asarray(schema.MAX_PRICES)[rng.integers(price_lo_N, price_hi_N)]
  max_conn_N = rng.choice(3, n, p=_CONNECTIONS_P)
  normal_cost_N = (rng.random(n) < _AIRLINE_PREF_P).astype(np.int64)
  goal_N = rng.choice(len(schema.GOALS), n, p=_GOAL_P)
  first_N = rng.integers(0, len(FIRST_NAMES), n)
  last_N = rng.integers(0, len(LAST_NAMES), n)

  # Flight table, K = kb_size rows per context.
  shape = (n, kb_size)
  f_origin_NxK, f_dest_NxK = _airport_pairs(rng, shape)
  t1_NxK = rng.normal(departure_s_N[:, None], _FLIGHT_TIME_STD_S, shape)
  t2_NxK = rng.normal(return_s_N[:, None], _FLIGHT_TIME_STD_S, shape)
  f_dep_s_NxK = np.floor(np.minimum(t1_NxK, t2_NxK)).astype(np.int64)
  f_ret_s_NxK = np.floor(np.maximum(t1_NxK, t2_NxK)).astype(np.int64)
  f_class_NxK = rng.choice(len(schema.CLASSES), shape, p=_FLIGHT_CLASS_P)
  f_conn_NxK = rng.choice(3, shape, p=_CONNECTIONS_P)
  f_price_NxK = _price(rng, f_class_NxK, f_conn_NxK)
  f_airline_NxK = rng.integers(0, len(schema.AIRLINES), shape)
  has_res_N = rng.random(n) < _RESERVATION_P
  res_idx_N = rng.integers(0, kb_size, n)
  reservation_N = np.where(has_res_N, schema.FIRST_FLIGHT_NUMBER + res_idx_N, schema.NO_RESERVATION)

  dep_month_N, dep_day_N, _ = _utc_month_day_hour(departure_s_N)
  ret_month_N, ret_day_N, _ = _utc_month_day_hour(return_s_N)
  f_dep_month_NxK, f_dep_day_NxK, f_dep_hour_NxK = _utc_month_day_hour(f_dep_s_NxK)
  f_ret_month_NxK, f_ret_day_NxK, f_ret_hour_NxK = _utc_month_day_hour(f_ret_s_NxK)

  # Map codes to Python strings in bulk, then build the records from plain lists:
  # the per-record loop then only calls constructors.
  flight_columns = [
      _lookup(schema.AIRLINES, f_airline_NxK),
      np.take_along_axis(candidates_Nx3, f_origin_NxK, axis=1).tolist(),
      np.take_along_axis(candidates_Nx3, f_dest_NxK, axis=1).tolist(),
      _lookup(schema.MONTHS, f_dep_month_NxK),
      _lookup(_DAY_STRINGS, f_dep_day_NxK),
      _lookup(schema.MONTHS, f_ret_month_NxK),
      _lookup(_DAY_STRINGS, f_ret_day_NxK),
      f_dep_hour_NxK.tolist(),
      f_ret_hour_NxK.tolist(),
      _lookup(schema.CLASSES, f_class_NxK),
      f_conn_NxK.tolist(),
      f_price_NxK.tolist(),
  ]
  intent_columns = dict(
      name=[f"{first} {last}" for first, last in zip(_lookup(FIRST_NAMES, first_N),
                                                     _lookup(LAST_NAMES, last_N))],
      goal=_lookup(schema.GOALS, goal_N),
      departure_airport=candidates_Nx3[np.arange(n), origin_N].tolist(),
      return_airport=candidates_Nx3[np.arange(n), dest_N].tolist(),
      departure_month=_lookup(schema.MONTHS, dep_month_N),
      departure_day=_lookup(_DAY_STRINGS, dep_day_N),
      return_month=_lookup(schema.MONTHS, ret_month_N),
      return_day=_lookup(_DAY_STRINGS, ret_day_N),
      max_price=max_price_N.tolist(),
      max_connections=_lookup((0, 1, None), max_conn_N),  # 2 = any: the key is absent.
      departure_time=_lookup(_TIME_PREFS, dep_time_N),
      return_time=_lookup(_TIME_PREFS, ret_time_N),
      flight_class=_lookup(_CLASS_PREFS, class_pref_N),
      airline_preference=_lookup((None, schema.AIRLINE_PREFERENCES[0]), normal_cost_N),
  )
  flight_numbers = range(schema.FIRST_FLIGHT_NUMBER, schema.FIRST_FLIGHT_NUMBER + kb_size)
  reservations = reservation_N.tolist()
  contexts = []
  for i in range(n):
    intent = schema.Intent(**{k: column[i] for k, column in intent_columns.items()})
    # Positional in schema.Flight field order (flight_number, airline, ..., price).
    flights = tuple(map(schema.Flight, flight_numbers, *(column[i] for column in flight_columns)))
    contexts.append((intent, schema.FlightTable(flights=flights, reservation=reservations[i])))
  return contexts


def sample_context(
    rng: np.random.Generator,
    kb_size: int = 30,
    airports: Sequence[str] | None = None,
) -> tuple[schema.Intent, schema.FlightTable]:
  """One context; equal to `sample_contexts(rng, 1, kb_size, airports)[0]`."""
  return sample_contexts(rng, 1, kb_size, airports)[0]
