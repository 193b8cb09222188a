"""Constructive task relabeling (calm/relabel.py, table_edits.py, intent_table.py)."""

import dataclasses
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from calm import intent_table
from calm import relabel
from calm import table_edits
from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import official_io
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import score
from data_pipelines.airdialogue import scorer
from data_pipelines.airdialogue import selfplay
from data_pipelines.airdialogue import solver

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# The solver's rules, written out here rather than read from the module under test.
REACHABLE = {("book", "book"), ("book", "no_flight"), ("change", "change"),
             ("change", "no_flight"), ("change", "no_reservation"), ("cancel", "cancel"),
             ("cancel", "no_reservation")}
FLIGHT_FIELDS = [f.name for f in dataclasses.fields(schema.Flight)]


def _row(table, number):
  return next(f for f in table.flights if f.flight_number == number)


def _changed_fields(before, after):
  return [name for name in FLIGHT_FIELDS if getattr(before, name) != getattr(after, name)]


def _scene(seed, goal, status, pick, conform, reserved, name_suffix=""):
  """A generated context whose agent submitted `status` (flight `pick` for book/change)."""
  rng = np.random.default_rng(seed)
  intent, table = context.sample_context(rng)
  intent = dataclasses.replace(intent, goal=goal)
  flights = list(table.flights)
  submitted = ()
  if status in ("book", "change"):
    submitted = (flights[pick].flight_number,)
    if conform:  # The agent picked a flight the customer accepts.
      flights[pick] = table_edits.conforming(flights[pick], intent, rng)
  reservation = flights[(pick + 7) % len(flights)].flight_number if reserved else 0
  table = schema.FlightTable(tuple(flights), reservation)
  action = schema.Action(status, intent.name + name_suffix, submitted)
  return schema.Sample(intent, table, ("customer: hi", "agent: done"), action,
                       extra={"search_info": [{"button_name": "search", "timestmamp": 1.5}]})


def _check_invariants(sample, relabeled, outcome):
  """What must hold of any relabeled sample, with the reachability worked out independently."""
  intent, action, before, after = sample.intent, sample.action, sample.table, relabeled.table
  assert relabeled.expected_action == solver.expected_action(intent, after)
  assert (relabeled.intent, relabeled.dialogue, relabeled.action) == (
      intent, sample.dialogue, action)
  assert relabeled.extra["search_info"] == sample.extra["search_info"]
  row_ok = True
  if action.flights:
    submitted_row = schema.FlightTable((_row(before, action.flights[0]),))
    row_ok = bool(solver.matching_flights(intent, submitted_row)[0])
    assert _row(after, action.flights[0]) == _row(before, action.flights[0])  # Bit for bit.
  reachable = (intent.goal, action.status) in REACHABLE and row_ok
  name_ok = scorer.normalize_name(action.name) == scorer.normalize_name(intent.name)
  expected = relabeled.expected_action
  if reachable:
    # The solver's expected action under the new table contains the submitted one.
    assert scorer.status_correct(action, expected) and scorer.flight_correct(action, expected)
    assert outcome == (relabel.RELABELED if name_ok else relabel.WRONG_NAME)
    assert relabeled.correct_sample is name_ok
    edited = relabeled.extra[relabel.RELABEL_KEY]["edited_flights"]
    for old, new in zip(before.flights, after.flights):
      assert old.flight_number == new.flight_number
      assert len(_changed_fields(old, new)) == (1 if old.flight_number in edited else 0)
  else:
    assert outcome in relabel.KEPT_REASONS and after == before
    assert relabeled.correct_sample is False
  assert relabeled.extra[relabel.RELABEL_KEY]["outcome"] == outcome


def _round_trip(samples):
  """The samples written in the official format and read back through its validator."""
  with tempfile.TemporaryDirectory() as directory:
    data, kb = os.path.join(directory, "data.json"), os.path.join(directory, "kb.json")
    official_io.write_samples(samples, data, kb)
    return list(official_io.read_samples(data, kb))


@hypothesis.settings(max_examples=120, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**32 - 1), goal=st.sampled_from(schema.GOALS),
                  status=st.sampled_from(schema.STATUSES), pick=st.integers(0, 29),
                  conform=st.booleans(), reserved=st.booleans(), wrong_name=st.booleans(),
                  relabel_seed=st.integers(0, 2**32 - 1))
