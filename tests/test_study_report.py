"""The study's results side: bots through the real server, the report, the exports.

A tiny AirDialogue study (two scripted agent arms, 16 scenarios) is played by 32 bots at
once through the HTTP API, with a few invitations left in every state a person can leave
them in; the report must count each of them, its numbers must be a hand count of the
database, and every web dialogue must be the one `evaluate_environment` plays for the same
agent, scenario and seed. A second study is killed (SIGKILL) while bots play it and started
again: nothing committed is lost and the bots finish. The exports read back through the
offline pipeline's own readers.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import types
import urllib.parse
from typing import Any, Mapping, Sequence

import httpx
import ml_collections
import pytest

import study_fixtures
from data_pipelines import cli
from data_pipelines import dialogue as dialogue_lib
from data_pipelines.airdialogue import official_io, to_dialogue
from data_pipelines.dialogue import Turn
from data_pipelines.persuasion import loader
from ilql_dialogue import registry
from workflows import evaluate
from workflows.study import bots, export, report
from workflows.study import store as store_lib

CUSTOMER = "scripted:answer_only"
ARMS = {"oracle": study_fixtures.ORACLE, "weak": "scripted_agent:wrong_status"}
NUM_SCENARIOS = 16
FAST = {"messages_per_minute": 10_000}


def _db(workdir: str) -> str:
  return os.path.join(workdir, report.DB_NAME)


def _rows(workdir: str, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
  conn = sqlite3.connect(f"file:{_db(workdir)}?mode=ro", uri=True)
  conn.row_factory = sqlite3.Row
  try:
    return conn.execute(sql, args).fetchall()
  finally:
    conn.close()


def _stored_turns(workdir: str) -> dict[int, list[tuple[str, str]]]:
  out: dict[int, list[tuple[str, str]]] = {}
  for r in _rows(workdir, "SELECT * FROM turns ORDER BY participant_id, idx"):
    out.setdefault(r["participant_id"], []).append((r["speaker"], r["text"]))
  return out


def _participant_ids(workdir: str) -> dict[str, int]:
  """Token sha256 -> participant id."""
  return {r["token_sha256"]: r["id"] for r in _rows(workdir, "SELECT * FROM participants")}


def _pid(workdir: str, link: str) -> int:
  return _participant_ids(workdir)[store_lib.token_hash(bots.token_of(link))]


def _evaluations(env: Any, role: str, arms: Mapping[str, str], opponent: str, num: int,
                 workdir: str, max_turns: int) -> dict[tuple[str, str], dict[str, Any]]:
  """(arm, scenario key) -> the lockstep transcript line of evaluate_environment."""
  out = {}
  for arm, spec in arms.items():
    summary = evaluate.evaluate_environment(env, role, spec, opponent, num_dialogues=num,
                                            workdir=workdir, seed=1000, batch_size=num,
                                            max_turns=max_turns, tag=arm)
    with open(summary["transcripts"], encoding="utf-8") as f:
      for line in f:
        row = json.loads(line)
        out[arm, row["key"]] = row
  return out


@pytest.fixture(scope="module")
def air_study(tmp_path_factory):
  """36 invitations: 32 played by concurrent bots, one never opened, one opened but not
  started, one left after one message, one whose survey is left unanswered."""
  root = tmp_path_factory.mktemp("air")
  workdir = str(root / "study")
  config = study_fixtures.tiny_study_config(
      "airdialogue", arms=ARMS, num_scenarios=NUM_SCENARIOS, participants_per_arm=18,
      limits=FAST, batch={"max_batch": 32, "wait_ms": 5})
  base_url, links, admin, stop = study_fixtures.start_server(config, workdir)
  try:
    played = bots.run_bots(base_url, links[:32], admin, CUSTOMER, concurrency=32, seed=3)
    opened = httpx.get(f"{base_url}/api/s/{bots.token_of(links[33])}", timeout=30)
    left = bots.run_bots(base_url, [links[34]], admin, CUSTOMER, max_messages=1)
    no_survey = bots.run_bots(base_url, [links[35]], admin, CUSTOMER, answer_survey=False)
  finally:
    stop()
  assert opened.status_code == 200, opened.text
  env = registry.task("airdialogue").make_env(ml_collections.ConfigDict({}))
  lockstep = _evaluations(env, "agent", ARMS, CUSTOMER, NUM_SCENARIOS, str(root / "eval"),
                          study_fixtures.MAX_TURNS["airdialogue"])
  return types.SimpleNamespace(workdir=workdir, links=links, played=played, left=left[0],
                               no_survey=no_survey[0], lockstep=lockstep, root=root)


def test_32_concurrent_bots_finish_with_nothing_lost_or_mixed(air_study):
  stored = _stored_turns(air_study.workdir)
  for link, result in zip(air_study.links, air_study.played):
    assert result.error is None, result
    assert result.phase == "done" and result.completion_code, result
    turns = stored[_pid(air_study.workdir, link)]
    assert [text for speaker, text in turns if speaker == "customer"] == result.sent
    assert turns == [tuple(t) for t in result.transcript]
    assert result.round_trips_s and all(s > 0 for s in result.round_trips_s)


def test_web_dialogues_score_as_evaluate_environment(air_study):
  """Every ended dialogue, per arm and scenario: the same turns and the same success as the
  lockstep engine; and the weaker agent is measurably weaker."""
  rows = _rows(air_study.workdir, "SELECT * FROM participants WHERE outcome_json IS NOT NULL")
  stored = _stored_turns(air_study.workdir)
  assert len(rows) == 33
  success = {arm: 0.0 for arm in ARMS}
  for r in rows:
    expected = air_study.lockstep[r["arm"], r["scenario_key"]]
    outcome = json.loads(r["outcome_json"])
    assert stored[r["id"]] == [tuple(t) for t in expected["turns"]], r["scenario_key"]
    assert outcome["success"] == expected["reward"], (r["arm"], r["scenario_key"])
    assert r["end_reason"] == expected["end_reason"]
    success[r["arm"]] += outcome["success"]
  assert success["weak"] < success["oracle"]


def test_report_counts_every_participant_as_the_database_does(air_study, tmp_path):
  out = report.run(air_study.workdir, out=str(tmp_path / "report"))
  by_hand = {r["arm"]: r for r in _rows(air_study.workdir, """
      SELECT arm, COUNT(*) AS invited, SUM(started_at IS NOT NULL) AS started,
             SUM(phase = 'done') AS completed, SUM(outcome_json IS NOT NULL) AS ended,
             AVG(json_extract(outcome_json, '$.success')) AS success,
             AVG(CASE WHEN phase = 'done' THEN json_extract(survey_json, '$.helpfulness') END)
               AS helpfulness
      FROM participants GROUP BY arm""")}
  assert set(out["arms"]) == set(ARMS)
  assert sum(a["invited"] for a in out["arms"].values()) == 36
  assert sum(a["incomplete"] for a in out["arms"].values()) == 2  # Left mid-chat; no survey.
  assert sum(a["not_started"] for a in out["arms"].values()) == 2
  for arm, row in out["arms"].items():
    hand = by_hand[arm]
    assert (row["invited"], row["started"], row["completed"], row["ended"]) == (
        hand["invited"], hand["started"], hand["completed"], hand["ended"])
    assert row["invited"] == row["not_started"] + row["incomplete"] + row["completed"]
    assert row["outcome"]["success"]["mean"] == pytest.approx(hand["success"])
    assert row["outcome"]["success"]["n"] == hand["ended"]
    assert row["survey"]["helpfulness"]["mean"] == pytest.approx(hand["helpfulness"])
    assert row["latency_s"]["n"] > 0 and row["latency_s"]["p95"] >= row["latency_s"]["p50"]
  assert out["headline"] == "success"
  assert "booking_success" in out["outcome_fields"]
  written = {p.name for p in (tmp_path / "report").iterdir()}
  assert written == {"report.md", "report.json", "report.png"}
  table = (tmp_path / "report" / "report.md").read_text()
  assert "| arm | invited | started | completed | incomplete | ended | success (n) |" in table
  assert "never dropped" in table


def test_exports_read_back_through_the_offline_readers(air_study, tmp_path):
  db = _db(air_study.workdir)
  dialogues = export.dialogues(db)
  assert len(dialogues) == 33  # Every ended dialogue, its survey answered or not.
  path = str(tmp_path / "study.jsonl")
  assert export.write_jsonl(db, path) == 33
  assert list(dialogue_lib.read_jsonl(path)) == [
      dialogue_lib.Dialogue.from_json(d.to_json()) for d in dialogues]
  assert export.write_official(db, str(tmp_path / "official")) == 33
  data, kb = str(tmp_path / "official" / "data.json"), str(tmp_path / "official" / "kb.json")
  samples = [s for _, s in official_io.enumerate_samples(data, kb)]
  assert len(samples) == 33
  read = list(to_dialogue.read_dialogues(data, kb))
  for ours, theirs in zip(dialogues, read):
    assert [(t.speaker, t.text.strip()) for t in ours.turns] == [
        (t.speaker, t.text) for t in theirs.turns]
    assert dict(ours.context) == dict(theirs.context)
    assert ours.outcome == theirs.outcome
    assert theirs.meta["study"]["participant_id"] == ours.meta["participant_id"]
    assert theirs.meta["action_in_text"] == "present"
  assert sum(d.outcome for d in read) == sum(
      json.loads(r["outcome_json"])["success"] for r in _rows(
          air_study.workdir, "SELECT * FROM participants WHERE outcome_json IS NOT NULL"))
  lines = export.official(db)
  assert [len(x) for x in lines] == [33, 33]
  assert export.dialogues_jsonl(db).count("\n") == 33


def test_report_main_writes_the_report_and_exports(air_study, tmp_path):
  command = [sys.executable, "-m", "experiments.human_study_report",
             f"--workdir={air_study.workdir}", f"--out={tmp_path / 'r'}",
             f"--export_jsonl={tmp_path / 'd.jsonl'}", f"--export_official={tmp_path / 'o'}"]
  done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                        cwd=study_fixtures.REPO)
  assert done.returncode == 0, done.stderr[-2000:]
  assert "| oracle |" in done.stdout and "jsonl: 33 dialogues" in done.stdout
  assert (tmp_path / "r" / "report.json").exists() and (tmp_path / "o" / "kb.json").exists()
  with pytest.raises(cli.BadInput, match="--workdir=.*no study.sqlite"):
    report.run(str(tmp_path))


def test_a_killed_server_loses_no_committed_turn_and_the_bots_finish(tmp_path):
  workdir = str(tmp_path / "study")
  config = study_fixtures.tiny_study_config(
      "airdialogue", arms={"oracle": study_fixtures.ORACLE}, num_scenarios=8,
      participants_per_arm=8, limits=FAST)
  base_url, links, admin, stop = study_fixtures.start_server(config, workdir)
  first: list[bots.BotResult] = []
  thread = threading.Thread(target=lambda: first.extend(bots.run_bots(
      base_url, links, admin, CUSTOMER, concurrency=8, think_s=0.2)))
  thread.start()
  deadline = time.monotonic() + 60
  while _rows(workdir, "SELECT COUNT(*) FROM turns")[0][0] < 12:
    assert time.monotonic() < deadline and thread.is_alive(), "the bots made no progress"
    time.sleep(0.02)
  stop(signal.SIGKILL)
  thread.join(60)
  committed = _stored_turns(workdir)
  assert any(r.error for r in first), "the kill came after every bot had finished"
  for link, result in zip(links, first):  # Every turn a bot saw answered is on disk.
    assert committed.get(_pid(workdir, link), [])[:len(result.transcript)] == [
        tuple(t) for t in result.transcript]
  port = urllib.parse.urlsplit(base_url).port
  base_url, again, admin_again, stop = study_fixtures.start_server(config, workdir, port=port)
  try:
    assert (again, admin_again) == (links, admin)
    second = bots.run_bots(base_url, links, admin, CUSTOMER, concurrency=8)
  finally:
    stop()
  final = _stored_turns(workdir)
  for pid, turns in committed.items():
    assert final[pid][:len(turns)] == turns
  env = registry.task("airdialogue").make_env(ml_collections.ConfigDict({}))
  lockstep = _evaluations(env, "agent", {"oracle": study_fixtures.ORACLE}, CUSTOMER, 8,
                          str(tmp_path / "eval"), study_fixtures.MAX_TURNS["airdialogue"])
  assert any(r.resumed_at and r.sent for r in second), "no bot resumed a dialogue mid-chat"
  for link, result in zip(links, second):
    assert result.error is None and result.phase == "done", result
    row = _rows(workdir, "SELECT * FROM participants WHERE id = ?", (_pid(workdir, link),))[0]
    assert final[row["id"]] == [tuple(t) for t in lockstep["oracle", row["scenario_key"]]["turns"]]


class DonatingPersuadee:
  """Says hello, then states a donation of $0.75 on its second turn."""

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    del contexts, seeds

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    return [None if h is None else "Hi! Tell me more." if sum(
        t.speaker == "persuadee" for t in h) == 0 else loader.format_donation(0.75)
            for h in histories]


def test_persuasion_study_closes_with_the_stated_donation(tmp_path, p4g_data_dir):
  del p4g_data_dir  # $P4G_DATA_DIR, which the server inherits.
  workdir = str(tmp_path / "study")
  arms = {"ask": study_fixtures.P4G_PERSUADER}
  config = study_fixtures.tiny_study_config("persuasion", arms=arms, limits=FAST)
  base_url, links, admin, stop = study_fixtures.start_server(config, workdir)
  try:
    results = bots.run_bots(base_url, links, admin, "test_study_report:DonatingPersuadee",
                            concurrency=4)
  finally:
    stop()
  assert all(r.error is None and r.phase == "done" and r.closing_value == 0.75
             for r in results), results
  env = export.make_env(json.loads(_rows(
      workdir, "SELECT value FROM meta WHERE key = 'config'")[0][0]))
  lockstep = _evaluations(env, "persuader", arms, "test_study_report:DonatingPersuadee", 2,
                          str(tmp_path / "eval"), study_fixtures.MAX_TURNS["persuasion"])
  stored = _stored_turns(workdir)
  for r in _rows(workdir, "SELECT * FROM participants"):
    expected = lockstep["ask", r["scenario_key"]]
    assert json.loads(r["outcome_json"])["donation"] == expected["info"]["donation"] == 0.75
    assert stored[r["id"]] == [tuple(t) for t in expected["turns"]]
  out = report.run(workdir, out=str(tmp_path / "report"))
  assert out["headline"] == "donation"
  assert out["arms"]["ask"]["outcome"]["donation"]["mean"] == pytest.approx(0.75)
  assert out["arms"]["ask"]["survey"]["intended_donation"]["n"] == 2
  dialogues = export.dialogues(_db(workdir))
  assert [d.outcome for d in dialogues] == [0.375] * 2  # donation / 2, as in the corpus.
  assert all(set(d.context) == {"persuader", "persuadee"} for d in dialogues)
  with pytest.raises(ValueError, match="AirDialogue"):
    export.official(_db(workdir))
