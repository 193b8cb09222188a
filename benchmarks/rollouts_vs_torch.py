"""Multi-turn rollouts per second: our engine against transformers + torch, same weights.

    python -m benchmarks.rollouts_vs_torch [--batches=16,64 --turns=10,20 --repeats=2
                                            --torch_threads=1 --single_core]

All three loops play the same AirDialogue dialogues through `environment.play`
against the same scripted customer (`scripted:volunteer`): the agent is one
random-weight Llama of the quick configs' shape (2 layers, width 128, vocab
2048, the context as text), ours exported to Hugging Face (hf_io.export_hf),
decoded greedily with the same forbidden ids (every special token but
<|eot|>) and the same stop token. Only the agent's LM loop differs:

  * `ours`: LMParty, the KV cache kept across turns (sampler.append + generate).
  * `torch_reprefill`: before each agent turn, the whole conversation so far
    (its ids as played, left-padded) goes through `generate` again: what
    TRL-style multi-turn trainers do.
  * `torch_kept`: the KV cache (`past_key_values`, named `cache` in
    transformers 5) kept across turns: each turn's new tokens
    (left-padded, masked) are appended with one forward pass, then a greedy
    loop decodes one token per forward; the best a torch user can write.

Every loop sees its own replies as the ids it decoded (never re-tokenized
text), so the three must agree token for token up to float rounding: random
weights give near-ties, and a flipped argmax changes that row from then on.
The share of identical agent turns is reported. Each loop is warmed up once
(compilation, allocator), then the loops alternate `--repeats` times and the
medians are kept. `--single_core` re-runs the whole measurement in a child
pinned to one core (`taskset -c 1`, one torch and one XLA thread). The
defaults (batch 16, 10 utterances) take about 3 minutes on 2 cores; the
command in docs/BENCHMARKS.md about 8 (under load from another job).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator, Mapping, Sequence

import jax
import numpy as np
import torch
import transformers
from absl import app, flags
from flax import nnx

from benchmarks import report as bench_report
from benchmarks import rollout_cache
from data_pipelines.dialogue import Turn
from data_pipelines.mdp import SerializeContext, json_context
from data_pipelines.tokenization import DialogueTokenizer
from domains.airdialogue import environment as airdialogue_env
from domains.airdialogue.parties import ScriptedCustomer
from ilql_dialogue import environment
from ilql_dialogue.generation import cpu_devices, sampler
from ilql_dialogue.lm_party import LMParty, forbidden_token_ids
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.hf_io import export_hf
from ilql_dialogue.models.transformer import Transformer

SECTION = "## Multi-turn rollouts vs transformers + torch"
OURS = ("ours", "ours_fine")  # ours_fine: the same engine, windows of 64 * 2^k or 1.5x that.
TORCH = ("torch_reprefill", "torch_kept")
LOOPS = OURS + TORCH
KB_SIZE = 3  # Flights in the agent's table: a text context of about 480 tokens.
VOCAB = 2048

if __name__ == "__main__":
  # --turns, --max_new_tokens, --repeats, --out and --output are rollout_cache's flags, with
  # defaults sized for a ~3 minute run on 2 cores.
  rollout_cache.define_flags()
  flags.DEFINE_list("batches", ["16"], "Dialogues per batch, one run each (e.g. 16,64).")
  flags.DEFINE_bool("single_core", False, "Also measure pinned to one core (a child process).")
  flags.DEFINE_integer("torch_threads", 0, "torch threads (0: the usable cores). Under load from "
                       "other jobs, 1 avoids torch's thread barriers stalling.")
  flags.DEFINE_string("cpu_devices", "1", "Our XLA:CPU devices: 'all' = one per usable core, "
                      "each batch's rows split over them (LMParty(devices=...)).")
  flags.FLAGS.set_default("turns", ["10"])
  flags.FLAGS.set_default("repeats", 2)


def agent_model(seed: int = 0) -> Transformer:
  """The quick configs' Llama (bc_airdialogue_quick.tiny_model), random weights.

  2048 positions, not the quick configs' 512: a 480-token context and 20 utterances of up to
  34 tokens pass 1024, and a row out of room would end early in LMParty alone.
  """
  cfg = ModelConfig.llama(vocab_size=VOCAB, num_layers=2, d_model=128, num_heads=4,
                          num_kv_heads=2, head_dim=32, mlp_dim=512, max_seq_len=2048,
                          tie_embeddings=True, dtype="float32")
  return Transformer(cfg, rngs=nnx.Rngs(seed))


def to_torch(model: Transformer, directory: pathlib.Path) -> torch.nn.Module:
  """Our weights through the Hugging Face export, loaded by transformers (float32, eval)."""
  export_hf(model, model.cfg, directory)
  hf = transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
  return hf.eval()


class TorchAgent:
  """A transformers model as a party (reset / respond), greedy, the LMParty token layout.

  The history is kept as ids exactly as LMParty keeps it (context, then
  `<|speaker|> text <|eot|>` per turn, our replies as decoded), so any
  difference from LMParty is the engine's. `keep_cache=False` re-encodes the
  whole sequence with `generate` before each turn; `keep_cache=True` appends
  only the new block to `past_key_values` and decodes with its own loop.
  Seconds spent in the model are summed in `seconds` (prefill / append /
  decode) for the split of the time.
  """

  def __init__(self, hf: torch.nn.Module, tokenizer: DialogueTokenizer, role: str, *,
               keep_cache: bool, max_new_tokens: int = 32,
               serialize_context: SerializeContext = json_context):
    self.hf, self.tokenizer, self.role = hf, tokenizer, role
    self.keep_cache, self.max_new_tokens = keep_cache, max_new_tokens
    self.serialize_context = serialize_context
    self.forbidden = torch.tensor(forbidden_token_ids(tokenizer, role), dtype=torch.long)
    self.seconds = {"prefill": 0.0, "append": 0.0, "decode": 0.0}

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    del seeds  # Greedy.
    tok = self.tokenizer
    self.token_ids = [[tok.context_id, *tok.encode(self.serialize_context(self.role, c)),
                       tok.dialogue_id] for c in contexts]
    self.generated_ids = [[] for _ in contexts]
    self._seen = [0] * len(contexts)
    self._open = [False] * len(contexts)
    if self.keep_cache:
      start = time.perf_counter()
      self._pending = [[] for _ in contexts]  # Decoded ids not in the cache yet.
      self._cache, self._mask = None, torch.zeros((len(contexts), 0), dtype=torch.long)
      self._positions = torch.zeros(len(contexts), dtype=torch.long)
      self._forward(self.token_ids)
      self.seconds["prefill"] += time.perf_counter() - start

  def _block(self, b: int, history: Sequence[Turn]) -> list[int]:
    """Row b's new ids: close an unfinished turn, the other side's turns, our speaker token."""
    tok = self.tokenizer
    ids = [tok.eot_id] if self._open[b] else []
    new = history[self._seen[b]:]
    for turn, text_ids in zip(new, tok.encode_batch([t.text for t in new]) if new else []):
      ids += [tok.speaker_token_ids[turn.speaker], *text_ids, tok.eot_id]
    return ids + [tok.speaker_token_ids[self.role]]

  def _forward(self, rows: Sequence[Sequence[int]]) -> torch.Tensor:
    """Appends each row's ids (left-padded, masked) to the kept cache; last position's logits."""
    width = max(1, max(map(len, rows)))
    tokens = torch.full((len(rows), width), self.tokenizer.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
      if row:
        tokens[b, width - len(row):] = torch.tensor(row)
        mask[b, width - len(row):] = 1
    positions = (self._positions[:, None] + mask.cumsum(1) - 1).clamp(min=0)
    self._mask = torch.cat([self._mask, mask], dim=1)
    with torch.no_grad():
      out = self.hf(input_ids=tokens, attention_mask=self._mask, position_ids=positions,
                    cache=self._cache, use_cache=True, logits_to_keep=1)
    self._cache, self._positions = out.cache, self._positions + mask.sum(1)
    return out.logits[:, -1].float()

  def _greedy(self, logits: torch.Tensor) -> torch.Tensor:
    logits[:, self.forbidden] = -torch.inf
    return logits.argmax(-1)

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    active = [b for b, h in enumerate(histories) if h is not None]
    blocks = {b: self._block(b, histories[b]) for b in active}
    decoded = self._respond_kept(blocks) if self.keep_cache else self._respond_reprefill(blocks)
    tok, replies = self.tokenizer, [None] * len(histories)
    for b in active:
      ids = decoded[b]
      self.token_ids[b] += blocks[b] + ids
      self.generated_ids[b].append(ids)
      closed = bool(ids) and ids[-1] == tok.eot_id
      self._open[b] = not closed
      replies[b] = tok.decode(ids[:-1] if closed else ids).strip()
      self._seen[b] = len(histories[b]) + 1
    return replies

  def _respond_reprefill(self, blocks: Mapping[int, list[int]]) -> dict[int, list[int]]:
    tok, rows = self.tokenizer, list(blocks)
    prompts = [self.token_ids[b] + blocks[b] for b in rows]
    width = max(map(len, prompts))
    tokens = torch.full((len(rows), width), tok.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
      tokens[i, width - len(prompt):] = torch.tensor(prompt)
      mask[i, width - len(prompt):] = 1
    forbidden = self.forbidden

    def forbid(input_ids, scores):
      del input_ids
      scores[:, forbidden] = -torch.inf
      return scores

    start = time.perf_counter()
    with torch.no_grad():
      out = self.hf.generate(input_ids=tokens, attention_mask=mask, do_sample=False,
                             max_new_tokens=self.max_new_tokens, eos_token_id=tok.eot_id,
                             pad_token_id=tok.pad_id, use_cache=True,
                             logits_processor=transformers.LogitsProcessorList([forbid]))
    self.seconds["decode"] += time.perf_counter() - start
    decoded = {}
    for i, b in enumerate(rows):
      ids = out[i, width:].tolist()
      decoded[b] = ids[:ids.index(tok.eot_id) + 1] if tok.eot_id in ids else ids
    return decoded

  def _respond_kept(self, blocks: Mapping[int, list[int]]) -> dict[int, list[int]]:
    tok, batch = self.tokenizer, len(self.token_ids)
    start = time.perf_counter()
    rows = [self._pending[b] + blocks[b] if b in blocks else [] for b in range(batch)]
    logits = self._forward(rows)
    self.seconds["append"] += time.perf_counter() - start
    start = time.perf_counter()
    alive = torch.tensor([b in blocks for b in range(batch)])
    decoded = {b: [] for b in blocks}
    self._pending = [[] for _ in range(batch)]
    for step in range(self.max_new_tokens):
      nxt = torch.where(alive, self._greedy(logits), tok.pad_id)
      for b in torch.nonzero(alive).flatten().tolist():
        decoded[b].append(int(nxt[b]))
      produced, alive = alive, alive & (nxt != tok.eot_id)
      if step == self.max_new_tokens - 1 or not alive.any():
        # The last token enters the cache with the next turn's block (one forward saved).
        for b in torch.nonzero(produced).flatten().tolist():
          self._pending[b] = [int(nxt[b])]
        break
      logits = self._forward([[int(nxt[b])] if produced[b] else [] for b in range(batch)])
    self.seconds["decode"] += time.perf_counter() - start
    return decoded


@contextlib.contextmanager
def finer_windows() -> Iterator[None]:
  """The engine attending over the filled slots rounded up to 64 * 2^k or 1.5 times that (64,
  96, 128, 192, ...) instead of its 64 * 2^k (`sampler.attend_window`): at most a third of a
  window is empty slots, not half. Measured here only: with these shapes XLA:CPU crashed
  (SIGSEGV) serializing executables to the persistent compilation cache in two test-suite runs
  of two (docs/BENCHMARKS.md)."""
  engine_rule = sampler.attend_window

  def finer(max_len: int, last_slot: int) -> int:
    window = sampler.ATTEND_BUCKET
    while window < last_slot:
      window = window * 3 // 2 if window & (window - 1) == 0 else window * 4 // 3
    return min(max_len, window)

  sampler.attend_window = finer
  try:
    yield
  finally:
    sampler.attend_window = engine_rule


def windows(loop: str) -> contextlib.AbstractContextManager:
  """The attended-window rule `loop` plays under: the finer one for ours_fine, else the engine's."""
  return finer_windows() if loop == "ours_fine" else contextlib.nullcontext()


