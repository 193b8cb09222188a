"""How fast a human study's agent answers when many people chat with it at once.

    python -m benchmarks.study_latency [--config=experiments/configs/study_airdialogue.py \
        --arm=calm --participants=1,8,32 --customer=scripted:answer_only --think_s=0 \
        --out=PATH.json --output=docs/BENCHMARKS.md]

For each number of participants N, a fresh study of one arm (`--arm`: a name of the
config's arms, by default the quickstart CALM agent when `make run`'s runs/quickstart
exists, else the scripted oracle; or NAME=SPEC for any party spec) on N scenarios is
served in this process (workflows/study/app.py, uvicorn on loopback), and N bot
participants (workflows/study/bots.py, `--customer`) play it at once from a separate
process, so the server's timings share no interpreter with the bots. The agent reply
latency is the server's own (turns.latency_s: from the person's committed turn to the
agent's reply, the batching wait included); the round trip is the bot's (a message's POST
to its answer). The mean batch is the items per call the MicroBatcher formed (before the
padding to a power of two). A first run of each N is played and discarded (compilation).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import multiprocessing
import os
import pathlib
import platform
import sqlite3
import sys
import tempfile
import time
from typing import Any

import numpy as np
from absl import flags

from benchmarks import report as bench_report
from data_pipelines import cli
from workflows import http_serving
from workflows.study import agents as agents_lib
from workflows.study import app as study_app
from workflows.study import bots
from workflows.study import config as study_config

_CONFIG = cli.define_config_file("config", "experiments/configs/study_airdialogue.py",
                                 "The study config whose arm is measured.")
_ARM = flags.DEFINE_string("arm", "", "An arm of --config, or NAME=SPEC ('' = calm when "
                           "runs/quickstart exists, else oracle=scripted_agent:oracle).")
_PARTICIPANTS = flags.DEFINE_list("participants", ["1", "8", "32"], "Simultaneous bots, one "
                                  "run each.")
_CUSTOMER = flags.DEFINE_string("customer", "scripted:answer_only", "The bots' party spec.")
_THINK = flags.DEFINE_float("think_s", 0.0, "Seconds each bot waits before each of its turns.",
                            lower_bound=0.0)
_WARMUP = flags.DEFINE_bool("warmup", True, "Play each N once untimed first (compilation).")
_WORKDIR = flags.DEFINE_string("workdir", "", "Where the studies go ('' = a temporary folder).")
_OUT = flags.DEFINE_string("out", "", "The results as JSON ('' = WORKDIR/study_latency.json).")
_OUTPUT = flags.DEFINE_string("output", str(pathlib.Path(__file__).resolve().parents[1] / "docs"
                                            / "BENCHMARKS.md"),
                              "Markdown file whose study section is (re)written ('' = none).")

SECTION = "## Human study: agent reply latency with simultaneous participants"
QUICKSTART = "runs/quickstart"


def arm(config: Any, name_or_spec: str) -> tuple[str, str]:
  """(name, spec) of the measured arm (the module docstring's default)."""
  if not name_or_spec:
    name_or_spec = "calm" if os.path.isdir(QUICKSTART) else "oracle=scripted_agent:oracle"
  name, sep, spec = name_or_spec.partition("=")
  if sep:
    return name, spec
  if name not in config.arms:
    raise cli.BadInput(f"--arm={name}: not an arm of --config ({sorted(config.arms)}); or "
                       "give NAME=SPEC")
  return name, config.arms[name]


def study_for(config: Any, name: str, spec: str, participants: int) -> study_config.Study:
  """The config with one arm, N scenarios and one participant on each, unthrottled."""
  config = study_config.make(
      config.task, {name: spec}, max_turns=config.max_turns, survey=list(config.survey),
      env=dict(config.env), agent_options=dict(config.agent_options),
      arm_options={k: dict(v) for k, v in config.arm_options.items() if k == name},
      scenario_seed=config.scenario_seed, num_scenarios=participants,
      participants_per_arm=participants, seed=config.seed, batch=dict(config.batch),
      limits={**dict(config.limits), "messages_per_minute": 1_000_000})
  return study_config.load(config)


def serve_and_play(study: study_config.Study, agents: agents_lib.Agents, workdir: str,
                   bot_pool: concurrent.futures.Executor, customer: str,
                   think_s: float) -> dict[str, Any]:
  """Serves the study, plays every invitation with a bot at once; returns the timings."""
  port = http_serving.free_port()  # Known before the app exists: the links name it.
  app = study_app.make_app(study, workdir, link_base=f"http://127.0.0.1:{port}", agents=agents)
  with open(os.path.join(workdir, "links.txt")) as f:
    links = [line.strip() for line in f if line.strip()]
  with open(os.path.join(workdir, "admin_token")) as f:
    admin = f.read().strip()
  first_batch = len(agents.batcher.batch_sizes)
  try:  # Lifespan off: the agents serve every run, and are closed by main.
    with http_serving.running(app, port=port, lifespan="off") as base_url:
      start = time.perf_counter()
      results = bot_pool.submit(bots.run_bots, base_url, links, admin, customer,
                                concurrency=len(links), think_s=think_s).result()
      seconds = time.perf_counter() - start
  finally:
    app.state.sessions.store.close()
  errors = [r.error for r in results if r.error]
  if errors:
    raise RuntimeError(f"{len(errors)} of {len(results)} bots failed, e.g. {errors[0]}")
  conn = sqlite3.connect(f"file:{os.path.join(workdir, 'study.sqlite')}?mode=ro", uri=True)
  try:
    latencies = np.asarray([r[0] for r in conn.execute(
        "SELECT latency_s FROM turns WHERE latency_s IS NOT NULL")], np.float64)
  finally:
    conn.close()
  trips = np.asarray([s for r in results for s in r.round_trips_s], np.float64)
  sizes = agents.batcher.batch_sizes[first_batch:]
  return {"participants": len(links), "agent_turns": len(latencies), "seconds": seconds,
          "latency_p50_s": float(np.percentile(latencies, 50)),
          "latency_p95_s": float(np.percentile(latencies, 95)),
          "round_trip_p50_s": float(np.percentile(trips, 50)),
          "round_trip_p95_s": float(np.percentile(trips, 95)),
          "mean_batch": float(np.mean(sizes)) if sizes else 0.0, "batches": len(sizes),
          "mean_turns": float(np.mean([r.turns for r in results]))}


def render(results: list[dict[str, Any]], meta: dict[str, Any], command: str) -> str:
  rows = [f"| {r['participants']} | {r['agent_turns']} | {r['latency_p50_s']:.3f} | "
          f"{r['latency_p95_s']:.3f} | {r['round_trip_p50_s']:.3f} | {r['round_trip_p95_s']:.3f} "
          f"| {r['mean_batch']:.1f} | {r['mean_turns']:.1f} |" for r in results]
  return "\n".join([
      SECTION, "",
      f"Command: `{command}` ({datetime.date.today().isoformat()}).", "",
      f"- Machine: {meta['machine']}; python {platform.python_version()}, jax "
      f"{meta['jax']}, backend {meta['backend']}.",
      f"- Arm `{meta['arm']}` = `{meta['spec']}` ({meta['agent_options']}), batched by the "
      f"server's MicroBatcher (max_batch {meta['batch']['max_batch']}, wait "
      f"{meta['batch']['wait_ms']} ms); N bots (`{meta['customer']}`, think "
      f"{meta['think_s']:g} s) at once from another process, one scenario each.",
      "- Agent reply: the server's latency_s (person's turn committed -> agent's reply); round "
      "trip: the bot's POST to its answer; mean batch: rows per batched call, before padding.",
      "",
      "| participants | agent turns | agent reply p50 (s) | p95 (s) | round trip p50 (s) | "
      "p95 (s) | mean batch | turns per dialogue |",
      "|---:|---:|---:|---:|---:|---:|---:|---:|",
      *rows,
  ])


def main(argv):
  del argv
  config = _CONFIG.value
  name, spec = arm(config, _ARM.value)
  sizes = [int(n) for n in _PARTICIPANTS.value]
  if not sizes or min(sizes) < 1:
    raise cli.BadInput(f"--participants={','.join(_PARTICIPANTS.value)}: positive integers")
  workdir = _WORKDIR.value or tempfile.mkdtemp(prefix="study_latency_")
  out = _OUT.value or os.path.join(workdir, "study_latency.json")
  cli.output_dir(workdir, "--workdir")
  studies = {n: study_for(config, name, spec, n) for n in sizes}  # Checks every config first.
  agents = agents_lib.Agents(studies[sizes[0]])  # One party per arm for every run (loaded once).
  results = []
  spawn = multiprocessing.get_context("spawn")
  try:
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as bot_pool:
      for n in sizes:
        for run in (("warmup", "timed") if _WARMUP.value else ("timed",)):
          measured = serve_and_play(studies[n], agents, os.path.join(workdir, f"n{n}_{run}"),
                                    bot_pool, _CUSTOMER.value, _THINK.value)
          print(json.dumps({"run": run, **measured}), flush=True)
        results.append(measured)
  finally:
    agents.close()
  import jax  # Only for the machine line: the arms' parties imported it already.
  meta = {"arm": name, "spec": spec, "customer": _CUSTOMER.value, "think_s": _THINK.value,
          "agent_options": dict(studies[sizes[0]].party_options(name)),
          "batch": dict(config.batch), "backend": jax.default_backend(), "jax": jax.__version__,
          "machine": f"{bench_report.cpu_name()}, {len(os.sched_getaffinity(0))} usable cores"
                     + (f", {jax.devices()[0].device_kind}"
                        if jax.default_backend() != "cpu" else "")}
  with open(out, "w") as f:
    json.dump({"meta": meta, "results": results}, f, indent=2)
  table = render(results, meta, " ".join(["python -m benchmarks.study_latency", *sys.argv[1:]]))
  print(table)
  if _OUTPUT.value:
    bench_report.write_section(pathlib.Path(_OUTPUT.value), SECTION, table)


if __name__ == "__main__":
  cli.run(main)
