"""The τ² funnel's command line: a bad record or a missing file is one error line naming it."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _diagnose(*args, env=None):
  return subprocess.run([sys.executable, "-m", "domains.tau2_retail.diagnose", *args], cwd=REPO,
                        capture_output=True, text=True, env=env, timeout=120)


def test_a_bad_record_or_a_missing_file_is_reported_with_its_place(tmp_path):
  bad = tmp_path / "transcripts.jsonl"
  bad.write_text('{"key": "test:0", "turns": [], "reward": 0.0}\n\n{"key": \n')
  done = _diagnose(str(bad))
  assert done.returncode == 1
  assert done.stderr.strip().splitlines()[-1].startswith(f"error: {bad}:3: not a JSON record")
  missing = tmp_path / "none.jsonl"
  done = _diagnose(str(missing))
  assert done.returncode == 1 and f"error: {missing}: " in done.stderr
  # --split reads the tasks: without the data it says where the data should come from.
  good = tmp_path / "good.jsonl"
  good.write_text('{"key": "test:0", "turns": [], "reward": 0.0}\n')
  env = {k: v for k, v in os.environ.items() if k != "TAU2_RETAIL_DATA_DIR"}
  done = _diagnose("--split=test", str(good), env=env)
  assert done.returncode == 1 and "TAU2_RETAIL_DATA_DIR" in done.stderr.splitlines()[-1]