def make_agent(loop: str, model: Transformer, hf: torch.nn.Module, tok: DialogueTokenizer,
               max_new_tokens: int) -> Any:
  if loop in OURS:
    devices = jax.devices() if jax.device_count() > 1 else None
    return LMParty(model, tok, "agent", max_new_tokens=max_new_tokens, temperature=0.0,
                   devices=devices)
  return TorchAgent(hf, tok, "agent", keep_cache=loop == "torch_kept",
                    max_new_tokens=max_new_tokens)


def play(agent: Any, scenarios: Sequence[Any], turns: int) -> tuple[float, list]:
  start = time.perf_counter()
  episodes = environment.play(airdialogue_env.AirDialogueEnv(),
                              {"agent": agent, "customer": ScriptedCustomer("volunteer")},
                              scenarios, max_turns=turns, seed=1)
  return time.perf_counter() - start, episodes


def same_turns(a: Sequence[Sequence[Sequence[int]]],
               b: Sequence[Sequence[Sequence[int]]]) -> tuple[int, int]:
  """(identical agent turns, agent turns): turn k of a row counts while both rows still agree."""
  same = total = 0
  for row_a, row_b in zip(a, b):
    total += max(len(row_a), len(row_b))
    for turn_a, turn_b in zip(row_a, row_b):
      if turn_a != turn_b:
        break
      same += 1
  return same, total


