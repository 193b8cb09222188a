"""Agents against customers on the same held-out scenarios: the tables of docs/RESULTS.md.

    python -m experiments.compare_agents --workdir=runs/results/eval \
        --agents=oracle=scripted_agent:oracle,bc=runs/results/bc_agent,ilql=runs/results/ilql_agent \
        --customers=scripted:volunteer,scripted:answer_only,scripted:late_reveal,scripted:terse,scripted:chatty \
        --num_dialogues=500 [--sweep_betas=0,4,16 --sweep_agents=ilql \
        --corpus_stats=DIR/stats.json]

Every (agent, customer) pair plays the same `num_dialogues` scenarios (seed
1000, held out from the training corpora and from checkpoint selection,
which uses seed 2000). A value-guided agent (ILQL, MC) decodes at the beta
its checkpoint was selected with (policy_io.selected), and, with
--sweep_betas, at each of those too. Each evaluation is written by
evaluate_lib.evaluate (summary + transcripts) and skipped when its summary
exists, so an interrupted comparison resumes. Writes comparison.json and
comparison.md: success rate +- standard error per pair, and pooled over the
customers.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Sequence

from absl import flags

from experiments import cli, evaluate_lib
from ilql_dialogue import policy_io, rollout


def selected_beta(spec: str) -> float:
  """The beta a run's kept checkpoint was selected at (0 for BC and scripted agents)."""
  if not os.path.isdir(spec):
    return 0.0
  meta = policy_io.selected(spec) or {}
  return float(meta.get("eval", {}).get("best_beta", 0.0))


FIELDS = ("status_acc", "flight_acc", "name_acc", "mean_turns")


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
  return out


def compare(agents: dict[str, str], customers: Sequence[str], *, num_dialogues: int,
            workdir: str, seed: int = rollout.DEFAULT_SEED, batch_size: int = 100,
            sweep_betas: Sequence[float] = (), sweep_agents: Sequence[str] | None = None,
            max_new_tokens: int = 64) -> list[dict[str, Any]]:
  """Rows of (agent, beta): per-customer and pooled summaries. `sweep_betas` apply to
  the value-guided agents named in `sweep_agents` (None: all of them)."""
  rows = []
  for name, spec in agents.items():
    best = selected_beta(spec)
    guided = os.path.isdir(spec) and policy_io.read_config(spec).algorithm.name in (
        "ilql", "mc_value")
    sweep = guided and (sweep_agents is None or name in sweep_agents)
    betas = [best] + [b for b in sweep_betas if b != best] if sweep else [best]
    for beta in betas:
      summaries = {}
      for customer in customers:
        tag = f"{name}_beta{beta:g}_vs_{os.path.basename(customer.rstrip('/')).replace(':', '-')}"
        path = os.path.join(workdir, f"eval_{tag}.json")
        if not os.path.exists(path):
          evaluate_lib.evaluate(spec, customer, num_dialogues=num_dialogues, workdir=workdir,
                                seed=seed, batch_size=batch_size, tag=tag, progress=True,
                                lm_options={"beta": beta, "max_new_tokens": max_new_tokens})
        with open(path) as f:
          summaries[customer] = json.load(f)
      rows.append({"agent": name, "spec": spec, "beta": beta, "selected": beta == best,
                   "per_customer": {c: {k: s[k] for k in (
                       "n", "success_rate", "success_stderr", "unparsable_actions", *FIELDS)}
                                    for c, s in summaries.items()},
                   "pooled": pooled(list(summaries.values()))})
  return rows


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
  short = [c.removeprefix("scripted:") for c in customers]
  lines = ["| agent | beta | " + " | ".join(short) + " | pooled |",
           "|---|---|" + "---|" * (len(customers) + 1)]
  for r in rows:
    mark = "" if r["selected"] else " (sweep)"
    lines.append(f"| {r['agent']}{mark} | {r['beta']:g} | " + " | ".join(
        cell(r["per_customer"].get(c)) for c in customers) + f" | {cell(r['pooled'])} |")
  lines += ["", "| agent | beta | status acc. | flight acc. | name acc. | unparsable action "
            "| turns |", "|---|---|---|---|---|---|---|"]
  for r in rows:
    if "status_acc" in r["pooled"]:
      p = r["pooled"]
      lines.append(f"| {r['agent']}{'' if r['selected'] else ' (sweep)'} | {r['beta']:g} | "
                   f"{p['status_acc']:.3f} | {p['flight_acc']:.3f} | {p['name_acc']:.3f} | "
                   f"{p['unparsable_rate']:.3f} | {p['mean_turns']:.1f} |")
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  f = flags.FLAGS
  agents = {}
  for item in f.agents:
    name, sep, spec = item.partition("=")
    if not (name and sep and spec):
      raise cli.BadInput(f"--agents: {item!r} is not NAME=SPEC")
    cli.check_party(spec, "agent", f"--agents {name}")
    agents[name] = spec
  customers = list(f.customers)
  for customer in customers:
    cli.check_party(customer, "customer", "--customers")
  unknown = sorted(set(f.sweep_agents) - set(agents))
  if unknown:
    raise cli.BadInput(f"--sweep_agents: {unknown} not in --agents {sorted(agents)}")
  try:
    sweep_betas = [float(b) for b in f.sweep_betas]
  except ValueError:
    raise cli.BadInput(f"--sweep_betas={','.join(f.sweep_betas)}: expected numbers") from None
  if f.corpus_stats:
    cli.existing_file(f.corpus_stats, "--corpus_stats")
  cli.output_dir(f.workdir, "--workdir")
  rows = compare(agents, customers, num_dialogues=f.num_dialogues, workdir=f.workdir,
                 seed=f.seed, batch_size=f.batch_size, sweep_betas=sweep_betas,
                 sweep_agents=f.sweep_agents or None)
  if f.corpus_stats:
    rows.insert(0, corpus_row(f.corpus_stats, customers))
  with open(os.path.join(f.workdir, "comparison.json"), "w") as out:
    json.dump(rows, out, indent=2)
  table = to_markdown(rows, customers)
  with open(os.path.join(f.workdir, "comparison.md"), "w") as out:
    out.write(table)
  print(table)


if __name__ == "__main__":
  flags.DEFINE_list("agents", None, "name=SPEC pairs (a training workdir or "
                    "scripted_agent:NAME).", required=True)
  flags.DEFINE_list("customers", [f"scripted:{s}" for s in (
      "volunteer", "answer_only", "late_reveal", "terse", "chatty")], "Customer specs.")
  flags.DEFINE_integer("num_dialogues", 500, "Held-out scenarios per pair.", lower_bound=1)
  flags.DEFINE_string("workdir", None, "Where evaluations and the tables go.", required=True)
  flags.DEFINE_integer("seed", rollout.DEFAULT_SEED, "Scenario seed (held out).")
  flags.DEFINE_integer("batch_size", 100, "Dialogues played at once.", lower_bound=1)
  flags.DEFINE_list("sweep_betas", [], "Extra betas for value-guided agents.")
  flags.DEFINE_list("sweep_agents", [], "Names of the agents to sweep (default: every "
                    "value-guided one).")
  flags.DEFINE_string("corpus_stats", "", "stats.json of the training corpus: a 'dataset' row.")
  cli.run(main)
