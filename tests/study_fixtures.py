"""Shared by the human-study tests: tiny study configs, an agent that writes HTML, and a real
server in a subprocess (so a test can kill -9 it and start it again on the same workdir).

    config = tiny_study_config("airdialogue", arms={"oracle": ORACLE, "html": HTML_AGENT})
    base_url, links, admin_token, stop = start_server(config, str(tmp_path / "study"))
    ...  # httpx against base_url; links[i] is "http://127.0.0.1:PORT/s/TOKEN"
    stop()                       # SIGTERM; stop(signal.SIGKILL) for a crash
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Mapping, Sequence

import httpx
import ml_collections

from data_pipelines.airdialogue import action_grammar, schema
from data_pipelines.dialogue import Turn
from workflows import http_serving
from workflows.study import config as study_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, "tests")
ORACLE = "scripted_agent:oracle"
HTML_AGENT = "study_fixtures:HtmlAgent"  # Importable wherever tests/ is on sys.path.
QUIT_AGENT = "study_fixtures:QuitAgent"
P4G_PERSUADER = "cotraining.persuader_probes:Ask"
HTML = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> hello'
HTML_ACTION = action_grammar.format_action(schema.Action("no_flight", "Jane Doe"))
MAX_TURNS = {"airdialogue": 40, "persuasion": 24}
DEFAULT_ARMS = {"airdialogue": {"oracle": ORACLE, "html": HTML_AGENT},
                "persuasion": {"ask": P4G_PERSUADER, "html": HTML_AGENT}}


def tiny_study_config(task: str = "airdialogue", arms: Mapping[str, str] | None = None,
                      **overrides: Any) -> ml_collections.ConfigDict:
  """A valid study config with 2 scenarios x 2 participants per arm and scripted arms.

  `overrides` set config fields (workflows/study/config.py); a dict given for a dict field
  (limits, batch, env, agent_options, arm_options) updates it rather than replacing it.
  """
  config = study_config.make(
      task, dict(DEFAULT_ARMS[task] if arms is None else arms), max_turns=MAX_TURNS[task],
      survey=study_config.SURVEY[:2] + ((study_config.INTENDED_DONATION,)
                                        if task == "persuasion" else ()),
      num_scenarios=2, participants_per_arm=2, agent_options={"max_new_tokens": 16},
      batch={"max_batch": 8, "wait_ms": 2})
  for field, value in overrides.items():
    if field not in config:
      raise KeyError(f"tiny_study_config: no field {field!r}; fields: {sorted(config)}")
    if isinstance(value, Mapping) and isinstance(config[field], ml_collections.ConfigDict):
      config[field].update(dict(value))
    else:
      config[field] = value
  return config


class HtmlAgent:
  """An agent whose every reply is HTML (pages must show it as text, never run it); as the
  AirDialogue agent it ends the dialogue with a valid action block on its third turn. With
  `hold_file`, a reply waits while that file exists (up to 60 s): a test can kill the server
  while a reply is outstanding (spec `study_fixtures:HtmlAgent?hold_file='/tmp/x'`)."""

  def __init__(self, role: str = "agent", hold_file: str = ""):
    self.role, self.hold_file = role, hold_file

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    del seeds
    self.batch = len(contexts)

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    deadline = time.monotonic() + 60
    while self.hold_file and os.path.exists(self.hold_file) and time.monotonic() < deadline:
      time.sleep(0.05)
    replies = []
    for history in histories:
      if history is None:
        replies.append(None)
        continue
      own = sum(t.speaker == self.role for t in history)
      closes = self.role == "agent" and own == 2
      replies.append(f"{HTML} {HTML_ACTION}" if closes else HTML)
    return replies


class QuitAgent:
  """An agent that says hello, then ends the dialogue (answers None, as a party whose context
  is full does)."""

  def __init__(self, role: str = "agent"):
    self.role = role

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    del contexts, seeds

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    return [None if h is None or any(t.speaker == self.role for t in h) else "hello"
            for h in histories]


def token(link: str) -> str:
  """The participant token at the end of an invitation link."""
  return link.strip().rstrip("/").rsplit("/", 1)[-1]


def write_config_file(config: ml_collections.ConfigDict, path: str) -> str:
  """`config` as a --config file (get_config() returning it)."""
  data = json.dumps(study_config.to_plain(config))
  with open(path, "w", encoding="utf-8") as f:
    f.write("import json\n\nimport ml_collections\n\n\ndef get_config():\n"
            f"  return ml_collections.ConfigDict(json.loads({data!r}))\n")
  return path


def start_server(config: ml_collections.ConfigDict, workdir: str, *, port: int | None = None,
                 timeout_s: float = 90.0
                 ) -> tuple[str, list[str], str, Callable[..., int]]:
  """Serves `config` on 127.0.0.1 with `python -m experiments.human_study` in a subprocess.

  Returns (base_url, links, admin_token, stop): links as written to WORKDIR/links.txt (a
  restart on the same workdir reopens the study, so they are the same), and stop(sig=SIGTERM)
  -> the exit status. Starting again on the same workdir with `port` reuses the links' port.
  """
  os.makedirs(workdir, exist_ok=True)
  config_path = write_config_file(config, workdir.rstrip("/") + ".config.py")
  port = port or http_serving.free_port()
  log = tempfile.NamedTemporaryFile(prefix="study_server_", suffix=".log", delete=False)
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, REPO, env.get("PYTHONPATH")) if p)
  process = subprocess.Popen(
      [sys.executable, "-m", "experiments.human_study", f"--config={config_path}",
       f"--workdir={workdir}", f"--port={port}"],
      cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
  base_url = f"http://127.0.0.1:{port}"

  def stop(sig: int = signal.SIGTERM) -> int:
    if process.poll() is None:
      process.send_signal(sig)
    try:
      return process.wait(timeout=30)
    finally:
      log.close()

  deadline = time.monotonic() + timeout_s
  while True:
    if process.poll() is not None:
      with open(log.name, encoding="utf-8", errors="replace") as f:
        raise RuntimeError(f"study server exited {process.returncode}:\n{f.read()[-4000:]}")
    admin_path = os.path.join(workdir, "admin_token")
    if os.path.exists(admin_path):
      with open(admin_path, encoding="utf-8") as f:
        admin_token = f.read().strip()
      try:
        reply = httpx.get(f"{base_url}/api/admin/summary", timeout=2,
                          headers={"Authorization": f"Bearer {admin_token}"})
        if reply.status_code == 200:
          break
      except httpx.TransportError:
        pass
    if time.monotonic() > deadline:
      stop(signal.SIGKILL)
      raise TimeoutError(f"study server not up within {timeout_s} s (log: {log.name})")
    time.sleep(0.2)
  with open(os.path.join(workdir, "links.txt"), encoding="utf-8") as f:
    links = [line.strip() for line in f if line.strip()]
  return base_url, links, admin_token, stop