def measure(model: Transformer, hf: torch.nn.Module, tok: DialogueTokenizer, batch: int,
            turns: int, max_new_tokens: int, repeats: int,
            loops: Sequence[str] = LOOPS) -> dict[str, Any]:
  """Dialogues per second of each loop at one (batch, turns), medians; identical-turn shares.
  `loops` starts with "ours"; the table needs them all."""
  scenarios = airdialogue_env.make_scenarios(7, 2 * batch, kb_size=KB_SIZE)
  warm, timed = scenarios[:batch], scenarios[batch:]
  result: dict[str, Any] = {"batch": batch, "turns": turns, "max_new_tokens": max_new_tokens,
                            "repeats": repeats}
  for loop in loops:
    with windows(loop):
      play(make_agent(loop, model, hf, tok, max_new_tokens), warm, turns)
  seconds = {loop: [] for loop in loops}
  decoded, splits = {}, {}
  for _ in range(repeats):  # Round-robin: load from other jobs hits every loop alike.
    for loop in loops:
      agent = make_agent(loop, model, hf, tok, max_new_tokens)
      timers = rollout_cache.Timers()
      if loop in OURS:  # Blocking on each device call costs little on CPU; split comes free.
        with timers.installed(), windows(loop):
          elapsed, episodes = play(agent, timed, turns)
        split = dict(timers.seconds)
        split["decode"] = split.pop("generate")
      else:
        elapsed, episodes = play(agent, timed, turns)
        split = dict(agent.seconds)
      split["host"] = elapsed - sum(split.values())
      seconds[loop].append(elapsed)
      splits[loop], decoded[loop] = split, agent.generated_ids
      result[loop] = {"mean_turns": float(np.mean([len(e.turns) for e in episodes])),
                      "agent_tokens": int(sum(len(t) for row in agent.generated_ids for t in row))}
  for loop in loops:
    median = float(np.median(seconds[loop]))
    result[loop].update(seconds=median, dialogues_per_sec=batch / median, split=splits[loop])
  for loop in loops[1:]:
    same, total = same_turns(decoded["ours"], decoded[loop])
    result[loop]["same_turns"], result[loop]["agent_turns"] = same, total
  fastest = max(TORCH, key=lambda loop: result[loop]["dialogues_per_sec"])
  result["fastest_torch"] = fastest
  result["ratio"] = result["ours"]["dialogues_per_sec"] / result[fastest]["dialogues_per_sec"]
  if "ours_fine" in loops:
    result["window_ratio"] = (result["ours_fine"]["dialogues_per_sec"]
                              / result["ours"]["dialogues_per_sec"])
  return result


