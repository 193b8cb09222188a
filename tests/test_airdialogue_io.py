"""Official-format reading/writing, its validation, the score CLI and Arrow conversion."""

import copy
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import datasets
import hypothesis
from hypothesis import strategies as st
import numpy as np
import pyarrow as pa
import pytest

from data_pipelines.airdialogue import arrow
from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import official_io
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import scorer
from data_pipelines.airdialogue import solver

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _flight(number, price, dep_hour=9, **changes):
  flight = {"departure_airport": "DTW", "return_airport": "IAD", "departure_month": "Dec",
            "return_month": "Dec", "departure_day": "12", "return_day": "14",
            "departure_time_num": dep_hour, "return_time_num": 15, "class": "economy",
            "num_connections": 1, "price": price, "flight_number": number, "airline": "UA"}
  flight.update(changes)
  return flight


# Three records shaped like the released files: key order as in the release,
# optional intent keys absent, human extras (timestamps, search_info).
DATA_LINES = [
    {"search_info": [{"button_name": "search", "field_name": "", "field_value": "",
                      "timestmamp": 1524094431.94}],
     "timestamps": [1524094387, 1524094397, 1524094450],
     "dialogue": ["customer: Hi, I am Emma Perez.", "agent: How can I help?",
                  "customer: Book Detroit to Washington, Dec 12-14."],
     "intent": {"return_month": "Dec", "return_day": "14", "max_price": 200,
                "departure_airport": "DTW", "max_connections": 1, "departure_day": "12",
                "goal": "book", "departure_month": "Dec", "name": "Emma Perez",
                "return_airport": "IAD"},
     "action": {"status": "book", "name": "Emma Perez", "flight": [1001]},
     "expected_action": {"status": "book", "name": "Emma Perez", "flight": [1001, 1002]},
     "correct_sample": True},
    {"timestamps": [1524094500],
     "dialogue": ["customer: Cancel my trip please.", "agent: No reservation found."],
     "intent": {"return_month": "Dec", "return_day": "14", "max_price": 5000,
                "departure_airport": "DTW", "departure_day": "12", "goal": "cancel",
                "departure_month": "Dec", "name": "Liam Chen", "return_airport": "IAD",
                "class": "business", "departure_time": "morning", "future_key": [1, {"a": None}]},
     "action": {"status": "no_reservation", "name": "liam  chen", "flight": []},
     "expected_action": {"status": "no_reservation", "name": "Liam Chen", "flight": []},
     "correct_sample": True},
    {"dialogue": ["customer: Change to an evening flight.", "agent: Done."],
     "intent": {"return_month": "Dec", "return_day": "14", "max_price": 1000,
                "departure_airport": "DTW", "max_connections": 1, "departure_day": "12",
                "goal": "change", "departure_month": "Dec", "name": "Ava Stone",
                "return_airport": "IAD", "airline_preference": "normal-cost",
                "return_time": "afternoon"},
     "action": {"status": "change", "name": "Ava Stone", "flight": [1002]},
     "expected_action": {"status": "change", "name": "Ava Stone", "flight": [1001]},
     "correct_sample": False},
]
KB_LINES = [
    {"kb": [_flight(1000, 300), _flight(1001, 200), _flight(1002, 200)], "reservation": 0},
    {"kb": [_flight(1000, 300), _flight(1001, 200, seat_map="A1")], "reservation": 0},
    {"kb": [_flight(1000, 300), _flight(1001, 200), _flight(1002, 100, airline="Spirit")],
     "reservation": 1000, "kb_version": 2},
]


def _line(x) -> bytes:
  if isinstance(x, bytes):
    return x
  return (x if isinstance(x, str) else json.dumps(x)).encode("utf-8", "surrogatepass")


def _write(directory, data_lines, kb_lines):
  """Writes lines (JSON objects, or raw str/bytes as they are) and returns both paths."""
  directory = pathlib.Path(directory)
  paths = []
  for name, lines in (("data.json", data_lines), ("kb.json", kb_lines)):
    (directory / name).write_bytes(b"".join(_line(x) + b"\n" for x in lines))
    paths.append(str(directory / name))
  return paths


def _canonical(obj) -> str:
  return json.dumps(obj, sort_keys=True)


