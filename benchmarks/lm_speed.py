"""LM core throughput, side by side with transformers + torch in one run.

  python -m benchmarks.lm_speed                 # full run, rewrites its docs/BENCHMARKS.md section
  python -m benchmarks.lm_speed --quick --output=/tmp/b.md   # seconds-long smoke run
  python -m benchmarks.lm_speed --cpu_devices=all   # our decoding's rows split, one device a core

One core against all cores, decoding only: `benchmarks.decode_cores`.

Both sides run the same GPT-2 weights (a random GPT2LMHeadModel saved with
save_pretrained and loaded into our trunk with hf_io.load_hf) on the same
token batches, in float32, with the same number of CPU threads:
  * training: one AdamW update on a [B, T] batch (ours: one jitted step with
    donated parameters and optimizer state; theirs: eager loss.backward() +
    optimizer.step());
  * decoding: prefill a [B, P] prompt, then exactly N greedy tokens (ours:
    sampler.prefill + sampler.generate; theirs: model.generate with use_cache
    and min_new_tokens = max_new_tokens = N);
  * sequence length: training tokens/s of both sides at a fixed number of
    tokens per step (batch x length) for each of `seq_lens`;
  * memory: our step's peak (XLA's buffer assignment of the compiled step:
    arguments + temporaries + outputs - donated aliases) per token, and the
    longest power-of-two sequence whose step compiles to fit this machine's
    available memory at the training batch (compiled only, never run).
Every timing is a median over repetitions after a warm-up call. MFU is
against the measured float32 matmul peak of the machine it runs on; no GPU
or TPU was lent to the runs in docs/BENCHMARKS.md, so there is no bf16
accelerator MFU yet.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import functools
import os
import pathlib
import platform
import re
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
import transformers
from absl import flags
from flax import nnx

from benchmarks import report as bench_report
from data_pipelines import cli
from ilql_dialogue.generation import cpu_devices, decode_devices, sampler
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.hf_io import load_hf
from ilql_dialogue.models.transformer import Transformer

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTION = "## LM core: training and decoding throughput vs transformers + torch"

@dataclasses.dataclass(frozen=True)
class BenchConfig:
  vocab_size: int
  num_layers: int
  d_model: int
  num_heads: int
  seq_len: int
  train_batch: int
  decode_batches: tuple[int, ...]
  prompt_len: int
  new_tokens: int
  repeats: int
  matmul_size: int
  seq_lens: tuple[int, ...]
  seq_tokens: int  # Tokens per training step in the sequence-length sweep (batch = this / length).
  probe_lens: tuple[int, ...]  # Candidates for the longest sequence that trains at train_batch.
  episode_slots: int  # A cache sized for a whole dialogue, as rollouts allocate it.


FULL = BenchConfig(vocab_size=2048, num_layers=4, d_model=256, num_heads=4, seq_len=256,
                   train_batch=16, decode_batches=(16, 64), prompt_len=32, new_tokens=96,
                   repeats=5, matmul_size=2048, seq_lens=(256, 1024, 2048), seq_tokens=4096,
                   probe_lens=(2048, 4096, 8192, 16384), episode_slots=1024)
QUICK = BenchConfig(vocab_size=256, num_layers=2, d_model=64, num_heads=4, seq_len=64,
                    train_batch=4, decode_batches=(4,), prompt_len=8, new_tokens=8,
                    repeats=2, matmul_size=256, seq_lens=(64, 128), seq_tokens=256,
                    probe_lens=(128, 256), episode_slots=64)
SEQ_REPEATS = 2  # The sequence-length sweep's steps are long; its ratios need fewer repeats.
TRAIN_TARGET, DECODE_TARGET = 1.5, 3.0
PROFILE_OPS = 10_000  # Every op: the shares need them all; the report lists the slowest.
LEARNING_RATE, WEIGHT_DECAY = 1e-4, 0.01


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
  """Median wall time of `fn` (which must block until its result is ready) after one warm-up."""
  return measure(fn, repeats)[0]


def measure(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
  """Medians of (wall seconds, CPU seconds of this process) per call, after one warm-up.

  CPU time is what the call actually got of the cores, so it is far less
  sensitive than wall time to other jobs on a shared machine.
  """
  fn()
  wall, cpu = [], []
  for _ in range(repeats):
    wall_start, cpu_start = time.perf_counter(), time.process_time()
    fn()
    wall.append(time.perf_counter() - wall_start)
    cpu.append(time.process_time() - cpu_start)
  return statistics.median(wall), statistics.median(cpu)


def matmul_peak_flops(n: int, repeats: int) -> float:
  """Float32 FLOP/s of one jitted n^3 matmul: the MFU denominator, measured on this machine."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
  matmul = jax.jit(jnp.matmul)
  return 2 * n ** 3 / median_seconds(lambda: matmul(a, b).block_until_ready(), repeats)


