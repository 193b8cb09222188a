"""A study's results per arm, read from its database: counts, outcomes, survey, timing.

    python -m experiments.human_study_report --workdir=DIR [--out=DIR/report --kind=all]

Every invited participant is counted: a person who never started, or who left
the chat or the survey half-way, is counted in their arm's row, never dropped, so
an arm that drives people away shows it. Outcomes are averaged over the dialogues
that ended (the task's ending or the turn limit), survey items over the people
who completed the survey; each mean carries its standard error (sample standard
deviation over sqrt(n)). The first field of a stored outcome is the headline
(AirDialogue "success", Persuasion for Good "donation"; ilql_dialogue/registry.py
StudySpec.outcome). The tables follow compare_agents' (workflows/compare.py):
`mean ± s.e.` cells, "–" where there is nothing to average.

The database is opened read-only, so reporting a study that is still running
changes nothing and sees every committed turn.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sqlite3
from typing import Any, Mapping, Sequence

import numpy as np

from data_pipelines import cli

DB_NAME = "study.sqlite"
KINDS = ("all", "person", "bot")
BOT = "bot"
DONE = "done"
NOT_STARTED = ("invited", "instructions")


@dataclasses.dataclass(frozen=True)
class Study:
  """What a study's database holds: its config, every participant and every turn."""

  config: Mapping[str, Any]
  participants: tuple[Mapping[str, Any], ...]
  turns: Mapping[int, tuple[Mapping[str, Any], ...]]  # participant id -> turns in order.

  @property
  def arms(self) -> list[str]:
    """The config's arms in order, then any arm only the participants name."""
    named = list(self.config.get("arms", {}))
    return named + sorted({p["arm"] for p in self.participants} - set(named))


def read_study(db_path: str) -> Study:
  """The database at `db_path`, read through a read-only connection."""
  if not os.path.isfile(db_path):
    raise FileNotFoundError(f"{db_path}: no study database")
  conn = sqlite3.connect(f"file:{os.path.abspath(db_path)}?mode=ro", uri=True,
                         isolation_level=None)
  conn.row_factory = sqlite3.Row
  try:
    conn.execute("BEGIN")  # One read transaction: participants and turns of the same moment.
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    participants = tuple(dict(r) for r in conn.execute("SELECT * FROM participants ORDER BY id"))
    turns: dict[int, list[Mapping[str, Any]]] = {}
    for r in conn.execute("SELECT * FROM turns ORDER BY participant_id, idx"):
      turns.setdefault(r["participant_id"], []).append(dict(r))
    conn.execute("COMMIT")
  finally:
    conn.close()
  if "config" not in meta:
    raise ValueError(f"{db_path}: table meta has no 'config'")
  return Study(json.loads(meta["config"]), participants,
               {pid: tuple(ts) for pid, ts in turns.items()})


def _json(value: str | None) -> dict[str, Any]:
  return json.loads(value) if value else {}


def _number(value: Any) -> float | None:
  """A stored outcome or answer as a float; None for what is not a finite number."""
  if isinstance(value, bool):
    return float(value)
  if isinstance(value, (int, float)) and math.isfinite(value):
    return float(value)
  return None


def mean_se(values: Sequence[float | None]) -> dict[str, Any]:
  """Mean and standard error of the numbers among `values` (None: not a number, skipped)."""
  xs = np.asarray([v for v in values if v is not None], np.float64)
  n = len(xs)
  return {"n": n, "mean": float(xs.mean()) if n else None,
          "stderr": float(xs.std(ddof=1) / math.sqrt(n)) if n > 1 else None}


def ended(p: Mapping[str, Any]) -> bool:
  """Whether the participant's dialogue ended (its outcome is scored and stored)."""
  return p.get("outcome_json") is not None


def started(p: Mapping[str, Any]) -> bool:
  """Whether the participant reached the chat (opening the link and reading is not starting)."""
  return p.get("started_at") is not None or p["phase"] not in NOT_STARTED


def of_kind(participants: Sequence[Mapping[str, Any]], kind: str) -> list[Mapping[str, Any]]:
  """"all", "bot", or "person" (everyone not marked a bot: an invitation nobody opened yet
  is a person's)."""
  if kind not in KINDS:
    raise ValueError(f"kind={kind!r} not in {KINDS}")
  if kind == "all":
    return list(participants)
  return [p for p in participants if (p.get("kind") == BOT) == (kind == BOT)]


