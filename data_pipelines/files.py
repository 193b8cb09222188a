"""Files written whole or not at all, so a process killed mid-write (kill -9, power loss)
leaves the previous version or nothing, never a torn file that the next run cannot read."""

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