def test_relabeling_invariants_over_generated_scenes(seed, goal, status, pick, conform, reserved,
                                                     wrong_name, relabel_seed):
  sample = _scene(seed, goal, status, pick, conform, reserved, "x" if wrong_name else "")
  relabeled, outcome = relabel.relabel_sample(sample, np.random.default_rng(relabel_seed))
  _check_invariants(sample, relabeled, outcome)
  assert _round_trip([relabeled]) == [relabeled]


@pytest.mark.parametrize("goal,status", sorted(REACHABLE))
def test_every_goal_and_status_is_relabeled(goal, status):
  for seed in range(40):
    sample = _scene(seed, goal, status, pick=seed % 30, conform=True, reserved=seed % 2 == 0)
    relabeled, outcome = relabel.relabel_sample(sample, np.random.default_rng(seed))
    assert outcome == relabel.RELABELED and relabeled.correct_sample
    _check_invariants(sample, relabeled, outcome)
    reservation = relabeled.table.reservation
    if status == "no_reservation":
      assert reservation == schema.NO_RESERVATION
    elif status == "cancel" or goal == "change":
      assert reservation != schema.NO_RESERVATION
      if sample.table.reservation:
        assert reservation == sample.table.reservation  # An existing one is kept.
      elif status == "change":
        assert reservation != sample.action.flights[0]  # A change moves another booking.
    else:
      assert reservation == sample.table.reservation


def test_competing_flights_are_displaced_not_the_submitted_one():
  intent = schema.Intent(name="Jane Doe", goal="book", departure_airport="DTW",
                         return_airport="IAD", departure_month="Dec", departure_day="12",
                         return_month="Dec", return_day="14", max_price=500, max_connections=0,
                         departure_time="morning", flight_class="economy",
                         airline_preference="normal-cost")
  base = schema.Flight(1000, "UA", "DTW", "IAD", "Dec", "12", "Dec", "14", 9, 15, "economy", 0, 400)
  table = schema.FlightTable(tuple(
      dataclasses.replace(base, flight_number=1000 + k, price=100 + 100 * (k % 4))
      for k in range(30)))
  sample = schema.Sample(intent, table, (), schema.Action("book", "Jane Doe", (1002,)))
  kinds = set()
  for seed in range(30):
    relabeled, outcome = relabel.relabel_sample(sample, np.random.default_rng(seed))
    assert outcome == relabel.RELABELED
    assert 1002 in relabeled.expected_action.flights  # Tied flights at 300 stay expected.
    edited = relabeled.extra[relabel.RELABEL_KEY]["edited_flights"]
    assert edited == [n for n in range(1000, 1030) if n % 4 in (0, 1)]  # Cheaper: 100, 200.
    for number in edited:
      (field,) = _changed_fields(_row(table, number), _row(relabeled.table, number))
      kinds.add(field)
  # Every kind of edit is used: a price above 300 or each constraint the intent states.
  assert kinds == {"price", "num_connections", "departure_time_num", "flight_class", "airline"}


def test_no_flight_displaces_every_matching_flight():
  for seed in range(30):
    sample = _scene(seed, "book", "no_flight", pick=0, conform=False, reserved=False)
    table = dataclasses.replace(sample.table, flights=tuple(
        table_edits.conforming(f, sample.intent, np.random.default_rng(k))
        for k, f in enumerate(sample.table.flights)))  # Every flight matches at first.
    relabeled, outcome = relabel.relabel_sample(dataclasses.replace(sample, table=table),
                                                np.random.default_rng(seed))
    assert outcome == relabel.RELABELED
    assert not solver.matching_flights(sample.intent, relabeled.table).any()
    assert len(relabeled.extra[relabel.RELABEL_KEY]["edited_flights"]) == 30


