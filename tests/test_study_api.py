"""The human-study server (workflows/study/, experiments/human_study.py) through its HTTP API.

Scripted and tiny agents only. In process (FastAPI's TestClient) for the API's rules; a real
server in a subprocess (study_fixtures.start_server) for kill -9 and restart.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

import study_fixtures as fx
from data_pipelines import cli
from data_pipelines.dialogue import Turn
from ilql_dialogue import environment, parties
from workflows import http_serving, serve
from workflows.study import app as study_app
from workflows.study import assignment
from workflows.study import config as study_config

BLIND_ARMS = {"arm_oracle_q7": fx.ORACLE, "arm_html_q8": fx.HTML_AGENT}
SECRETS = ("arm_oracle_q7", "arm_html_q8", "scripted_agent", "study_fixtures", "HtmlAgent")


class Clock:
  """A settable clock for the server (expiry and the rate limit read it)."""

  def __init__(self):
    self.now = time.time()

  def __call__(self) -> float:
    return self.now


def _client(config, workdir, clock=None, **options):
  study = study_config.load(config)
  app = study_app.make_app(study, str(workdir), **({"clock": clock} if clock else {}), **options)
  with open(os.path.join(workdir, "links.txt")) as f:
    tokens = [fx.token(line) for line in f if line.strip()]
  return TestClient(app), app, tokens


def _snapshot(workdir) -> tuple:
  """Every row of the study's database, to compare before and after a refused request."""
  conn = sqlite3.connect(f"file:{os.path.join(workdir, 'study.sqlite')}?mode=ro", uri=True)
  try:
    return tuple(tuple(map(tuple, conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()))
                 for t in ("meta", "participants", "turns"))
  finally:
    conn.close()


def _arm_tokens(app, tokens, arm):
  store = app.state.sessions.store
  return [t for t in tokens if store.participant(t)["arm"] == arm]


def _play_person(client, tok, admin, spec="scripted:volunteer", limit=40):
  """Plays the person's role through the API with a scripted customer party; returns the
  last state."""
  bot = client.get(f"/api/admin/bot/{tok}", headers={"Authorization": f"Bearer {admin}"}).json()
  person = parties.make_party(spec, "customer")
  person.reset([bot["context"]], [bot["human_seed"]])
  state = client.post(f"/api/s/{tok}/start").json()
  for _ in range(limit):
    if state["ended"]:
      break
    history = [Turn(t["speaker"], t["text"]) for t in state["turns"]]
    text = person.respond([history])[0]
    reply = client.post(f"/api/s/{tok}/message", json={"text": text, "turn": len(history)})
    assert reply.status_code == 200, reply.text
    state = reply.json()
  return state


def test_invitations_are_balanced_per_scenario(tmp_path):
  order = assignment.slots(["a", "b", "c"], 4, 6, seed=3)
  assert len(order) == 18
  for block in range(6):  # Every block of len(arms) invitations has each arm once.
    assert sorted(a for a, _ in order[3 * block:3 * block + 3]) == ["a", "b", "c"]
  counts = collections.Counter(order)
  for scenario in range(4):
    assert len({counts[(arm, scenario)] for arm in "abc"}) == 1
  assert assignment.slots(["a", "b", "c"], 4, 6, seed=3) == order
  assert assignment.slots(["a", "b", "c"], 4, 6, seed=4) != order

  config = fx.tiny_study_config(num_scenarios=3, participants_per_arm=5)
  client, app, tokens = _client(config, tmp_path)
  rows = app.state.sessions.store.participants()
  assert len(tokens) == len(set(tokens)) == len(rows) == 10
  study = app.state.sessions.study
  for row in rows:
    key = study.env.scenario_key(study.scenarios[row["scenario_index"]])
    assert row["scenario_key"] == key and row["phase"] == "invited"
    assert row["agent_seed"] == environment.row_seeds(
        1000, [key], study.env.seed_streams["agent"])[0]
    assert row["human_seed"] == environment.row_seeds(
        1000, [key], study.env.seed_streams["customer"])[0]
  per_scenario = collections.Counter((r["arm"], r["scenario_index"]) for r in rows)
  for scenario in range(3):
    assert per_scenario[("oracle", scenario)] == per_scenario[("html", scenario)]
  assert oct(os.stat(tmp_path / "links.txt").st_mode & 0o777) == "0o600"
  for private in ("admin_token", "study.sqlite", "study.sqlite-wal"):
    assert oct(os.stat(tmp_path / private).st_mode & 0o777) == "0o600", private
  assert all(t not in (tmp_path / "study.sqlite").read_bytes().decode("latin-1") for t in tokens)


