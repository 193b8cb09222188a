"""Start-up checks of the command-line mains: bad input is one line naming it, not a traceback.

A mistyped path or config field should be reported, before anything heavy
starts (compiling, loading weights, building datasets), as one line that names
the flag or field and the path, not as a traceback from deep inside a library.
Every main runs through `run(main)`, and its config flags through
`define_config_file`:

  * flag errors, a missing --config file and an override of a field the config
    does not have (`--config.data.foo=1`) are reported while flags are parsed;
  * the main first validates its input with the checks below, which raise
    BadInput.

Both print `error: MESSAGE` on stderr and exit with status 1. Errors raised
later, from inside training or evaluation, keep their tracebacks: those are
bugs or data problems to debug, not bad input.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib.util
import os
import re
import sys
from typing import Any, Callable, Iterator, NoReturn, Sequence

import ml_collections
from absl import app, flags
from ml_collections import config_flags

# Sections every training config has (experiments/configs/base_config + algorithm and model).
TRAIN_SECTIONS = ("algorithm", "model", "train", "optim", "mesh")
VALUE_GUIDED = ("ilql", "mc_value")  # Algorithms whose model has Q and V heads (beta != 0).

_CONFIG_FLAGS: dict[str, str | None] = {}  # Config flag name -> its default file.


class BadInput(Exception):
  """Input the user can fix on the command line; `run` prints it as one line."""


def fail(message: str) -> NoReturn:
  """Ends the program: `error: MESSAGE` as one line on stderr, exit status 1."""
  lines = [line.strip() for line in message.splitlines() if line.strip()]
  sys.stderr.write(f"error: {' '.join(lines)}\n")
  sys.exit(1)


def run(main: Callable[[list[str]], Any]) -> None:
  """`app.run(main)` with bad flags, config overrides, stray arguments (no main takes
  any) and BadInput reported as one line."""

  def checked_main(argv: list[str]) -> Any:
    if len(argv) > 1:
      fail(f"unexpected arguments {argv[1:]}; every input is a --flag")
    try:
      return main(argv)
    except BadInput as e:
      fail(str(e))

  app.run(checked_main, flags_parser=_parse_flags)


@contextlib.contextmanager
def reported_as(what: str = "") -> Iterator[None]:
  """A library's own check (ValueError, OSError) run during validation becomes BadInput,
  prefixed with `what` unless the library's message names it already."""
  try:
    yield
  except (ValueError, OSError) as e:
    raise BadInput(f"{what}: {e}" if what else str(e)) from None


# --- Flags ---------------------------------------------------------------------


def define_config_file(name: str, default: str | None = None, help_string: str = "Config file.",
                       **kwargs: Any) -> flags.FlagHolder:
  """`config_flags.DEFINE_config_file`, with a missing file or an unknown override as one line.

  A flag with a default applies the command line's overrides while it is
  defined (when --NAME is not given), so they are checked here as well.
  """
  _CONFIG_FLAGS[name] = default
  try:
    return config_flags.DEFINE_config_file(name, default, help_string, **kwargs)
  except (KeyError, AttributeError, TypeError, OSError):
    _fail_on_config_problem(sys.argv)
    raise


def _parse_flags(argv: list[str]) -> list[str]:
  try:
    args = flags.FLAGS(argv)
  except flags.Error as e:
    fail(f"{e} (--helpshort lists the flags)")
  except (KeyError, AttributeError, TypeError, OSError):  # ml_collections: bad override or file.
    _fail_on_config_problem(argv)
    raise
  for name in _CONFIG_FLAGS:
    flag = flags.FLAGS[name]
    if flag.value is None:
      fail(f"--{name}: missing; pass --{name}=experiments/configs/NAME.py")
    if not os.path.isfile(flag.config_filename.split(":")[0]):
      fail(f"--{name}={flag.config_filename}: no such config file")
  return args


def _fail_on_config_problem(argv: list[str]) -> None:
  """Reports what is wrong with a config flag's file or overrides; returns if nothing is."""
  for name, default in _CONFIG_FLAGS.items():
    filename = _flag_argument(argv, name)
    filename = default if filename is None else filename
    if filename is None:
      continue
    if not os.path.isfile(filename.split(":")[0]):
      fail(f"--{name}={filename}: no such config file")
    config = _load_config(filename)
    for arg in argv:
      override = re.match(rf"--?(?:no)?{re.escape(name)}\.([^=]+)", arg)
      problem = override and _missing_field(config, override.group(1), name)
      if problem:
        fail(f"{arg}: {problem}")


