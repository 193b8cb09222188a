"""The simulator-collapse comparison's report: per arm, success against the training simulator
and the held-out panel, the policy's entropy and diversity, and curves over steps.

    python -m experiments.collapse_report --compare=runs/collapse/compare \
        --arms=single=runs/collapse/single_s0+runs/collapse/single_s1,temperature=...,cotrain=... \
        --training_simulator=runs/panel_airdialogue/customer_seed0 --start=start \
        --output_dir=runs/collapse/report

`--compare` is the experiments.compare_agents workdir that played every arm
(its seeds joined by '+', named as in `--arms`) against the training
simulator and the held-out members, greedily on the held-out test scenarios.
Held-out success is each seed's mean over the held-out customers, then the
mean over seeds with its standard error (seeds carry the training noise).
Diversity is of the agent's utterances against the held-out customers
(action blocks removed): distinct-1/2 and Self-BLEU over a fixed sample
(ilql_dialogue/text_metrics.py). Entropy is the training log's per-token
policy entropy at sampling temperature, first and last logged step (and the
co-trained simulator's, where there is one). The curves (collapse_curves.png)
are the training reward and the validation success against the training
simulator over steps, means over seeds. Writes collapse.md and collapse.json.
"""

from __future__ import annotations

import collections
import glob
import json
import math
import os
import re
from typing import Any, Sequence

import numpy as np

from data_pipelines import cli
from data_pipelines.airdialogue import action_grammar
from ilql_dialogue import text_metrics
from ilql_dialogue import restore
from workflows import config_checks

DIVERSITY_SAMPLE = 300  # Utterances per arm for Self-BLEU (quadratic in the sample).


def _tag(customer: str) -> str:
  """compare_agents' file-name tag of a customer spec."""
  name = os.path.basename(customer.rstrip("/")) if os.path.isdir(customer) else customer
  return name.replace(":", "-").replace("/", "-")


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
  values = [v for v in values if not math.isnan(v)]
  if not values:
    return math.nan, math.nan
  se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
  return float(np.mean(values)), se


def evaluations(compare_dir: str, arm: str, num_seeds: int) -> list[dict[str, dict[str, Any]]]:
  """Per seed, {customer tag: (summary, transcripts path)} of the arm's greedy evaluations."""
  per_seed = []
  for i in range(num_seeds):
    label = arm if num_seeds == 1 else f"{arm}_seed{i}"
    found = {}
    for path in glob.glob(os.path.join(compare_dir, f"eval_{label}_beta*_vs_*.json")):
      tag = re.sub(r"\.json$", "", path.rsplit("_vs_", 1)[1])
      with open(path) as f:
        found[tag] = {"summary": json.load(f),
                      "transcripts": path.replace("/eval_", "/transcripts_").replace(".json",
                                                                                      ".jsonl")}
    if not found:
      raise cli.BadInput(f"--compare={compare_dir}: no evaluations of {label!r} (eval_{label}_*)")
    per_seed.append(found)
  return per_seed


def agent_utterances(transcripts: Sequence[str]) -> list[str]:
  """The agent's turns in these transcripts, each without its action block."""
  out = []
  for path in transcripts:
    with open(path) as f:
      for line in f:
        for turn in json.loads(line)["turns"]:
          if turn["speaker"] == "agent":
            text = turn["text"].split(action_grammar.OPEN_TAG)[0].strip()
            if text:
              out.append(text)
  return out


def action_statuses(transcripts: Sequence[str]) -> dict[str, float]:
  """Shares of the statuses the agent submitted (no action: "none"): a policy that games the
  base rate (always `no_flight`) shows here before it shows in success."""
  counts: collections.Counter[str] = collections.Counter()
  for path in transcripts:
    with open(path) as f:
      for line in f:
        action = json.loads(line).get("action")
        counts[action["status"] if action else "none"] += 1
  total = sum(counts.values()) or 1
  return {status: n / total for status, n in counts.most_common()}