def test_airdialogue_path_is_blinded_scored_and_finishes_once(tmp_path):
  config = fx.tiny_study_config(arms=BLIND_ARMS)
  client, app, tokens = _client(config, tmp_path)
  admin = (tmp_path / "admin_token").read_text().strip()
  bodies = []
  with client:
    original_request = client.request

    def recorded(method, url, **kwargs):
      reply = original_request(method, url, **kwargs)
      if "/api/admin/" not in str(url):
        bodies.append(reply.text + json.dumps(dict(reply.headers)))
      return reply

    client.request = recorded
    tok = _arm_tokens(app, tokens, "arm_oracle_q7")[0]
    first = client.get(f"/api/s/{tok}").json()
    assert first["phase"] == "instructions" and first["human_role"] == "customer"
    assert first["instructions"] and first["card"] and first["closing"] is None
    state = _play_person(client, tok, admin)
    assert state["phase"] == "survey" and state["ended"] and state["end_reason"] == "action"
    assert [t["you"] for t in state["turns"]] == [t["speaker"] == "customer"
                                                  for t in state["turns"]]
    row = app.state.sessions.store.participant(tok)
    outcome = json.loads(row["outcome_json"])
    assert list(outcome)[0] == "success" and outcome["success"] == 1.0
    turns = app.state.sessions.store.turns(row["id"])
    assert all((t["latency_s"] is not None) == (t["speaker"] == "agent") for t in turns)

    bad = client.post(f"/api/s/{tok}/survey", json={"answers": {"success": 5}})
    assert bad.status_code == 422 and "helpfulness" in bad.json()["detail"]
    done = client.post(f"/api/s/{tok}/survey", json={"answers": {"success": 5, "helpfulness": 4}})
    assert done.status_code == 200 and done.json()["phase"] == "done"
    code = done.json()["completion_code"]
    assert re.fullmatch(r"[0-9A-F]{8}", code)
    assert client.post(f"/api/s/{tok}/survey",
                       json={"answers": {"success": 5, "helpfulness": 4}}).status_code == 410
    assert client.post(f"/api/s/{tok}/start").status_code == 410
    again = client.get(f"/api/s/{tok}")  # A reload still shows the code.
    assert again.status_code == 200 and again.json()["completion_code"] == code

    html_tok = _arm_tokens(app, tokens, "arm_html_q8")[0]
    state = _play_person(client, html_tok, admin)
    assert state["phase"] == "survey" and state["end_reason"] == "action"
    agent_texts = [t["text"] for t in state["turns"] if not t["you"]]
    assert agent_texts[0] == fx.HTML  # Raw text in JSON: escaping is the page's job.
    assert agent_texts[2] == f"{fx.HTML} {fx.HTML_ACTION}"
  assert bodies
  for body in bodies:
    for secret in SECRETS:
      assert secret not in body


def test_one_person_is_serialized_and_people_are_batched(tmp_path):
  hold = tmp_path / "hold"
  config = fx.tiny_study_config(arms={"html": f"{fx.HTML_AGENT}?hold_file={str(hold)!r}"},
                                num_scenarios=1, batch={"wait_ms": 300})
  client, app, tokens = _client(config, tmp_path)
  statuses = []
  with client:
    for tok in tokens[:2]:
      client.post(f"/api/s/{tok}/start")
    hold.touch()  # Replies wait: the requests below are all in flight at once.
    threads = [threading.Thread(target=lambda tok=tok: statuses.append(client.post(
        f"/api/s/{tok}/message", json={"text": "hi", "turn": 0}).status_code))
               for tok in (tokens[0], tokens[0], tokens[1])]
    for thread in threads:
      thread.start()
    _wait_for_turns(tmp_path, 2)
    hold.unlink()
    for thread in threads:
      thread.join()
    assert sorted(statuses) == [200, 200, 409]  # The same turn twice: one is refused.
    store = app.state.sessions.store
    for tok in tokens[:2]:
      turns = store.turns(store.participant(tok)["id"])
      assert [(t["speaker"], t["text"]) for t in turns] == [("customer", "hi"), ("agent", fx.HTML)]
    assert app.state.sessions.agents.batcher.batch_sizes == [2]  # Two people, one batch.