def test_round_trip_keeps_every_key_and_type(tmp_path):
  data, kb = _write(tmp_path, DATA_LINES, KB_LINES)
  samples = list(official_io.read_samples(data, kb))
  assert len(samples) == 3
  assert samples[1].intent.max_connections is None and samples[1].intent.flight_class == "business"
  assert samples[1].intent.extra == {"future_key": [1, {"a": None}]}
  assert samples[0].extra["timestamps"] == DATA_LINES[0]["timestamps"]
  assert samples[1].table.flights[1].extra == {"seat_map": "A1"}
  assert samples[2].table.extra == {"kb_version": 2} and samples[2].table.reservation == 1000
  out = tmp_path / "out"
  out.mkdir()
  assert official_io.write_samples(samples, out / "data.json", out / "kb.json") == 3
  for name, originals in (("data.json", DATA_LINES), ("kb.json", KB_LINES)):
    written = [json.loads(line) for line in (out / name).read_text().splitlines()]
    assert [_canonical(x) for x in written] == [_canonical(x) for x in originals]
  # Writing what was read back is byte-identical.
  again = tmp_path / "again"
  again.mkdir()
  official_io.write_samples(official_io.read_samples(out / "data.json", out / "kb.json"),
                            again / "data.json", again / "kb.json")
  for name in ("data.json", "kb.json"):
    assert (again / name).read_bytes() == (out / name).read_bytes()


def test_generated_samples_round_trip(tmp_path):
  samples = []
  for intent, table in context.sample_contexts(np.random.default_rng(0), 30):
    expected = solver.expected_action(intent, table)
    action = schema.Action(expected.status, intent.name.lower(), expected.flights[:1])
    samples.append(schema.Sample(intent, table, ("customer: hi", "agent: bye"), action, expected,
                                 scorer.is_success(action, expected), {"timestamps": [1, 2]}))
  official_io.write_samples(samples, tmp_path / "d.json", tmp_path / "k.json")
  assert list(official_io.read_samples(tmp_path / "d.json", tmp_path / "k.json")) == samples


def _set(obj, path, value):
  for key in path[:-1]:
    obj = obj[key]
  if value is _DELETE:
    del obj[path[-1]]
  else:
    obj[path[-1]] = value


_DELETE = object()
# (file with the bad record, path to change, new value or _DELETE, field in the message).
BAD_RECORDS = [
    ("data", ("intent", "name"), _DELETE, "intent.name"),
    ("data", ("intent",), _DELETE, "intent"),
    ("data", ("dialogue",), _DELETE, "dialogue"),
    ("data", ("action", "flight"), _DELETE, "action.flight"),
    ("data", ("expected_action", "status"), _DELETE, "expected_action.status"),
    ("kb", ("kb",), _DELETE, "kb"),
    ("kb", ("reservation",), _DELETE, "reservation"),
    ("kb", ("kb", 1, "price"), _DELETE, "kb[1].price"),
    ("data", ("intent", "max_price"), "500", "intent.max_price"),
    ("data", ("intent", "max_price"), True, "intent.max_price"),
    ("data", ("intent", "max_connections"), 1.0, "intent.max_connections"),
    ("data", ("intent", "departure_day"), 12, "intent.departure_day"),
    ("data", ("intent", "departure_day"), "04", "intent.departure_day"),
    ("data", ("intent", "return_time"), None, "intent.return_time"),
    ("data", ("intent",), ["not", "an", "object"], "intent"),
    ("data", ("dialogue", 1), 5, "dialogue[1]"),
    ("data", ("correct_sample",), "yes", "correct_sample"),
    ("data", ("action", "flight"), 1002, "action.flight"),
    ("data", ("action", "flight", 0), "1002", "action.flight[0]"),
    ("data", ("action", "flight", 0), False, "action.flight[0]"),
    ("kb", ("kb", 0, "price"), True, "kb[0].price"),
    ("kb", ("kb", 0, "flight_number"), "1000", "kb[0].flight_number"),
    ("kb", ("kb", 2, "departure_time_num"), 24, "kb[2].departure_time_num"),
    ("kb", ("kb", 0), "flight", "kb[0]"),
    ("kb", ("reservation",), None, "reservation"),
    ("data", ("action", "status"), "booked", "action.status"),
    ("data", ("intent", "departure_month"), "September", "intent.departure_month"),
    ("kb", ("kb", 1, "return_month"), "Sep", "kb[1].return_month"),
    ("data", ("intent", "return_time"), "night", "intent.return_time"),
    ("data", ("intent", "class"), "first", "intent.class"),
    ("kb", ("kb", 0, "class"), "premium", "kb[0].class"),
    ("data", ("intent", "goal"), "upgrade", "intent.goal"),
    ("kb", ("kb", 0, "airline"), "Lufthansa", "kb[0].airline"),
    ("data", ("intent", "airline_preference"), "low-cost", "intent.airline_preference"),
    ("data", ("action", "flight", 0), 1009, "action.flight[0]"),
    ("data", ("expected_action", "flight"), [1002, 1777], "expected_action.flight[1]"),
    ("kb", ("reservation",), 1234, "reservation"),
    ("kb", ("kb", 1, "flight_number"), 1000, "kb[1].flight_number"),
]


