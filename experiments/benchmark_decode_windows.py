"""Decoding with growing attention windows within a call vs one window per call.

  taskset -c 1 python -m experiments.benchmark_decode_windows --repeats=7

`sampler.generate` attends over the filled part of the cache, rounded up to
a bucket. A call whose tokens cross into the next bucket either attends over
the wider window for all its steps (one window per call, the previous loop)
or switches to it when its tokens get there (growing windows, the default).
Both run here on experiments.benchmark's GPT-2 model and prompts, alternating
call by call so that load from other jobs hits them alike; the table is
printed as markdown for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import contextlib
import pathlib
import statistics
import tempfile
import time
from typing import Iterator

import jax
import numpy as np
from absl import flags

from experiments import benchmark, cli
from ilql_dialogue.generation import sampler

_REPEATS = flags.DEFINE_integer("repeats", 7, "Timed calls per arm and setting (medians).")
_BATCHES = flags.DEFINE_list("batches", ["16", "64"], "Decode batch sizes.")
_SLOTS = flags.DEFINE_list("cache_slots", ["128", "1024"],
                           "Cache lengths: the benchmark's prompt + new tokens, and a whole dialogue's.")


@contextlib.contextmanager
def one_window_per_call() -> Iterator[None]:
  """`generate` as it was: the widest window from the first step."""
  growing = sampler.attend_windows
  sampler.attend_windows = lambda max_len, first, last: growing(max_len, first, last)[-1:]
  try:
    yield
  finally:
    sampler.attend_windows = growing


def decode_seconds(model, prompts_BxP: np.ndarray, new_tokens: int, max_len: int,
                   single: bool) -> tuple[float, np.ndarray]:
  batch = prompts_BxP.shape[0]
  params = sampler.SamplingParams.make(batch, max_new_tokens=new_tokens, temperature=0.0)
  mask_BxP = np.ones_like(prompts_BxP, bool)
  with one_window_per_call() if single else contextlib.nullcontext():
    start = time.perf_counter()
    state = sampler.prefill(model, prompts_BxP, mask_BxP, max_len=max_len)
    _, tokens_BxN, _, _ = sampler.generate(model, state, params, jax.random.key(0),
                                           max_new_tokens=new_tokens)
    tokens_BxN = np.asarray(tokens_BxN)
  return time.perf_counter() - start, tokens_BxN


def main(_):
  bc = benchmark.FULL
  with tempfile.TemporaryDirectory() as workdir:
    _, model = benchmark.build_models(bc, pathlib.Path(workdir))
  rng = np.random.default_rng(0)
  print(f"GPT-2, {bc.num_layers} layers, width {bc.d_model}; prompt {bc.prompt_len}, "
        f"{bc.new_tokens} greedy tokens; medians of {_REPEATS.value} alternating calls.\n")
  print("| batch | cache slots | windows | growing (tokens/s) | one per call (tokens/s) "
        "| ratio | same tokens |")
  print("|---:|---:|---|---:|---:|---:|---|")
  for batch in map(int, _BATCHES.value):
    prompts_BxP = rng.integers(1, bc.vocab_size, (batch, bc.prompt_len)).astype(np.int32)
    for max_len in map(int, _SLOTS.value):
      windows = sampler.attend_windows(max_len, bc.prompt_len, bc.prompt_len + bc.new_tokens)
      times = {False: [], True: []}
      tokens = {}
      for repeat in range(_REPEATS.value + 1):  # The first call of each arm compiles.
        for single in (False, True):
          seconds, tokens[single] = decode_seconds(model, prompts_BxP, bc.new_tokens, max_len,
                                                   single)
          if repeat:
            times[single].append(seconds)
      rate = {single: batch * bc.new_tokens / statistics.median(times[single])
              for single in times}
      same = bool(np.array_equal(tokens[False], tokens[True]))
      print(f"| {batch} | {max_len} | {' -> '.join(map(str, windows))} | {rate[False]:,.0f} "
            f"| {rate[True]:,.0f} | {rate[False] / rate[True]:.2f}x | {same} |")


if __name__ == "__main__":
  cli.run(main)