def logged_arms(items: Sequence[str]) -> dict[str, list[str]]:
  """--arms NAME=RUN[+RUN...] as {name: runs}, every run checked to have a training log."""
  arms = config_checks.named_seeds(items, "--arms")
  for name, runs in arms.items():
    for wd in runs:
      cli.existing_file(os.path.join(wd, "metrics.jsonl"), f"--arms {name}")
  return arms


def training_log(workdir: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
  """(train records, eval records) of a run's metrics.jsonl."""
  train, evals = [], []
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    for line in f:
      record = json.loads(line)
      (train if record.get("split") == "train" else evals).append(record)
  return train, evals


def arm_report(name: str, seeds: Sequence[str], compare_dir: str, training_tag: str,
               rng: np.random.Generator) -> dict[str, Any]:
  per_seed = evaluations(compare_dir, name, len(seeds))
  held_out_tags = sorted(set(per_seed[0]) - {training_tag})
  if not held_out_tags or training_tag not in per_seed[0]:
    raise cli.BadInput(f"arm {name}: evaluations against {sorted(per_seed[0])}; need the "
                       f"training simulator ({training_tag}) and at least one held-out customer")
  success = lambda found, tag: found[tag]["summary"]["success_rate"]
  row: dict[str, Any] = {
      "seeds": len(seeds), "held_out": held_out_tags,
      "training": mean_stderr([success(f, training_tag) for f in per_seed]),
      "held_out_success": mean_stderr([np.mean([success(f, t) for t in held_out_tags])
                                       for f in per_seed]),
      "per_held_out": {t: mean_stderr([success(f, t) for f in per_seed]) for t in held_out_tags},
  }
  utterances = agent_utterances([f[t]["transcripts"] for f in per_seed for t in held_out_tags])
  sample = [utterances[i] for i in sorted(rng.choice(
      len(utterances), min(DIVERSITY_SAMPLE, len(utterances)), replace=False))]
  row["statuses"] = action_statuses([f[t]["transcripts"] for f in per_seed for t in held_out_tags])
  row.update(utterances=len(utterances), distinct_1=text_metrics.distinct_n(utterances, 1),
             distinct_2=text_metrics.distinct_n(utterances, 2),
             self_bleu=text_metrics.self_bleu(sample))
  logs = [training_log(wd) for wd in seeds]
  for key in ("entropy", "simulator/entropy", "reward", "simulator/reward"):
    if all(key in train[0] for train, _ in logs):
      row[f"{key}_first"] = mean_stderr([train[0][key] for train, _ in logs])
      row[f"{key}_last"] = mean_stderr([train[-1][key] for train, _ in logs])
  selected = [restore.selected(wd) or {} for wd in seeds]
  row["selected_steps"] = [meta.get("step") for meta in selected]
  row["curves"] = {
      "train_reward": mean_curve([[(r["step"], r["reward"]) for r in train] for train, _ in logs]),
      "validation": mean_curve([[(r["step"], r["return"]) for r in evals if "return" in r]
                                 for _, evals in logs]),
  }
  return row


def mean_curve(curves: Sequence[Sequence[tuple[int, float]]]) -> list[tuple[int, float]]:
  """Mean over seeds at the steps every seed logged."""
  steps = sorted(set.intersection(*(set(s for s, _ in c) for c in curves)))
  values = [dict(c) for c in curves]
  return [(s, float(np.mean([v[s] for v in values]))) for s in steps]


def to_markdown(rows: dict[str, dict[str, Any]], training_simulator: str) -> str:
  pm = lambda ms: "–" if math.isnan(ms[0]) else f"{ms[0]:.3f} ± {ms[1]:.3f}"
  first = next(iter(rows.values()))
  lines = [f"Training simulator: `{training_simulator}`; held out: "
           + ", ".join(f"`{t}`" for t in first["held_out"]) + ". Means over seeds ± s.e.", "",
           "| arm | seeds | vs training simulator | held-out (mean of customers) | "
           + " | ".join(first["held_out"]) + " |",
           "|---|---:|---:|---:|" + "---:|" * len(first["held_out"])]
  for name, r in rows.items():
    lines.append(f"| {name} | {r['seeds']} | {pm(r['training'])} | {pm(r['held_out_success'])} | "
                 + " | ".join(pm(r["per_held_out"][t]) for t in first["held_out"]) + " |")
  lines += ["", "Statuses the agent submitted against the held-out customers (shares):", ""]
  for name, r in rows.items():
    lines.append(f"- {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in r["statuses"].items()))
  lines += ["", "| arm | policy entropy (first -> last) | distinct-1 | distinct-2 | Self-BLEU | "
            "agent utterances | simulator entropy (first -> last) | simulator reward "
            "(first -> last) |", "|---|---|---:|---:|---:|---:|---|---|"]
  for name, r in rows.items():
    arrow = lambda key: (f"{pm(r[key + '_first'])} -> {pm(r[key + '_last'])}"
                         if key + "_first" in r else "–")
    lines.append(f"| {name} | {arrow('entropy')} | {r['distinct_1']:.3f} | "
                 f"{r['distinct_2']:.3f} | {r['self_bleu']:.1f} | {r['utterances']} | "
                 f"{arrow('simulator/entropy')} | {arrow('simulator/reward')} |")
  return "\n".join(lines) + "\n"


def start_held_out(compare_dir: str, start: str, training_tag: str) -> float:
  """The starting agent's success averaged over the held-out customers: every arm's step 0."""
  found = evaluations(compare_dir, start, 1)[0]
  return float(np.mean([f["summary"]["success_rate"] for tag, f in found.items()
                        if tag != training_tag]))


def plot(rows: dict[str, dict[str, Any]], path: str, start: float | None = None) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 3, figsize=(16, 4))
  for name, r in rows.items():
    for ax, key in zip(axes, ("train_reward", "validation")):
      steps, values = zip(*r["curves"][key]) if r["curves"][key] else ((), ())
      ax.plot(steps, values, marker="o" if key == "validation" else None, label=name)
    steps = [s for s in r.get("selected_steps", []) if s is not None]
    if steps:  # Held-out success: the start at step 0, each arm at its selected checkpoints.
      mean, se = r["held_out_success"]
      axes[2].errorbar([0, np.mean(steps)] if start is not None else [np.mean(steps)],
                       [start, mean] if start is not None else [mean],
                       yerr=[0, se] if start is not None else [se], marker="o", capsize=3,
                       label=name)
  axes[0].set(title="training reward (rollouts vs the arm's simulator)", xlabel="update")
  axes[1].set(title="validation success vs the frozen training simulator", xlabel="update")
  axes[2].set(title="held-out panel success (start; selected checkpoints)", xlabel="update")
  for ax in axes[1:]:
    if ax.get_legend_handles_labels()[0]:
      ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def run(arms: Sequence[str], compare_dir: str, training_simulator: str, output_dir: str, *,
        start: str = "") -> dict[str, dict[str, Any]]:
  """experiments.collapse_report: checks its input (cli.BadInput), writes collapse.md,
  collapse.json and collapse_curves.png into `output_dir`; returns the rows. `arms`:
  NAME=WORKDIR[+WORKDIR...], named as in the comparison's --agents."""
  named = logged_arms(arms)
  cli.existing_dir(compare_dir, "--compare")
  os.makedirs(cli.output_dir(output_dir, "--output_dir"), exist_ok=True)
  rng = np.random.default_rng(0)
  training_tag = _tag(training_simulator)
  rows = {name: arm_report(name, seeds, compare_dir, training_tag, rng)
          for name, seeds in named.items()}
  table = to_markdown(rows, training_simulator)
  with open(os.path.join(output_dir, "collapse.md"), "w") as out:
    out.write(table)
  with open(os.path.join(output_dir, "collapse.json"), "w") as out:
    json.dump(rows, out, indent=1)
  held_out_start = start_held_out(compare_dir, start, training_tag) if start else None
  plot(rows, os.path.join(output_dir, "collapse_curves.png"), held_out_start)
  print(table)
  return rows