def test_tokens_wrong_expired_and_used(tmp_path):
  clock = Clock()
  config = fx.tiny_study_config(limits={"token_ttl_hours": 1})
  client, app, tokens = _client(config, tmp_path, clock)
  with client:
    for path in ("", "/start"):
      method = client.get if not path else client.post
      assert method(f"/api/s/{'x' * 32}{path}").status_code == 403
      assert method(f"/api/s/{tokens[0][:-1]}{path}").status_code == 403
    assert client.get(f"/api/s/{tokens[0]}").status_code == 200
    clock.now += 3599
    assert client.post(f"/api/s/{tokens[0]}/start").status_code == 200
    clock.now += 2
    before = _snapshot(tmp_path)
    expired = client.get(f"/api/s/{tokens[0]}")
    assert expired.status_code == 403 and "expired" in expired.json()["detail"]
    assert client.post(f"/api/s/{tokens[0]}/message",
                       json={"text": "hi", "turn": 0}).status_code == 403
    assert _snapshot(tmp_path) == before
    assert client.get(f"/api/s/{tokens[1]}").status_code == 200  # Not visited: not expired.


def test_admin_routes_need_the_admin_token(tmp_path):
  client, app, tokens = _client(fx.tiny_study_config(), tmp_path)
  admin = (tmp_path / "admin_token").read_text().strip()
  with client:
    for route in ("/api/admin/summary", f"/api/admin/bot/{tokens[0]}",
                  "/api/admin/export?format=jsonl"):
      before = _snapshot(tmp_path)
      assert client.get(route).status_code == 403
      assert client.get(route, headers={"Authorization": f"Bearer {admin}x"}).status_code == 403
      assert client.get(route, headers={"Authorization": admin}).status_code == 403
      assert _snapshot(tmp_path) == before
    auth = {"Authorization": f"Bearer {admin}"}
    summary = client.get("/api/admin/summary", headers=auth).json()
    assert summary["participants"] == 4
    assert summary["arms"]["oracle"]["invited"] == summary["arms"]["html"]["invited"] == 2
    bot = client.get(f"/api/admin/bot/{tokens[0]}", headers=auth).json()
    row = app.state.sessions.store.participant(tokens[0])
    assert bot["human_seed"] == row["human_seed"] and bot["scenario_key"] == row["scenario_key"]
    assert bot["context"]["name"] and row["kind"] == "bot"
    _play_person(client, tokens[0], admin)
    lines = client.get("/api/admin/export?format=jsonl", headers=auth)
    assert lines.status_code == 200 and len(lines.text.splitlines()) == 1
    official = client.get("/api/admin/export?format=official", headers=auth).json()
    assert len(official["data"]) == len(official["kb"]) == 1
    assert client.get("/api/admin/export?format=csv", headers=auth).status_code == 400


