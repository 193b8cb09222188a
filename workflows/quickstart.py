"""The end-to-end pipeline: raw dialogues -> tokenizer -> MDP datasets -> trained
agents and simulator -> online evaluation -> report.

Each stage writes into its own folder of the workdir and is skipped when its
output already exists (training resumes from its last checkpoint), so an
interrupted `make run` continues where it stopped. The runs are the quick
configs (experiments/configs/*_quick.py) with the task data in this workdir;
`report.json` collects the corpus statistics, each run's selected checkpoint
and every evaluation's success rate +- standard error; its tables name each run
by its `label` (config.runs), the run's name where it has none. An evaluation
is played again when a party's checkpoint changed (a retrained run), never
read back from an older one.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
from typing import Any, Callable

import datasets
import ml_collections
from absl import logging

from calm import data as calm_data
from data_pipelines import cli, files, mdp_dataset, tokenization
from data_pipelines.airdialogue import action_grammar, selfplay, to_dialogue
from data_pipelines.dialogue import write_jsonl
from ilql_dialogue import checkpointing, init_from, metrics as metrics_lib, restore, tasks
from ilql_dialogue.checkpointing import BEST_DIR, CHECKPOINT_DIR
from workflows import compare, config_checks, customer_fidelity, evaluate, train

SPLITS = ("train", "eval")
# The package of the config modules config.runs names (`config=MODULE[:ARGUMENT]`), loaded by
# name as config files are: the pipeline's runs are configs, not code it depends on.
CONFIGS_PACKAGE = "experiments.configs"


def _stage(name: str, done_marker: str, fn: Callable[[], Any]) -> None:
  """Runs `fn` unless `done_marker` exists; writes the marker only on success."""
  if os.path.exists(done_marker):
    logging.info("stage %s: already done (%s)", name, done_marker)
    return
  logging.info("stage %s", name)
  fn()
  files.write_text(done_marker, "done\n")


def generate_airdialogue(config: ml_collections.ConfigDict, workdir: str) -> dict[str, str]:
  """Writes official-format corpora for both splits and their Dialogue JSON lines."""
  paths = {}
  for split in SPLITS:
    out_dir = os.path.join(workdir, "airdialogue", split)
    paths[split] = os.path.join(out_dir, "dialogues.jsonl")

    def make(out_dir=out_dir, split=split):
      cfg = config.airdialogue
      selfplay.write_corpus(out_dir, cfg[f"{split}_dialogues"], seed=cfg[f"{split}_seed"],
                            kb_size=cfg.kb_size)
      write_jsonl(os.path.join(out_dir, "dialogues.jsonl"), to_dialogue.read_dialogues(
          os.path.join(out_dir, "data.json"), os.path.join(out_dir, "kb.json")))

    os.makedirs(out_dir, exist_ok=True)
    _stage(f"generate airdialogue/{split}", os.path.join(out_dir, ".done"), make)
  return paths


def train_tokenizer(config: ml_collections.ConfigDict, dialogues_path: str, out_dir: str) -> None:
  """A byte-level BPE on the training split only: eval text never shapes the vocabulary."""

  def make():
    # The action markers are single ids so that decoding can forbid them to the customer.
    tokenizer = tokenization.train_tokenizer(
        mdp_dataset.tokenizer_texts(dialogues_path, to_dialogue.serialize_context),
        to_dialogue.ROLES, config.tokenizer.vocab_size,
        markers=(action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG))
    tokenizer.save(out_dir)

  os.makedirs(out_dir, exist_ok=True)
  _stage("tokenizer", os.path.join(out_dir, ".done"), make)


def run_config(config: ml_collections.ConfigDict, name: str,
               workdir: str) -> ml_collections.ConfigDict:
  """The config of training run `name` (config.runs): its quick config file, with
  the task data in this workdir, the run's step and evaluation budget, and its
  starting checkpoint (`init_from`: an earlier run's name, whose workdir it becomes)."""
  spec = config.runs[name]
  module, _, argument = spec.config.partition(":")
  get_config = importlib.import_module(f"{CONFIGS_PACKAGE}.{module}").get_config
  run = get_config(argument) if argument else get_config()
  if run.get("calm_data") is not None:
    # CALM's task.root follows calm_data (its relabeled copy of this workdir's corpus).
    run.calm_data.source_root = workdir
  else:
    run.task.root = workdir
  run.train.update(steps=spec.steps, eval_every=spec.eval_every,
                   checkpoint_every=spec.eval_every)
  if spec.init_from:
    run.model.init_from = os.path.join(workdir, spec.init_from)
  if any(run_name(party) == name and party != name for pair in evaluation_pairs(config)
         for party in pair):
    run.train.keep_checkpoints = spec.steps // spec.eval_every + 1  # A pair plays NAME@STEP.
  if run.get("online_eval") is not None and run.online_eval.num_dialogues > 0:
    run.online_eval.num_dialogues = config.training.online_dialogues
    # A checkpoint is selected decoding as it will be evaluated.
    run.online_eval.temperature = config.evaluation[f"{run.task.role}_temperature"]
  for key, value in spec.get("set", ()):  # A run's own settings win over the pipeline's.
    run.update_from_flattened_dict({key: _in_workdir(value, config, workdir)})
  return run


def _items(value: Any) -> tuple[Any, ...]:
  """A `set` value's items: a tuple's, or the value alone."""
  return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _is_run(value: Any, config: ml_collections.ConfigDict) -> bool:
  return isinstance(value, str) and value in config.runs


def _in_workdir(value: Any, config: ml_collections.ConfigDict, workdir: str) -> Any:
  """A run's `set` value with every run name in it (alone or in a tuple) as its workdir."""
  resolved = tuple(os.path.join(workdir, v) if _is_run(v, config) else v for v in _items(value))
  return resolved if isinstance(value, (tuple, list)) else resolved[0]


def _needs(config: ml_collections.ConfigDict, name: str) -> list[str]:
  """The runs run `name` reads: the one it starts from and those its `set` values name."""
  spec = config.runs[name]
  return ([spec.init_from] if spec.init_from else []) + [
      v for _, value in spec.get("set", ()) for v in _items(value) if _is_run(v, config)]


def build_task_datasets(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """The MDP datasets every run trains on (built once per task layout); their statistics."""
  stats = {}
  for name in config.runs:
    run = run_config(config, name, workdir)
    kind = ""
    if run.get("calm_data") is not None:  # The corpus relabeled, with the action head's targets.
      calm_data.prepare_for(run)
      kind = "calm_"
    task = tasks.make_task(run)
    for split, dataset in task.datasets.items():
      stats[f"{kind}{task.role}_{task.context}/{split}"] = mdp_dataset.dataset_stats(dataset)
  return stats


def training_order(config: ml_collections.ConfigDict) -> list[str]:
  """Run names, each after the runs it reads (its init_from, the runs its `set` names)."""
  order: list[str] = []

  def visit(name: str, path: tuple[str, ...]) -> None:
    if name in order:
      return
    if name in path:
      raise ValueError(f"config.runs: cycle {' -> '.join(path + (name,))}")
    if name not in config.runs:
      raise ValueError(f"config.runs.{path[-1]}.init_from={name!r}: no such run")
    for needed in _needs(config, name):
      visit(needed, path + (name,))
    order.append(name)

  for name in config.runs:
    visit(name, ())
  return order


def validate(config: ml_collections.ConfigDict, workdir: str,
             defaults: ml_collections.ConfigDict | None = None) -> None:
  """Raises cli.BadInput before the first stage, not after an hour of them: the sections
  against the defaults (by default quickstart.py's), each run's config, each pair's roles."""
  cli.output_dir(workdir, "--workdir")
  if defaults is None:
    defaults = importlib.import_module(f"{CONFIGS_PACKAGE}.quickstart").get_config()
  for section in defaults:
    if section not in config:
      raise cli.BadInput(f"config: section {section!r} missing")
    if isinstance(defaults[section], ml_collections.ConfigDict) and section != "runs":
      missing = sorted(set(defaults[section]) - set(config[section]))
      if missing:
        raise cli.BadInput(f"config.{section}: field(s) {missing} missing")
      cli.check_known_fields(config[section], defaults[section], f"config.{section}")
  roles = {}
  for name, run in config.runs.items():
    where = f"config.runs.{name}.config={run.config}"
    module = run.config.partition(":")[0]
    try:
      found = importlib.util.find_spec(f"{CONFIGS_PACKAGE}.{module}") is not None
    except (ImportError, ValueError):  # A dotted or empty name.
      found = False
    if not found:
      raise cli.BadInput(f"{where}: no such module in experiments/configs")
    try:
      training = run_config(config, name, workdir)
    except AttributeError:  # run_config sets fields of the run's task and train sections.
      raise cli.BadInput(f"{where}: not a task config (experiments/configs/bc_*.py, ilql_*.py)"
                         ) from None
    config_checks.check_train_fields(training, where)
    roles[name] = training.task.role
  for field in ("pairs", "greedy_customer_pairs"):
    for agent, customer in config.evaluation.get(field, ()):
      _check_party(config, roles, agent, "agent", f"config.evaluation.{field}")
      _check_party(config, roles, customer, "customer", f"config.evaluation.{field}")
  collapse = config.collapse
  for arm in collapse.arms:
    if arm not in roles:
      raise cli.BadInput(f"config.collapse.arms: {arm!r} is not a run of config.runs")
  if collapse.arms:
    if not collapse.held_out:
      raise cli.BadInput("config.collapse.held_out: empty; the comparison is on held-out "
                         "customers")
    for spec in (collapse.start,) + tuple(collapse.arms):
      _check_party(config, roles, spec, "agent", "config.collapse")
    for spec in (collapse.training_simulator,) + tuple(collapse.held_out):
      _check_party(config, roles, spec, "customer", "config.collapse")


def _check_party(config: ml_collections.ConfigDict, roles: dict[str, str], spec: str,
                 role: str, what: str) -> None:
  """A party the pipeline plays: one of its runs (at a step it saves) or a party spec."""
  name, step = init_from.split_step(spec)
  if name not in roles:
    config_checks.check_party(spec, role, what)
  elif step is not None and not _saves(config.runs[name], step):
    raise cli.BadInput(f"{what}: {spec}: run {name!r} saves no checkpoint "
                       f"at step {step} (every {config.runs[name].eval_every} to "
                       f"{config.runs[name].steps})")
  elif roles[name] != role:
    raise cli.BadInput(f"{what}: run {name!r} plays the {roles[name]}, paired as the {role}")


def _saves(run: ml_collections.ConfigDict, step: int) -> bool:
  """Whether a pipeline run checkpoints at `step` (every eval_every, and at its last step)."""
  return 0 < step <= run.steps and (step % run.eval_every == 0 or step == run.steps)


class Stopped(Exception):
  """A training stage returned before its last step: SIGTERM made it save and stop."""


def _train(config: ml_collections.ConfigDict, name: str, workdir: str) -> None:
  """Trains run `name` to its last step (resuming its workdir), or raises Stopped, so that a
  preempted stage is neither marked done nor followed by the stages that start from it."""
  run = run_config(config, name, workdir)
  run_dir = os.path.join(workdir, name)
  train.run(run, run_dir)
  saved = max(checkpointing.saved_steps(run_dir), default=0)
  if saved < run.train.steps:
    raise Stopped(f"stage train {name}: stopped at step {saved} of {run.train.steps} "
                  "(checkpoint saved); the same command resumes it")


def train_runs(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Trains every run (dialogue LM, BC agent, BC customer, ILQL agent), each after the
  run it starts from; returns their selections."""
  selections = {}
  for name in training_order(config):
    _stage(f"train {name}", os.path.join(workdir, f".{name}.done"),
           lambda name=name: _train(config, name, workdir))
    selections[name] = restore.selected(os.path.join(workdir, name))
  return selections


def _party(spec: str, config: ml_collections.ConfigDict, workdir: str) -> str:
  """A run's name (config.runs), or NAME@STEP for its checkpoint at STEP -> its workdir (with
  the step); other party specs pass through. A CALM run whose config acts by its head
  (planning.action=head) plays as that agent, without planning, as its selection played it."""
  if run_name(spec) not in config.runs:
    return spec
  path = os.path.join(workdir, spec)
  planning = restore.read_config(os.path.join(workdir, run_name(spec))).get("planning")
  return f"calm:n=1:{path}" if planning and planning.get(
      "action") == "head" else path


def evaluation_pairs(config: ml_collections.ConfigDict) -> tuple[tuple[str, str], ...]:
  """Every (agent, customer) pair the evaluation stage plays."""
  return (tuple(config.evaluation.pairs)
          + tuple(config.evaluation.get("greedy_customer_pairs", ())))


def run_name(spec: str) -> str:
  """'bc_customer@4000' -> 'bc_customer': the run a pair's spec names, if it names one."""
  return init_from.split_step(spec)[0]


def party_label(config: ml_collections.ConfigDict, spec: str) -> str:
  """What tables call a party: its run's `label` (what the run is, where its name says less),
  else the spec itself; NAME@STEP keeps its step."""
  name, step = init_from.split_step(spec)
  if name not in config.runs:
    return spec
  text = config.runs[name].get("label") or name
  return text if step is None else f"{text}@{step}"


def checkpoint_fingerprint(run_dir: str, step: int | None = None) -> str | None:
  """The checkpoint a party of `run_dir` restores (`step` of checkpoints/, by default the
  selected best/ else the latest) as "DIRECTORY/STEP:HASH", the hash over its files' names and
  sizes and the contents of the small ones (orbax's commit timestamps among them): a run
  retrained to the same step gets another. None where there is no checkpoint."""
  def steps(directory: str) -> list[int]:
    path = os.path.join(run_dir, directory)
    return sorted(int(n) for n in os.listdir(path) if n.isdigit()) if os.path.isdir(path) else []

  if step is not None:
    directory = CHECKPOINT_DIR
  elif steps(BEST_DIR):
    directory, step = BEST_DIR, steps(BEST_DIR)[-1]
  elif steps(CHECKPOINT_DIR):
    directory, step = CHECKPOINT_DIR, steps(CHECKPOINT_DIR)[-1]
  else:
    return None
  path = os.path.join(run_dir, directory, str(step))
  digest = hashlib.sha256()
  for root, dirs, files in os.walk(path):
    dirs.sort()
    for name in sorted(files):
      file = os.path.join(root, name)
      size = os.path.getsize(file)
      digest.update(f"{os.path.relpath(file, path)}:{size}\n".encode())
      if size <= 1 << 20:
        with open(file, "rb") as f:
          digest.update(f.read())
  return f"{directory}/{step}:{digest.hexdigest()[:16]}"


def _checkpoint_of(spec: str, config: ml_collections.ConfigDict, workdir: str) -> str | None:
  """checkpoint_fingerprint of the workdir a party spec plays (a run of config.runs, or a
  training workdir given by its path); None for a scripted or other party."""
  name, step = init_from.split_step(spec)
  path = os.path.join(workdir, name) if name in config.runs else name
  return checkpoint_fingerprint(path, step) if os.path.isdir(path) else None


def _recorded_play(summary_path: str) -> dict[str, Any] | None:
  """The checkpoints and decoding an evaluation's summary was played with (None: none)."""
  if not os.path.exists(summary_path):
    return None
  with open(summary_path) as f:
    summary = json.load(f)
  return {"checkpoints": summary.get("checkpoints"), "decoding": summary.get("decoding")}


def evaluate_pair(config: ml_collections.ConfigDict, workdir: str, agent: str, customer: str,
                  num_dialogues: int, customer_temperature: float | None = None
                  ) -> dict[str, Any]:
  """Plays one (agent, customer) pair on held-out scenarios (once: its summary is kept); an
  ILQL agent decodes at the beta its checkpoint was selected with (compare.py's rule). The
  summary is kept with the checkpoints and decoding it played, and played again when one
  changed. A learned customer samples at `customer_temperature` (None: config.evaluation's)
  with config.evaluation's min-p filter."""
  out_dir = os.path.join(workdir, "eval")
  beta = compare.selected_beta(_party(agent, config, workdir))
  tag = f"{agent}_vs_{customer.replace(':', '-').replace('/', '-')}"
  if num_dialogues != config.evaluation.num_dialogues:
    tag += f"_n{num_dialogues}"
  if customer_temperature is None:
    customer_temperature = config.evaluation.customer_temperature
  else:
    tag += f"_cT{customer_temperature:g}"
  min_p = config.evaluation.customer_min_p if customer_temperature > 0 else 0.0
  summary_path = os.path.join(out_dir, f"eval_{tag}.json")
  decoding = {
      "agent": {"beta": beta, "max_new_tokens": config.evaluation.max_new_tokens,
                "temperature": config.evaluation.agent_temperature},
      "customer": {"max_new_tokens": config.evaluation.max_new_tokens,
                   "temperature": customer_temperature, "min_p": min_p}}
  played = {"checkpoints": {"agent": _checkpoint_of(agent, config, workdir),
                            "customer": _checkpoint_of(customer, config, workdir)},
            "decoding": decoding}
  if _recorded_play(summary_path) != played:
    logging.info("stage evaluate %s vs %s (beta %g)", agent, customer, beta)
    summary = evaluate.evaluate(
        _party(agent, config, workdir), _party(customer, config, workdir),
        num_dialogues=num_dialogues, workdir=out_dir,
        batch_size=config.evaluation.batch_size, max_turns=config.evaluation.max_turns,
        tag=tag, progress=True, lm_options=decoding["agent"],
        customer_lm_options=decoding["customer"])
    files.write_json(summary_path, {**summary, **played}, indent=2)
  with open(summary_path) as f:
    summary = json.load(f)
  row = {"agent": agent, "customer": customer, "beta": beta,
         "agent_label": party_label(config, agent),
         "customer_label": party_label(config, customer) + (
             f" (T = {customer_temperature:g}{f', min-p {min_p:g}' if min_p else ''})"
             if run_name(customer) in config.runs else ""),
         **{k: summary[k] for k in ("n", "success_rate", "success_stderr", "mean_turns",
                                    "end_reasons")},
         **{k: summary.get(k) for k in ("booking_success", "booking_n", "mean_agent_turns",
                                        "asked_share", "asked_before_closing")}}
  if run_name(customer) in config.runs:  # Does the learned simulator say what its intent says?
    fidelity = customer_fidelity.fidelity(
        customer_fidelity.read_transcripts(summary["transcripts"]))
    row["customer_fidelity"] = {
        "stated_correctly": {f: r["stated_correctly"] for f, r in fidelity["fields"].items()},
        "customer_action_blocks": fidelity["customer_action_blocks"]}
  return row


def evaluate_pairs(config: ml_collections.ConfigDict, workdir: str) -> list[dict[str, Any]]:
  """`pairs`, then `greedy_customer_pairs` with the learned customer decoding greedily."""
  n = config.evaluation.num_dialogues
  return ([evaluate_pair(config, workdir, agent, customer, n)
           for agent, customer in config.evaluation.pairs]
          + [evaluate_pair(config, workdir, agent, customer, n, customer_temperature=0.0)
             for agent, customer in config.evaluation.get("greedy_customer_pairs", ())])


def compare_arms(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """The simulator-collapse comparison, short: the start and every arm against the arms'
  training simulator and each held-out customer; per agent, its success over the
  held-out customers' dialogues (compare.pooled) +- its standard error."""
  c = config.collapse
  customers = (c.training_simulator,) + tuple(c.held_out)
  rows = {}
  for agent in (c.start,) + tuple(c.arms):
    cells = {customer: evaluate_pair(config, workdir, agent, customer, c.num_dialogues)
             for customer in customers}
    held_out = compare.pooled([cells[customer] for customer in c.held_out])
    rows[agent] = {
        "label": party_label(config, agent),
        "success": {customer: (r["success_rate"], r["success_stderr"])
                    for customer, r in cells.items()},
        "held_out_mean": held_out["success_rate"],
        "held_out_stderr": held_out["success_stderr"]}
  return {"training_simulator": c.training_simulator, "held_out": list(c.held_out),
          "labels": {spec: party_label(config, spec) for spec in customers}, "rows": rows}


def run(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  datasets.disable_progress_bars()
  workdir = os.path.abspath(workdir)
  os.makedirs(workdir, exist_ok=True)
  dialogue_paths = generate_airdialogue(config, workdir)
  tokenizer_dir = os.path.join(workdir, "tokenizer")
  train_tokenizer(config, dialogue_paths["train"], tokenizer_dir)
  report: dict[str, Any] = {"workdir": workdir,
                            "labels": {name: party_label(config, name) for name in config.runs}}
  for split in SPLITS:
    with open(os.path.join(workdir, "airdialogue", split, "stats.json")) as f:
      corpus = json.load(f)
    report[f"airdialogue/{split}"] = {k: corpus[k]
                                      for k in ("n", "success_rate", "expected_status")}
  report["datasets"] = build_task_datasets(config, workdir)
  report["selected_checkpoints"] = train_runs(config, workdir)
  report["evaluation"] = evaluate_pairs(config, workdir)
  if config.collapse.arms:
    report["collapse"] = compare_arms(config, workdir)
  report["learning_curves"] = plot_curves(config, workdir)
  files.write_json(os.path.join(workdir, "report.json"), report, indent=2)
  print(json.dumps(report, indent=2))
  print(format_table(report["evaluation"]))
  if "collapse" in report:
    print(format_collapse_table(report["collapse"]))
  return report


# (metric key, label) of each run's evaluation records plotted in learning_curves.png; a
# run with none of them (the customer) shows its held-out loss.
CURVES = (("skill/agent_name_acc_expected", "agent closing-turn name acc."),
          ("skill/customer_name_rate", "customer states its name"),
          ("skill/customer_departure_airport_rate", "customer states its airport"),
          ("return", "online success (validation)"))


def plot_curves(config: ml_collections.ConfigDict, workdir: str) -> str:
  """One panel per run: its evaluation metrics over updates (the probes, online success,
  held-out loss); returns the PNG's path."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  arms = tuple(config.collapse.arms)
  names = [name for name in training_order(config) if name not in arms]
  panels = len(names) + bool(arms)
  fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.2), squeeze=False)
  if arms:  # The simulator-collapse arms share one panel: reward against the training simulator.
    ax = axes[0][-1]
    for arm in arms:
      points = [(r["step"], r["reward"]) for r in metrics_lib.read_metrics(
          os.path.join(workdir, arm, "metrics.jsonl")) if r["split"] == "train"]
      ax.plot(*zip(*points), marker=".", label=party_label(config, arm))
    ax.set(title="collapse arms", xlabel="updates", ylabel="training reward (success)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
  for ax, name in zip(axes[0], names):
    records = [r for r in metrics_lib.read_metrics(os.path.join(workdir, name, "metrics.jsonl"))
               if r["split"] == "eval"]
    curves = [(key, label) for key, label in CURVES if any(key in r for r in records)]
    for key, label in curves or [("loss", "held-out loss")]:
      points = [(r["step"], r[key]) for r in records if key in r]
      if points:
        ax.plot(*zip(*points), marker="o", label=label)
    ax.set_title(party_label(config, name))
    ax.set_xlabel("updates")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
  fig.tight_layout()
  path = os.path.join(workdir, "learning_curves.png")
  fig.savefig(path)
  plt.close(fig)
  return path


def format_table(evaluation: list[dict[str, Any]]) -> str:
  """One row per pair: success, booking success, and how the agent gathered the intent (its
  turns, the share of the slots that matter it asked about before closing)."""
  lines = ["| agent | customer | beta | n | success | booking success | turns | agent turns | "
           "asked share |", "|---|---|---|---|---|---|---|---|---|"]
  number = lambda value, fmt: "–" if value is None else format(value, fmt)
  for r in evaluation:
    booking = r.get("booking_success")
    lines.append(f"| {r.get('agent_label', r['agent'])} | "
                 f"{r.get('customer_label', r['customer'])} | {r['beta']:g} | {r['n']} | "
                 f"{r['success_rate']:.3f} ± {r['success_stderr']:.3f} | "
                 + ("–" if booking is None else f"{booking:.3f} of {r['booking_n']}")
                 + f" | {r['mean_turns']:.1f} | {number(r.get('mean_agent_turns'), '.1f')} | "
                 f"{number(r.get('asked_share'), '.2f')} |")
  return "\n".join(lines)


def format_collapse_table(collapse: dict[str, Any]) -> str:
  customers = [collapse["training_simulator"]] + collapse["held_out"]
  named = lambda spec: collapse.get("labels", {}).get(spec, spec)
  lines = ["| agent | " + " | ".join([f"{named(customers[0])} (training)"]
                                    + [f"{named(c)} (held out)" for c in customers[1:]])
           + " | held-out mean |", "|---" * (len(customers) + 2) + "|"]
  for agent, row in collapse["rows"].items():
    cells = [f"{row['success'][c][0]:.3f} ± {row['success'][c][1]:.3f}" for c in customers]
    lines.append(f"| {row.get('label', agent)} | " + " | ".join(cells)
                 + f" | {row['held_out_mean']:.3f} ± {row['held_out_stderr']:.3f} |")
  return "\n".join(lines)
