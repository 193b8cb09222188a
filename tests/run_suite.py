"""Runs pytest with the given arguments; when its only failures are crashed workers, runs the
tests that did not pass again, at most twice.

XLA:CPU (jaxlib 0.10.2) at times dies of a segmentation fault inside its compiler while the
suite's processes compile with the shared persistent cache: in `backend_compile_and_load` in
one suite run of seven on an Intel Xeon with AVX-512 and in CI's run, and in
`executable.serialize()` with glibc's huge-page malloc (the Makefile). Never in a test's own
code, and never when the crashed test's file ran alone. A crashed pytest-xdist worker fails its
test; with `--max-worker-restart=0` the session then ends at once (xdist's loadfile scheduler
can wait forever for a replacement worker), so a crash can cost a run but never hang it.

When every failure of a run is a crashed worker, the tests that did not pass (the crashed one
and those never reached) run again in fresh processes, saying so. This file is also the pytest
plugin (`-p run_suite`) that writes each test that passed or skipped to $RUN_SUITE_DONE_FILE
and leaves out those listed in $RUN_SUITE_SKIP_FILE. A failed check is never retried, and a
third crash fails. pytest's "no tests collected" (exit 5) is success: not a failure of the code.

    python tests/run_suite.py -q -n auto --dist loadfile --max-worker-restart=0 tests
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

_CRASH = re.compile(r"^worker '[\w-]+' crashed while running '.*'$")  # xdist's failure text.
_COUNTS = re.compile(r"(\d+) (failed|errors?)\b")
_NO_TESTS = 5
_RERUNS = 2


def run_pytest(args: list[str], **env_vars: str) -> tuple[int, list[str]]:
  """pytest's exit status and output lines; the output also goes to stdout as it comes."""
  # PYTHONPATH: this folder, where pytest (and each xdist worker) finds the plugin below.
  here = os.path.dirname(os.path.abspath(__file__))
  paths = [here] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
  env = {k: v for k, v in os.environ.items() if not k.startswith("RUN_SUITE_")}  # A run's own.
  env.update(env_vars, PYTHONPATH=os.pathsep.join(paths))
  process = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "run_suite", *args],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             bufsize=1, env=env)
  lines = []
  assert process.stdout is not None
  for line in process.stdout:
    sys.stdout.write(line)
    lines.append(line)
  sys.stdout.flush()
  return process.wait(), lines


def only_crashes(lines: list[str]) -> list[str]:
  """xdist's crash lines when the run failed by crashed workers alone, else []."""
  crashes = [line.strip() for line in lines if _CRASH.match(line.strip())]
  failures = sum(int(n) for n, _ in _COUNTS.findall(lines[-1] if lines else ""))
  return crashes if crashes and len(crashes) == failures else []


def main(args: list[str]) -> int:
  with tempfile.TemporaryDirectory(prefix="run_suite_") as scratch:
    done = os.path.join(scratch, "done.txt")  # Node ids that passed or skipped, every run.
    status, lines = run_pytest(args, RUN_SUITE_DONE_FILE=done)
    for rerun in range(1, _RERUNS + 1):
      crashes = only_crashes(lines) if status not in (0, _NO_TESTS) else []
      if not crashes:
        break
      print(f"\nrun_suite: {len(crashes)} pytest worker(s) crashed (a signal, not a failed "
            "check):\n  " + "\n  ".join(crashes) + f"\nrun_suite: rerun {rerun} of "
            f"{_RERUNS}: the tests that did not pass, in fresh processes.\n", flush=True)
      status, lines = run_pytest(args, RUN_SUITE_DONE_FILE=done, RUN_SUITE_SKIP_FILE=done)
  return 0 if status == _NO_TESTS else status


# The pytest plugin. Only the process that reports (xdist's controller, or a run without xdist)
# writes the done file; the workers leave out the listed tests as they collect.
_REPORTER = True
_FAILED: set[str] = set()


def pytest_configure(config) -> None:
  global _REPORTER
  _REPORTER = not hasattr(config, "workerinput")


def pytest_runtest_logreport(report) -> None:
  done_file = os.environ.get("RUN_SUITE_DONE_FILE")
  if not done_file or not _REPORTER:
    return
  if report.failed:
    _FAILED.add(report.nodeid)
  elif report.when == "teardown" and report.nodeid not in _FAILED:
    with open(done_file, "a", encoding="utf-8") as out:
      out.write(report.nodeid + "\n")


def pytest_collection_modifyitems(config, items) -> None:
  skip_file = os.environ.get("RUN_SUITE_SKIP_FILE")
  if not skip_file or not os.path.exists(skip_file):
    return
  with open(skip_file, encoding="utf-8") as listed:
    done = set(listed.read().splitlines())
  config.hook.pytest_deselected(items=[item for item in items if item.nodeid in done])
  items[:] = [item for item in items if item.nodeid not in done]


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
