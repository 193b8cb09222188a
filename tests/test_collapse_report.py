"""The collapse report reads compare_agents' files and the runs' logs into per-arm numbers."""

import json
import math

import numpy as np
import pytest

from data_pipelines import cli
from workflows import collapse_report


def _write_run(path, rewards, entropies, returns):
  path.mkdir()
  with open(path / "metrics.jsonl", "w") as f:
    for step, (reward, entropy) in enumerate(zip(rewards, entropies)):
      f.write(json.dumps({"step": 2 * step + 2, "split": "train", "reward": reward,
                          "entropy": entropy}) + "\n")
    for step, value in returns:
      f.write(json.dumps({"step": step, "split": "eval", "return": value}) + "\n")


def _write_eval(compare, label, tag, success, agent_texts):
  with open(compare / f"eval_{label}_beta0_T0_vs_{tag}.json", "w") as f:
    json.dump({"n": 10, "success_rate": success}, f)
  with open(compare / f"transcripts_{label}_beta0_T0_vs_{tag}.jsonl", "w") as f:
    for text in agent_texts:
      action = {"status": "book"} if "[action]" in text else None
      f.write(json.dumps({"turns": [{"speaker": "customer", "text": "hi"},
                                    {"speaker": "agent", "text": text}], "action": action}) + "\n")


@pytest.fixture
def experiment(tmp_path):
  compare = tmp_path / "compare"
  compare.mkdir()
  seeds = []
  for i, (train, held) in enumerate([(0.5, (0.2, 0.4)), (0.7, (0.4, 0.6))]):
    run = tmp_path / f"single_s{i}"
    _write_run(run, rewards=[0.1, 0.3], entropies=[0.5, 0.2], returns=[(0, 0.1), (4, 0.5 + i)])
    seeds.append(str(run))
    _write_eval(compare, f"single_seed{i}", "sim", train, ["a b"])
    for tag, success in zip(("scripted-terse", "other"), held):
      _write_eval(compare, f"single_seed{i}", tag, success,
                  ["fine [action] status=book [/action]", "fine then"])
  return compare, seeds


def test_arm_report_means_over_seeds(experiment, tmp_path):
  compare, seeds = experiment
  row = collapse_report.arm_report("single", seeds, str(compare), "sim",
                                   np.random.default_rng(0))
  assert row["held_out"] == ["other", "scripted-terse"]
  assert row["training"][0] == pytest.approx(0.6)
  assert row["held_out_success"] == pytest.approx((0.4, 0.1))  # Seeds: 0.3 and 0.5.
  assert row["per_held_out"]["scripted-terse"][0] == pytest.approx(0.3)
  assert row["entropy_first"][0] == pytest.approx(0.5)
  assert row["entropy_last"][0] == pytest.approx(0.2)
  assert row["utterances"] == 8  # Held-out transcripts only; the action block removed:
  assert row["distinct_1"] == pytest.approx(2 / 12)  # "fine" x 8, "then" x 4... of 12 words.
  assert row["statuses"] == {"book": 0.5, "none": 0.5}
  assert row["curves"]["validation"] == [(0, pytest.approx(0.1)), (4, pytest.approx(1.0))]
  text = collapse_report.to_markdown({"single": row}, "sim")
  assert "| single | 2 | 0.600 ± 0.100 | 0.400 ± 0.100 |" in text
  collapse_report.plot({"single": row}, str(tmp_path / "curves.png"))
  assert (tmp_path / "curves.png").stat().st_size > 0


def test_missing_evaluations_are_named(experiment, tmp_path):
  compare, seeds = experiment
  with pytest.raises(cli.BadInput, match="no evaluations of 'vs_seed0'"):
    collapse_report.arm_report("vs", seeds, str(compare), "sim", np.random.default_rng(0))
  with pytest.raises(cli.BadInput, match="need the training simulator"):
    collapse_report.arm_report("single", seeds, str(compare), "elsewhere",
                               np.random.default_rng(0))


def test_mean_stderr_skips_nan():
  assert collapse_report.mean_stderr([1.0, math.nan, 3.0]) == pytest.approx((2.0, 1.0))
  assert math.isnan(collapse_report.mean_stderr([2.0])[1])
