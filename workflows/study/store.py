"""The study's database (SQLite, `WORKDIR/study.sqlite`): invitations, turns and outcomes.

What a person did must survive a crash: every write is committed (synchronous=FULL, WAL)
before the server replies, so a reply the person saw is on disk. Rows are never deleted; a
participant moves through its phases (invited -> instructions -> chat -> survey -> done)
and a turn is written once (its primary key refuses a second turn at the same index).
Tokens are kept only as their sha256. One connection serves every thread behind a lock.
Row seeds are unsigned 64-bit; SQLite's INTEGER is signed, so a seed >= 2**63 is kept as
seed - 2**64, and every read here gives the seed back (`unsigned`).
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
from typing import Any, Iterator, Sequence

PHASES = ("invited", "instructions", "chat", "survey", "done")
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS participants (
  id INTEGER PRIMARY KEY, token_sha256 TEXT UNIQUE NOT NULL,
  arm TEXT NOT NULL, scenario_key TEXT NOT NULL, scenario_index INTEGER NOT NULL,
  agent_seed INTEGER NOT NULL, human_seed INTEGER NOT NULL,
  phase TEXT NOT NULL,
  created_at REAL, started_at REAL, ended_at REAL, finished_at REAL, expires_at REAL,
  end_reason TEXT, outcome_json TEXT, survey_json TEXT, completion_code TEXT, kind TEXT);
CREATE TABLE IF NOT EXISTS turns (participant_id INTEGER, idx INTEGER, speaker TEXT, text TEXT,
  created_at REAL, latency_s REAL, PRIMARY KEY (participant_id, idx));
"""
PARTICIPANT_FIELDS = ("token_sha256", "arm", "scenario_key", "scenario_index", "agent_seed",
                      "human_seed", "phase", "created_at", "started_at", "ended_at",
                      "finished_at", "expires_at", "end_reason", "outcome_json", "survey_json",
                      "completion_code", "kind")


SEED_FIELDS = ("agent_seed", "human_seed")


def signed(seed: int) -> int:
  return seed - 2**64 if seed >= 2**63 else seed


def unsigned(value: int) -> int:
  return value + 2**64 if value < 0 else value


def _participant(row: sqlite3.Row) -> dict[str, Any]:
  out = dict(row)
  for field in SEED_FIELDS:
    out[field] = unsigned(out[field])
  return out


def token_hash(token: str) -> str:
  return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Store:
  """The database of one study; `with store.transaction() as db:` groups writes."""

  def __init__(self, path: str):
    self.path = path
    self._lock = threading.RLock()
    self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    self._db.row_factory = sqlite3.Row
    self._db.execute("PRAGMA journal_mode=WAL")
    self._db.execute("PRAGMA synchronous=FULL")
    self._db.executescript(SCHEMA)

  def close(self) -> None:
    with self._lock:
      self._db.close()

  @contextlib.contextmanager
  def transaction(self) -> Iterator[sqlite3.Connection]:
    """One committed transaction (rolled back on any error)."""
    with self._lock:
      self._db.execute("BEGIN IMMEDIATE")
      try:
        yield self._db
      except BaseException:
        self._db.execute("ROLLBACK")
        raise
      self._db.execute("COMMIT")

  def _read(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
    with self._lock:
      return self._db.execute(sql, args).fetchall()

  # --- meta ---

  def meta(self) -> dict[str, str]:
    return {r["key"]: r["value"] for r in self._read("SELECT key, value FROM meta")}

  # --- participants ---

  def participant(self, token: str) -> dict[str, Any] | None:
    rows = self._read("SELECT * FROM participants WHERE token_sha256 = ?", (token_hash(token),))
    return _participant(rows[0]) if rows else None

  def participant_by_id(self, participant_id: int) -> dict[str, Any]:
    return _participant(self._read("SELECT * FROM participants WHERE id = ?",
                                   (participant_id,))[0])

  def participants(self) -> list[dict[str, Any]]:
    return [_participant(r) for r in self._read("SELECT * FROM participants ORDER BY id")]

  def count_participants(self) -> int:
    return self._read("SELECT COUNT(*) FROM participants")[0][0]

  @staticmethod
  def insert_participant(db: sqlite3.Connection, **fields: Any) -> int:
    fields = {k: signed(v) if k in SEED_FIELDS else v for k, v in fields.items()}
    names = [f for f in PARTICIPANT_FIELDS if f in fields]
    cursor = db.execute(f"INSERT INTO participants ({', '.join(names)}) VALUES "
                        f"({', '.join('?' * len(names))})", [fields[f] for f in names])
    return cursor.lastrowid

  @staticmethod
  def update_participant(db: sqlite3.Connection, participant_id: int, **fields: Any) -> None:
    unknown = sorted(set(fields) - set(PARTICIPANT_FIELDS))
    if unknown:
      raise ValueError(f"participants: no columns {unknown}")
    if "phase" in fields and fields["phase"] not in PHASES:
      raise ValueError(f"participants: phase {fields['phase']!r} not in {PHASES}")
    db.execute(f"UPDATE participants SET {', '.join(f'{f} = ?' for f in fields)} WHERE id = ?",
               [*fields.values(), participant_id])

  # --- turns ---

  def turns(self, participant_id: int) -> list[dict[str, Any]]:
    return [dict(r) for r in self._read(
        "SELECT * FROM turns WHERE participant_id = ? ORDER BY idx", (participant_id,))]

  def all_turns(self) -> list[dict[str, Any]]:
    return [dict(r) for r in self._read("SELECT * FROM turns ORDER BY participant_id, idx")]

  def recent_turns(self, participant_id: int, speaker: str, since: float) -> int:
    return self._read("SELECT COUNT(*) FROM turns WHERE participant_id = ? AND speaker = ? "
                      "AND created_at > ?", (participant_id, speaker, since))[0][0]

  @staticmethod
  def insert_turn(db: sqlite3.Connection, participant_id: int, idx: int, speaker: str, text: str,
                  created_at: float, latency_s: float | None = None) -> None:
    db.execute("INSERT INTO turns (participant_id, idx, speaker, text, created_at, latency_s) "
               "VALUES (?, ?, ?, ?, ?, ?)", (participant_id, idx, speaker, text, created_at,
                                             latency_s))

  @staticmethod
  def set_meta(db: sqlite3.Connection, key: str, value: str) -> None:
    db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))
