"""Streams the official line-aligned AirDialogue files (`data.json` + `kb.json`).

Line i of `data.json` (intent, dialogue, actions, ...) goes with line i of
`kb.json` (flight table, reservation). Reading yields one typed `Sample` per
line pair and holds only the current pair, so the 400k-line official release
reads in constant memory. Every record is validated: a bad one raises
`AirDialogueFormatError` naming file, line and field instead of being skipped,
since a silently dropped or mistyped record biases every number computed
downstream. Keys the schema does not know (`timestamps`, `search_info`, ...)
are kept in `extra`, so writing a sample back reproduces the same JSON object.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple

from data_pipelines.airdialogue import schema

PathLike = str | os.PathLike[str]
LINE_FIELD = "<line>"  # The field named when the line as a whole is bad.

_DAYS = frozenset(str(day) for day in range(1, 32))
_JSON_TYPES = {int: "int", float: "float", str: "string", list: "list", dict: "object"}


class AirDialogueFormatError(ValueError):
  """A record not in the official format; the message reads `FILE:LINE: field 'F': why`."""


def format_error(path: PathLike, line: int, field: str, reason: str) -> AirDialogueFormatError:
  return AirDialogueFormatError(f"{os.fspath(path)}:{line}: field '{field}': {reason}")


def _json_type(value: Any) -> str:
  if value is None:
    return "null"
  if isinstance(value, bool):
    return "bool"
  return _JSON_TYPES.get(type(value), type(value).__name__)


def _predicate(kind: Any) -> Callable[[Any], bool]:
  """A fast test for the common, valid case; `_Record.check` explains failures.

  `kind` is str, int (non-negative), bool, "day" (unpadded '1'..'31'), "hour"
  (0..23) or a tuple of allowed strings. JSON parsing yields exact types, so
  `type(v) is int` also rejects bools, which the official files never use as ints.
  """
  if kind is str:
    return lambda v: type(v) is str
  if kind is bool:
    return lambda v: type(v) is bool
  if kind is int:
    return lambda v: type(v) is int and v >= 0
  if kind == "hour":
    return lambda v: type(v) is int and 0 <= v <= 23
  allowed = _DAYS if kind == "day" else frozenset(kind)
  return lambda v: type(v) is str and v in allowed


class _Specs(NamedTuple):
  """The checked keys of one kind of JSON object: (key, attribute, kind, required, predicate)."""

  rows: tuple[tuple[str, str, Any, bool, Callable[[Any], bool]], ...]
  known: frozenset[str]


def _specs(*rows: tuple[str, Any, bool]) -> _Specs:
  """(JSON key, kind, required) rows; the JSON key "class" is the attribute `flight_class`."""
  return _Specs(
      tuple((key, "flight_class" if key == "class" else key, kind, required, _predicate(kind))
            for key, kind, required in rows),
      frozenset(row[0] for row in rows))


_INTENT_SPECS = _specs(
    ("name", str, True),
    ("goal", schema.GOALS, True),
    ("departure_airport", str, True),
    ("return_airport", str, True),
    ("departure_month", schema.MONTHS, True),
    ("departure_day", "day", True),
    ("return_month", schema.MONTHS, True),
    ("return_day", "day", True),
    ("max_price", int, True),
    ("max_connections", int, False),
    ("departure_time", schema.TIMES_OF_DAY, False),
    ("return_time", schema.TIMES_OF_DAY, False),
    ("class", schema.CLASSES, False),
    ("airline_preference", schema.AIRLINE_PREFERENCES, False),
)
_FLIGHT_SPECS = _specs(
    ("flight_number", int, True),
    ("airline", schema.AIRLINES, True),
    ("departure_airport", str, True),
    ("return_airport", str, True),
    ("departure_month", schema.MONTHS, True),
    ("departure_day", "day", True),
    ("return_month", schema.MONTHS, True),
    ("return_day", "day", True),
    ("departure_time_num", "hour", True),
    ("return_time_num", "hour", True),
    ("class", schema.CLASSES, True),
    ("num_connections", int, True),
    ("price", int, True),
)
_ACTION_SPECS = _specs(("status", schema.STATUSES, True), ("name", str, True))
_DATA_SPECS = _specs(("correct_sample", bool, False))
_DATA_KEYS = frozenset(("intent", "action", "expected_action", "dialogue", "correct_sample"))
_KB_KEYS = ("kb", "reservation")


class _Record:
  """Where a JSON object came from, so that every check names file, line and field."""

  def __init__(self, path: PathLike, line: int):
    self.path = path
    self.line = line

  def error(self, field: str, reason: str) -> AirDialogueFormatError:
    return format_error(self.path, self.line, field, reason)

  def parse_json(self, raw: bytes) -> dict[str, Any]:
    try:
      obj = json.loads(raw)
    # JSONDecodeError and UnicodeDecodeError are ValueErrors; deep nesting recurses.
    except (ValueError, RecursionError) as e:
      raise self.error(LINE_FIELD, f"malformed JSON ({e})") from None
    if not isinstance(obj, dict):
      raise self.error(LINE_FIELD, f"expected a JSON object, got {_json_type(obj)}")
    return obj

  def as_object(self, value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
      raise self.error(field, f"expected an object, got {_json_type(value)}")
    return value

  def as_list(self, value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
      raise self.error(field, f"expected a list, got {_json_type(value)}")
    return value

  def require(self, obj: Mapping[str, Any], key: str, field: str) -> Any:
    if key not in obj:
      raise self.error(field, "missing")
    return obj[key]

  def check(self, value: Any, kind: Any, field: str) -> Any:
    """Validates one scalar of `kind` (as in `_predicate`), raising with the reason."""
    if kind is str or isinstance(kind, tuple) or kind == "day":
      if not isinstance(value, str):
        raise self.error(field, f"expected a string, got {_json_type(value)} {value!r}")
      if isinstance(kind, tuple) and value not in kind:
        raise self.error(field, f"unknown value {value!r}; expected one of {list(kind)}")
      if kind == "day" and value not in _DAYS:
        raise self.error(field, f"expected a day of month '1'..'31' (unpadded), got {value!r}")
    elif kind is bool:
      if not isinstance(value, bool):
        raise self.error(field, f"expected a bool, got {_json_type(value)} {value!r}")
    elif kind is int or kind == "hour":
      if not isinstance(value, int) or isinstance(value, bool):
        raise self.error(field, f"expected an int, got {_json_type(value)} {value!r}")
      if value < 0 or (kind == "hour" and value > 23):
        hint = " (hours are 0..23)" if kind == "hour" else ""
        raise self.error(field, f"out of range: {value}{hint}")
    else:
      raise TypeError(f"unknown field kind {kind!r}")
    return value

  def fields(self, obj: Mapping[str, Any], specs: _Specs,
             prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The checked values by attribute name, and the keys `specs` does not know (the extras)."""
    values = {}
    for key, attr, kind, required, is_valid in specs.rows:
      if key in obj:
        value = obj[key]
        if not is_valid(value):
          self.check(value, kind, f"{prefix}.{key}" if prefix else key)
        values[attr] = value
      elif required:
        raise self.error(f"{prefix}.{key}" if prefix else key, "missing")
    if len(values) == len(obj):
      return values, {}
    return values, {k: v for k, v in obj.items() if k not in specs.known}