def headline_field(study: Study) -> str:
  """The first field of the stored outcomes (StudySpec.outcome's headline)."""
  for p in study.participants:
    outcome = _json(p.get("outcome_json"))
    if outcome:
      return next(iter(outcome))
  return {"airdialogue": "success", "persuasion": "donation"}.get(study.config.get("task"),
                                                                   "outcome")


def survey_items(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
  return list(config.get("survey", []))


def arm_report(participants: Sequence[Mapping[str, Any]],
               turns: Mapping[int, Sequence[Mapping[str, Any]]], fields: Sequence[str],
               items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """One arm's row: counts (every participant), outcome fields over the dialogues that ended,
  survey items over the completed surveys, turns and minutes, agent reply latencies."""
  began = [p for p in participants if started(p)]
  finished = [p for p in participants if ended(p)]
  completed = [p for p in participants if p["phase"] == DONE]
  outcomes = [_json(p["outcome_json"]) for p in finished]
  answers = [_json(p.get("survey_json")) for p in completed]
  latencies = np.asarray([t["latency_s"] for p in participants for t in turns.get(p["id"], ())
                          if t.get("latency_s") is not None], np.float64)
  chat_minutes = [(p["ended_at"] - p["started_at"]) / 60 for p in finished
                  if p.get("ended_at") is not None and p.get("started_at") is not None]
  session_minutes = [(p["finished_at"] - p["started_at"]) / 60 for p in completed
                     if p.get("finished_at") is not None and p.get("started_at") is not None]
  kinds: dict[str, int] = {}
  for p in participants:
    kinds[p.get("kind") or "unknown"] = kinds.get(p.get("kind") or "unknown", 0) + 1
  return {
      "invited": len(participants),
      "not_started": len(participants) - len(began),
      "started": len(began),
      "ended": len(finished),
      "completed": len(completed),
      "incomplete": len(began) - len(completed),
      "kinds": kinds,
      "phases": {phase: sum(p["phase"] == phase for p in participants)
                 for phase in sorted({p["phase"] for p in participants})},
      "end_reasons": {reason: sum(str(p.get("end_reason")) == reason for p in finished)
                      for reason in sorted({str(p.get("end_reason")) for p in finished})},
      "outcome": {f: mean_se([_number(o.get(f)) for o in outcomes]) for f in fields},
      "survey": {item["id"]: mean_se([_number(a.get(item["id"])) for a in answers])
                 for item in items},
      "turns": mean_se([len(turns.get(p["id"], ())) for p in finished]),
      "chat_minutes": mean_se(chat_minutes),
      "minutes": mean_se(session_minutes),
      "latency_s": {"n": len(latencies),
                    "p50": float(np.percentile(latencies, 50)) if len(latencies) else None,
                    "p95": float(np.percentile(latencies, 95)) if len(latencies) else None,
                    "mean": float(latencies.mean()) if len(latencies) else None},
  }


def outcome_fields(study: Study) -> list[str]:
  """The headline first, then every other numeric field the stored outcomes hold, in the
  order they were first seen."""
  fields = [headline_field(study)]
  for p in study.participants:
    for key, value in _json(p.get("outcome_json")).items():
      if key not in fields and _number(value) is not None:
        fields.append(key)
  return fields


def build(study: Study, kind: str = "all") -> dict[str, Any]:
  """The report as JSON: per-arm rows (arm_report) and what they were computed from."""
  participants = of_kind(study.participants, kind)
  fields = outcome_fields(study)
  items = survey_items(study.config)
  return {
      "task": study.config.get("task"),
      "kind": kind,
      "headline": fields[0],
      "outcome_fields": fields,
      "survey": [dict(item) for item in items],
      "arms": {arm: dict(arm_report([p for p in participants if p["arm"] == arm], study.turns,
                                    fields, items), spec=study.config.get("arms", {}).get(arm))
               for arm in study.arms},
  }


def _cell(s: Mapping[str, Any] | None, digits: int = 3) -> str:
  if not s or s.get("mean") is None:
    return "–"
  if s.get("stderr") is None:
    return f"{s['mean']:.{digits}f}"
  return f"{s['mean']:.{digits}f} ± {s['stderr']:.{digits}f}"


def _seconds(x: float | None) -> str:
  return "–" if x is None else f"{x:.2f}"


def to_markdown(report: Mapping[str, Any]) -> str:
  """compare_agents' table style: one row per arm, `mean ± s.e.` cells, "–" where empty."""
  arms = report["arms"]
  head, others = report["headline"], report["outcome_fields"][1:]
  items = [item["id"] for item in report["survey"]]
  lines = [
      f"Every invited participant is counted: invited = not started + incomplete (started, "
      f"not completed; kept, never dropped) + completed. Outcomes over the dialogues that "
      f"ended (n), survey items over the completed surveys; ± standard error. Participants: "
      f"{report['kind']}.", "",
      f"| arm | invited | started | completed | incomplete | ended | {head} (n) |",
      "|---|---|---|---|---|---|---|"]
  for name, r in arms.items():
    lines.append(f"| {name} | {r['invited']} | {r['started']} | {r['completed']} | "
                 f"{r['incomplete']} | {r['ended']} | {_cell(r['outcome'][head])} "
                 f"(n = {r['outcome'][head]['n']}) |")
  if others:
    lines += ["", "| arm | " + " | ".join(others) + " |", "|---|" + "---|" * len(others)]
    for name, r in arms.items():
      lines.append(f"| {name} | " + " | ".join(_cell(r["outcome"][f]) for f in others) + " |")
  if items:
    lines += ["", "| arm | " + " | ".join(items) + " | n |", "|---|" + "---|" * (len(items) + 1)]
    for name, r in arms.items():
      lines.append(f"| {name} | " + " | ".join(_cell(r["survey"][i], 2) for i in items)
                   + f" | {r['completed']} |")
  lines += ["", "| arm | turns | minutes (session) | minutes (chat) | agent reply p50 (s) | "
            "agent reply p95 (s) |", "|---|---|---|---|---|---|"]
  for name, r in arms.items():
    lat = r["latency_s"]
    lines.append(f"| {name} | {_cell(r['turns'], 1)} | {_cell(r['minutes'], 1)} | "
                 f"{_cell(r['chat_minutes'], 1)} | {_seconds(lat['p50'])} | "
                 f"{_seconds(lat['p95'])} |")
  return "\n".join(lines) + "\n"


def plot(report: Mapping[str, Any], path: str) -> None:
  """The headline per arm with s.e. bars, and each survey item's mean per arm."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  arms = list(report["arms"])
  items = [item["id"] for item in report["survey"]]
  fig, axes = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [1, 2]})

  def bars(ax, stats, x, width, color, label=None):
    means = [s["mean"] if s["mean"] is not None else np.nan for s in stats]
    errs = [s["stderr"] if s["stderr"] is not None else 0.0 for s in stats]
    ax.bar(x, means, width, yerr=errs, capsize=3, color=color, label=label)

  head = report["headline"]  # Each arm in its own colour in both panels.
  bars(axes[0], [report["arms"][a]["outcome"][head] for a in arms], np.arange(len(arms)), 0.6,
       [f"C{i}" for i in range(len(arms))])
  axes[0].set_xticks(np.arange(len(arms)), arms)
  axes[0].set(title=f"{head} per arm (± s.e.)", ylabel=head)
  width = 0.8 / max(len(arms), 1)
  for i, arm in enumerate(arms):
    bars(axes[1], [report["arms"][arm]["survey"][item] for item in items],
         np.arange(len(items)) + (i - (len(arms) - 1) / 2) * width, width, f"C{i}", label=arm)
  axes[1].set_xticks(np.arange(len(items)), items)
  axes[1].set(title="survey item means (± s.e.)")
  if arms and items:
    axes[1].legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def study_db(workdir: str) -> str:
  """WORKDIR/study.sqlite, or BadInput naming the flag."""
  cli.existing_dir(workdir, "--workdir")
  db_path = os.path.join(workdir, DB_NAME)
  if not os.path.isfile(db_path):
    raise cli.BadInput(f"--workdir={workdir}: no {DB_NAME}; not a study's workdir "
                       "(python -m experiments.human_study)")
  return db_path


def run(workdir: str, *, out: str = "", kind: str = "all") -> dict[str, Any]:
  """experiments.human_study_report: checks its input (cli.BadInput), writes report.md,
  report.json and report.png into `out` (default WORKDIR/report); returns the report."""
  db_path = study_db(workdir)
  if kind not in KINDS:
    raise cli.BadInput(f"--kind={kind}: expected one of {list(KINDS)}")
  out = out or os.path.join(workdir, "report")
  os.makedirs(cli.output_dir(out, "--out"), exist_ok=True)
  with cli.reported_as("--workdir"):
    study = read_study(db_path)
  report = build(study, kind)
  table = to_markdown(report)
  with open(os.path.join(out, "report.md"), "w") as f:
    f.write(table)
  with open(os.path.join(out, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
    f.write("\n")
  plot(report, os.path.join(out, "report.png"))
  print(table)
  return report
