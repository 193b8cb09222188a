"""Does SmolLM2-135M's knowledge pay for itself in the dialogue LM at laptop cost?

  python -m benchmarks.borrow --output=/tmp/borrow.md        # ~15 min; tiny corpus in a temp dir
  python -m benchmarks.borrow --root=runs/quickstart --output=/tmp/borrow.md
  python -m benchmarks.borrow --steps=10 --seeds=1 --output=/tmp/b.md   # a smoke run

Arms (experiments/configs/lm_airdialogue_quick.py and lm_airdialogue_borrow.py, started
the way a training run starts them, `init_from.starting_state`):
  scratch      the quick trunk (2 layers, width 128), random;
  embeddings   the same trunk, its embedding SmolLM2's projected (models/borrow.py);
  layers K     SmolLM2's width and first K layers, its embedding unprojected;
  wide1        the control: a random trunk of layers1's shape (is it the width or SmolLM2?).

Cost: the training loop's jitted update on the stream's first mixture cycle (one batch of
each kind), compiled by a warm-up pass, then the median wall and CPU time per update over
`--timing_passes` passes. Distillation would add, per update, SmolLM2 run frozen over the
same turns in its own tokenization and mean-pooled per turn (`teacher_features`); that
forward pass (and its host-side re-tokenization) is timed on the same batches.

Learning: each arm's held-out loss (the loss the run logs: agent tokens of the task's eval
split, 4 fixed batches) after each of `--steps` updates on the same streamed rows
(`lm_task` train_stream, config.seed = the seed), mean and standard error over seeds.
"""

from __future__ import annotations

import datetime
import functools
import importlib
import os
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags
from flax import nnx
from flax.nnx import traversals

from benchmarks import report as bench_report
from data_pipelines import cli
from domains.airdialogue import lm_task
from ilql_dialogue import bc, init_from, registry, sharding, tasks, train_loop
from ilql_dialogue.models import borrow
from ilql_dialogue.models.transformer import Transformer
from workflows import quickstart as pipeline_lib

# arm -> (config.model.borrow, SmolLM2 layers); "wide" is a random trunk of layers1's shape.
ARMS = {"scratch": ("", 0), "embeddings": ("embeddings", 0), "layers1": ("layers", 1),
        "layers2": ("layers", 2), "wide1": ("", 1)}
LABELS = {"scratch": "from scratch (2 x 128)", "embeddings": "embeddings, projected (2 x 128)",
          "layers1": "SmolLM2 layer 0 (1 x 576)", "layers2": "SmolLM2 layers 0-1 (2 x 576)",
          "wide1": "control: random 1 x 576, SmolLM2's shape"}

_OUTPUT = flags.DEFINE_string("output", None, "Markdown file the table is written to.",
                              required=True)
_ROOT = flags.DEFINE_string("root", "", "A pipeline workdir (airdialogue/, tokenizer/); "
                            "'' = a tiny corpus generated in a temporary directory.")
_STEPS = flags.DEFINE_list("steps", ["50", "100"], "Updates after which the loss is read.")
_SEEDS = flags.DEFINE_integer("seeds", 3, "Seeds per learning arm.", lower_bound=1)
_FIRST_SEED = flags.DEFINE_integer("first_seed", 0, "Seeds first_seed, first_seed + 1, ...: "
                                   "a long run split over processes (the losses are exact).",
                                   lower_bound=0)
_COST_ARMS = flags.DEFINE_list("cost_arms", ["scratch", "embeddings", "layers1", "layers2"],
                               f"Arms timed, of {list(ARMS)}.")
_LEARN_ARMS = flags.DEFINE_list("learn_arms", ["scratch", "embeddings", "layers1", "wide1"],
                                f"Arms trained, of {list(ARMS)}.")
_TIMING_PASSES = flags.DEFINE_integer("timing_passes", 2, "Timed passes over the cycle.",
                                      lower_bound=1)
_DISTILL = flags.DEFINE_bool("distill", True, "Time SmolLM2's frozen per-turn features.")
_DIALOGUES = flags.DEFINE_integer("dialogues", 600, "Training dialogues of the tiny corpus "
                                  "(the tokenizer's text; the stream generates its own rows).")


def config_file(name: str, *args: str) -> ml_collections.ConfigDict:
  """experiments/configs/NAME.py's config, found by name as the pipeline finds it."""
  return importlib.import_module(f"{pipeline_lib.CONFIGS_PACKAGE}.{name}").get_config(*args)