def _parse_action(rec: _Record, value: Any, field: str) -> schema.Action:
  obj = rec.as_object(value, field)
  values, extra = rec.fields(obj, _ACTION_SPECS, field)
  flights = tuple(rec.as_list(rec.require(obj, "flight", f"{field}.flight"), f"{field}.flight"))
  for i, number in enumerate(flights):
    if type(number) is not int or number < 0:
      rec.check(number, int, f"{field}.flight[{i}]")
  del extra["flight"]
  return schema.Action(flights=flights, extra=extra, **values)


def _parse_data_line(rec: _Record, obj: Mapping[str, Any]) -> dict[str, Any]:
  """A `data.json` object as `Sample` keyword arguments (all but `table`)."""
  intent_obj = rec.as_object(rec.require(obj, "intent", "intent"), "intent")
  intent_values, intent_extra = rec.fields(intent_obj, _INTENT_SPECS, "intent")
  dialogue = tuple(rec.as_list(rec.require(obj, "dialogue", "dialogue"), "dialogue"))
  for i, turn in enumerate(dialogue):
    if type(turn) is not str:
      rec.check(turn, str, f"dialogue[{i}]")
  values, _ = rec.fields(obj, _DATA_SPECS, "")
  actions = {key: _parse_action(rec, obj[key], key) if key in obj else None
             for key in ("action", "expected_action")}
  return dict(
      intent=schema.Intent(extra=intent_extra, **intent_values),
      dialogue=dialogue,
      correct_sample=values.get("correct_sample"),
      extra={k: v for k, v in obj.items() if k not in _DATA_KEYS},
      **actions,
  )


