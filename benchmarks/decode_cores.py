"""Batched decoding on one core and on all cores, ours and transformers + torch side by side.

  python -m benchmarks.decode_cores                      # rewrites its docs/BENCHMARKS.md section
  python -m benchmarks.decode_cores --quick --output=/tmp/d.md     # seconds-long smoke run

The model and the decode are `benchmarks.lm_speed`'s (a random GPT-2, the same weights on both
sides; prefill a [B, P] prompt, then exactly N greedy tokens). Each setting runs in a child
process of its own, because a process's CPU devices are fixed when jax starts and threads
already started keep their CPU affinity:
  * `one_core`: pinned to one CPU; ours on one device, torch with 1 thread;
  * `all_cores_one_device`: every usable CPU, ours on one device (what a default run does);
  * `all_cores`: every usable CPU; ours on one CPU device per core with each batch's rows
    split over them (`generation/decode_devices.py`), torch with one thread per core.
Each child also plays multi-turn dialogues as evaluation and online RL do: the rollout
benchmarks' agent (`benchmarks.rollouts_vs_torch.agent_model`, greedy) as an `LMParty` against
the scripted volunteer through `environment.play`, its rows split over the devices where the
setting has several (`LMParty(devices=...)`).
Each child prints one JSON line; `--setting=NAME` runs one child's measurement alone (add
`--xla_flags=...` to try XLA:CPU flags on our side).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
from typing import Any

from absl import flags

from benchmarks import report as bench_report
from data_pipelines import cli

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTION = "## LM core: batched decoding on one core and on all cores"
SETTINGS = ("one_core", "all_cores_one_device", "all_cores")
TARGET_SCALING, TARGET_VS_TORCH = 1.8, 2.0  # At the largest batch, on all cores.
DIALOGUE_TURNS, DIALOGUE_NEW_TOKENS = 10, 32  # Utterances per dialogue, tokens per agent turn.


@dataclasses.dataclass(frozen=True)
class Setting:
  cores: int  # CPUs the child may run on.
  devices: int  # Our CPU devices; rows split over them when more than one.
  torch: bool  # Whether torch is measured too (threads = cores).


def settings(all_cores: int) -> dict[str, Setting]:
  return {"one_core": Setting(1, 1, True),
          "all_cores_one_device": Setting(all_cores, 1, False),
          "all_cores": Setting(all_cores, all_cores, True)}


def measure_setting(setting: Setting, quick: bool, repeats: int | None,
                    batches: tuple[int, ...] | None) -> dict[str, Any]:
  """Runs in the child: our decode (and torch's) at every batch; tokens/s and greedy tokens."""
  from ilql_dialogue.generation import cpu_devices
  cpu_devices.use_cpu_devices(setting.devices)  # Before jax's first computation.

  import tempfile

  import jax
  import numpy as np
  import torch

  from benchmarks import lm_speed
  from ilql_dialogue.generation import decode_devices

  bc = lm_speed.QUICK if quick else lm_speed.FULL
  bc = dataclasses.replace(bc, repeats=repeats or bc.repeats,
                           decode_batches=batches or bc.decode_batches)
  torch.set_num_threads(setting.cores)
  with tempfile.TemporaryDirectory() as workdir:
    hf, ours = lm_speed.build_models(bc, pathlib.Path(workdir))
  mesh = decode_devices.decode_mesh() if setting.devices > 1 else None
  out: dict[str, Any] = {"load_before": os.getloadavg(), "devices": jax.device_count(),
                         "cores": len(os.sched_getaffinity(0)), "batches": {}}
  for batch in bc.decode_batches:
    prompts = np.random.default_rng(batch).integers(
        1, bc.vocab_size, (batch, bc.prompt_len)).astype(np.int32)
    sides = [("ours", lambda: lm_speed.ours_decode(ours, prompts, bc.new_tokens, bc.repeats,
                                                   mesh=mesh))]
    if setting.torch:
      sides.append(("torch", lambda: lm_speed.torch_decode(hf, prompts, bc.new_tokens,
                                                           bc.repeats)))
    row = {}
    for name, decode in sides:
      timing = decode()
      wall_s, cpu_s = timing["total_s"]
      row[name] = {"tokens_per_s": batch * bc.new_tokens / wall_s,
                   "cpu_per_wall": cpu_s / wall_s,
                   "prefill_ms": 1e3 * timing["prefill_s"],
                   "step_ms": 1e3 * (wall_s - timing["prefill_s"]) / bc.new_tokens,
                   "tokens": np.asarray(timing["tokens"]).tolist()}
    out["batches"][str(batch)] = row
  out["dialogues"] = play_dialogues(max(bc.decode_batches), 1 if quick else bc.repeats,
                                    2 if quick else DIALOGUE_TURNS)
  out["load_after"] = os.getloadavg()
  out["shape"] = {"prompt_len": bc.prompt_len, "new_tokens": bc.new_tokens,
                  "repeats": bc.repeats, "layers": bc.num_layers, "width": bc.d_model,
                  "vocab": bc.vocab_size}
  out["versions"] = (f"python {platform.python_version()}, jax {jax.__version__}, torch "
                     f"{torch.__version__}")
  return out


def play_dialogues(batch: int, repeats: int, turns: int) -> dict[str, Any]:
  """Multi-turn dialogues per second of one LMParty batch (rows split over every device when
  there are several), median of `repeats` after a warm-up batch; the agent's ids."""
  import time

  import jax
  import numpy as np

  from benchmarks import rollout_cache, rollouts_vs_torch
  from domains.airdialogue import environment as airdialogue_env
  from ilql_dialogue.lm_party import LMParty

  tok, model = rollout_cache.tokenizer(), rollouts_vs_torch.agent_model()
  scenarios = airdialogue_env.make_scenarios(7, 2 * batch, kb_size=rollouts_vs_torch.KB_SIZE)
  devices = jax.devices() if jax.device_count() > 1 else None
  seconds = []
  for k in range(repeats + 1):
    agent = LMParty(model, tok, "agent", max_new_tokens=DIALOGUE_NEW_TOKENS, temperature=0.0,
                    devices=devices)
    start = time.perf_counter()
    rollouts_vs_torch.play(agent, scenarios[:batch] if k == 0 else scenarios[batch:], turns)
    if k:
      seconds.append(time.perf_counter() - start)
  return {"batch": batch, "turns": turns, "dialogues_per_s": batch / float(np.median(seconds)),
          "placed_on": len(agent.state.cache.valid_BxS.sharding.device_set),
          "tokens": [[t for turn in row for t in turn] for row in agent.generated_ids]}


def run_child(name: str, setting: Setting, argv: list[str]) -> dict[str, Any]:
  """One setting in a child process pinned to the first `setting.cores` usable CPUs (the last
  one alone for a single core)."""
  cpus = sorted(os.sched_getaffinity(0))
  pinned = cpus[-1:] if setting.cores == 1 else cpus[:setting.cores]
  args = [a for a in argv if not a.startswith(("--setting", "--output"))]
  result = subprocess.run(
      [sys.executable, "-m", "benchmarks.decode_cores", f"--setting={name}", *args],
      cwd=REPO_ROOT, capture_output=True, text=True, check=False,
      preexec_fn=lambda: os.sched_setaffinity(0, pinned))
  if result.returncode:
    raise RuntimeError(f"{name}: exit {result.returncode}\n{result.stderr[-4000:]}")
  return json.loads(result.stdout.strip().splitlines()[-1])


def same_share(a: list[list[int]], b: list[list[int]]) -> float:
  """Share of greedy tokens equal position by position."""
  flat_a = [t for row in a for t in row]
  flat_b = [t for row in b for t in row]
  return sum(x == y for x, y in zip(flat_a, flat_b, strict=True)) / len(flat_a)


def render(runs: dict[str, dict[str, Any]], command: str, xla_flags: str) -> str:
  one, mid, every = runs["one_core"], runs["all_cores_one_device"], runs["all_cores"]
  cores = every["cores"]
  shape = every["shape"]
  batches = list(every["batches"])
  largest = batches[-1]
  rate = lambda run, batch, side: run["batches"][batch][side]["tokens_per_s"]
  rows, ratio_rows, step_rows, same_rows = [], [], [], []
  for b in batches:
    ours1, ours_mid, ours_n = rate(one, b, "ours"), rate(mid, b, "ours"), rate(every, b, "ours")
    torch1, torch_n = rate(one, b, "torch"), rate(every, b, "torch")
    rows.append(f"| {b} | {ours1:,.0f} | {ours_mid:,.0f} | {ours_n:,.0f} | {torch1:,.0f} | "
                f"{torch_n:,.0f} |")
    target = (f">= {TARGET_SCALING}x / >= {TARGET_VS_TORCH}x" if b == largest else "")
    ratio_rows.append(f"| {b} | {ours_n / ours1:.2f}x | {ours_mid / ours1:.2f}x | "
                      f"{torch_n / torch1:.2f}x | {ours1 / torch1:.2f}x | {ours_n / torch_n:.2f}x "
                      f"| {target} |")
    for label, run, side in (("ours, 1 core", one, "ours"),
                             (f"ours, {cores} cores, 1 device", mid, "ours"),
                             (f"ours, {cores} cores, rows on {cores} devices", every, "ours"),
                             ("torch, 1 core", one, "torch"),
                             (f"torch, {cores} cores", every, "torch")):
      r = run["batches"][b][side]
      step_rows.append(f"| {b} | {label} | {r['prefill_ms']:.1f} | {r['step_ms']:.2f} | "
                       f"{r['cpu_per_wall']:.2f} |")
    ref = one["batches"][b]["ours"]["tokens"]
    same_rows.append(
        f"batch {b}: split vs one device {100 * same_share(ref, every['batches'][b]['ours']['tokens']):.0f}%, "
        f"ours vs torch {100 * same_share(ref, one['batches'][b]['torch']['tokens']):.0f}% (1 core) / "
        f"{100 * same_share(every['batches'][b]['ours']['tokens'], every['batches'][b]['torch']['tokens']):.0f}% "
        f"({cores} cores)")
  dialogues = {name: run["dialogues"] for name, run in runs.items()}
  d_rate = {name: d["dialogues_per_s"] for name, d in dialogues.items()}
  d = dialogues["all_cores"]
  dialogue_rows = [
      f"| {d['batch']} | {d['turns']} | {d_rate['one_core']:.2f} | "
      f"{d_rate['all_cores_one_device']:.2f} | {d_rate['all_cores']:.2f} | "
      f"{d_rate['all_cores'] / d_rate['one_core']:.2f}x | "
      f"{d_rate['all_cores_one_device'] / d_rate['one_core']:.2f}x | "
      f"{100 * same_share(dialogues['one_core']['tokens'], d['tokens']):.0f}% |"]
  load = lambda run, key: " / ".join(f"{x:.2f}" for x in run[key])
  return "\n".join([
      SECTION,
      "",
      f"Command: `{command}` ({datetime.date.today().isoformat()}).",
      "",
      f"- Machine: {bench_report.cpu_name()}, {cores} usable cores; {every['versions']}.",
      f"- Load average (1/5/15 min) before the one-core child: {load(one, 'load_before')}, after "
      f"the {cores}-core child: {load(every, 'load_after')}.",
      f"- Model and decode as `benchmarks.lm_speed`: GPT-2 family, {shape['layers']} layers, "
      f"width {shape['width']}, vocab {shape['vocab']}, float32, the same random weights on "
      f"both sides; greedy, prefill of {shape['prompt_len']} tokens included, exactly "
      f"{shape['new_tokens']} new tokens per row; medians of {shape['repeats']} after a warm-up.",
      f"- One child process per setting: `1 core` pinned to one CPU (ours on one XLA device, "
      f"torch 1 thread); `{cores} cores, 1 device` ours as a default run is; `{cores} cores, "
      f"rows on {cores} devices` ours on one XLA:CPU device per core (`--cpu_devices=all`, "
      f"`generation/cpu_devices.py`) with each batch's rows split over them "
      f"(`generation/decode_devices.py`), torch with {cores} threads."
      + (f" Extra XLA flags: `{xla_flags}`." if xla_flags else ""),
      "",
      f"| batch | ours, 1 core | ours, {cores} cores, 1 device | ours, {cores} cores, rows on "
      f"{cores} devices | torch, 1 core | torch, {cores} cores |",
      "|---:|---:|---:|---:|---:|---:|",
      *rows,
      "",
      "Tokens/s (wall). Ratios:",
      "",
      f"| batch | ours 1 -> {cores} cores | ours 1 -> {cores} cores, 1 device | torch 1 -> "
      f"{cores} cores | ours / torch, 1 core | ours / torch, {cores} cores | target (scaling / "
      "vs torch) |",
      "|---:|---:|---:|---:|---:|---:|---|",
      *ratio_rows,
      "",
      "Where the time goes (milliseconds, medians; CPU / wall: cores busy on average over the "
      "whole decode):",
      "",
      "| batch | setting | prefill | per new token | CPU / wall |",
      "|---:|---|---:|---:|---:|",
      *step_rows,
      "",
      "Greedy tokens identical, position by position: " + "; ".join(same_rows) + ".",
      "",
      f"Multi-turn dialogues per second (an `LMParty` agent, the rollout benchmarks' 2-layer "
      f"Llama of width 128 with its ~480-token context, greedy, at most "
      f"{DIALOGUE_NEW_TOKENS} tokens a turn, against the scripted volunteer through "
      f"`environment.play`; rows split over the devices with `LMParty(devices=...)`; the "
      f"customer, tokenization and bookkeeping included):",
      "",
      f"| batch | utterances | 1 core | {cores} cores, 1 device | {cores} cores, rows on "
      f"{cores} devices | 1 -> {cores} cores | 1 -> {cores} cores, 1 device | agent tokens "
      f"identical (split vs 1 core) |",
      "|---:|---:|---:|---:|---:|---:|---:|---:|",
      *dialogue_rows,
  ])


def main(argv: list[str]) -> None:
  del argv
  f = flags.FLAGS
  batches = tuple(int(b) for b in f.batches) if f.batches else None
  if f.setting:  # A child: measure one setting, print it as one JSON line.
    if f.xla_flags:  # Read when jax's backend starts, inside measure_setting.
      os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {f.xla_flags}".strip()
    setting = settings(len(os.sched_getaffinity(0)))[f.setting]
    print(json.dumps(measure_setting(setting, f.quick, f.repeats, batches)))
    return
  cli.output_file(f.output, "--output")
  table = settings(len(os.sched_getaffinity(0)))
  runs = {name: run_child(name, table[name], sys.argv[1:]) for name in SETTINGS}
  env = [f"GLIBC_TUNABLES={os.environ['GLIBC_TUNABLES']}"] if "GLIBC_TUNABLES" in os.environ else []
  command = " ".join([*env, "python -m benchmarks.decode_cores", *sys.argv[1:]])
  bench_report.write_section(pathlib.Path(f.output), SECTION, render(runs, command, f.xla_flags))
  print(render(runs, command, f.xla_flags))


if __name__ == "__main__":
  flags.DEFINE_bool("quick", False, "Tiny model and few repetitions: a seconds-long smoke run.")
  flags.DEFINE_string("output", str(REPO_ROOT / "docs" / "BENCHMARKS.md"),
                      "Markdown file whose section is (re)written.")
  flags.DEFINE_integer("repeats", None, "Timed repetitions per measurement (median).",
                       lower_bound=1)
  flags.DEFINE_list("batches", None, "Decode batch sizes (default: lm_speed's, 16 and 64).")
  flags.DEFINE_enum("setting", None, SETTINGS, "Measure this one setting in this process and "
                    "print it as JSON (what each child does).")
  flags.DEFINE_string("xla_flags", "", "Extra XLA_FLAGS for our side, e.g. XLA:CPU flags to "
                      "compare with the split rows.")
  cli.run(main)
