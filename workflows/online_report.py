"""Online RL against one training simulator, measured against held-out ones: curves and table.

    python -m experiments.online_report \
        --arms=grpo=runs/p4g/grpo_s0+runs/p4g/grpo_s1+runs/p4g/grpo_s2[,single=...] \
        --output_dir=runs/p4g/report \
        [--tests=runs/p4g/test --opponents=runs/p4g/persuadee_s0,runs/p4g/persuadee_s1,... \
         --num_dialogues=102 --seed=1000 --start=runs/p4g/persuader_bc]

Any environment: the curves come from the runs' own training logs, whose
evaluations play the validation scenarios against the training simulator
("return", what selection reads) and against every `online_eval.held_out`
simulator ("held_out/NAME/return"). Each curve is the mean over an arm's seeds
with the standard error of that mean (seeds carry the training noise); the
held-out mean is, per seed, the mean over the held-out simulators.

With --tests, the final table reads the test evaluations experiments.evaluate_env
wrote there for every run (`--party=RUN`: its selected checkpoint, else its latest;
with --test_step=N, `--party=RUN@N`) and for --start, against every --opponent:
per opponent the mean reward over seeds +- s.e.; over the opponents, the share of
dialogues whose outcome was stated (P4G: a readable donation), the mean stated
outcome and the unparsable share; and the party's diversity (distinct-1/2 and
Self-BLEU of its utterances, closing blocks included). Writes report.md,
report.json and curves.png to --output_dir.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Sequence

import numpy as np

from data_pipelines import cli
from ilql_dialogue import text_metrics
from workflows import evaluate
from workflows.collapse_report import (DIVERSITY_SAMPLE, logged_arms, mean_curve, mean_stderr,
                                       training_log)

HELD_OUT_PREFIX = "held_out/"
TRAINING = "training"  # The curve of "return": the training simulator on validation scenarios.


def eval_curves(evals: Sequence[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
  """{simulator name: [(step, return)]} of one run: TRAINING and every held-out one."""
  curves: dict[str, list[tuple[int, float]]] = {}
  for record in evals:
    for key, value in record.items():
      if key == "return":
        curves.setdefault(TRAINING, []).append((record["step"], value))
      elif key.startswith(HELD_OUT_PREFIX) and key.endswith("/return"):
        name = key[len(HELD_OUT_PREFIX):-len("/return")]
        curves.setdefault(name, []).append((record["step"], value))
  return curves


def arm_curves(runs: Sequence[str]) -> dict[str, Any]:
  """Per simulator (and their held-out mean), the mean curve over seeds with its s.e."""
  per_run = [eval_curves(training_log(wd)[1]) for wd in runs]
  names = sorted(set.intersection(*(set(c) for c in per_run)), key=lambda n: (n != TRAINING, n))
  if TRAINING not in names:
    raise cli.BadInput(f"runs {list(runs)}: no online evaluation (\"return\") in their logs")
  held_out = [n for n in names if n != TRAINING]
  if held_out:  # Per seed, the held-out simulators' mean at each step all of them logged.
    for curves in per_run:
      curves["held_out_mean"] = mean_curve([curves[n] for n in held_out])
  out = {"held_out": held_out, "curves": {}}
  for name in names + (["held_out_mean"] if held_out else []):
    steps = sorted(set.intersection(*(set(s for s, _ in c[name]) for c in per_run)))
    values = [dict(c[name]) for c in per_run]
    out["curves"][name] = [(s, *mean_stderr([v[s] for v in values])) for s in steps]
  return out


def entropy(runs: Sequence[str]) -> dict[str, tuple[float, float]]:
  """The policy's per-token entropy at its sampling temperature and the training reward (and
  a co-trained simulator's), each averaged over the first and the last tenth of the logged
  steps (one rollout batch is too noisy a point), then over seeds."""
  logs = [training_log(wd)[0] for wd in runs]
  out = {}
  for key in ("entropy", "reward", "simulator/entropy", "simulator/reward"):
    if all(train and key in train[0] for train in logs):
      window = lambda train: max(1, len(train) // 10)
      out[f"{key}_first"] = mean_stderr([np.mean([r[key] for r in train[:window(train)]])
                                         for train in logs])
      out[f"{key}_last"] = mean_stderr([np.mean([r[key] for r in train[-window(train):]])
                                        for train in logs])
  return out


def test_results(tests_dir: str, runs: Sequence[str], opponents: Sequence[str], seed: int,
                 num_dialogues: int, rng: np.random.Generator) -> dict[str, Any]:
  """Per opponent the test reward (mean over runs +- s.e.), and the party's diversity."""
  found: dict[str, list[dict[str, Any]]] = {}
  for opponent in opponents:
    for run in runs:
      path = os.path.join(tests_dir, "eval_" + evaluate.default_tag(
          run, opponent, seed, num_dialogues) + ".json")
      cli.existing_file(path, f"--tests (experiments.evaluate_env --party={run} "
                        f"--opponent={opponent})")
      with open(path) as f:
        found.setdefault(opponent, []).append(json.load(f))
  utterances = []
  for summaries in found.values():
    for summary in summaries:
      with open(summary["transcripts"]) as f:
        utterances += [text for line in f for speaker, text in json.loads(line)["turns"]
                       if speaker == summary["role"]]
  sample = [utterances[i] for i in sorted(rng.choice(
      len(utterances), min(DIVERSITY_SAMPLE, len(utterances)), replace=False))]
  return {
      "reward": {o: mean_stderr([s["return"] for s in found[o]]) for o in opponents},
      "unparsable": {o: float(np.mean([s.get("donation/unparsable", math.nan) / s["n"]
                                       for s in found[o]])) for o in opponents},
      "stated": {o: float(np.mean([s.get("donation/stated", math.nan) / s["n"]
                                   for s in found[o]])) for o in opponents},
      "stated_mean": {o: float(np.mean([s.get("donation/mean", math.nan) for s in found[o]]))
                      for o in opponents},
      "utterances": len(utterances), "distinct_1": text_metrics.distinct_n(utterances, 1),
      "distinct_2": text_metrics.distinct_n(utterances, 2),
      "self_bleu": text_metrics.self_bleu(sample)}