def test_wrong_name_is_kept_with_reward_zero_and_counted(tmp_path):
  sample = _scene(3, "book", "book", pick=4, conform=True, reserved=False, name_suffix="x")
  relabeled, outcome = relabel.relabel_sample(sample, np.random.default_rng(0))
  assert outcome == relabel.WRONG_NAME and relabeled.correct_sample is False
  # Status and flight are made right; only the name fails.
  expected = relabeled.expected_action
  assert scorer.status_correct(sample.action, expected)
  assert scorer.flight_correct(sample.action, expected)
  assert not scorer.name_correct(sample.action, expected)
  right = _scene(3, "book", "book", pick=4, conform=True, reserved=False)
  official_io.write_samples([sample, right], tmp_path / "data.json", tmp_path / "kb.json")
  stats = relabel.relabel_files(str(tmp_path / "data.json"), str(tmp_path / "kb.json"),
                                str(tmp_path / "out"))
  assert stats["outcomes"] == {"relabeled": 1, "wrong_name": 1}
  assert stats["eligible"] == 1 and stats["relabeled_fraction_of_eligible"] == 1.0
  assert stats["per_goal"]["book"]["outcomes"]["wrong_name"] == 1
  scored = score.score_files(str(tmp_path / "out" / "data.json"))
  assert scored["success_rate"] == 0.5 and scored["name_acc"] == 0.5


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """A small self-play corpus of every agent skill, in the official files."""
  directory = tmp_path_factory.mktemp("corpus")
  samples = list(selfplay.generate_samples(11, 150))
  official_io.write_samples(samples, directory / "data.json", directory / "kb.json")
  return directory, samples


def test_selfplay_corpus_relabels_every_reachable_dialogue(corpus, tmp_path):
  directory, samples = corpus
  stats = relabel.relabel_files(str(directory / "data.json"), str(directory / "kb.json"),
                                str(tmp_path))
  out = list(official_io.read_samples(tmp_path / "data.json", tmp_path / "kb.json"))
  assert len(out) == stats["n"] == len(samples)
  for before, after in zip(samples, out):
    assert after.extra["timestamps"] == before.extra["timestamps"]
    assert after.extra["selfplay"] == before.extra["selfplay"]
    outcome = after.extra[relabel.RELABEL_KEY]["outcome"]
    if before.action is None:
      assert outcome == "no_action" and not after.correct_sample
    else:
      if before.action.flights:
        flight = before.action.flights[0]
        assert _row(after.table, flight) == _row(before.table, flight)
      name_ok = scorer.normalize_name(before.action.name) == scorer.normalize_name(
          before.intent.name)
      reachable = ((before.intent.goal, before.action.status) in REACHABLE
                   and (not before.action.flights or solver.matching_flights(
                       before.intent, schema.FlightTable((_row(before.table, flight),)))[0]))
      assert after.correct_sample is bool(reachable and name_ok)
  outcomes = stats["outcomes"]
  assert sum(outcomes.values()) == stats["n"]
  assert {"relabeled", "wrong_name", "status_unreachable"} <= set(outcomes)
  assert set(stats["per_goal"]) == set(schema.GOALS)
  assert sum(g["n"] for g in stats["per_goal"].values()) == stats["n"]
  # Every eligible dialogue (action parsed, name right) is relabeled unless no table can fix it.
  assert stats["eligible"] - outcomes["relabeled"] == sum(stats["eligible_not_relabeled"].values())
  assert set(stats["eligible_not_relabeled"]) <= {"status_unreachable", "flight_violates_intent"}
  assert score.score_files(str(tmp_path / "data.json"))["success_rate"] == pytest.approx(
      stats["relabeled_fraction"])


def test_cli_output_scores_one_on_every_relabeled_dialogue(corpus, tmp_path):
  directory, _ = corpus
  out = tmp_path / "out"
  subprocess.run([sys.executable, "-m", "calm.relabel", f"--data={directory / 'data.json'}",
                  f"--kb={directory / 'kb.json'}", f"--out_dir={out}", "--seed=4"],
                 check=True, capture_output=True, cwd=REPO_ROOT)
  stats = json.loads((out / "stats.json").read_text())
  assert stats["config"]["seed"] == 4 and stats["timing"]["seconds_per_10000_dialogues"] > 0
  relabeled_dir = tmp_path / "relabeled_only"
  relabeled_dir.mkdir()
  kept = [(d, k) for d, k in zip((out / "data.json").read_text().splitlines(),
                                 (out / "kb.json").read_text().splitlines())
          if json.loads(d)[relabel.RELABEL_KEY]["outcome"] == relabel.RELABELED]
  assert len(kept) == stats["outcomes"]["relabeled"]
  (relabeled_dir / "data.json").write_text("".join(d + "\n" for d, _ in kept))
  (relabeled_dir / "kb.json").write_text("".join(k + "\n" for _, k in kept))
  result = subprocess.run(
      [sys.executable, "-m", "data_pipelines.airdialogue.score",
       f"--data={relabeled_dir / 'data.json'}", f"--kb={relabeled_dir / 'kb.json'}"],
      check=True, capture_output=True, text=True, cwd=REPO_ROOT)
  assert json.loads(result.stdout)["success_rate"] == 1.0