def _parse_kb_line(rec: _Record, obj: Mapping[str, Any]) -> schema.FlightTable:
  flights = []
  numbers = set()
  for i, flight in enumerate(rec.as_list(rec.require(obj, "kb", "kb"), "kb")):
    field = f"kb[{i}]"
    values, extra = rec.fields(rec.as_object(flight, field), _FLIGHT_SPECS, field)
    if values["flight_number"] in numbers:
      raise rec.error(f"{field}.flight_number",
                      f"duplicate flight number {values['flight_number']}")
    numbers.add(values["flight_number"])
    flights.append(schema.Flight(extra=extra, **values))
  reservation = rec.check(rec.require(obj, "reservation", "reservation"), int, "reservation")
  if reservation != schema.NO_RESERVATION and reservation not in numbers:
    raise rec.error("reservation", f"flight {reservation} is not in this line's table "
                    "(0 means no reservation)")
  return schema.FlightTable(flights=tuple(flights), reservation=reservation,
                            extra={k: v for k, v in obj.items() if k not in _KB_KEYS})


def _check_flights_in_table(rec: _Record, sample_fields: Mapping[str, Any],
                            table: schema.FlightTable) -> None:
  numbers = {f.flight_number for f in table.flights}
  for key in ("action", "expected_action"):
    action = sample_fields[key]
    for i, number in enumerate(action.flights if action is not None else ()):
      if number not in numbers:
        raise rec.error(f"{key}.flight[{i}]",
                        f"flight {number} is not in the aligned kb line's table")


def enumerate_samples(data_path: PathLike, kb_path: PathLike | None = None, *,
                      keep: Callable[[int], bool] | None = None
                      ) -> Iterator[tuple[int, schema.Sample]]:
  """Yields (1-based line number, Sample), reading both files in lockstep.

  Without `kb_path` every sample's table is None and flight numbers are not
  checked against a table. Files of different lengths raise when the shorter
  one ends, naming both files. With `keep`, only lines it accepts are parsed
  and yielded (parallel readers split one file this way).
  """
  with open(data_path, "rb") as data_file, (
      open(kb_path, "rb") if kb_path is not None else contextlib.nullcontext()) as kb_file:
    line = 0
    while True:
      data_raw = data_file.readline()
      kb_raw = kb_file.readline() if kb_file is not None else b""
      if not data_raw and not kb_raw:
        return
      line += 1
      if not data_raw or (kb_file is not None and not kb_raw):
        longer, shorter = (kb_path, data_path) if not data_raw else (data_path, kb_path)
        raise format_error(longer, line, LINE_FIELD,
                           f"no aligned line: {os.fspath(shorter)} has only {line - 1} lines")
      if keep is not None and not keep(line):
        continue
      data_rec = _Record(data_path, line)
      sample_fields = _parse_data_line(data_rec, data_rec.parse_json(data_raw))
      table = None
      if kb_file is not None:
        kb_rec = _Record(kb_path, line)
        table = _parse_kb_line(kb_rec, kb_rec.parse_json(kb_raw))
        _check_flights_in_table(data_rec, sample_fields, table)
      yield line, schema.Sample(table=table, **sample_fields)


def read_samples(data_path: PathLike, kb_path: PathLike | None = None) -> Iterator[schema.Sample]:
  for _, sample in enumerate_samples(data_path, kb_path):
    yield sample


def data_line(sample: schema.Sample) -> str:
  return json.dumps(sample.data_json())


def kb_line(table: schema.FlightTable) -> str:
  return json.dumps(table.to_json())


def write_samples(samples: Iterable[schema.Sample], data_path: PathLike,
                  kb_path: PathLike | None = None) -> int:
  """Writes aligned lines as it consumes `samples`; returns how many were written."""
  n = 0
  with open(data_path, "w", encoding="utf-8") as data_file, (
      open(kb_path, "w", encoding="utf-8") if kb_path is not None
      else contextlib.nullcontext()) as kb_file:
    for n, sample in enumerate(samples, 1):
      if kb_file is not None:
        if sample.table is None:
          raise ValueError(f"sample {n} has no flight table to write to {os.fspath(kb_path)}")
        kb_file.write(kb_line(sample.table) + "\n")
      data_file.write(data_line(sample) + "\n")
  return n