def make_root(directory: str, dialogues: int) -> str:
  """A pipeline workdir with AirDialogue corpora and the 2,048-token BPE, as `make run` has."""
  config = config_file("quickstart")
  config.airdialogue.update(train_dialogues=dialogues, eval_dialogues=max(dialogues // 6, 64))
  paths = pipeline_lib.generate_airdialogue(config, directory)
  pipeline_lib.train_tokenizer(config, paths["train"], os.path.join(directory, "tokenizer"))
  return directory


def arm_config(arm: str, root: str, seed: int, steps: int) -> ml_collections.ConfigDict:
  kind, layers = ARMS[arm]
  c = config_file("lm_airdialogue_borrow", kind) if kind else config_file("lm_airdialogue_quick")
  if kind == "layers":
    c.model.borrow_layers = layers
  elif layers:  # The control: SmolLM2's architecture, nothing borrowed.
    c.model.update(borrow.architecture(borrow.source_config(borrow.default_path()), layers))
  c.task.root = root
  c.seed = seed
  c.train.update(steps=steps, progress_bar=False)
  return c


class Arm:
  """One arm's task, algorithm and train state, started as a training run starts it."""

  def __init__(self, arm: str, root: str, seed: int, steps: int, workdir: str):
    self.config = arm_config(arm, root, seed, steps)
    self.task = tasks.make_task(self.config)
    tasks.configure_model(self.config, self.task)
    self.task.tokenizer.save(os.path.join(workdir, init_from.TOKENIZER_DIR))
    self.algorithm = registry.make_algorithm(self.config)
    self.mesh = sharding.make_mesh()
    with sharding.mesh_context(self.mesh):
      self.training = train_loop.build_training(self.config, self.algorithm, self.mesh)
      self.state = init_from.starting_state(self.training.init(), self.training.graphdef,
                                            self.config, workdir)
    self.evaluators = {}

  def update(self, batch: dict[str, np.ndarray]) -> float:
    with sharding.mesh_context(self.mesh):
      placed = train_loop.place_batch(batch, self.config, self.mesh)
      self.state, metrics = self.training.step(self.state, placed)
      return float(jax.block_until_ready(metrics["loss"]))

  def held_out_loss(self, batches: Sequence[dict[str, np.ndarray]]) -> float:
    evaluate = self.evaluators.setdefault(
        id(batches), train_loop.loss_evaluator(self.algorithm, batches))
    with sharding.mesh_context(self.mesh):
      return float(evaluate(nnx.merge(self.training.graphdef, self.state).model, 0)["loss"])


def stream(config: ml_collections.ConfigDict, task: tasks.Task, count: int) -> list[dict]:
  data = iter(tasks.train_data(task, config)(0))
  return [next(data) for _ in range(count)]


def timed(fn, *args) -> tuple[Any, float, float]:
  wall, cpu = time.perf_counter(), time.process_time()
  out = fn(*args)
  return out, time.perf_counter() - wall, time.process_time() - cpu


def cost(arm: Arm, cycle: Sequence[dict], passes: int) -> dict[str, float]:
  """Median wall / CPU seconds per update after a warm-up pass (which compiles each shape)."""
  start = time.perf_counter()
  for batch in cycle:
    arm.update(batch)
  compile_s = time.perf_counter() - start
  wall, cpu = [], []
  for _ in range(passes):
    for batch in cycle:
      _, w, c = timed(arm.update, batch)
      wall.append(w)
      cpu.append(c)
  return {"wall": statistics.median(wall), "cpu": statistics.median(cpu),
          "warmup": compile_s}


def turns(ids_T: np.ndarray, mask_T: np.ndarray, speakers: set[int], eot: int
          ) -> list[list[int]]:
  """The token ids of each turn of a row (after a speaker token, up to end of turn)."""
  out, current = [], None
  for token, real in zip(ids_T.tolist(), mask_T.tolist()):
    if not real:
      break
    if token in speakers:
      current = []
    elif token == eot and current is not None:
      out.append(current)
      current = None
    elif current is not None:
      current.append(token)
  return out


def teacher_inputs(batch: dict[str, np.ndarray], ours: Any, theirs: Any, max_turns: int
                   ) -> dict[str, np.ndarray]:
  """Each row's turns decoded and re-tokenized by SmolLM2, packed into one row:
  ids, mask and the turn index of every token (-1: none), [B, T'] padded to 64."""
  speakers = set(ours.speaker_token_ids.values())
  rows = []
  for ids_T, mask_T in zip(batch["input_ids"], batch["attention_mask"]):
    row_ids, row_turn = [], []
    for t, turn in enumerate(turns(ids_T, mask_T, speakers, ours.eot_id)[:max_turns]):
      piece = theirs(" " + ours.decode(turn), add_special_tokens=False).input_ids
      row_ids += piece
      row_turn += [t] * len(piece)
    rows.append((row_ids, row_turn))
  length = max(64, -(-max(len(r[0]) for r in rows) // 64) * 64)
  out = {"ids": np.zeros((len(rows), length), np.int32),
         "turn": np.full((len(rows), length), -1, np.int32)}
  for b, (row_ids, row_turn) in enumerate(rows):
    out["ids"][b, :len(row_ids)] = row_ids[:length]
    out["turn"][b, :len(row_turn)] = row_turn[:length]
  return out


MAX_TURNS = 32  # Turns pooled per row (a dialogue LM row has fewer).


@functools.partial(jax.jit, static_argnums=0)
def teacher_features(graphdef: nnx.GraphDef, state: nnx.State, ids_BxT: jax.Array,
                     turn_BxT: jax.Array) -> jax.Array:
  """SmolLM2's final hidden state mean-pooled over each turn's tokens: [B, turns, 576]."""
  model = nnx.merge(graphdef, state)
  mask_BxT = turn_BxT >= 0
  hidden_BxTxD, _ = model(ids_BxT, bc.positions_from_mask(mask_BxT), mask_BxT)
  onehot_BxTxN = jax.nn.one_hot(turn_BxT, MAX_TURNS, dtype=hidden_BxTxD.dtype)
  sums_BxNxD = jnp.einsum("btn,btd->bnd", onehot_BxTxN, hidden_BxTxD)
  return sums_BxNxD / jnp.maximum(onehot_BxTxN.sum(axis=1), 1.0)[..., None]


def distill_cost(cycle: Sequence[dict], ours: Any, passes: int) -> dict[str, float]:
  """Per update: re-tokenizing the turns on the host and SmolLM2's frozen forward pass."""
  source = borrow.load_source(borrow.default_path())
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(source.cfg, rngs=nnx.Rngs(0))))
  nnx.replace_by_pure_dict(state, traversals.unflatten_mapping(
      {name: jnp.asarray(value) for name, value in source.weights.items()}, sep="."))
  batches = [b for b in cycle if ours.eot_id in b["input_ids"]]  # Rows with turns.
  host, wall, cpu, tokens = [], [], [], []
  for repeat in range(passes + 1):  # About 5 s a batch: one timed pass by default.
    for batch in batches:
      inputs, host_s, _ = timed(teacher_inputs, batch, ours, source.tokenizer, MAX_TURNS)
      out, w, c = timed(lambda: jax.block_until_ready(
          teacher_features(graphdef, state, inputs["ids"], inputs["turn"])))
      if repeat:  # The first pass compiles each shape.
        host.append(host_s)
        wall.append(w)
        cpu.append(c)
        tokens.append(int((inputs["turn"] >= 0).sum()))
  return {"host": statistics.median(host), "wall": statistics.median(wall),
          "cpu": statistics.median(cpu), "tokens": statistics.median(tokens),
          "batches": len(batches)}


def learning(arms: Sequence[str], root: str, seeds: Sequence[int], checkpoints: Sequence[int],
             eval_set: Sequence[dict], workdir: str, report) -> dict[str, dict]:
  """Held-out loss per arm, per checkpoint, per seed, on the same rows for every arm; and
  the CPU seconds of each update (the median one skips those that compiled a new shape).
  `report(results)` after each run, so a stopped benchmark leaves what it measured."""
  results = {arm: {"loss": {n: [] for n in checkpoints}, "cpu": []} for arm in arms}
  for seed in seeds:
    rows = None
    for arm in arms:
      runner = Arm(arm, root, seed, max(checkpoints), workdir)
      rows = rows or stream(runner.config, runner.task, max(checkpoints))
      for step, batch in enumerate(rows, start=1):
        results[arm]["cpu"].append(timed(runner.update, batch)[2])
        if step in checkpoints:
          results[arm]["loss"][step].append(runner.held_out_loss(eval_set))
      print(f"seed {seed} {arm}: {[results[arm]['loss'][n][-1] for n in checkpoints]}",
            flush=True)
      report({a: r for a, r in results.items() if r["cpu"]})
  return results


def mean_se(values: Sequence[float]) -> str:
  if not values:
    return "-"
  if len(values) < 2:
    return f"{values[0]:.3f}"
  return f"{np.mean(values):.3f} ± {np.std(values, ddof=1) / np.sqrt(len(values)):.3f}"


def cost_table(costs: dict[str, dict], distill: dict | None, cycle: Sequence[dict]
               ) -> list[str]:
  tokens = statistics.median(int(b["attention_mask"].sum()) for b in cycle)
  base = costs.get("scratch")
  lines = [f"Cost per update: median over {len(cycle)} batches (one of each stream kind, "
           f"median {tokens:.0f} real tokens, batch 16) x {_TIMING_PASSES.value} passes, "
           "after a warm-up pass.", "",
           "| trunk | wall ms / update | CPU ms / update | vs scratch (wall) | warm-up pass |",
           "|---|---:|---:|---:|---:|"]
  for arm, c in costs.items():
    ratio = f"{c['wall'] / base['wall']:.2f}x" if base else "-"
    lines.append(f"| {LABELS[arm]} | {c['wall'] * 1e3:,.0f} | {c['cpu'] * 1e3:,.0f} | {ratio} | "
                 f"{c['warmup']:.1f} s |")
  if distill is not None:
    added = distill["host"] + distill["wall"]
    lines.append(
        f"| + distillation's teacher: SmolLM2 frozen over the turns ({distill['tokens']:,.0f} "
        f"of its tokens; host re-tokenizing {distill['host'] * 1e3:,.0f} ms) | "
        f"+{added * 1e3:,.0f} | +{distill['cpu'] * 1e3:,.0f} | "
        f"{'+%.1fx' % (added / base['wall']) if base else '-'} | - |")
  return lines


def loss_table(losses: dict[str, dict], checkpoints: Sequence[int], seeds: Sequence[int]
               ) -> list[str]:
  last = max(checkpoints)
  lines = [f"Held-out loss (nats per agent token, task eval split, 4 batches of 16) after N "
           f"updates on the same streamed rows; mean ± s.e. over seeds {list(seeds)}. Compute: "
           f"{last} x the median update's CPU time in these runs.", "",
           "| trunk | " + " | ".join(f"N = {n}" for n in checkpoints)
           + f" | CPU s for {last} updates |", "|---|" + "---:|" * (len(checkpoints) + 1)]
  for arm, result in losses.items():
    lines.append(f"| {LABELS[arm]} | " + " | ".join(
        mean_se(result["loss"][n]) for n in checkpoints)
        + f" | {last * np.median(result['cpu']):.0f} |")
  return lines


def render(costs: dict[str, dict], distill: dict | None, losses: dict, checkpoints,
           seeds: Sequence[int], cycle: Sequence[dict], command: str, started: float,
           load: tuple) -> str:
  lines = ["## Borrowing SmolLM2-135M in the dialogue LM", "",
           f"Command: `{command}` ({datetime.date.today().isoformat()}); "
           f"{bench_report.cpu_name()}, {len(os.sched_getaffinity(0))} usable cores, "
           f"backend {jax.default_backend()}; load average before {load[0]:.2f}, after "
           f"{os.getloadavg()[0]:.2f}; {time.perf_counter() - started:.0f} s in all.", ""]
  if costs or distill:
    lines += cost_table(costs, distill, cycle) + [""]
  if losses:
    lines += loss_table(losses, checkpoints, seeds)
  return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
  del argv
  started, load = time.perf_counter(), os.getloadavg()
  output = pathlib.Path(cli.output_file(_OUTPUT.value, "--output"))
  if not all(n.isdigit() and int(n) > 0 for n in _STEPS.value):
    raise cli.BadInput(f"--steps={_STEPS.value}: positive update counts")
  checkpoints = sorted({int(n) for n in _STEPS.value})
  for name, arms in (("--cost_arms", _COST_ARMS.value), ("--learn_arms", _LEARN_ARMS.value)):
    if set(arms) - set(ARMS):
      raise cli.BadInput(f"{name}={arms}: arms are {list(ARMS)}")
  if _ROOT.value:
    cli.existing_dir(_ROOT.value, "--root")
  try:
    borrow.default_path()
  except FileNotFoundError as e:
    raise cli.BadInput(str(e)) from None
  with tempfile.TemporaryDirectory() as scratch:
    # Every arm and seed builds its own jitted step; identical programs compile once.
    jax.config.update("jax_compilation_cache_dir", os.path.join(scratch, "xla_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    root = _ROOT.value or make_root(os.path.join(scratch, "root"), _DIALOGUES.value)
    workdir = os.path.join(scratch, "workdir")
    probe = arm_config("scratch", root, 0, 1)
    probe_task = tasks.make_task(probe)
    eval_set = tasks.eval_batches(probe_task, probe)
    cycle = stream(probe, probe_task, len(lm_task.parse_mixture(probe.task.mixture)))
    costs = {}
    for arm in _COST_ARMS.value:
      costs[arm] = cost(Arm(arm, root, 0, 1000, workdir), cycle, _TIMING_PASSES.value)
      print(arm, costs[arm], flush=True)
    distill = distill_cost(cycle, probe_task.tokenizer, 1) if _DISTILL.value else None
    command = " ".join(["python -m benchmarks.borrow", *sys.argv[1:]])
    seeds = range(_FIRST_SEED.value, _FIRST_SEED.value + _SEEDS.value)

    def write(losses: dict[str, dict]) -> str:
      table = render(costs, distill, losses, checkpoints, seeds, cycle, command, started, load)
      output.parent.mkdir(parents=True, exist_ok=True)
      output.write_text(table)
      return table

    write({})
    print(write(learning(_LEARN_ARMS.value, root, seeds, checkpoints, eval_set, workdir, write)))


if __name__ == "__main__":
  cli.run(main)
