"""A flight table drawn around a given intent, for dialogues that come without a kb.

Relabeling needs a table to edit. When only `data.json` is given, a context
is drawn from the official generator (`context.sample_context`: its priors
for classes, connections, prices, airlines, hours and the reservation) and
moved onto the dialogue's intent: the generated customer's airports become
the intent's (the third candidate becomes another airport), and every
flight's dates keep their offset in days from the generated customer's
dates. The table then relates to the intent as a generated one relates to
its own customer. Dates are shifted with numpy datetime64, which is UTC by
construction; a leap year is the frame, so that 29 Feb is a date.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import schema

_FRAME_YEAR = 2012  # A leap year: every (month, day) of the official files is a date in it.
_DAYS_IN_FRAME = 366


def _date(month: str, day: str) -> np.datetime64 | None:
  """(month, day) as a date of the frame year; None for a day the month lacks (e.g. 31 June)."""
  try:
    return np.datetime64(f"{_FRAME_YEAR}-{schema.MONTHS.index(month) + 1:02d}-{int(day):02d}", "D")
  except ValueError:
    return None


@functools.lru_cache(maxsize=1 << 14)  # A table repeats a few dates; the year has 366.
def _offset_days(month: str, day: str, from_month: str, from_day: str) -> int:
  """Signed days from one (month, day) to another, the short way round the year end."""
  to, origin = _date(month, day), _date(from_month, from_day)
  if to is None or origin is None:
    return 0
  days = int((to - origin).astype(np.int64))
  return (days + _DAYS_IN_FRAME // 2) % _DAYS_IN_FRAME - _DAYS_IN_FRAME // 2


@functools.lru_cache(maxsize=1 << 14)
def _shifted(month: str, day: str, days: int) -> tuple[str, str]:
  """(month, day) moved by `days`; unchanged when it is not a date of the frame year."""
  origin = _date(month, day)
  if days == 0 or origin is None:
    return month, day
  moved = origin + np.timedelta64(days, "D")
  month_index = int(moved.astype("datetime64[M]").astype(np.int64) % 12)
  day_of_month = int((moved - moved.astype("datetime64[M]").astype("datetime64[D]"))
                     .astype(np.int64)) + 1
  return schema.MONTHS[month_index], str(day_of_month)


def table_for_intent(intent: schema.Intent, rng: np.random.Generator,
                     kb_size: int = 30) -> schema.FlightTable:
  """A generated table moved onto `intent`'s trip: flights numbered from 1000, reservation as
  drawn."""
  drawn_intent, drawn_table = context.sample_context(rng, kb_size)
  others = [a for a in context.AIRPORTS
            if a not in (intent.departure_airport, intent.return_airport)]
  third = others[rng.integers(len(others))]
  airport_of = {drawn_intent.departure_airport: intent.departure_airport,
                drawn_intent.return_airport: intent.return_airport}
  flights = []
  for flight in drawn_table.flights:
    departure = _shifted(intent.departure_month, intent.departure_day, _offset_days(
        flight.departure_month, flight.departure_day, drawn_intent.departure_month,
        drawn_intent.departure_day))
    arrival = _shifted(intent.return_month, intent.return_day, _offset_days(
        flight.return_month, flight.return_day, drawn_intent.return_month,
        drawn_intent.return_day))
    flights.append(dataclasses.replace(
        flight,
        departure_airport=airport_of.get(flight.departure_airport, third),
        return_airport=airport_of.get(flight.return_airport, third),
        departure_month=departure[0], departure_day=departure[1],
        return_month=arrival[0], return_day=arrival[1]))
  return dataclasses.replace(drawn_table, flights=tuple(flights))