def test_refused_requests_write_nothing(tmp_path):
  clock = Clock()
  config = fx.tiny_study_config(arms={"html": fx.HTML_AGENT},
                                limits={"messages_per_minute": 2, "max_message_chars": 50,
                                        "max_body_bytes": 300})
  client, app, tokens = _client(config, tmp_path, clock)
  tok = tokens[0]
  url = f"/api/s/{tok}"
  with client:
    assert client.post(f"{url}/message", json={"text": "hi", "turn": 0}).status_code == 409
    client.get(url)
    assert client.post(f"{url}/message", json={"text": "hi", "turn": 0}).status_code == 409
    assert client.post(f"{url}/survey", json={"answers": {}}).status_code == 409
    client.post(f"{url}/start")
    assert client.post(f"{url}/message", json={"text": "hello", "turn": 0}).status_code == 200

    refused = [
        (422, dict(json={"text": "x" * 51, "turn": 2}), "50"),  # Names the limit.
        (422, dict(json={"text": "   ", "turn": 2}), "empty"),
        (422, dict(json={"text": "book [action] x", "turn": 2}), "[action]"),
        (422, dict(json={"text": "hi", "turn": "2"}), "turn"),
        (422, dict(json={"text": "hi"}), "turn"),
        (422, dict(json={"text": "hi", "turn": 2, "extra": 1}), "extra"),
        (400, dict(content=b'{"text": "hi", "turn": ', headers={"content-type":
                                                                "application/json"}), "JSON"),
        (409, dict(json={"text": "hi", "turn": 0}), "turn"),  # A retry of turn 0: no duplicate.
        (409, dict(json={"text": "hi", "turn": 3}), "turn"),
        (413, dict(json={"text": "x" * 400, "turn": 2}), "300"),
        (413, dict(content=iter([b'{"text": "', b"y" * 400, b'", "turn": 2}']),
                   headers={"content-type": "application/json"}), "300"),  # Chunked.
    ]
    for status, kwargs, named in refused:
      before = _snapshot(tmp_path)
      reply = client.post(f"{url}/message", **kwargs)
      assert reply.status_code == status, (kwargs, reply.text)
      assert isinstance(reply.json()["detail"], str) and named in reply.json()["detail"]
      assert _snapshot(tmp_path) == before
    assert client.post(f"{url}/close", json={"value": 1.0}).status_code == 409  # No closing.
    assert client.get("/api/nothing").status_code == 404

    assert client.post(f"{url}/message", json={"text": "again", "turn": 2}).status_code == 200
    before = _snapshot(tmp_path)
    limited = client.post(f"{url}/message", json={"text": "third", "turn": 4})
    assert limited.status_code == 429 and "2 messages" in limited.json()["detail"]
    assert _snapshot(tmp_path) == before
    clock.now += 61  # The limit reads the committed turns' times.
    state = client.post(f"{url}/message", json={"text": "third", "turn": 4}).json()
    assert state["phase"] == "survey" and len(state["turns"]) == 6
    before = _snapshot(tmp_path)
    assert client.post(f"{url}/message", json={"text": "late", "turn": 6}).status_code == 409
    assert _snapshot(tmp_path) == before


def test_page_and_api_headers(tmp_path):
  client, _, tokens = _client(fx.tiny_study_config(), tmp_path)
  with client:
    for route in (f"/s/{tokens[0]}", f"/api/s/{tokens[0]}", "/api/s/unknown", "/static/app.js"):
      reply = client.get(route)
      if route.startswith("/s/") or route.startswith("/static/"):
        if not os.path.isfile(os.path.join(study_app.STATIC, os.path.basename(route)
                                           if route.startswith("/static/") else "index.html")):
          assert reply.status_code == 404
          continue
        assert reply.status_code == 200
      csp = reply.headers["content-security-policy"]
      assert "default-src 'self'" in csp and "script-src 'self'" in csp
      assert "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
      assert reply.headers["x-content-type-options"] == "nosniff"
      assert reply.headers["referrer-policy"] == "no-referrer"
      if route.startswith("/api/"):
        assert reply.headers["cache-control"] == "no-store"
    page = client.get(f"/s/{tokens[0]}")
    if page.status_code == 200:
      assert page.headers["content-type"].startswith("text/html")
    assert client.get("/docs").status_code == 404


@pytest.mark.parametrize("name", ["study_airdialogue", "study_airdialogue:pilot",
                                  "study_persuasion"])
def test_shipped_study_configs_pass_but_for_their_runs(name, p4g_data_dir):
  """The shipped studies' fields pass the start-up check; only their arms' workdirs (trained by
  `make run` or the P4G quick configs) may be missing here, and are named if so."""
  del p4g_data_dir
  module, _, variant = name.partition(":")
  config = __import__(f"experiments.configs.{module}", fromlist=["get_config"]).get_config(
      *([variant] if variant else []))
  try:
    study_config.load(config)
  except cli.BadInput as error:
    assert re.search(r"config\.arms\.\w+=\S+: no such directory", str(error)), error


