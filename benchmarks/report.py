"""What every benchmark writes the same way: the machine it ran on and its section of
docs/BENCHMARKS.md (replaced in place, so re-running a benchmark updates its table)."""

from __future__ import annotations

import pathlib
import platform


def cpu_name() -> str:
  """The processor's model name from /proc/cpuinfo (platform's guess elsewhere)."""
  try:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown"


def write_section(path: pathlib.Path, heading: str, section: str) -> None:
  """Replaces the section that starts with `heading` (up to the next `## ` heading), or
  appends it; the rest of the file is kept."""
  text = path.read_text() if path.exists() else "# Benchmarks\n"
  section = section.rstrip("\n") + "\n\n"
  start = text.find(heading)
  if start < 0:
    text = text.rstrip("\n") + "\n\n" + section
  else:
    end = text.find("\n## ", start + len(heading))
    text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text.rstrip("\n") + "\n")
