"""Files written whole or not at all, so a process killed mid-write (kill -9, power loss)
leaves the previous version or nothing, never a torn file that the next run cannot read;
JSON files read with errors that name the file and line."""

from __future__ import annotations

import json
import os
from typing import Any, Iterable


def write_text(path: str, text: str | Iterable[str]) -> None:
  """Writes `text` (a string or its lines) to `path` through `path.partial` and a rename."""
  partial = path + ".partial"
  with open(partial, "w", encoding="utf-8") as f:
    if isinstance(text, str):
      f.write(text)
    else:
      f.writelines(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(partial, path)


def write_json(path: str, value: Any, **dump_options: Any) -> None:
  """`json.dump(value)` into `path`, atomically (`write_text`)."""
  write_text(path, json.dumps(value, **dump_options))


def read_json(path: str, error: type[Exception] = ValueError) -> Any:
  """The JSON value in `path`; malformed JSON raises `error` naming the file and line."""
  with open(path, encoding="utf-8") as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise error(f"{path}:{e.lineno}: not JSON: {e.msg}") from None