def test_config_checks_name_the_field(tmp_path):
  good = fx.tiny_study_config()
  study_config.load(good)
  cases = [
      (dict(task="no_such_task"), "config.task"),
      (dict(arms={"a": str(tmp_path / "missing_run")}), "config.arms.a"),
      (dict(arms={}), "config.arms"),
      (dict(limits={"max_message_chars": 0}), "config.limits.max_message_chars"),
      (dict(survey=[{"id": "x", "text": "t", "scale": 1, "low": "a", "high": "b"}]),
       "config.survey[0].scale"),
      (dict(survey=[{"id": "x", "text": "t", "type": "number", "min": 2, "max": 1}]),
       "config.survey[0]"),
      (dict(max_turns=0), "config.max_turns"),
      (dict(arm_options={"nope": {}}), "config.arm_options.nope"),
  ]
  for overrides, field in cases:
    config = fx.tiny_study_config()
    for name, value in overrides.items():
      config[name] = value
    with pytest.raises(cli.BadInput, match=field.replace("[", r"\[").replace("]", r"\]")):
      study_config.load(config)
  config = fx.tiny_study_config()
  config.unknown = 1
  with pytest.raises(cli.BadInput, match="unknown"):
    study_config.load(config)

  customer = fx.tiny_study_config(arms={"a": "scripted:volunteer"})  # Not an agent.
  with pytest.raises(cli.BadInput, match="config.arms.a"):
    study_app.make_app(study_config.load(customer), str(tmp_path / "c"))

  assignment.open_study(study_config.load(good), str(tmp_path / "s"), "http://x").close()
  changed = fx.tiny_study_config(participants_per_arm=3)
  with pytest.raises(cli.BadInput, match="config.participants_per_arm"):
    assignment.open_study(study_config.load(changed), str(tmp_path / "s"), "http://x")


def test_an_openai_model_is_served_beside_the_participants(tmp_path, monkeypatch):
  """config.openai_model (here a tiny chat_model) puts /v1 on the study's own server, e.g.
  for a vs_llm arm; its body limit is its own, and the participant routes work as before."""
  for field, value in (("openai_model", str(tmp_path / "no_model")), ("openai_name", "a b")):
    with pytest.raises(cli.BadInput, match=f"config.{field}"):
      study_config.load(fx.tiny_study_config(**{field: value}))

  monkeypatch.setenv("OPENAI_API_KEY", "a key of this test's process")  # Kept by the server.
  chat = serve.tiny_chat_model()
  config = fx.tiny_study_config(openai_name="tiny", batch={"wait_ms": 0})
  client, app, tokens = _client(config, tmp_path, chat_model=chat)
  admin = (tmp_path / "admin_token").read_text().strip()
  key = (tmp_path / "openai_key").read_text().strip()
  assert key != admin and (tmp_path / "openai_key").stat().st_mode & 0o077 == 0
  messages = [{"role": "user", "content": "hello"}]
  with client:
    for wrong in ({}, {"Authorization": f"Bearer {admin}"}, {"Authorization": key}):
      refused = client.get("/v1/models", headers=wrong)
      assert refused.status_code == 401 and "API_KEY" in refused.text
    client.headers["Authorization"] = f"Bearer {key}"
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["tiny"]
    reply = client.post("/v1/chat/completions", json={
        "model": "tiny", "messages": messages, "max_tokens": 6, "temperature": 0})
    assert reply.status_code == 200 and reply.headers["cache-control"] == "no-store"
    alone = chat.complete(messages, temperature=0.0, top_p=1.0, max_tokens=6, seed=None)
    assert reply.json()["choices"][0]["message"]["content"] == alone["text"]
    long = [{"role": "user", "content": "z" * 2 * config.limits.max_body_bytes}]
    # Over the study's body limit but within /v1's: the model's context refuses it, not 413.
    refused = client.post("/v1/chat/completions", json={"messages": long})
    assert refused.status_code == 400 and "context" in refused.json()["error"]["message"]
    too_big = client.post(f"/api/s/{tokens[0]}/message", json={"text": long[0]["content"],
                                                               "turn": 0})
    assert too_big.status_code == 413 and "max_body_bytes" in too_big.json()["detail"]

    state = _play_person(client, _arm_tokens(app, tokens, "oracle")[0], admin)
    assert state["phase"] == "survey" and state["end_reason"] == "action"
  with pytest.raises(RuntimeError, match="closed"):  # The study's shutdown closed its batcher.
    app.state.batcher.submit("tiny", None)


