"""Rollout throughput: the cache-keeping engine against re-prefilling the history every turn.

    python -m benchmarks.rollout_cache [--batch=16 --turns=10,20 --max_new_tokens=32 --repeats=5]

Both sides play the same AirDialogue dialogues: an agent LM of the quick
configs' shape (2 Llama layers of width 128, the flight table as a
structured prefix, untrained weights, so every dialogue runs to the turn
limit) against the scripted volunteer customer, decoded greedily. One side
keeps each row's KV cache across turns (LMParty); the other
re-encodes the whole history before each of its turns (reprefill.RePrefill,
the common practice). Each is warmed up once (compilation); then both play a
second batch `--repeats` times, alternating, and the medians are kept. The
decoded tokens must agree, or the comparison is void.

The split of the kept-cache run's time (a third, separately timed run):
`prefill` (the table prefix and first block), `append` (the rest of the
context and each new turn), `generate` (the decode loops) and host work
(the scripted party, tokenization, the engine), blocking on each device call.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import platform
import sys
import time
from typing import Any, Iterator

import jax
import numpy as np
from absl import app, flags
from flax import nnx

from benchmarks import report as bench_report
from cotraining import reprefill
from data_pipelines import tokenization
from data_pipelines.airdialogue import action_grammar, agents, customers, selfplay, to_dialogue
from domains.airdialogue import environment as airdialogue_env
from domains.airdialogue import task as airdialogue_task
from domains.airdialogue.parties import ScriptedCustomer
from ilql_dialogue import bc, environment
from ilql_dialogue.generation import sampler
from ilql_dialogue.lm_party import LMParty
from ilql_dialogue.models.config import ModelConfig



def define_flags() -> None:
  """The command's flags, defined when it runs (or a benchmark built on it runs), never on
  import: a test process imports several benchmarks, whose flag names overlap."""
  flags.DEFINE_integer("batch", 16, "Dialogues per batch.")
  flags.DEFINE_list("turns", ["10", "20"], "Utterances per dialogue (both sides), one run each.")
  flags.DEFINE_integer("max_new_tokens", 32, "Tokens per agent turn.")
  flags.DEFINE_integer("repeats", 5, "Timed batches per side (medians), after a compiling one.")
  flags.DEFINE_string("out", "", "Write the results as JSON here.")
  flags.DEFINE_string("output", str(pathlib.Path(__file__).resolve().parents[1] / "docs" /
                                    "BENCHMARKS.md"),
                      "Markdown file whose rollout section is (re)written ('' = none).")


SECTION = "## Online RL rollouts: kept KV cache vs re-prefilling the history"
TARGET = 3.0  # Kept cache over re-prefill, at 10 or more turns.


def tokenizer() -> tokenization.DialogueTokenizer:
  """A BPE tokenizer on scripted self-play text (as the pipeline's, smaller)."""
  texts = []
  for i, s in enumerate(airdialogue_env.make_scenarios(3, 40, kb_size=3)):
    texts += [to_dialogue.serialize_context(role, s.context(role)) for role in to_dialogue.ROLES]
    style = sorted(customers.STYLES)[i % len(customers.STYLES)]
    lines, _, _ = selfplay.play(customers.Customer(s.intent, style, np.random.default_rng(i)),
                                agents.ScriptedAgent(s.table, "oracle", np.random.default_rng(i)))
    texts += [line.partition(": ")[2] for line in lines]
  return tokenization.train_tokenizer(
      texts, to_dialogue.ROLES, vocab_size=1000,
      markers=(action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG))


def agent_model(vocab: int) -> nnx.Module:
  prefix = airdialogue_task.TABLE_PREFIX
  cfg = ModelConfig.llama(vocab_size=-(-vocab // 128) * 128, num_layers=2, d_model=128,
                          num_heads=4, num_kv_heads=2, mlp_dim=512, max_seq_len=1024,
                          prefix_field_vocab_sizes=prefix.field_vocab_sizes,
                          prefix_num_rows=prefix.num_rows)
  return bc.PrefixLM(cfg, rngs=nnx.Rngs(0))


class Timers:
  """Seconds spent in the sampler's `prefill`, `append` and `generate`, each call blocked on."""

  def __init__(self):
    self.seconds = {"prefill": 0.0, "append": 0.0, "generate": 0.0}

  @contextlib.contextmanager
  def installed(self) -> Iterator[None]:
    originals = {name: getattr(sampler, name) for name in self.seconds}

    def timed(name):
      def call(*args, **kwargs):
        start = time.perf_counter()
        out = jax.block_until_ready(originals[name](*args, **kwargs))
        self.seconds[name] += time.perf_counter() - start
        return out
      return call

    for name in self.seconds:
      setattr(sampler, name, timed(name))
    try:
      yield
    finally:
      for name, fn in originals.items():
        setattr(sampler, name, fn)


def play(party: Any, scenarios, turns: int, seed: int) -> tuple[float, list]:
  start = time.perf_counter()
  parties = {"agent": party, "customer": ScriptedCustomer("volunteer")}
  episodes = environment.play(airdialogue_env.AirDialogueEnv(), parties, scenarios, max_turns=turns,
                              seed=seed)
  return time.perf_counter() - start, episodes


def measure(model, tok, batch: int, turns: int, max_new_tokens: int,
            repeats: int) -> dict[str, Any]:
  make = lambda: LMParty(model, tok, "agent", max_new_tokens=max_new_tokens,
                                    temperature=0.0, include_context=False,
                                    prefix_fields=airdialogue_task.table_fields)
  scenarios = airdialogue_env.make_scenarios(7, 2 * batch, kb_size=30)
  warm, timed = scenarios[:batch], scenarios[batch:]
  result = {"batch": batch, "turns": turns, "max_new_tokens": max_new_tokens, "repeats": repeats}
  arms = (("kept_cache", lambda p: p), ("reprefill", reprefill.RePrefill))
  for _, wrap in arms:
    play(wrap(make()), warm, turns, seed=0)  # Compiles every shape this run needs.
  seconds, decoded = {name: [] for name, _ in arms}, {}
  for _ in range(repeats):  # Round-robin, so load from other jobs hits both arms alike.
    for name, wrap in arms:
      party = make()
      elapsed, episodes = play(wrap(party), timed, turns, seed=1)
      seconds[name].append(elapsed)
      decoded[name] = party.token_ids
      result[name] = {"mean_turns": float(np.mean([len(e.turns) for e in episodes])),
                      "agent_tokens": int(sum(map(len, party.token_ids)))}
  for name, _ in arms:
    median = float(np.median(seconds[name]))
    result[name].update(seconds=median, dialogues_per_sec=batch / median)
  timers, party = Timers(), make()  # Once more, each device call blocked on, for the split.
  with timers.installed():
    seconds, _ = play(party, timed, turns, seed=1)
  result["kept_cache_split"] = {**timers.seconds, "host": seconds - sum(timers.seconds.values())}
  result["same_tokens"] = decoded["kept_cache"] == decoded["reprefill"]
  result["speedup"] = result["reprefill"]["seconds"] / result["kept_cache"]["seconds"]
  return result


def render(results: list[dict[str, Any]], command: str, load: tuple[float, ...]) -> str:
  rows = []
  for r in results:
    split = r["kept_cache_split"]
    rows.append(
        f"| {r['turns']} | {r['kept_cache']['dialogues_per_sec']:.1f} | "
        f"{r['reprefill']['dialogues_per_sec']:.1f} | **{r['speedup']:.1f}x** | "
        f"{split.get('prefill', 0):.2f} / {split.get('append', 0):.2f} / "
        f"{split.get('generate', 0):.2f} / {split['host']:.2f} | {r['same_tokens']} |")
  met = all(r["speedup"] >= TARGET for r in results if r["turns"] >= 10)
  return "\n".join([
      SECTION, "",
      f"Command: `{command}` ({datetime.date.today().isoformat()}).", "",
      f"- Machine: {bench_report.cpu_name()}, {len(os.sched_getaffinity(0))} usable cores; "
      f"python {platform.python_version()}, jax {jax.__version__}, backend "
      f"{jax.default_backend()}; load average before: {' / '.join(f'{x:.2f}' for x in load)}.",
      "- The quick agent's shape (2 Llama layers, width 128, the table as a structured prefix, "
      "untrained, so every dialogue runs to the turn limit) against `scripted:volunteer`, "
      f"greedy, batch {results[0]['batch']}, at most {results[0]['max_new_tokens']} tokens "
      f"per agent turn; medians of {results[0]['repeats']} timed batches per side, "
      "alternating; both sides decode the same tokens (last column).",
      "- Re-prefill re-encodes the whole history before each agent turn (the common "
      "practice); the kept cache appends only the new turns (`LMParty`).", "",
      "| utterances | kept cache (dialogues/s) | re-prefill (dialogues/s) | speedup | "
      "kept cache: prefill / append / generate / host (s) | same tokens |",
      "|---:|---:|---:|---:|---|---|",
      *rows, "",
      f"Target: at least {TARGET:g}x at 10 or more utterances; {'met' if met else 'not met'}.",
  ])


def main(argv):
  del argv
  load = os.getloadavg()
  tok = tokenizer()
  model = agent_model(tok.vocab_size)
  results = [measure(model, tok, flags.FLAGS.batch, int(t), flags.FLAGS.max_new_tokens,
                     flags.FLAGS.repeats) for t in flags.FLAGS.turns]
  print(json.dumps({"device": str(jax.devices()[0]), "results": results}, indent=2))
  if flags.FLAGS.out:
    with open(flags.FLAGS.out, "w") as f:
      json.dump({"device": str(jax.devices()[0]), "results": results}, f, indent=2)
  if flags.FLAGS.output:
    command = " ".join(["python -m benchmarks.rollout_cache", *sys.argv[1:]])
    bench_report.write_section(pathlib.Path(flags.FLAGS.output), SECTION,
                               render(results, command, load))


if __name__ == "__main__":
  define_flags()
  app.run(main)