@pytest.mark.parametrize("which,path,value,field", BAD_RECORDS)
def test_bad_record_names_file_line_and_field(tmp_path, which, path, value, field):
  data_lines, kb_lines = copy.deepcopy(DATA_LINES), copy.deepcopy(KB_LINES)
  _set((data_lines if which == "data" else kb_lines)[2], path, value)
  data, kb = _write(tmp_path, data_lines, kb_lines)
  bad_file = data if which == "data" else kb
  with pytest.raises(official_io.AirDialogueFormatError) as e:
    list(official_io.read_samples(data, kb))
  assert str(e.value).startswith(f"{bad_file}:3: field '{field}': "), str(e.value)


@pytest.mark.parametrize("which,raw", [
    ("data", '{"intent": {"name": '), ("kb", '{"kb": [}'), ("data", ""), ("kb", "[1, 2]"),
    ("data", '"just a string"'), ("data", b'{"intent": "\xff\xfe"}'), ("kb", "1e999999"),
])
def test_malformed_line_names_file_and_line(tmp_path, which, raw):
  data_lines, kb_lines = list(DATA_LINES), list(KB_LINES)
  (data_lines if which == "data" else kb_lines)[1] = raw
  data, kb = _write(tmp_path, data_lines, kb_lines)
  samples = official_io.read_samples(data, kb)
  assert next(samples).intent.name == "Emma Perez"  # Streams up to the bad line.
  with pytest.raises(official_io.AirDialogueFormatError) as e:
    next(samples)
  assert str(e.value).startswith(f"{data if which == 'data' else kb}:2: field '<line>': ")


@pytest.mark.parametrize("short", ["data", "kb"])
def test_mismatched_line_counts_name_both_files(tmp_path, short):
  data_lines = DATA_LINES[:2] if short == "data" else DATA_LINES
  kb_lines = KB_LINES[:2] if short == "kb" else KB_LINES
  data, kb = _write(tmp_path, data_lines, kb_lines)
  with pytest.raises(official_io.AirDialogueFormatError) as e:
    list(official_io.read_samples(data, kb))
  longer, shorter = (kb, data) if short == "data" else (data, kb)
  assert str(e.value).startswith(f"{longer}:3: field '<line>': ") and shorter in str(e.value)


def test_without_kb_tables_are_absent_and_flights_unchecked(tmp_path):
  data_lines = copy.deepcopy(DATA_LINES)
  data_lines[0]["action"]["flight"] = [4242]
  data, _ = _write(tmp_path, data_lines, KB_LINES)
  samples = list(official_io.read_samples(data))
  assert [s.table for s in samples] == [None] * 3
  assert samples[0].action.flights == (4242,)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                      max_size=4),
    max_leaves=12)
_KEYS = st.sampled_from(["intent", "kb", "action", "dialogue", "reservation", "name", "flight",
                         "price", "goal", "status", "correct_sample", "0", "extra"])


def _read_all_or_format_error(directory, data_lines, kb_lines):
  data, kb = _write(directory, data_lines, kb_lines)
  try:
    list(official_io.read_samples(data, kb))
    list(official_io.read_samples(data))
  except official_io.AirDialogueFormatError:
    pass


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(data=_JSON, kb=_JSON, raw=st.text(max_size=20))
def test_fuzz_arbitrary_lines_only_raise_format_errors(data, kb, raw):
  with tempfile.TemporaryDirectory() as directory:
    _read_all_or_format_error(directory, [data, raw], [kb, raw])


def _paths(obj, prefix=()):
  yield prefix
  if isinstance(obj, dict):
    for key, value in obj.items():
      yield from _paths(value, prefix + (key,))
  elif isinstance(obj, list):
    for i, value in enumerate(obj):
      yield from _paths(value, prefix + (i,))


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(which=st.integers(0, 1), line=st.integers(0, 2), pick=st.integers(0, 10**6),
                  action=st.sampled_from(["replace", "delete", "add"]), value=_JSON, key=_KEYS)