def _load_config(filename: str) -> Any:
  """`get_config()` of a config file, as config_flags calls it (`path:argument`)."""
  path, *argument = filename.split(":", 1)
  spec = importlib.util.spec_from_file_location("_config_under_check", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(*argument)


def _flag_argument(argv: list[str], name: str) -> str | None:
  """The last value given to --name (as --name=V or --name V), or None."""
  value = None
  for i, arg in enumerate(argv):
    match = re.fullmatch(rf"--?{re.escape(name)}(?:=(.*))?", arg, re.DOTALL)
    if match:
      value = match.group(1) if match.group(1) is not None else next(iter(argv[i + 1:]), None)
  return value


def _missing_field(config: Any, path: str, where: str) -> str | None:
  node = config
  for key in path.split("."):
    if not isinstance(node, ml_collections.ConfigDict) or key not in node:
      fields = sorted(node) if isinstance(node, ml_collections.ConfigDict) else []
      return f"{where} has no field {key!r}" + (f"; its fields: {', '.join(fields)}"
                                                 if fields else "")
    node, where = node[key], f"{where}.{key}"
  return None


# --- Paths ---------------------------------------------------------------------


def existing_file(path: str, what: str) -> str:
  if not path or not os.path.isfile(path):
    raise BadInput(f"{what}={path}: " + ("a directory, not a file" if path and os.path.isdir(path)
                                         else "no such file"))
  return path


def existing_dir(path: str, what: str) -> str:
  if not path or not os.path.isdir(path):
    raise BadInput(f"{what}={path}: " + ("a file, not a directory" if path and os.path.isfile(path)
                                         else "no such directory"))
  return path


def output_dir(path: str, what: str) -> str:
  """A directory the main creates or writes into: only an existing file is in its way."""
  if os.path.exists(path) and not os.path.isdir(path):
    raise BadInput(f"{what}={path}: a file, not a directory")
  return path


def _open_options(spec: str) -> bool:
  """Whether a seed spec ends inside a wrapper's options ("calm:n=4" of "calm:n=4,m=2:RUN"),
  whose commas a list flag split."""
  from ilql_dialogue import simulators

  last = spec.rpartition("+")[2]
  for prefix in (simulators.CALM_PREFIX, simulators.VS_PREFIX):
    if last.startswith(prefix):
      options = last[len(prefix):]
      return "=" in options and ":" not in options
  return False


def named_seeds(items: Sequence[str], what: str) -> dict[str, list[str]]:
  """["NAME=A+B+C", ...] (a list flag) -> {NAME: [A, B, C]}: one agent or run, several seeds.
  A wrapper's options ("calm:n=4,m=2:RUN") keep their commas."""
  joined: list[str] = []
  for item in items:
    if joined and _open_options(joined[-1].partition("=")[2]):
      joined[-1] += "," + item
    else:
      joined.append(item)
  named = {}
  for item in joined:
    name, sep, spec = item.partition("=")
    if not (name and sep and spec):
      raise BadInput(f"{what}: {item!r} is not NAME=SPEC[+SPEC...]")
    named[name] = spec.split("+")
  return named


def output_file(path: str, what: str) -> str:
  """A file written at the end of a long run: its directory must exist now."""
  directory = os.path.dirname(os.path.abspath(path))
  if os.path.isdir(path) or not os.path.isdir(directory):
    raise BadInput(f"{what}={path}: " + ("a directory, not a file" if os.path.isdir(path)
                                         else f"no directory {directory}"))
  return path


# --- Datasets and tokenizers ---------------------------------------------------


def mdp_dataset_role(path: str, what: str) -> str:
  """The role an MDP dataset directory (data_pipelines.build_dataset, tasks/) was built for."""
  from data_pipelines import mdp_dataset  # `datasets`: only for mains that read one.

  existing_dir(path, what)
  if not os.path.isfile(os.path.join(path, "tokenizer", "tokenizer.json")):
    raise BadInput(f"{what}={path}: no tokenizer/tokenizer.json; not an MDP dataset "
                   "(python -m data_pipelines.build_dataset)")
  with reported_as(what):
    dataset = mdp_dataset.load_mdp_dataset(path)
  if len(dataset) == 0:
    raise BadInput(f"{what}={path}: no examples")
  return dataset[0]["role"]


def same_tokenizer(tokenizer_dir: str, what: str, reference_dir: str, reference_what: str, *,
                   extends: bool = False) -> None:
  """The tokenizer in `tokenizer_dir` is the one in `reference_dir`; with `extends` it may add
  tokens, as the dialogue tokens appended to a pretrained tokenizer do, but moves no id.
  `what` and `reference_what` name each side in the message."""
  import tokenizers

  files = [os.path.join(d, "tokenizer.json") for d in (tokenizer_dir, reference_dir)]
  if not all(os.path.isfile(f) for f in files):
    return  # A tokenizer without tokenizer.json is converted on load; nothing to compare.
  mine, theirs = (tokenizers.Tokenizer.from_file(f).get_vocab(with_added_tokens=True)
                  for f in files)
  moved = sorted(t for t, i in theirs.items() if mine.get(t) != i)
  if moved or (not extends and len(mine) != len(theirs)):
    detail = (f"{len(moved)} of its {len(theirs)} tokens have other ids, e.g. {moved[0]!r}"
              if moved else f"{len(mine)} tokens, not {len(theirs)}")
    raise BadInput(f"{what}: tokenizer differs from that of {reference_what} ({detail})")


# --- Training workdirs and party specs -----------------------------------------


def training_workdir(path: str, what: str, step: int | None = None) -> ml_collections.ConfigDict:
  """The config of a training workdir (experiments.train) that holds a checkpoint (`step`)."""
  from ilql_dialogue import policy_io
  from ilql_dialogue.checkpointing import BEST_DIR, CHECKPOINT_DIR

  existing_dir(path, what)
  if not os.path.isfile(os.path.join(path, "config.json")):
    raise BadInput(f"{what}={path}: no config.json; not a training workdir (experiments.train)")
  with reported_as(what):
    config = policy_io.read_config(path)

  def steps(directory: str) -> set[int]:
    directory = os.path.join(path, directory)
    names = os.listdir(directory) if os.path.isdir(directory) else []
    return {int(n) for n in names if n.isdigit()}

  saved = steps(CHECKPOINT_DIR)
  if step is not None and step not in saved:
    raise BadInput(f"{what}={path}: no checkpoint at step {step}; saved: {sorted(saved)}")
  if not saved | steps(BEST_DIR):
    raise BadInput(f"{what}={path}: no checkpoint under {CHECKPOINT_DIR}/ yet")
  return config


def trained_role(path: str, config: ml_collections.ConfigDict, what: str) -> str:
  """The role a training workdir's model plays: its task's, else its dataset's."""
  if config.get("task") is not None:
    check_task(config, f"{what}={path}: config")
    return config.task.role
  dataset = (config.get("data") or {}).get("dataset_dir") or ""
  if not dataset:
    raise BadInput(f"{what}={path}: trained on no task or dataset, so it plays no role")
  return mdp_dataset_role(dataset, f"{what}={path}: its config.data.dataset_dir")


def task_workdir(path: str, what: str, step: int | None = None) -> ml_collections.ConfigDict:
  """A training workdir of a task run (config.task) whose task data is still there."""
  config = training_workdir(path, what, step)
  if config.get("task") is None:
    raise BadInput(f"{what}={path}: trained without a task (config.task), which this needs "
                   "(experiments/configs/bc_*.py, ilql_*.py)")
  check_task(config, f"{what}={path}: config")
  return config


# The role an online evaluation's opponent plays, by the trained role (two-party tasks).
OTHER_ROLE = {"agent": "customer", "customer": "agent",
              "persuader": "persuadee", "persuadee": "persuader"}


def check_party(spec: str, role: str, what: str) -> ml_collections.ConfigDict | None:
  """A party spec (ilql_dialogue/simulators.py) that can play `role`; the config of a
  training workdir's."""
  from ilql_dialogue import init_from, simulators

  workdir, step = init_from.split_step(spec)
  if spec.startswith((simulators.SCRIPTED_CUSTOMER_PREFIX, simulators.SCRIPTED_AGENT_PREFIX)):
    with reported_as(what):
      simulators.make_party(spec, role)
  elif spec.startswith("vs_llm:"):
    from cotraining import vs_llm  # An endpoint: its options are all a start-up can check.
    with reported_as(what):
      vs_llm.parse_spec(spec)
  elif spec.startswith((simulators.VS_PREFIX, simulators.CALM_PREFIX)):
    # A wrapper around a workdir: its options here, the workdir as any other.
    if spec.startswith(simulators.VS_PREFIX):
      from cotraining.verbalized_sampling import parse_spec
    else:
      from calm.planning import parse_spec
    with reported_as(what):
      _, inner = parse_spec(spec)
    return check_party(inner, role, what)
  elif os.path.isdir(workdir):
    config = training_workdir(workdir, what, step)
    trained = trained_role(workdir, config, what)
    if trained != role:
      raise BadInput(f"{what}={spec}: trained to play {trained!r}, not the {role}")
    return config
  elif simulators.CLASS_SPEC_RE.match(spec):  # The grammar make_party accepts.
    module = spec.partition(":")[0]
    try:
      found = importlib.util.find_spec(module) is not None
    except ImportError:
      found = False
    if not found:
      raise BadInput(f"{what}={spec}: no module {module!r}")
  else:
    raise BadInput(f"{what}={spec}: no such directory (a party is scripted:STYLE, "
                   "scripted_agent:NAME, a training workdir or module.path:ClassName)")
  return None


# --- Training configs ----------------------------------------------------------


def validate_train_config(config: ml_collections.ConfigDict, where: str = "config") -> None:
  """Everything a training run reads from `config` (experiments/train_lib.run), checked
  before anything is built: its fields, then the paths it names."""
  check_train_fields(config, where)
  check_train_paths(config, where)


def check_train_fields(config: ml_collections.ConfigDict, where: str = "config") -> None:
  """Sections, field names and values that need no file: the algorithm (by its own
  `from_config`), the model architecture (ModelConfig), the task's role and context."""
  from experiments.configs import base_config
  from ilql_dialogue import bc, registry
  from ilql_dialogue.models.config import ModelConfig

  missing = [s for s in TRAIN_SECTIONS if config.get(s) is None]
  if missing:
    raise BadInput(f"{where}: section(s) {missing} missing")
  base = base_config()
  for section in ("mesh", "train", "optim", "selection"):
    if config.get(section) is not None:
      check_known_fields(config[section], base[section], f"{where}.{section}")
  model_fields = {f.name for f in dataclasses.fields(ModelConfig)} | set(bc.NOT_ARCHITECTURE)
  check_known_fields(config.model, model_fields, f"{where}.model")
  name = config.algorithm.get("name")
  if name not in registry.ALGORITHMS:
    raise BadInput(f"{where}.algorithm.name={name!r}: unknown algorithm; known: "
                   f"{sorted(registry.ALGORITHMS)}")
  probe = copy.deepcopy(config)
  with probe.unlocked():
    probe.model.vocab_size = max(probe.model.get("vocab_size", 1), 1)  # 0 = from the data.
  try:
    registry.make_algorithm(probe, where)
  except ValueError as e:
    raise BadInput(str(e)) from None
  except (KeyError, AttributeError) as e:  # ConfigDict: a field the algorithm reads is missing.
    raise BadInput(f"{where}.algorithm: field {e} missing") from None
  if not config.model.get("init_from"):  # Else a Hugging Face or GGUF source may decide it.
    with reported_as(f"{where}.model"):
      bc.model_config(probe)
  if config.get("task") is not None:
    check_task(config, where, paths=False)
    from data_pipelines import mdp_dataset
    with reported_as(f"{where}.data.train_part"):
      mdp_dataset.parse_part((config.get("data") or {}).get("train_part", ""))
  elif config.get("data") is None:
    raise BadInput(f"{where}: section 'task' or 'data' missing")
  elif not config.data.get("synthetic") and not config.data.get("dataset_dir"):
    raise BadInput(f"{where}.data: set dataset_dir=DIR (python -m data_pipelines.build_dataset) "
                   "or synthetic=True")


def check_known_fields(section: ml_collections.ConfigDict, known: Any, where: str) -> None:
  unknown = sorted(set(section) - set(known))
  if unknown:
    raise BadInput(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}")


def check_train_paths(config: ml_collections.ConfigDict, where: str = "config") -> None:
  """The files and directories the config names exist and fit together: datasets of one role
  and one tokenizer, which is also that of the `model.init_from` source."""
  spec = config.model.get("init_from") or ""
  source, source_tokenizer, source_what = None, None, f"{where}.model.init_from={spec}"
  if spec:
    from ilql_dialogue import init_from
    with reported_as():  # Its messages name config.model.init_from.
      source = init_from.parse(spec)
    if source.kind == "workdir":
      training_workdir(source.path, f"{where}.model.init_from", source.step)
    # What the data must share: a workdir's tokenizer exactly, an HF model's extended by the
    # dialogue tokens (a GGUF file keeps its tokenizer inside; the launcher checks it).
    source_tokenizer = {"workdir": os.path.join(source.path, init_from.TOKENIZER_DIR),
                        "hf": source.path}.get(source.kind)
  if config.get("task") is not None:
    check_task(config, where)
    if source is not None and source.kind != "workdir" and not config.task.get("tokenizer"):
      raise BadInput(f"{source_what} needs the data in its own vocabulary: set "
                     f"{where}.task.tokenizer to its tokenizer directory")
    if source is not None and source.kind == "hf":
      same_tokenizer(config.task.tokenizer, f"{where}.task.tokenizer={config.task.tokenizer}",
                     source.path, source_what, extends=True)
    online = config.get("online_eval")
    if online is not None and online.get("num_dialogues", 0) > 0:
      check_party(online.opponent, OTHER_ROLE.get(config.task.role, "agent"),
                  f"{where}.online_eval.opponent")
    return
  data = config.data
  if not data.get("dataset_dir"):
    return  # Synthetic data.
  what = f"{where}.data.dataset_dir"
  role = mdp_dataset_role(data.dataset_dir, what)
  tokenizer = os.path.join(data.dataset_dir, "tokenizer")
  if source_tokenizer:
    same_tokenizer(tokenizer, f"{what}={data.dataset_dir}", source_tokenizer, source_what,
                   extends=source.kind == "hf")
  if data.get("eval_dataset_dir"):
    eval_what = f"{where}.data.eval_dataset_dir"
    eval_role = mdp_dataset_role(data.eval_dataset_dir, eval_what)
    if eval_role != role:
      raise BadInput(f"{eval_what}={data.eval_dataset_dir}: built for role {eval_role!r}, but "
                     f"{what}={data.dataset_dir} for {role!r}")
    same_tokenizer(os.path.join(data.eval_dataset_dir, "tokenizer"),
                   f"{eval_what}={data.eval_dataset_dir}", tokenizer,
                   f"{what}={data.dataset_dir}")


def _task_contexts(name: str) -> dict[str, tuple[str, ...]] | None:
  """Role -> the contexts it can read, for the tasks whose modules list them."""
  if name == "airdialogue":
    from ilql_dialogue.tasks import airdialogue
    # Role "lm" is the dialogue LM of both roles on the table prefix (tasks/airdialogue_lm.py).
    return {**airdialogue.CONTEXTS, "lm": ("prefix",)}
  if name == "persuasion":
    from data_pipelines.persuasion import loader
    from ilql_dialogue.tasks import persuasion
    return {role: persuasion.CONTEXTS for role in loader.ROLES}
  return None


def check_task(config: ml_collections.ConfigDict, where: str = "config", *,
               paths: bool = True) -> None:
  """config.task names a known task, role and context; with `paths`, the data its
  build_datasets reads exists (ilql_dialogue/tasks/)."""
  from ilql_dialogue import tasks

  task = config.task
  if task.get("name") not in tasks.TASK_MODULES:
    raise BadInput(f"{where}.task.name={task.get('name')!r}: unknown task; known: "
                   f"{list(tasks.TASK_MODULES)}")
  contexts = _task_contexts(task.name)
  if contexts is not None and task.get("role") not in contexts:
    raise BadInput(f"{where}.task.role={task.get('role')!r}: {task.name} roles are "
                   f"{list(contexts)}")
  if contexts is not None and task.get("context") not in contexts[task.role]:
    raise BadInput(f"{where}.task.context={task.get('context')!r}: the {task.role} reads "
                   f"{list(contexts[task.role])}")
  if not paths:
    return
  if task.get("tokenizer"):
    existing_dir(task.tokenizer, f"{where}.task.tokenizer")
  if task.name == "airdialogue":
    from ilql_dialogue.tasks import airdialogue
    required = list(airdialogue.dialogue_paths(task.root).values())
    if task.get("tokenizer"):
      existing_file(os.path.join(task.tokenizer, "tokenizer.json"),
                    f"{where}.task.tokenizer: its file")
    else:
      required.append(os.path.join(task.root, "tokenizer", "tokenizer.json"))
    for path in required:
      if not os.path.isfile(path):
        raise BadInput(f"{where}.task.root={task.root}: {path} missing; run `make run` "
                       f"(python -m experiments.pipeline --workdir={task.root}) first")
  elif task.name == "persuasion":
    from data_pipelines.persuasion import loader
    from ilql_dialogue.tasks import persuasion
    if not all(os.path.isfile(p) for p in persuasion.corpus_paths(task.root).values()):
      data_dir = task.get("data_dir") or loader.default_data_dir()
      for name in (loader.FULL_DIALOG, loader.FULL_INFO):
        if not os.path.isfile(os.path.join(data_dir, name)):
          raise BadInput(f"{where}.task.data_dir={data_dir}: {name} missing; not a Persuasion "
                         "for Good folder")
