"""Attending over the filled window of a KV cache vs over its whole buffer.

  taskset -c 1 python -m benchmarks.cache_window --repeats=5

Rollouts allocate one cache for a whole dialogue, so most of its slots are
empty for most of the dialogue. `sampler.prefill`, `append` and `generate`
attend over the first slots up to the last one each call writes (rounded up
to a bucket); the obvious alternative, which static-shape decoders do,
attends over the whole buffer every call. Both arms play the same dialogue
turns on benchmarks.lm_speed's GPT-2 model: a prompt, then turns of an
appended block (the other speaker) and greedy tokens, alternating call by
call so that load from other jobs hits them alike. The table is printed as
markdown for docs/BENCHMARKS.md.
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

from benchmarks import lm_speed
from data_pipelines import cli
from ilql_dialogue.generation import sampler

_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed dialogues per arm and setting (medians).")
_BATCHES = flags.DEFINE_list("batches", ["16", "64"], "Dialogues decoded together.")
_SLOTS = flags.DEFINE_list("cache_slots", ["512", "1024"], "Cache lengths to compare.")
_TURNS = flags.DEFINE_integer("turns", 4, "Appended blocks, each followed by generated tokens.")
_BLOCK = flags.DEFINE_integer("block", 32, "Tokens per prompt, appended block and generated turn.")


@contextlib.contextmanager
def whole_buffer() -> Iterator[None]:
  """Every call attends over all of the cache's slots."""
  windowed = sampler.attend_window
  sampler.attend_window = lambda max_len, last_slot: max_len
  try:
    yield
  finally:
    sampler.attend_window = windowed


def play(model, blocks_NxBxT: np.ndarray, max_len: int, whole: bool,
         ) -> tuple[dict[str, float], np.ndarray]:
  """Seconds in prefill, append and generate for one dialogue batch, and its tokens."""
  batch, width = blocks_NxBxT.shape[1:]
  mask_BxT = np.ones((batch, width), bool)
  params = sampler.SamplingParams.make(batch, max_new_tokens=width, temperature=0.0)
  seconds = dict(prefill=0.0, append=0.0, generate=0.0)
  tokens = []

  def timed(name, fn):
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    seconds[name] += time.perf_counter() - start
    return out

  with whole_buffer() if whole else contextlib.nullcontext():
    state = timed("prefill", lambda: sampler.prefill(model, blocks_NxBxT[0], mask_BxT,
                                                     max_len=max_len))
    for block_BxT in blocks_NxBxT[1:]:
      state = timed("append", lambda: sampler.append(model, state, block_BxT, mask_BxT))
      state, new_BxN, _, _ = timed("generate", lambda: sampler.generate(
          model, state, params, jax.random.key(0), max_new_tokens=width))
      tokens.append(np.asarray(new_BxN))
  return seconds, np.concatenate(tokens, axis=1)


def main(_):
  bc = lm_speed.FULL
  with tempfile.TemporaryDirectory() as workdir:
    _, model = lm_speed.build_models(bc, pathlib.Path(workdir))
  rng = np.random.default_rng(0)
  width, turns = _BLOCK.value, _TURNS.value
  print(f"GPT-2, {bc.num_layers} layers, width {bc.d_model}, float32. A dialogue: a "
        f"{width}-token prompt, then {turns} turns of a {width}-token appended block and "
        f"{width} greedy tokens ({(2 * turns + 1) * width} slots). Medians of "
        f"{_REPEATS.value} alternating dialogues after a compiling one.\n")
  print("| batch | cache slots | windowed: prefill / append / generate (ms) | whole buffer: "
        "prefill / append / generate (ms) | ratio (total) | same tokens |")
  print("|---:|---:|---|---|---:|---|")
  for batch in map(int, _BATCHES.value):
    blocks = rng.integers(1, bc.vocab_size, (turns + 1, batch, width)).astype(np.int32)
    for max_len in map(int, _SLOTS.value):
      runs = {False: [], True: []}
      tokens = {}
      for repeat in range(_REPEATS.value + 1):  # The first dialogue of each arm compiles.
        for whole in (False, True):
          seconds, tokens[whole] = play(model, blocks, max_len, whole)
          if repeat:
            runs[whole].append(seconds)
      median = {whole: {name: 1e3 * statistics.median(r[name] for r in runs[whole])
                        for name in runs[whole][0]} for whole in runs}
      total = {whole: statistics.median(sum(r.values()) for r in runs[whole]) for whole in runs}
      split = lambda whole: " / ".join(f"{ms:,.0f}" for ms in median[whole].values())
      print(f"| {batch} | {max_len} | {split(False)} | {split(True)} "
            f"| {total[True] / total[False]:.2f}x "
            f"| {bool(np.array_equal(tokens[False], tokens[True]))} |")


if __name__ == "__main__":
  cli.run(main)