def test_fuzz_mutated_valid_records_only_raise_format_errors(which, line, pick, action, value, key):
  data_lines, kb_lines = copy.deepcopy(DATA_LINES), copy.deepcopy(KB_LINES)
  root = (data_lines, kb_lines)[which][line]
  paths = [p for p in _paths(root) if p]
  path = paths[pick % len(paths)]
  parent = root
  for k in path[:-1]:
    parent = parent[k]
  if action == "replace":
    parent[path[-1]] = value
  elif action == "delete":
    del parent[path[-1]]
  elif isinstance(parent, dict):
    parent[key] = value
  else:
    parent.append(value)
  with tempfile.TemporaryDirectory() as directory:
    _read_all_or_format_error(directory, data_lines, kb_lines)


def _run(module, *args):
  return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, capture_output=True,
                        text=True, timeout=120)


def test_score_cli(tmp_path):
  data_lines = copy.deepcopy(DATA_LINES)
  del data_lines[2]["expected_action"]  # The solver says: change, cheapest normal-cost = 1001.
  data, kb = _write(tmp_path, data_lines, KB_LINES)
  result = _run("data_pipelines.airdialogue.score", f"--data={data}", f"--kb={kb}")
  assert result.returncode == 0, result.stderr
  scores = json.loads(result.stdout)
  assert scores["n"] == 3
  assert scores["success_rate"] == pytest.approx(2 / 3)  # Line 3 picked 1002, a low-cost airline.
  assert scores["status_acc"] == pytest.approx(1.0)
  assert scores["flight_acc"] == pytest.approx(2 / 3)
  assert scores["name_acc"] == pytest.approx(1.0)
  assert scores["soft_score"] == pytest.approx((1 + 1 + 0.5) / 3)

  no_kb = _run("data_pipelines.airdialogue.score", f"--data={data}")
  assert no_kb.returncode != 0
  assert f"{data}:3: field 'expected_action': " in no_kb.stderr

  data_lines[1]["intent"]["goal"] = "refund"
  data, kb = _write(tmp_path, data_lines, KB_LINES)
  bad = _run("data_pipelines.airdialogue.score", f"--data={data}", f"--kb={kb}")
  assert bad.returncode != 0 and not bad.stdout
  assert f"{data}:2: field 'intent.goal': unknown value 'refund'" in bad.stderr


def test_arrow_conversion_is_lossless_and_batched(tmp_path):
  data_lines = [*DATA_LINES, *DATA_LINES[:2]]
  kb_lines = [*KB_LINES, *KB_LINES[:2]]
  data, kb = _write(tmp_path, data_lines, kb_lines)
  out = tmp_path / "corpus.arrow"
  assert arrow.convert(data, kb, str(out), batch_size=2) == 5
  with pa.ipc.open_stream(out) as reader:
    assert [b.num_rows for b in reader] == [2, 2, 1]
  ds = datasets.Dataset.from_file(str(out))
  assert ds.num_rows == 5 and ds[1]["intent"]["max_connections"] is None
  assert ds[0]["kb"][1]["price"] == 200 and ds[2]["action"]["flight"] == [1002]
  for row, d, k in zip(ds, data_lines, kb_lines):
    got_data, got_kb = arrow.row_to_json(row)
    assert (_canonical(got_data), _canonical(got_kb)) == (_canonical(d), _canonical(k))


def test_arrow_cli_fails_cleanly_on_bad_input(tmp_path):
  data, kb = _write(tmp_path, DATA_LINES, KB_LINES[:2])
  out = tmp_path / "corpus.arrow"
  result = _run("data_pipelines.airdialogue.arrow", f"--data={data}", f"--kb={kb}", f"--out={out}")
  assert result.returncode != 0 and f"{data}:3: field '<line>'" in result.stderr
  assert sorted(os.listdir(tmp_path)) == ["data.json", "kb.json"]
  data, kb = _write(tmp_path, DATA_LINES, KB_LINES)
  result = _run("data_pipelines.airdialogue.arrow", f"--data={data}", f"--kb={kb}", f"--out={out}")
  assert result.returncode == 0, result.stderr
  assert json.loads(result.stdout)["rows"] == 3
  assert datasets.Dataset.from_file(str(out)).num_rows == 3