def test_p4g_closing_donation(tmp_path, p4g_data_dir):
  del p4g_data_dir
  client, app, tokens = _client(fx.tiny_study_config("persuasion"), tmp_path)
  with client:
    tok = _arm_tokens(app, tokens, "ask")[0]
    state = client.get(f"/api/s/{tok}").json()
    assert state["closing"] == {"field": "donation", "min": 0.0, "max": 2.0}
    assert any("$2" in value for _, value in state["card"])
    state = client.post(f"/api/s/{tok}/start").json()
    assert [t["speaker"] for t in state["turns"]] == ["persuader"]  # The agent opens.
    state = client.post(f"/api/s/{tok}/message", json={"text": "Hi! Not yet.", "turn": 1}).json()
    assert len(state["turns"]) == 3 and not state["must_close"]
    before = _snapshot(tmp_path)
    for value in (2.5, -0.1, float("nan")):
      body = json.dumps({"value": value}).encode()
      reply = client.post(f"/api/s/{tok}/close", content=body,
                          headers={"content-type": "application/json"})
      assert reply.status_code == 422, reply.text
    assert client.post(f"/api/s/{tok}/close", json={"value": 1, "turn": 1}).status_code == 409
    assert _snapshot(tmp_path) == before
    state = client.post(f"/api/s/{tok}/close", json={"value": 1.5}).json()
    assert state["phase"] == "survey" and state["end_reason"] == "donation"
    assert state["turns"][-1]["you"] and len(state["turns"]) == 4
    assert json.loads(app.state.sessions.store.participant(tok)["outcome_json"]) == {
        "donation": 1.5}
    bad = client.post(f"/api/s/{tok}/survey",
                      json={"answers": {"success": 3, "helpfulness": 3, "intended_donation": 3}})
    assert bad.status_code == 422 and "intended_donation" in bad.json()["detail"]
    assert client.post(f"/api/s/{tok}/survey", json={"answers": {
        "success": 3, "helpfulness": 3, "intended_donation": 0.5}}).json()["phase"] == "done"

    tok = tokens[1] if tokens[1] != tok else tokens[2]  # The last turn must be the closing.
    client.post(f"/api/s/{tok}/start")
    for turn in range(1, 23, 2):
      state = client.post(f"/api/s/{tok}/message", json={"text": f"m{turn}", "turn": turn}).json()
    assert state["must_close"] and len(state["turns"]) == 23
    last = client.post(f"/api/s/{tok}/message", json={"text": "bye", "turn": 23})
    assert last.status_code == 409 and "donation" in last.json()["detail"]
    assert client.post(f"/api/s/{tok}/close", json={"value": 0}).json()["end_reason"] == "donation"


def test_p4g_agent_that_ends_leaves_the_closing_to_the_person(tmp_path, p4g_data_dir):
  del p4g_data_dir
  config = fx.tiny_study_config("persuasion", arms={"quit": fx.QUIT_AGENT})
  client, app, tokens = _client(config, tmp_path)
  with client:
    client.post(f"/api/s/{tokens[0]}/start")
    state = client.post(f"/api/s/{tokens[0]}/message", json={"text": "hi", "turn": 1}).json()
    assert state["phase"] == "chat" and state["ended"] and state["must_close"]
    assert state["end_reason"] == "persuader_ended" and len(state["turns"]) == 2
    assert client.post(f"/api/s/{tokens[0]}/message",
                       json={"text": "more", "turn": 2}).status_code == 409
    state = client.post(f"/api/s/{tokens[0]}/close", json={"value": 0.25, "turn": 2}).json()
    assert state["phase"] == "survey" and state["end_reason"] == "donation"
    row = app.state.sessions.store.participant(tokens[0])
    assert json.loads(row["outcome_json"]) == {"donation": 0.25}