def build_models(bc: BenchConfig, workdir: pathlib.Path):
  """One random GPT2LMHeadModel (dropout off) and our trunk loaded from its checkpoint."""
  torch.manual_seed(0)
  hf_cfg = transformers.GPT2Config(
      vocab_size=bc.vocab_size, n_positions=max(bc.seq_len, *bc.seq_lens),
      n_embd=bc.d_model, n_layer=bc.num_layers,
      n_head=bc.num_heads, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
      bos_token_id=None, eos_token_id=None, pad_token_id=0)
  hf = transformers.GPT2LMHeadModel(hf_cfg)
  hf.save_pretrained(workdir)
  _, ours = load_hf(workdir)
  return hf, ours


def matmul_params(hf: torch.nn.Module) -> int:
  """Parameters that take part in a matmul per token: all but the position table.

  The tied token embedding counts once, as the output projection (its lookup
  costs no FLOPs).
  """
  return sum(p.numel() for name, p in hf.named_parameters() if "wpe" not in name)


def train_flops_per_token(bc: BenchConfig, n_params: int) -> float:
  """6N for the dense layers plus 12 L D T for attention scores and values (PaLM, appendix B)."""
  return 6 * n_params + 12 * bc.num_layers * bc.d_model * bc.seq_len


def decode_flops_per_token(bc: BenchConfig, n_params: int) -> float:
  """Forward only: 2N + 4 L D C with C the mean context a new token attends to."""
  mean_context = bc.prompt_len + (bc.new_tokens + 1) / 2
  return 2 * n_params + 4 * bc.num_layers * bc.d_model * mean_context


def make_train_step(graphdef: nnx.GraphDef, tx: optax.GradientTransformation):
  """Our jitted AdamW step (parameters and optimizer state donated) and its loss alone."""

  def loss_fn(params, tokens_BxT):
    model = nnx.merge(graphdef, params)
    mask_BxT = jnp.ones_like(tokens_BxT, jnp.bool_)
    positions_BxT = jnp.broadcast_to(jnp.arange(tokens_BxT.shape[1]), tokens_BxT.shape)
    hidden_BxTxD, _ = model(tokens_BxT, positions_BxT, mask_BxT)
    logits_BxTxV = model.logits(hidden_BxTxD[:, :-1]).astype(jnp.float32)  # As HF's loss does.
    return optax.softmax_cross_entropy_with_integer_labels(logits_BxTxV, tokens_BxT[:, 1:]).mean()

  def train_step(params, opt_state, tokens_BxT):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens_BxT)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  return jax.jit(train_step, donate_argnums=(0, 1)), jax.jit(loss_fn)


def peak_bytes(compiled: Any) -> int:
  """Peak memory of a compiled step by XLA's buffer assignment (donated inputs counted once)."""
  stats = compiled.memory_analysis()
  return (stats.argument_size_in_bytes + stats.temp_size_in_bytes
          + stats.output_size_in_bytes - stats.alias_size_in_bytes)


def ours_train(model: nnx.Module, tokens_BxT: np.ndarray, repeats: int,
               with_forward: bool = True) -> dict[str, Any]:
  """Timings of our trunk: one jitted AdamW step with donated state, and its forward alone."""
  graphdef, params = nnx.split(model)
  params = jax.tree.map(jnp.copy, params)  # The step donates its input; keep `model` intact.
  tx = optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)
  tokens_BxT = jnp.asarray(tokens_BxT, jnp.int32)
  train_step, forward = make_train_step(graphdef, tx)
  carry = {"params": params, "opt_state": tx.init(params)}

  def step():
    carry["params"], carry["opt_state"], loss = train_step(
        carry["params"], carry["opt_state"], tokens_BxT)
    return float(loss)

  compile_step = lambda: train_step.lower(carry["params"], carry["opt_state"], tokens_BxT).compile()
  first_loss = step()
  out = {"step_s": measure(step, repeats), "first_loss": first_loss,
         "profile": (step, compile_step)}
  if with_forward:
    out["forward_s"] = median_seconds(
        lambda: forward(carry["params"], tokens_BxT).block_until_ready(), repeats)
    out["peak_bytes"] = peak_bytes(compile_step())
  return out