def test_same_seed_same_files_other_seed_other_tables(corpus, tmp_path):
  directory, _ = corpus
  data, kb = str(directory / "data.json"), str(directory / "kb.json")
  for kb_path in (kb, None):  # With the input tables, and with tables drawn per intent.
    runs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
      out = tmp_path / f"{name}{kb_path is None}"
      relabel.relabel_files(data, kb_path, str(out), seed)
      runs[name] = [(out / f).read_bytes() for f in ("data.json", "kb.json")]
    assert runs["a"] == runs["b"]
    assert runs["a"][1] != runs["c"][1]


def test_output_does_not_depend_on_the_time_zone(corpus, tmp_path):
  """The reference's relabeling moved dates with the host's zone; drawn tables here do not."""
  directory, _ = corpus
  relabel.relabel_files(str(directory / "data.json"), None, str(tmp_path / "here"), 2)
  subprocess.run([sys.executable, "-m", "calm.relabel", f"--data={directory / 'data.json'}",
                  f"--out_dir={tmp_path / 'kolkata'}", "--seed=2"], check=True,
                 capture_output=True, cwd=REPO_ROOT, env={**os.environ, "TZ": "Asia/Kolkata"})
  for name in ("data.json", "kb.json"):
    assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "kolkata" / name).read_bytes()


def test_without_kb_tables_are_drawn_around_each_intent(corpus, tmp_path):
  directory, samples = corpus
  stats = relabel.relabel_files(str(directory / "data.json"), None, str(tmp_path))
  out = list(official_io.read_samples(tmp_path / "data.json", tmp_path / "kb.json"))
  assert "flight_violates_intent" not in stats["outcomes"]  # No kb: the submitted row is free.
  for before, after in zip(samples, out):
    assert len(after.table.flights) == 30
    assert after.extra[relabel.RELABEL_KEY]["table"] == "drawn"
    trip = {before.intent.departure_airport, before.intent.return_airport}
    airports = {a for f in after.table.flights for a in (f.departure_airport, f.return_airport)}
    assert trip <= airports and len(airports - trip) <= 1
    reachable = (before.action is not None
                 and (before.intent.goal, before.action.status) in REACHABLE)
    name_ok = before.action is not None and relabel.name_is_right(before.intent, before.action)
    assert after.correct_sample is (reachable and name_ok)


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(day=st.dates(datetime.date(2012, 1, 1), datetime.date(2012, 12, 31)),
                  seed=st.integers(0, 2**32 - 1))
def test_drawn_tables_keep_their_dates_near_the_intent(day, seed):
  """Flights fall within days of the intent's dates, across month and year ends (UTC only)."""
  back = day + datetime.timedelta(days=2)
  intent = schema.Intent("Ann Lee", "book", "SFO", "JFK", schema.MONTHS[day.month - 1],
                         str(day.day), schema.MONTHS[back.month - 1], str(back.day), 500)
  table = intent_table.table_for_intent(intent, np.random.default_rng(seed))

  def near(month, days, centre):
    dates = {(centre + datetime.timedelta(days=d)) for d in range(-4, 5)}
    return (month, days) in {(schema.MONTHS[x.month - 1], str(x.day)) for x in dates}

  for f in table.flights:
    assert near(f.departure_month, f.departure_day, day)
    assert near(f.return_month, f.return_day, back)


