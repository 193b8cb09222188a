"""Where the τ²-bench retail files are: a config's `data_dir`, else $TAU2_RETAIL_DATA_DIR.

There is no built-in location: the data is not part of the repository, so a missing folder or
file is one clear error saying what to set.
"""

from __future__ import annotations

import os

DATA_DIR_ENV = "TAU2_RETAIL_DATA_DIR"
DB_FILE = "db.json"
TASKS_FILE = "tasks.json"
SPLITS_FILE = "split_tasks.json"
POLICY_FILE = "policy.md"
FILES = (DB_FILE, TASKS_FILE, SPLITS_FILE, POLICY_FILE)
ADVICE = (f"set {DATA_DIR_ENV} (or the config's data_dir) to a folder holding "
          f"{', '.join(FILES)}: data/tau2/domains/retail of sierra-research/tau2-bench (MIT)")


class MissingDataError(FileNotFoundError):
  """No data folder, or a file missing in it; the message says what to set."""


def resolve_data_dir(data_dir: str | None = None) -> str:
  """`data_dir` if given, else $TAU2_RETAIL_DATA_DIR; with neither, MissingDataError."""
  path = data_dir or os.environ.get(DATA_DIR_ENV, "").strip()
  if not path:
    raise MissingDataError(f"no τ²-bench retail data: {ADVICE}")
  return path


def data_file(name: str, data_dir: str | None = None) -> str:
  """The path of one of FILES, checked to exist."""
  path = os.path.join(resolve_data_dir(data_dir), name)
  if not os.path.isfile(path):
    raise MissingDataError(f"{path}: no such file; {ADVICE}")
  return path


def missing_reason(data_dir: str | None = None) -> str | None:
  """Why the data cannot be read (one line), or None when every file is there."""
  try:
    for name in FILES:
      data_file(name, data_dir)
  except MissingDataError as e:
    return str(e)
  return None
