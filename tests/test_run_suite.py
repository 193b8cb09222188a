"""`make test`'s runner (tests/run_suite.py) runs the tests that did not pass again only when
crashed workers are a run's only failures: a failed check is never retried, and a third crash
fails."""

import os
import subprocess
import sys
import textwrap

RUN_SUITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_suite.py")

PASSING = """
def test_one():
  pass

def test_two():
  pass
"""

# Crashes its worker (SIGSEGV, as XLA:CPU does) while MARKER does not exist, and creates it.
CRASH_ONCE = """
import os, signal

def test_crashes_the_first_time():
  if not os.path.exists(MARKER):
    open(MARKER, "w").close()
    os.kill(os.getpid(), signal.SIGSEGV)
"""

CRASH_ALWAYS = """
import os, signal

def test_crashes():
  os.kill(os.getpid(), signal.SIGSEGV)
"""

FAILING_CHECK = """
def test_fails():
  assert 1 == 2
"""


def _run(tmp_path, files: dict[str, str]):
  for name, text in files.items():
    text = text.replace("MARKER", repr(str(tmp_path / "crashed_once")))
    (tmp_path / name).write_text(textwrap.dedent(text))
  process = subprocess.run(
      [sys.executable, RUN_SUITE, "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
       "loadfile", "--max-worker-restart=0", str(tmp_path)],
      cwd=tmp_path, capture_output=True, text=True, timeout=300)
  return process.returncode, process.stdout


def test_a_crash_reruns_what_did_not_pass_and_passes_when_that_does(tmp_path):
  status, out = _run(tmp_path, {"test_a.py": PASSING, "test_b.py": CRASH_ONCE})
  assert status == 0, out
  assert "crashed while running 'test_b.py::test_crashes_the_first_time'" in out
  assert "rerun 1 of 2" in out and "rerun 2" not in out, out
  first, rerun = out.split("rerun 1 of 2")
  assert "1 failed, 2 passed" in first, out
  assert rerun.strip().splitlines()[-1].startswith("1 passed in"), out  # The crashed test alone.


def test_a_third_crash_fails(tmp_path):
  status, out = _run(tmp_path, {"test_a.py": PASSING, "test_b.py": CRASH_ALWAYS})
  assert status == 1, out
  assert "rerun 2 of 2" in out and out.count("crashed while running 'test_b") >= 3, out


def test_a_failed_check_is_never_retried_even_beside_a_crash(tmp_path):
  status, out = _run(tmp_path, {"test_a.py": FAILING_CHECK, "test_b.py": CRASH_ONCE})
  assert status == 1, out
  assert "rerun" not in out, out


def test_no_tests_collected_is_success(tmp_path):
  status, out = _run(tmp_path, {"conftest.py": ""})
  assert status == 0, out
