"""experiments.online_report: the curves over seeds, the held-out mean, and the test table."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from workflows import evaluate as evaluate_lib, online_report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_run(path, returns, held_out, entropy):
  """A run's metrics.jsonl: evaluations at steps 0 and 20, two train records."""
  os.makedirs(path)
  with open(os.path.join(path, "metrics.jsonl"), "w") as f:
    for step, (r, h) in zip((0, 20), zip(returns, held_out)):
      f.write(json.dumps({"step": step, "split": "eval", "return": r,
                          **{f"held_out/{n}/return": v for n, v in h.items()}}) + "\n")
    for step, e in zip((2, 20), entropy):
      f.write(json.dumps({"step": step, "split": "train", "entropy": e, "reward": 0.1}) + "\n")


def write_test(tests, run, opponent, reward, utterances):
  tag = evaluate_lib.default_tag(run, opponent, 1000, 2)
  transcripts = os.path.join(tests, f"transcripts_{tag}.jsonl")
  with open(transcripts, "w") as f:
    for u in utterances:
      f.write(json.dumps({"turns": [["persuader", u], ["persuadee", "no"]]}) + "\n")
  with open(os.path.join(tests, f"eval_{tag}.json"), "w") as f:
    json.dump({"return": reward, "n": 2, "role": "persuader", "donation/unparsable": 1,
               "donation/stated": 1, "donation/mean": 2 * reward,
               "transcripts": transcripts}, f)


@pytest.fixture
def runs(tmp_path):
  a, b = str(tmp_path / "run_a"), str(tmp_path / "run_b")
  write_run(a, (0.1, 0.3), ({"sim1": 0.0, "sim2": 0.2}, {"sim1": 0.4, "sim2": 0.6}), (1.0, 0.5))
  write_run(b, (0.1, 0.5), ({"sim1": 0.2, "sim2": 0.2}, {"sim1": 0.2, "sim2": 0.4}), (1.2, 0.7))
  return a, b


def test_curves_are_means_over_seeds_with_their_standard_error(runs):
  out = online_report.arm_curves(runs)
  assert out["held_out"] == ["sim1", "sim2"]
  (s0, m0, e0), (s1, m1, e1) = out["curves"]["training"]
  assert (s0, s1) == (0, 20) and m0 == pytest.approx(0.1) and e0 == pytest.approx(0.0)
  assert m1 == pytest.approx(0.4) and e1 == pytest.approx(np.std([0.3, 0.5], ddof=1) / math.sqrt(2))
  # Held-out mean: per seed the mean over simulators (0.5 and 0.3 at step 20), then over seeds.
  assert out["curves"]["held_out_mean"][1][1] == pytest.approx(0.4)
  assert online_report.entropy(runs)["entropy_last"][0] == pytest.approx(0.6)


def test_entropy_and_reward_are_averaged_over_a_tenth_of_the_steps(tmp_path):
  path = str(tmp_path / "run")
  os.makedirs(path)
  with open(os.path.join(path, "metrics.jsonl"), "w") as f:
    for step in range(1, 21):
      f.write(json.dumps({"step": step, "split": "train", "entropy": 1.0,
                          "reward": float(step)}) + "\n")
  out = online_report.entropy([path])
  assert out["reward_first"][0] == pytest.approx(1.5) and out["reward_last"][0] == 19.5


def test_a_run_without_online_evaluation_is_named(tmp_path):
  path = str(tmp_path / "bc")
  os.makedirs(path)
  with open(os.path.join(path, "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"step": 100, "split": "eval", "loss": 3.0}) + "\n")
  with pytest.raises(Exception, match="no online evaluation"):
    online_report.arm_curves([path])


def test_the_command_writes_the_table_with_the_start_row_first(runs, tmp_path):
  tests = tmp_path / "tests"
  tests.mkdir()
  start = str(tmp_path / "start")
  for run, reward in ((runs[0], 0.5), (runs[1], 0.7), (start, 0.2)):
    for opponent in ("sims/sim1", "sims/sim2"):
      write_test(str(tests), run, opponent, reward, ["would you donate", "please donate $1"])
  out = subprocess.run(
      [sys.executable, "-m", "experiments.online_report", f"--arms=grpo={runs[0]}+{runs[1]}",
       f"--output_dir={tmp_path / 'report'}", f"--tests={tests}",
       "--opponents=sims/sim1,sims/sim2", "--num_dialogues=2", f"--start={start}"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  table = (tmp_path / "report" / "report.md").read_text()
  rows = [l for l in table.splitlines() if l.startswith(("| start", "| grpo"))]
  assert rows[-2].startswith("| start | 0.200 | 0.200 | 0.500 | 0.400 | 0.500 |")
  assert rows[-1].startswith("| grpo | 0.600 ± 0.100 | 0.600 ± 0.100 | 0.500 | 1.200 | 0.500 |")
  assert (tmp_path / "report" / "curves.png").stat().st_size > 0


def test_a_missing_test_evaluation_names_the_command_to_run(runs, tmp_path):
  (tmp_path / "tests").mkdir()
  out = subprocess.run(
      [sys.executable, "-m", "experiments.online_report", f"--arms=grpo={runs[0]}",
       f"--output_dir={tmp_path / 'report'}", f"--tests={tmp_path / 'tests'}",
       "--opponents=sims/sim1", "--num_dialogues=2"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert out.returncode == 1 and "experiments.evaluate_env --party=" in out.stderr


def test_a_saved_step_is_tested_under_its_own_tag(runs, tmp_path):
  tests = tmp_path / "tests"
  tests.mkdir()
  write_test(str(tests), runs[0] + "@20", "sims/sim1", 0.25, ["hi"])
  write_test(str(tests), runs[0], "sims/sim1", 0.75, ["hi"])
  out = online_report.test_results(str(tests), [runs[0] + "@20"], ["sims/sim1"], 1000, 2,
                                   np.random.default_rng(0))
  assert out["reward"]["sims/sim1"][0] == 0.25
