"""Agents against customers on the same held-out scenarios: the tables of docs/RESULTS.md.

    python -m experiments.compare_agents --workdir=runs/results/eval \
        --agents=oracle=scripted_agent:oracle,bc=runs/results/bc_agent,ilql=runs/ilql_s0+runs/ilql_s1 \
        --customers=scripted:volunteer,scripted:answer_only,scripted:late_reveal,scripted:terse,scripted:chatty \
        --num_dialogues=500 [--sweep_betas=0,4,16 --sweep_agents=ilql \
        --corpus_stats=DIR/stats.json]

Every (agent, customer) pair plays the same `num_dialogues` scenarios (seed
1000, held out from the training corpora and from checkpoint selection,
which uses seed 2000). A value-guided agent (ILQL, MC) decodes at the beta
its checkpoint was selected with (restore.selected), and, with
--sweep_betas, at each of those too. An agent given as several training seeds
("A+B+C") is played seed by seed and pooled, with the standard error of the
seeds' mean next to the one over dialogues. Each evaluation is written by
workflows/evaluate.py (summary + transcripts) and skipped when its summary
exists, so an interrupted comparison resumes. Writes comparison.json and
comparison.md: success rate +- standard error per pair, and pooled over the
customers.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Sequence

import numpy as np

from data_pipelines import cli
from domains.airdialogue import environment as airdialogue_env
from ilql_dialogue import init_from
from ilql_dialogue import restore
from workflows import config_checks, evaluate


def selected_beta(spec: str) -> float:
  """The beta a run's kept checkpoint was selected at (0 for BC and scripted agents, and for
  a checkpoint named by its step, WORKDIR@STEP, which no selection chose)."""
  path, step = init_from.split_step(spec)
  if step is not None or not os.path.isdir(path):
    return 0.0
  meta = restore.selected(path) or {}
  return float(meta.get("eval", {}).get("best_beta", 0.0))


def value_guided(spec: str) -> bool:
  """Whether the run `spec` names (WORKDIR or WORKDIR@STEP) decodes with a value (ILQL, MC)."""
  path, _ = init_from.split_step(spec)
  return os.path.isdir(path) and restore.read_config(path).algorithm.name in (
      "ilql", "mc_value")


FIELDS = ("status_acc", "flight_acc", "name_acc", "mean_turns")
SEED_SEP = "+"  # --agents=ilql=RUN_SEED0+RUN_SEED1+RUN_SEED2: one agent, several seeds.


def pooled(summaries: Sequence[dict[str, Any]]) -> dict[str, float]:
  """Success over the union of the dialogues, with its binomial standard error (and
  the field accuracies and turns over that union, where the summaries have them)."""
  n = sum(s["n"] for s in summaries)
  p = sum(s["success_rate"] * s["n"] for s in summaries) / n
  out = {"n": n, "success_rate": p, "success_stderr": math.sqrt(p * (1 - p) / n)}
  for field in FIELDS:
    if all(field in s for s in summaries):
      out[field] = sum(s[field] * s["n"] for s in summaries) / n
  if all("unparsable_actions" in s for s in summaries):
    out["unparsable_rate"] = sum(s["unparsable_actions"] for s in summaries) / n
  if all("booking_n" in s for s in summaries):  # Summaries written before it lack it.
    booking_n = sum(s["booking_n"] for s in summaries)
    out["booking_n"] = booking_n
    out["booking_success"] = (sum((s["booking_success"] or 0.0) * s["booking_n"]
                                  for s in summaries) / booking_n if booking_n else None)
  return out


def compare(agents: dict[str, str], customers: Sequence[str], *, num_dialogues: int,
            workdir: str, seed: int = airdialogue_env.DEFAULT_SEED, batch_size: int = 100,
            sweep_betas: Sequence[float] = (), sweep_agents: Sequence[str] | None = None,
            max_new_tokens: int = 64, temperature: float = 1.0,
            customer_temperature: float | None = None) -> list[dict[str, Any]]:
  """Rows of (agent, beta): per-customer and pooled summaries. An agent's spec may name
  several training seeds, "DIR1+DIR2+DIR3": each plays every scenario at the beta its own
  checkpoint was selected with, and the rows pool them (`seed_stderr`: the standard error
  of the seeds' mean success, which carries training noise as well as scenario noise).
  `sweep_betas` apply to the value-guided agents named in `sweep_agents` (None: all).
  Learned agents decode at `temperature` (0 = greedy), learned customers at
  `customer_temperature` (None: the same)."""
  decoding = {"max_new_tokens": max_new_tokens, "temperature": temperature,
              "customer_temperature": temperature if customer_temperature is None
              else customer_temperature}
  # Evaluations at other temperatures are other files (the defaults keep the plain names).
  temperatures = "".join(f"_{key}{value:g}" for key, value in (
      ("T", decoding["temperature"]), ("cT", decoding["customer_temperature"])) if value != 1.0)
  rows = []
  for name, spec in agents.items():
    seeds = spec.split(SEED_SEP)
    best = [selected_beta(s) for s in seeds]
    sweep = value_guided(seeds[0]) and (sweep_agents is None or name in sweep_agents)
    settings = [(best, True)] + [([b] * len(seeds), False) for b in sweep_betas
                                 if sweep and [b] * len(seeds) != best]
    for betas, is_selected in settings:
      per_seed = []
      for i, (seed_spec, beta) in enumerate(zip(seeds, betas)):
        label = name if len(seeds) == 1 else f"{name}_seed{i}"
        per_seed.append({customer: _evaluation(
            seed_spec, customer, f"{label}_beta{beta:g}{temperatures}_vs_{_short(customer)}",
            num_dialogues=num_dialogues, workdir=workdir, seed=seed, batch_size=batch_size,
            beta=beta, **decoding) for customer in customers})
      row = {"agent": name, "spec": spec, "beta": betas[0] if len(set(betas)) == 1 else betas,
             "selected": is_selected,
             "per_customer": {c: pooled([s[c] for s in per_seed]) for c in customers},
             "pooled": pooled([s[c] for s in per_seed for c in customers])}
      if len(seeds) > 1:
        seed_success = [pooled(list(s.values()))["success_rate"] for s in per_seed]
        row["pooled"].update(seed_success=seed_success, seed_stderr=float(
            np.std(seed_success, ddof=1) / math.sqrt(len(seeds))))
      rows.append(row)
  return rows


def _short(customer: str) -> str:
  """A file-name tag: a workdir by its folder name, a spec ("scripted:terse/numeric") whole."""
  name = os.path.basename(customer.rstrip("/")) if os.path.isdir(customer) else customer
  return name.replace(":", "-").replace("/", "-")


def _evaluation(agent: str, customer: str, tag: str, *, num_dialogues: int, workdir: str,
                seed: int, batch_size: int, beta: float, max_new_tokens: int,
                temperature: float, customer_temperature: float) -> dict[str, Any]:
  """The summary of one pair, played unless its file exists (an interrupted comparison
  resumes)."""
  path = os.path.join(workdir, f"eval_{tag}.json")
  if not os.path.exists(path):
    evaluate.evaluate(agent, customer, num_dialogues=num_dialogues, workdir=workdir,
                          seed=seed, batch_size=batch_size, tag=tag, progress=True,
                          lm_options={"beta": beta, "max_new_tokens": max_new_tokens,
                                      "temperature": temperature},
                          customer_lm_options={"max_new_tokens": max_new_tokens,
                                               "temperature": customer_temperature})
  with open(path) as f:
    return json.load(f)


def corpus_row(stats_path: str, customers: Sequence[str]) -> dict[str, Any]:
  """The training corpus's own success per customer style (self-play stats.json)."""
  with open(stats_path) as f:
    stats = json.load(f)
  per_style = stats["per_customer_style"]
  per_customer = {}
  for customer in customers:
    style = customer.removeprefix("scripted:")
    if style in per_style:
      s = per_style[style]
      p = s["success_rate"]
      per_customer[customer] = {"n": s["n"], "success_rate": p,
                                "success_stderr": math.sqrt(p * (1 - p) / s["n"])}
  p = stats["success_rate"]
  return {"agent": "dataset", "spec": stats_path, "beta": 0.0, "selected": True,
          "per_customer": per_customer,
          "pooled": {"n": stats["n"], "success_rate": p,
                     "success_stderr": math.sqrt(p * (1 - p) / stats["n"])}}


def to_markdown(rows: Sequence[dict[str, Any]], customers: Sequence[str]) -> str:
  cell = lambda s: f"{s['success_rate']:.3f} ± {s['success_stderr']:.3f}" if s else "–"

  def pooled_cell(s):
    if "seed_stderr" not in s:
      return cell(s)
    return (f"{s['success_rate']:.3f} ± {s['seed_stderr']:.3f} ({len(s['seed_success'])} seeds; "
            f"± {s['success_stderr']:.3f} over dialogues)")

  beta = lambda b: "/".join(f"{x:g}" for x in b) if isinstance(b, list) else f"{b:g}"
  short = [c.removeprefix("scripted:") for c in customers]
  lines = ["| agent | beta | " + " | ".join(short) + " | pooled |",
           "|---|---|" + "---|" * (len(customers) + 1)]
  for r in rows:
    mark = "" if r["selected"] else " (sweep)"
    lines.append(f"| {r['agent']}{mark} | {beta(r['beta'])} | " + " | ".join(
        cell(r["per_customer"].get(c)) for c in customers) + f" | {pooled_cell(r['pooled'])} |")
  lines += ["", "| agent | beta | status acc. | flight acc. | name acc. | unparsable action "
            "| turns | booking success |", "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    if "status_acc" in r["pooled"]:
      p = r["pooled"]
      booking = p.get("booking_success")
      lines.append(f"| {r['agent']}{'' if r['selected'] else ' (sweep)'} | {beta(r['beta'])} | "
                   f"{p['status_acc']:.3f} | {p['flight_acc']:.3f} | {p['name_acc']:.3f} | "
                   f"{p['unparsable_rate']:.3f} | {p['mean_turns']:.1f} | "
                   + ("–" if booking is None else f"{booking:.3f} (n = {p['booking_n']})")
                   + " |")
  return "\n".join(lines) + "\n"


def run(agents: Sequence[str], customers: Sequence[str], *, workdir: str, num_dialogues: int,
        seed: int = airdialogue_env.DEFAULT_SEED, batch_size: int = 100,
        sweep_betas: Sequence[str] = (), sweep_agents: Sequence[str] = (),
        temperature: float = 0.0, customer_temperature: float = 1.0,
        corpus_stats: str = "") -> list[dict[str, Any]]:
  """experiments.compare_agents: checks its input (cli.BadInput), plays every pair and writes
  comparison.json and comparison.md into `workdir`. `agents` are NAME=SPEC[+SPEC...] items
  (a list flag's, split at commas); `sweep_betas` the flag's strings."""
  named = {}
  for name, seed_specs in config_checks.named_seeds(agents, "--agents").items():
    for seed_spec in seed_specs:
      config_checks.check_party(seed_spec, "agent", f"--agents {name}")
    named[name] = SEED_SEP.join(seed_specs)
  customers = list(customers)
  for customer in customers:
    config_checks.check_party(customer, "customer", "--customers")
  unknown = sorted(set(sweep_agents) - set(named))
  if unknown:
    raise cli.BadInput(f"--sweep_agents: {unknown} not in --agents {sorted(named)}")
  try:
    betas = [float(b) for b in sweep_betas]
  except ValueError:
    raise cli.BadInput(f"--sweep_betas={','.join(sweep_betas)}: expected numbers") from None
  if corpus_stats:
    cli.existing_file(corpus_stats, "--corpus_stats")
  cli.output_dir(workdir, "--workdir")
  rows = compare(named, customers, num_dialogues=num_dialogues, workdir=workdir, seed=seed,
                 batch_size=batch_size, sweep_betas=betas, sweep_agents=list(sweep_agents) or None,
                 temperature=temperature, customer_temperature=customer_temperature)
  if corpus_stats:
    rows.insert(0, corpus_row(corpus_stats, customers))
  with open(os.path.join(workdir, "comparison.json"), "w") as out:
    json.dump(rows, out, indent=2)
  table = to_markdown(rows, customers)
  with open(os.path.join(workdir, "comparison.md"), "w") as out:
    out.write(table)
  print(table)
  return rows