def run_all(batches: Sequence[int], turns: Sequence[int], max_new_tokens: int,
            repeats: int, torch_threads: int = 0) -> dict[str, Any]:
  cores = len(os.sched_getaffinity(0))
  torch_threads = min(torch_threads or cores, cores)
  torch.set_num_threads(torch_threads)
  tok = rollout_cache.tokenizer()
  model = agent_model()
  with tempfile.TemporaryDirectory() as directory:
    hf = to_torch(model, pathlib.Path(directory))
  results = [measure(model, hf, tok, b, t, max_new_tokens, repeats)
             for b in batches for t in turns]
  return {"cores": cores, "torch_threads": torch_threads, "device": str(jax.devices()[0]),
          "devices": jax.device_count(), "results": results}


def single_core(argv: Sequence[str]) -> dict[str, Any]:
  """The same measurement in a child pinned to one core, one torch and one XLA thread."""
  env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                                    " --xla_cpu_multi_thread_eigen=false "
                                    "intra_op_parallelism_threads=1").strip(),
             OMP_NUM_THREADS="1")
  core = sorted(os.sched_getaffinity(0))[-1]
  with tempfile.NamedTemporaryFile(suffix=".json") as out:
    args = [a for a in argv
            if not a.startswith(("--single_core", "--out", "--output", "--torch_threads"))]
    subprocess.run(["taskset", "-c", str(core), sys.executable, "-m",
                    "benchmarks.rollouts_vs_torch", *args, f"--out={out.name}", "--output="],
                   env=env, check=True)
    return json.loads(pathlib.Path(out.name).read_text())