def _pm(ms: Sequence[float]) -> str:
  return "–" if math.isnan(ms[0]) else (f"{ms[0]:.3f}" if math.isnan(ms[1]) else
                                         f"{ms[0]:.3f} ± {ms[1]:.3f}")


def _test_row(name: str, test: dict[str, Any], opponents: Sequence[str]) -> str:
  mean = lambda key: f"{np.mean(list(test[key].values())):.3f}"
  return (f"| {name} | " + " | ".join(_pm(test["reward"][o]) for o in opponents)
          + f" | {mean('stated')} | {mean('stated_mean')} | {mean('unparsable')} | "
          f"{test['distinct_1']:.3f} | {test['distinct_2']:.3f} | {test['self_bleu']:.1f} |")


def to_markdown(rows: dict[str, dict[str, Any]], opponents: Sequence[str],
                start: tuple[str, dict[str, Any]] | None = None, step: int = 0) -> str:
  """The curves' first and last points, entropy, and (with tests) the test table, whose
  first row is the starting party `start` = (spec, its test results) when given."""
  first = next(iter(rows.values()))
  names = [TRAINING, *first["held_out"]] + (["held_out_mean"] if first["held_out"] else [])
  lines = ["Validation return over steps (training logs; mean over seeds ± s.e.), first -> "
           "last evaluation:", "", "| arm | seeds | " + " | ".join(names) + " |",
           "|---|---:|" + "---|" * len(names)]
  for arm, r in rows.items():
    cells = [f"{_pm(r['curves'][n][0][1:])} -> {_pm(r['curves'][n][-1][1:])}" for n in names]
    lines.append(f"| {arm} | {r['seeds']} | " + " | ".join(cells) + " |")
  lines += ["", "| arm | policy entropy (first -> last tenth) | training reward (first -> last "
            "tenth) |",
            "|---|---|---|"]
  for arm, r in rows.items():
    arrow = lambda k: f"{_pm(r[k + '_first'])} -> {_pm(r[k + '_last'])}" if k + "_first" in r \
        else "–"
    lines.append(f"| {arm} | {arrow('entropy')} | {arrow('reward')} |")
  tested = {arm: r["test"] for arm, r in rows.items() if "test" in r}
  if tested:
    lines += ["", "Test (" + (f"start `{start[0]}` and " if start else "")
              + ("the runs' selected checkpoints" if not step else f"the runs at step {step}")
              + "; mean over seeds ± s.e.):", "",
              "| arm | " + " | ".join(evaluate.slug(o) for o in opponents)
              + " | stated | mean stated | unparsable | distinct-1 | distinct-2 | Self-BLEU |",
              "|---|" + "---:|" * (len(opponents) + 6)]
    if start:
      lines.append(_test_row("start", start[1], opponents))
    lines += [_test_row(arm, t, opponents) for arm, t in tested.items()]
  return "\n".join(lines) + "\n"


def plot(rows: dict[str, dict[str, Any]], path: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  first = next(iter(rows.values()))
  names = [TRAINING, *first["held_out"]]
  fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.8), squeeze=False)
  for ax, name in zip(axes[0], names):
    for arm, r in rows.items():
      steps, mean, se = (np.asarray(v) for v in zip(*r["curves"][name]))
      ax.plot(steps, mean, marker="o", label=arm)
      ax.fill_between(steps, mean - np.nan_to_num(se), mean + np.nan_to_num(se), alpha=0.2)
    ax.set(title=("validation vs the training simulator" if name == TRAINING
                  else f"held out: {name}"), xlabel="update", ylabel="mean return")
    ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def run(arms: Sequence[str], output_dir: str, *, tests: str = "", opponents: Sequence[str] = (),
        num_dialogues: int = 102, seed: int = 1000, start: str = "",
        test_step: int = 0) -> dict[str, Any]:
  """experiments.online_report: checks its input (cli.BadInput), writes report.md, report.json
  and curves.png into `output_dir`; returns report.json's content. `arms`: NAME=RUN[+RUN...]."""
  named = logged_arms(arms)
  if tests:
    cli.existing_dir(tests, "--tests")
    if not opponents:
      raise cli.BadInput("--tests needs --opponents (the specs evaluate_env played)")
  os.makedirs(cli.output_dir(output_dir, "--output_dir"), exist_ok=True)
  rng = np.random.default_rng(0)
  rows = {}
  for name, runs in named.items():
    rows[name] = {"seeds": len(runs), "runs": list(runs), **arm_curves(runs), **entropy(runs)}
    if tests:
      tested = [f"{wd}@{test_step}" if test_step else wd for wd in runs]
      rows[name]["test"] = test_results(tests, tested, opponents, seed, num_dialogues, rng)
  started = None
  if start and tests:
    started = (start, test_results(tests, [start], opponents, seed, num_dialogues, rng))
  table = to_markdown(rows, opponents, started, test_step)
  with open(os.path.join(output_dir, "report.md"), "w") as out:
    out.write(table)
  report = {"arms": rows, "start": started}
  with open(os.path.join(output_dir, "report.json"), "w") as out:
    json.dump(report, out, indent=1)
  plot(rows, os.path.join(output_dir, "curves.png"))
  print(table)
  return report