def _rows(workdir, sql):
  conn = sqlite3.connect(f"file:{os.path.join(workdir, 'study.sqlite')}?mode=ro", uri=True)
  conn.row_factory = sqlite3.Row
  try:
    return [dict(r) for r in conn.execute(sql)]
  finally:
    conn.close()


def _wait_for_turns(workdir, count, timeout_s=20):
  """Until the database holds `count` turns (requests in flight on other threads)."""
  deadline = time.monotonic() + timeout_s
  while len(_rows(workdir, "SELECT * FROM turns")) < count:
    assert time.monotonic() < deadline
    time.sleep(0.02)


def test_kill_and_restart_keeps_every_committed_turn(tmp_path):
  hold = tmp_path / "hold"
  config = fx.tiny_study_config(arms={"html": f"{fx.HTML_AGENT}?hold_file={str(hold)!r}"},
                                num_scenarios=1, participants_per_arm=2)
  workdir = str(tmp_path / "study")
  base_url, links, admin, stop = fx.start_server(config, workdir)
  port = int(base_url.rsplit(":", 1)[1])
  with socket.socket() as s:  # Bound to 127.0.0.1 only: another loopback address is refused.
    assert s.connect_ex(("127.0.0.2", port)) != 0
  tok = fx.token(links[0])
  with httpx.Client(base_url=base_url, timeout=30) as client:
    client.post(f"/api/s/{tok}/start")
    state = client.post(f"/api/s/{tok}/message", json={"text": "one", "turn": 0}).json()
    assert len(state["turns"]) == 2
    hold.touch()  # The next reply waits: the server dies with the person's turn committed.
    thread = threading.Thread(target=lambda: _quietly(
        client.post, f"/api/s/{tok}/message", json={"text": "two", "turn": 2}))
    thread.start()
    _wait_for_turns(workdir, 3)
    assert stop(signal.SIGKILL) == -signal.SIGKILL
    thread.join()
  hold.unlink()
  turns = _rows(workdir, "SELECT speaker, text FROM turns ORDER BY idx")
  assert [(t["speaker"], t["text"]) for t in turns] == [
      ("customer", "one"), ("agent", fx.HTML), ("customer", "two")]

  changed = fx.tiny_study_config(arms=dict(config.arms), num_scenarios=1, participants_per_arm=3)
  refused = subprocess.run(
      [sys.executable, "-m", "experiments.human_study",
       f"--config={fx.write_config_file(changed, str(tmp_path / 'changed.py'))}",
       f"--workdir={workdir}", f"--port={http_serving.free_port()}"],
      cwd=fx.REPO, capture_output=True, text=True, timeout=120,
      env={**os.environ, "PYTHONPATH": os.pathsep.join((fx.TESTS, fx.REPO))})
  assert refused.returncode == 1
  assert refused.stderr.strip().splitlines()[-1].startswith("error: config.participants_per_arm")

  base_url, again, admin_again, stop = fx.start_server(config, workdir, port=port)
  try:
    assert (again, admin_again) == (links, admin)
    with httpx.Client(base_url=base_url, timeout=30) as client:
      state = client.get(f"/api/s/{tok}").json()  # The missing reply is produced now.
      assert [t["text"] for t in state["turns"]] == ["one", fx.HTML, "two", fx.HTML]
      assert state["phase"] == "chat" and not state["agent_pending"]
      state = client.post(f"/api/s/{tok}/message", json={"text": "three", "turn": 4}).json()
      assert state["phase"] == "survey" and state["end_reason"] == "action"
      summary = client.get("/api/admin/summary",
                           headers={"Authorization": f"Bearer {admin}"}).json()
      assert summary["arms"]["html"]["survey"] == 1 and summary["arms"]["html"]["invited"] == 1
  finally:
    stop()
  rows = _rows(workdir, "SELECT * FROM turns ORDER BY idx")
  assert [r["idx"] for r in rows] == list(range(6))
  assert all(r["latency_s"] is not None for r in rows if r["speaker"] == "agent")


def _quietly(fn, *args, **kwargs):
  try:
    fn(*args, **kwargs)
  except httpx.HTTPError:
    pass  # The server was killed mid-request.