def available_bytes() -> int:
  """MemAvailable of /proc/meminfo: what a new allocation may use without swapping."""
  for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
    if line.startswith("MemAvailable:"):
      return int(line.split()[1]) * 1024
  raise OSError("no MemAvailable in /proc/meminfo")


def longest_trainable(bc: BenchConfig, budget: int, dtype: str = "float32"
                      ) -> tuple[int, dict[int, int | None]]:
  """(longest of `bc.probe_lens` whose step fits `budget` bytes, peak bytes per length tried).

  Compiled from abstract shapes only (nothing allocated or run), so lengths
  past the machine's memory cost seconds of compilation, not a crash (on a
  GPU, XLA's autotuner runs candidates on real buffers: running out of memory
  there counts as not fitting, peak None). The attention block grows with the
  length to keep at most 16 blocks per layer.
  """
  tx = optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)
  longest, peaks = 0, {}
  for length in bc.probe_lens:
    cfg = ModelConfig.gpt2(vocab_size=bc.vocab_size, num_layers=bc.num_layers,
                           d_model=bc.d_model, num_heads=bc.num_heads, max_seq_len=length,
                           attention_block=max(128, length // 16), dtype=dtype)
    abstract = nnx.eval_shape(lambda cfg=cfg: Transformer(cfg, rngs=nnx.Rngs(0)))
    graphdef, params = nnx.split(abstract)
    train_step, _ = make_train_step(graphdef, tx)
    tokens = jax.ShapeDtypeStruct((bc.train_batch, length), jnp.int32)
    try:
      peaks[length] = peak_bytes(train_step.lower(params, jax.eval_shape(tx.init, params),
                                                  tokens).compile())
    except jax.errors.JaxRuntimeError as e:
      if "RESOURCE_EXHAUSTED" not in str(e):
        raise
      peaks[length] = None
      break
    if peaks[length] > budget:
      break
    longest = length
  return longest, peaks


def torch_train(hf: torch.nn.Module, tokens_BxT: np.ndarray, repeats: int,
                with_forward: bool = True) -> dict[str, Any]:
  """Timings of eager transformers + torch: forward + backward + AdamW, and the forward alone."""
  hf = copy.deepcopy(hf).train()  # Decoding later starts from the same weights as ours.
  optimizer = torch.optim.AdamW(hf.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
  tokens = torch.tensor(tokens_BxT, dtype=torch.long)

  def step():
    loss = hf(input_ids=tokens, labels=tokens).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()

  def forward():
    hf(input_ids=tokens, labels=tokens).loss.item()  # Records the graph, as in training.

  first_loss = step()
  out = {"step_s": measure(step, repeats), "first_loss": first_loss}
  if with_forward:
    out["forward_s"] = median_seconds(forward, repeats)
  return out


def ours_decode(model: nnx.Module, prompts_BxP: np.ndarray, new_tokens: int,
                repeats: int, max_len: int | None = None,
                mesh: jax.sharding.Mesh | None = None) -> dict[str, Any]:
  """Our prefill + greedy decode; with `mesh`, the rows split over its devices
  (`decode_devices`: on CPU, one device per core decodes on every core)."""
  batch, prompt_len = prompts_BxP.shape
  mask_BxP = np.ones_like(prompts_BxP, bool)
  params = sampler.SamplingParams.make(batch, max_new_tokens=new_tokens, temperature=0.0)
  max_len = max_len or prompt_len + new_tokens
  if mesh is not None:
    model = decode_devices.replicate(model, mesh)
    prompts_BxP, mask_BxP, params = decode_devices.split_rows((prompts_BxP, mask_BxP, params), mesh)
  out = {}

  def run():
    state = sampler.prefill(model, prompts_BxP, mask_BxP, max_len=max_len)
    _, tokens, _, _ = sampler.generate(model, state, params, jax.random.key(0),
                                       max_new_tokens=new_tokens)
    out["tokens"] = np.asarray(tokens)

  def prefill():
    sampler.prefill(model, prompts_BxP, mask_BxP, max_len=max_len).last_hidden_BxD.block_until_ready()

  def compile_generate():
    state = sampler.prefill(model, prompts_BxP, mask_BxP, max_len=max_len)
    return sampler._generate.lower(model, state, params, jax.random.key(0), jnp.int32(0), None,
                                   max_new_tokens=new_tokens,
                                   attend_len=sampler.attend_window(
                                       max_len, prompt_len + new_tokens)).compile()

  return {"total_s": measure(run, repeats), "tokens": out["tokens"],
          "prefill_s": median_seconds(prefill, repeats), "profile": (run, compile_generate)}


def torch_decode(hf: torch.nn.Module, prompts_BxP: np.ndarray, new_tokens: int,
                 repeats: int) -> dict[str, Any]:
  hf.eval()
  prompts = torch.tensor(prompts_BxP, dtype=torch.long)
  mask = torch.ones_like(prompts)
  out = {}

  def run():
    with torch.no_grad():
      tokens = hf.generate(input_ids=prompts, attention_mask=mask, do_sample=False,
                           use_cache=True, max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, pad_token_id=0)
    out["tokens"] = tokens[:, prompts_BxP.shape[1]:].numpy()

  def prefill():
    with torch.no_grad():
      hf(input_ids=prompts, attention_mask=mask, use_cache=True)

  return {"total_s": measure(run, repeats), "tokens": out["tokens"],
          "prefill_s": median_seconds(prefill, repeats)}


def op_profile(fn: Callable[[], Any], compiled: Any, top: int) -> list[tuple[float, int, str]]:
  """(ms per call, executions, description) of the slowest XLA ops of `compiled` while `fn` runs.

  Read from a jax.profiler trace; each op is described by its HLO shape and
  the jax source op it came from. Control-flow ops (while, conditional) are
  left out: their bodies' ops are listed instead. Times are summed over
  XLA's CPU threads.
  """
  hlo = compiled.as_text()
  module = re.search(r"HloModule (\S+?),", hlo).group(1)
  described = {}
  for line in hlo.splitlines():
    match = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+) ([\w\-]+)\(", line)
    if match:
      op_name = re.search(r'op_name="([^"]*)"', line)
      described[match.group(1)] = (match.group(3), f"{match.group(2)} "
                                   f"{op_name.group(1) if op_name else match.group(3)}")
  fn()
  with tempfile.TemporaryDirectory() as logdir:
    with jax.profiler.trace(logdir):
      fn()
    data = jax.profiler.ProfileData.from_file(str(next(pathlib.Path(logdir).rglob("*.xplane.pb"))))
  total_ns: dict[str, int] = collections.Counter()
  calls: dict[str, int] = collections.Counter()
  for plane in data.planes:
    for line in plane.lines:
      for event in line.events:
        kind = described.get(event.name, ("",))[0]
        if dict(event.stats).get("hlo_module") == module and kind not in ("while", "conditional"):
          total_ns[event.name] += event.duration_ns
          calls[event.name] += 1
  return [(ns / 1e6, calls[name], described[name][1][:160])
          for name, ns in total_ns.most_common(top) if name in described]


def profile_shares(profile: list[tuple[float, int, str]]) -> dict[str, float]:
  """Fractions of profiled op time: matmuls, data movement (slices, copies, transposes), the rest.

  Classified by the op's own primitive (the last part of its jax op name; an
  autodiff "transpose(jvp())" scope earlier in the path does not count).
  """
  totals = collections.Counter()
  for ms, _, description in profile:
    primitive = description.rsplit("/", 1)[-1] if "/" in description else description
    if re.search(r"\bdot", primitive):
      totals["matmuls"] += ms
    elif re.search(r"dynamic_slice|dynamic_index|transpose|copy|concatenate|\bslice", primitive):
      totals["data movement"] += ms
    else:
      totals["elementwise, reductions, updates"] += ms
  grand = sum(totals.values()) or 1.0
  return {name: value / grand for name, value in totals.most_common()}


def render_profile(title: str, profile: list[tuple[float, int, str]], top: int) -> list[str]:
  shares = ", ".join(f"{name} {100 * share:.0f}%" for name, share in profile_shares(profile).items())
  lines = [f"{title}: {shares} of the op time. Slowest ops (ms per call summed over XLA's "
           "threads, executions per call, HLO shape and source):", ""]
  lines += [f"    {ms:8.1f}  x{calls:<4d} {description}" for ms, calls, description in profile[:top]]
  return lines + [""]


def machine_description(threads: int) -> dict[str, str]:
  return {
      "cpu": bench_report.cpu_name(),
      "cores": f"{len(os.sched_getaffinity(0))} usable ({os.cpu_count()} online); torch threads {threads}",
      "versions": (f"python {platform.python_version()}, jax {jax.__version__}, flax "
                   f"{flax.__version__}, optax {optax.__version__}, torch {torch.__version__}, "
                   f"transformers {transformers.__version__}"),
  }


def run(bc: BenchConfig, threads: int, profile_top: int = 0) -> dict[str, Any]:
  torch.set_num_threads(threads)
  rng = np.random.default_rng(0)
  results: dict[str, Any] = {"load_before": os.getloadavg()}
  results["peak_flops"] = matmul_peak_flops(bc.matmul_size, bc.repeats)
  with tempfile.TemporaryDirectory() as workdir:
    hf, ours = build_models(bc, pathlib.Path(workdir))
  results["n_params"] = matmul_params(hf)

  train_tokens = rng.integers(0, bc.vocab_size, (bc.train_batch, bc.seq_len))
  for name, fn, model in (("ours", ours_train, ours), ("torch", torch_train, hf)):
    timing = fn(model, train_tokens, bc.repeats)
    (wall_s, cpu_s) = timing["step_s"]
    results[f"train_{name}"] = bc.train_batch * bc.seq_len / wall_s
    results[f"train_cpu_{name}"] = bc.train_batch * bc.seq_len / cpu_s
    results[f"train_loss_{name}"] = timing["first_loss"]
    results[f"train_step_ms_{name}"] = 1e3 * wall_s
    results[f"train_forward_ms_{name}"] = 1e3 * timing["forward_s"]
    if "peak_bytes" in timing:
      results["train_peak_bytes"] = timing["peak_bytes"]
    if profile_top and "profile" in timing:
      fn, compile_fn = timing["profile"]
      results["profile_train"] = op_profile(fn, compile_fn(), profile_top)

  for length in bc.seq_lens:
    batch = max(1, bc.seq_tokens // length)
    tokens = rng.integers(0, bc.vocab_size, (batch, length))
    results[f"seq_{length}_ours"] = batch * length / ours_train(
        ours, tokens, SEQ_REPEATS, with_forward=False)["step_s"][0]
    results[f"seq_{length}_torch"] = batch * length / torch_train(
        hf, tokens, SEQ_REPEATS, with_forward=False)["step_s"][0]
  results["memory_budget"] = available_bytes()
  results["longest"], results["probe_peaks"] = longest_trainable(bc, results["memory_budget"])

  # With several devices (`--cpu_devices`), our decoding splits its rows over all of them.
  mesh = decode_devices.decode_mesh() if jax.device_count() > 1 else None
  results["decode_devices"] = jax.device_count()
  decoders = (("ours", functools.partial(ours_decode, mesh=mesh), ours),
              ("torch", torch_decode, hf))
  for batch in bc.decode_batches:
    prompts = rng.integers(1, bc.vocab_size, (batch, bc.prompt_len)).astype(np.int32)
    for name, fn, model in decoders:
      timing = fn(model, prompts, bc.new_tokens, bc.repeats)
      (wall_s, cpu_s) = timing["total_s"]
      results[f"decode_{name}_{batch}"] = batch * bc.new_tokens / wall_s
      results[f"decode_cpu_{name}_{batch}"] = batch * bc.new_tokens / cpu_s
      results[f"decode_prefill_ms_{name}_{batch}"] = 1e3 * timing["prefill_s"]
      results[f"decode_step_ms_{name}_{batch}"] = (
          1e3 * (wall_s - timing["prefill_s"]) / bc.new_tokens)
      results[f"decode_tokens_{name}_{batch}"] = timing["tokens"]
      if profile_top and "profile" in timing and batch == max(bc.decode_batches):
        fn, compile_fn = timing["profile"]
        results["profile_decode"] = op_profile(fn, compile_fn(), profile_top)
    results[f"decode_agree_{batch}"] = float(np.mean(
        results.pop(f"decode_tokens_ours_{batch}") == results.pop(f"decode_tokens_torch_{batch}")))
  big = max(bc.decode_batches)
  prompts = rng.integers(1, bc.vocab_size, (big, bc.prompt_len)).astype(np.int32)
  wall_s = ours_decode(ours, prompts, bc.new_tokens, bc.repeats, bc.episode_slots,
                       mesh=mesh)["total_s"][0]
  results["decode_episode_ours"] = big * bc.new_tokens / wall_s
  results["load_after"] = os.getloadavg()
  return results


def render(bc: BenchConfig, results: dict[str, Any], command: str, threads: int) -> str:
  peak = results["peak_flops"]
  train_fpt = train_flops_per_token(bc, results["n_params"])
  decode_fpt = decode_flops_per_token(bc, results["n_params"])
  mfu = lambda tokens_per_s, fpt: f"{100 * tokens_per_s * fpt / peak:.1f}%"
  machine = machine_description(threads)
  def row(label, key, target, fpt):
    ours, theirs = results[key.format("ours")], results[key.format("torch")]
    cpu_ratio = results[key.format("cpu_ours")] / results[key.format("cpu_torch")]
    return (f"| {label} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f}x | {cpu_ratio:.2f}x | "
            f"{target} | {mfu(ours, fpt)} | {mfu(theirs, fpt)} |")

  rows = [row(f"training, batch {bc.train_batch} x {bc.seq_len}", "train_{}",
              f">= {TRAIN_TARGET}x", train_fpt)]
  for batch in bc.decode_batches:
    target = f">= {DECODE_TARGET}x" if batch == max(bc.decode_batches) else ""
    rows.append(row(f"decoding, batch {batch}, {bc.prompt_len} + {bc.new_tokens} tokens",
                    f"decode_{{}}_{batch}", target, decode_fpt))
  ms = lambda key: f"{results[key]:.1f}"
  parts = [f"| training step (forward + backward + AdamW) | {ms('train_step_ms_ours')} | "
           f"{ms('train_step_ms_torch')} |",
           f"| training forward alone | {ms('train_forward_ms_ours')} | "
           f"{ms('train_forward_ms_torch')} |"]
  for batch in bc.decode_batches:
    parts += [f"| decoding batch {batch}: prefill of {bc.prompt_len} tokens | "
              f"{ms(f'decode_prefill_ms_ours_{batch}')} | {ms(f'decode_prefill_ms_torch_{batch}')} |",
              f"| decoding batch {batch}: per new token (rest / {bc.new_tokens}) | "
              f"{ms(f'decode_step_ms_ours_{batch}')} | {ms(f'decode_step_ms_torch_{batch}')} |"]
  needed_train = TRAIN_TARGET * results["train_torch"] * train_fpt
  big = max(bc.decode_batches)
  cache_mb = (2 * bc.num_layers * big * (bc.prompt_len + bc.new_tokens) * bc.d_model * 4) / 2**20
  step_ms = results[f"decode_step_ms_ours_{big}"]
  needed_decode = DECODE_TARGET * results[f"decode_torch_{big}"]
  analysis = [
      f"- Training target: {TRAIN_TARGET}x transformers means {needed_train / 1e9:.0f} GFLOP/s "
      f"sustained over the whole step, against a {peak / 1e9:.0f} GFLOP/s matmul peak "
      f"({100 * needed_train / peak:.0f}% MFU; transformers + torch itself runs at "
      f"{100 * results['train_torch'] * train_fpt / peak:.0f}%).",
      f"- Decoding target: {DECODE_TARGET}x at batch {big} means {needed_decode:,.0f} tokens/s, "
      f"{1e3 * big / needed_decode:.1f} ms per step for all {big} rows; ours takes "
      f"{step_ms:.1f} ms. Each step reads the whole preallocated cache ({cache_mb:.0f} MB of "
      f"keys and values for {bc.prompt_len + bc.new_tokens} slots, static shapes), while "
      "transformers' cache grows with the sequence.",
      f"- With a cache sized for a whole dialogue ({bc.episode_slots} slots, as rollouts "
      f"allocate it) ours decodes {results['decode_episode_ours']:,.0f} tokens/s at batch {big} "
      f"({results['decode_episode_ours'] / results[f'decode_torch_{big}']:.2f}x transformers' "
      f"batch-{big} run): the prefill and the loop attend over the filled slots only (up to "
      "the last token each can write, rounded up to 64 slots times a power of two); the "
      "difference is allocating the larger cache's zeros.",
  ]
  gib = lambda n: f"{n / 2**30:.2f} GiB"
  tokens_per_step = bc.train_batch * bc.seq_len
  seq_rows = [f"| {length:,} | {max(1, bc.seq_tokens // length)} | "
              f"{results[f'seq_{length}_ours']:,.0f} | {results[f'seq_{length}_torch']:,.0f} | "
              f"{results[f'seq_{length}_ours'] / results[f'seq_{length}_torch']:.2f}x |"
              for length in bc.seq_lens]
  probes = ", ".join(f"{length:,}: {'out of memory' if peak is None else gib(peak)}"
                     for length, peak in results["probe_peaks"].items())
  longest = (f"{results['longest']:,} tokens" if results["longest"]
             else f"none of {bc.probe_lens}")
  memory = [
      f"Training tokens/s by sequence length ({bc.seq_tokens:,} tokens per step, so the batch "
      f"shrinks as the sequence grows; medians of {SEQ_REPEATS} steps; our attention: "
      "`attention_impl=\"auto\"`, the blocked kernel on CPU):",
      "",
      "| sequence | batch | ours (JAX) | transformers + torch | ratio |",
      "|---:|---:|---:|---:|---:|",
      *seq_rows,
      "",
      f"- Peak memory of our training step at batch {bc.train_batch} x {bc.seq_len} (XLA's "
      f"buffer assignment: parameters, AdamW state, activations, gradients): "
      f"{gib(results['train_peak_bytes'])}, "
      f"{results['train_peak_bytes'] / tokens_per_step / 2**10:.0f} KiB per token.",
      f"- Longest sequence that trains at batch {bc.train_batch} within this machine's available "
      f"memory ({gib(results['memory_budget'])}): {longest} (powers of two tried; peak per "
      f"length: {probes}; compiled, not run).",
      "- No GPU or TPU was lent to this run, so there is no MFU against an accelerator's bf16 "
      "peak; MFU above is against this CPU's measured float32 matmul peak.",
  ]
  profile_lines = []
  if "profile_train" in results:
    profile_lines += render_profile("Our training step, profiled (`--profile`)",
                                    results["profile_train"], 8)
  if "profile_decode" in results:
    profile_lines += render_profile(
        f"Our decoding at batch {max(bc.decode_batches)}, profiled (`--profile`)",
        results["profile_decode"], 8)
  if profile_lines:
    profile_lines += [
        "How to read these: `transpose(jvp())` in a source path marks the backward pass; "
        "`slice` ops shaped like one layer's weights inside the decode loop are that layer's "
        "parameters taken out of the stacked [L, ...] tree on every step; bare `dot` ops shaped "
        "[B, K, 1, S] and [B, K, 1, H] are the attention products over all S preallocated "
        "cache slots.",
        ""]
  agree = ", ".join(f"batch {b}: {100 * results[f'decode_agree_{b}']:.0f}%"
                    for b in bc.decode_batches)
  load = lambda key: " / ".join(f"{x:.2f}" for x in results[key])
  return "\n".join([
      SECTION,
      "",
      f"Command: `{command}` ({datetime.date.today().isoformat()}).",
      "",
      f"- Machine: {machine['cpu']}, {machine['cores']}.",
      f"- Versions: {machine['versions']}.",
      f"- Load average (1/5/15 min) before: {load('load_before')}, after: {load('load_after')} "
      "(other jobs share these cores; ratios come from the same run).",
      f"- Model: GPT-2 family, {bc.num_layers} layers, width {bc.d_model}, {bc.num_heads} heads, "
      f"vocab {bc.vocab_size}, float32; the same weights on both sides "
      f"({results['n_params']:,} matmul parameters).",
      f"- Peak: {peak / 1e9:.0f} GFLOP/s, one jitted float32 {bc.matmul_size}^3 matmul in JAX. "
      f"FLOPs/token: training 6N + 12 L D T = {train_fpt / 1e6:.1f} M; decoding "
      f"2N + 4 L D C (C = mean attended context) = {decode_fpt / 1e6:.1f} M.",
      f"- Training: one AdamW step (lr {LEARNING_RATE}, weight decay {WEIGHT_DECAY}) per batch. "
      f"First-step loss on the same batch: ours {results['train_loss_ours']:.4f}, "
      f"torch {results['train_loss_torch']:.4f}.",
      f"- Decoding: greedy, prompt prefill included, exactly {bc.new_tokens} new tokens per row. "
      f"Greedy tokens identical to transformers': {agree} (random weights give near-ties, so "
      "float rounding can flip a choice and everything after it).",
      f"- Medians of {bc.repeats} repetitions after a warm-up call.",
      "- Our side as configured by default: `attention_impl=\"auto\"` (on CPU the blocked "
      "kernel: query blocks of `attention_block` = 128 rows, each scoring only the keys it can "
      "see), layers unrolled without a cache (`unroll_layers`), and while decoding one cache "
      "buffer per layer updated in place, per-layer weights sliced once before the decode loop, "
      "and attention over the filled window of the cache only.",
      *([f"- Our decoding split each batch's rows over {results['decode_devices']} CPU devices "
         "(`--cpu_devices`, `generation/decode_devices.py`); training ran on one."]
        if results.get("decode_devices", 1) > 1 else []),
      "",
      "Ratios are ours / theirs, by wall time and by the CPU time each process got (the "
      "latter is the fairer one when other jobs share the cores). MFU is by wall time.",
      "",
      "| tokens/s | ours (JAX) | transformers + torch | ratio | ratio, CPU time | target | "
      "MFU ours | MFU torch |",
      "|---|---:|---:|---:|---:|---|---:|---:|",
      *rows,
      "",
      *analysis,
      "",
      *memory,
      "",
      "Where the time goes (milliseconds, medians):",
      "",
      "| component | ours (JAX) | transformers + torch |",
      "|---|---:|---:|",
      *parts,
      "",
      *profile_lines,
  ])


def benchmark_and_report(*, quick: bool, output: str, command: str, repeats: int | None = None,
                         threads: int | None = None, profile_top: int = 0) -> dict[str, Any]:
  """Runs both sides, (re)writes the markdown section in `output`, returns the raw numbers."""
  bc = QUICK if quick else FULL
  if repeats:
    bc = dataclasses.replace(bc, repeats=repeats)
  threads = threads or len(os.sched_getaffinity(0))
  results = run(bc, threads, profile_top)
  bench_report.write_section(pathlib.Path(output), SECTION, render(bc, results, command, threads))
  return results


def main(argv: list[str]) -> None:
  del argv
  f = flags.FLAGS
  cli.output_file(f.output, "--output")  # Written after the whole benchmark.
  if f.cpu_devices:
    cpu_devices.use_cpu_devices(f.cpu_devices)  # Before jax's first computation.
  benchmark_and_report(
      quick=f.quick, output=f.output, repeats=f.repeats, threads=f.threads,
      profile_top=PROFILE_OPS if f.profile else 0,
      command=" ".join([*pinning(), "python -m benchmarks.lm_speed", *sys.argv[1:]]))


def pinning() -> list[str]:
  """The `taskset` prefix that reproduces this process's CPU affinity, if it is not all CPUs."""
  cpus = sorted(os.sched_getaffinity(0))
  return [] if len(cpus) == os.cpu_count() else ["taskset", "-c", ",".join(map(str, cpus))]


if __name__ == "__main__":
  # Defined here, not at import: benchmarks.accelerator imports this module.
  flags.DEFINE_bool("quick", False, "Tiny model and few repetitions: a seconds-long smoke run.")
  flags.DEFINE_string("output", str(REPO_ROOT / "docs" / "BENCHMARKS.md"),
      "Markdown file whose LM-core section is (re)written.")
  flags.DEFINE_integer("repeats", None, "Timed repetitions per measurement (median).",
      lower_bound=1)
  flags.DEFINE_integer("threads", None, "torch threads; default: the CPUs this process may use.",
      lower_bound=1)
  flags.DEFINE_string("cpu_devices", None, "\"all\" (one per usable core) or a count: "
      "XLA:CPU devices for this process; our decoding then splits its rows over them.")
  flags.DEFINE_bool("profile", False, "Also profile our training step and largest-batch "
      "decode (jax.profiler trace) and add the op breakdown to the report.")
  cli.run(main)