def test_real_format_fields_pass_through(tmp_path):
  """search_info, timestamps, unknown keys and num_connections of the release's files."""
  def flight(number, price, connections, **extra):
    return {"departure_airport": "DTW", "return_airport": "IAD", "departure_month": "Dec",
            "return_month": "Dec", "departure_day": "12", "return_day": "14",
            "departure_time_num": 9, "return_time_num": 15, "class": "economy",
            "num_connections": connections, "price": price, "flight_number": number,
            "airline": "UA", **extra}

  data_line = {
      "search_info": [{"button_name": "search", "field_name": "", "field_value": "",
                       "timestmamp": 1524094431.94}],
      "timestamps": [1524094387, 1524094397],
      "dialogue": ["customer: Hi, I am Emma Perez.", "agent: Booked 1001 for 300."],
      "intent": {"return_month": "Dec", "return_day": "14", "max_price": 500,
                 "departure_airport": "DTW", "max_connections": 1, "departure_day": "12",
                 "goal": "book", "departure_month": "Dec", "name": "Emma Perez",
                 "return_airport": "IAD", "future_key": [1]},
      "action": {"status": "book", "name": "emma perez", "flight": [1001]},
      "expected_action": {"status": "book", "name": "Emma Perez", "flight": [1002]},
      "correct_sample": False}
  kb_line = {"kb": [flight(1000, 300, 2), flight(1001, 300, 1, seat_map="A1"),
                    flight(1002, 100, 0), flight(1003, 200, 1, seat_map="B2")],
             "reservation": 0, "kb_version": 2}
  (tmp_path / "data.json").write_text(json.dumps(data_line) + "\n")
  (tmp_path / "kb.json").write_text(json.dumps(kb_line) + "\n")
  for kb_path in (str(tmp_path / "kb.json"), None):
    out = tmp_path / f"out{kb_path is None}"
    stats = relabel.relabel_files(str(tmp_path / "data.json"), kb_path, str(out))
    assert stats["outcomes"] == {"relabeled": 1}
    written = json.loads((out / "data.json").read_text())
    written_kb = json.loads((out / "kb.json").read_text())
    for key in ("search_info", "timestamps", "dialogue", "intent", "action"):
      assert written[key] == data_line[key]
    assert written["correct_sample"] is True
    if kb_path is not None:
      assert written_kb["kb_version"] == 2
      assert written_kb["kb"][1] == kb_line["kb"][1]  # The submitted row, extras included.
      assert written_kb["kb"][0] == kb_line["kb"][0]  # Two connections: never competed.
      assert written[relabel.RELABEL_KEY]["edited_flights"] == [1002, 1003]
      for k in (2, 3):
        assert written_kb["kb"][k].get("seat_map") == kb_line["kb"][k].get("seat_map")
        assert written_kb["kb"][k]["num_connections"] >= 2 or written_kb["kb"][k]["price"] > 300 \
            or written_kb["kb"][k]["departure_airport"] != "DTW" \
            or written_kb["kb"][k]["return_airport"] != "IAD"


@pytest.mark.parametrize("which,line,path,value,field", [
    ("kb", 2, ("kb", 1, "price"), "300", "kb[1].price"),
    ("data", 3, ("intent", "goal"), "upgrade", "intent.goal"),
    ("data", 1, ("action", "flight"), [1999], "action.flight[0]"),
])
def test_bad_input_names_file_line_and_field(corpus, tmp_path, which, line, path, value, field):
  directory, _ = corpus
  files = {name: (directory / f"{name}.json").read_text().splitlines()[:4]
           for name in ("data", "kb")}
  record = json.loads(files[which][line - 1])
  target = record
  for key in path[:-1]:
    target = target[key]
  target[path[-1]] = value
  files[which][line - 1] = json.dumps(record)
  for name, lines in files.items():
    (tmp_path / f"{name}.json").write_text("".join(x + "\n" for x in lines))
  bad = tmp_path / f"{which}.json"
  with pytest.raises(official_io.AirDialogueFormatError) as e:
    relabel.relabel_files(str(tmp_path / "data.json"), str(tmp_path / "kb.json"),
                          str(tmp_path / "out"))
  assert str(e.value).startswith(f"{bad}:{line}: field '{field}': "), str(e.value)


def test_cli_reports_bad_input_as_one_line(corpus, tmp_path):
  directory, _ = corpus
  lines = (directory / "kb.json").read_text().splitlines()[:3]
  record = json.loads(lines[2])
  del record["kb"][0]["price"]
  lines[2] = json.dumps(record)
  (tmp_path / "kb.json").write_text("".join(x + "\n" for x in lines))
  data = "".join(x + "\n" for x in (directory / "data.json").read_text().splitlines()[:3])
  (tmp_path / "data.json").write_text(data)
  result = subprocess.run(
      [sys.executable, "-m", "calm.relabel", f"--data={tmp_path / 'data.json'}",
       f"--kb={tmp_path / 'kb.json'}", f"--out_dir={tmp_path / 'out'}"],
      capture_output=True, text=True, cwd=REPO_ROOT)
  assert result.returncode == 1
  assert result.stderr == f"error: {tmp_path / 'kb.json'}:3: field 'kb[0].price': missing\n"
  result = subprocess.run(
      [sys.executable, "-m", "calm.relabel", f"--data={tmp_path / 'data.json'}",
       f"--out_dir={tmp_path}"], capture_output=True, text=True, cwd=REPO_ROOT)
  assert result.returncode == 1 and "would overwrite it" in result.stderr