def _table(runs: dict[str, Any]) -> list[str]:
  rows = ["| cores (torch threads) | batch | utterances | ours (dialogues/s) | ours, windows of "
          "1.5 x 2^k | torch re-prefill | torch kept cache | ours / faster torch | finer windows "
          "/ ours | identical agent turns (finer windows / re-prefill / kept) |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
  for r in runs["results"]:
    shares = " / ".join(f"{r[loop]['same_turns']}/{r[loop]['agent_turns']}"
                        for loop in LOOPS[1:])
    rows.append(f"| {runs['cores']} ({runs['torch_threads']}) | {r['batch']} | {r['turns']} | "
                f"{r['ours']['dialogues_per_sec']:.2f} | "
                f"{r['ours_fine']['dialogues_per_sec']:.2f} | "
                f"{r['torch_reprefill']['dialogues_per_sec']:.2f} | "
                f"{r['torch_kept']['dialogues_per_sec']:.2f} | **{r['ratio']:.1f}x** | "
                f"{r['window_ratio']:.2f}x | {shares} |")
  return rows


def _splits(runs: dict[str, Any]) -> list[str]:
  rows = ["| cores | batch | utterances | loop | prefill | append | decode | host (s) |",
          "|---:|---:|---:|---|---:|---:|---:|---:|"]
  for r in runs["results"]:
    for loop in LOOPS:
      s = r[loop]["split"]
      rows.append(f"| {runs['cores']} | {r['batch']} | {r['turns']} | {loop} | "
                  f"{s.get('prefill', 0):.2f} | {s.get('append', 0):.2f} | "
                  f"{s.get('decode', 0):.2f} | {s['host']:.2f} |")
  return rows


def render(all_runs: Sequence[dict[str, Any]], command: str, load: tuple[float, ...]) -> str:
  first = all_runs[0]["results"][0]
  results = [r for runs in all_runs for r in runs["results"]]
  ratios = [r["ratio"] for r in results]
  return "\n".join([
      SECTION, "",
      f"Command: `{command}` ({datetime.date.today().isoformat()}).", "",
      f"- Machine: {bench_report.cpu_name()}, {len(os.sched_getaffinity(0))} usable cores; "
      f"python {platform.python_version()}, jax {jax.__version__}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}; load average before: "
      f"{' / '.join(f'{x:.2f}' for x in load)}"
      + (" (other jobs shared these cores: absolute rates are low and noisy; torch with more than "
         "one thread stalls on its thread barriers under such load, hence `--torch_threads=1`)."
         if load[0] > len(os.sched_getaffinity(0)) else "."),
      "- One random-weight Llama of the quick configs' shape (2 layers, width 128, vocab "
      f"{VOCAB}, 2048 positions, float32; the agent's context as text, {KB_SIZE} flights, "
      "about 480 tokens), ours exported with "
      "`hf_io.export_hf` and loaded by transformers; against `scripted:volunteer` through "
      f"`environment.play`, greedy, at most {first['max_new_tokens']} tokens per agent turn "
      "(untrained, so every turn runs to the cap and every dialogue to the utterance limit); "
      f"medians of {first['repeats']} timed batches per loop, alternating, after a warm-up "
      "batch each.",
      "- `ours`: LMParty, the KV cache kept across turns, each call attending over the filled "
      "slots rounded up to 64 * 2^k; `ours, windows of 1.5 x 2^k`: the same engine with windows "
      "of 64 * 2^k or 1.5 times that (`finer_windows`, measured here only). `torch re-prefill`: "
      "the whole conversation (ids as played, left-padded) through `generate` before each agent turn, as "
      "TRL-style multi-turn trainers do. `torch kept cache`: `past_key_values` kept; each "
      "turn's new ids appended with one masked forward, then a greedy one-token-per-forward "
      "loop (the best a torch user can write). All three use the same forbidden ids and stop "
      "token.",
      "- Identical agent turns: turns equal to ours token for token, counted per row until the "
      "first difference. Float rounding differs between XLA and torch, and random weights give "
      "near-ties, so a rare argmax may flip; that row's dialogue then diverges.", "",
      *[line for runs in all_runs for line in _table(runs)[(0 if runs is all_runs[0] else 2):]],
      "",
      f"Ours over the faster torch loop: {min(ratios):.1f}x to {max(ratios):.1f}x; finer "
      f"windows over ours: {min(r['window_ratio'] for r in results):.2f}x to "
      f"{max(r['window_ratio'] for r in results):.2f}x. Every "
      f"dialogue ran to its utterance limit in every loop: "
      f"{all(r[loop]['mean_turns'] == r['turns'] for r in results for loop in LOOPS)}.", "",
      "Where the time goes (seconds per batch, last timed batch, each model call timed to its "
      "end): `prefill` the context (ours: none, the context enters through `append` in 32-slot "
      "chunks, one compiled shape), `append` the new turns, `decode` the replies (torch "
      "re-prefill: the whole `generate`, the re-encoded conversation included), `host` the rest "
      "(the scripted customer, tokenization, padding, Python loops, the engine's bookkeeping).",
      "",
      *[line for runs in all_runs for line in _splits(runs)[(0 if runs is all_runs[0] else 2):]],
  ])


def main(argv: Sequence[str]) -> None:
  del argv
  f = flags.FLAGS
  cpu_devices.use_cpu_devices(f.cpu_devices)  # Before jax's first computation.
  load = os.getloadavg()
  runs = run_all([int(b) for b in f.batches], [int(t) for t in f.turns], f.max_new_tokens,
                 f.repeats, f.torch_threads)
  all_runs = [runs]
  if f.single_core:
    all_runs.append(single_core(sys.argv[1:]))
  print(json.dumps(all_runs, indent=2))
  if f.out:
    pathlib.Path(f.out).write_text(json.dumps(all_runs if f.single_core else runs, indent=2))
  if f.output:
    command = " ".join(["python -m benchmarks.rollouts_vs_torch", *sys.argv[1:]])
    bench_report.write_section(pathlib.Path(f.output), SECTION, render(all_runs, command, load))


if __name__ == "__main__":
  app.run(main)
