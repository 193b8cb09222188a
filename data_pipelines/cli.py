"""Start-up checks of the command-line mains: bad input is one line naming it, not a traceback.

A mistyped path or config field should be reported, before anything heavy
starts (compiling, loading weights, building datasets), as one line that names
the flag or field and the path, not as a traceback from deep inside a library.
Every main runs through `run(main)`, and its config flags through
`define_config_file`:

  * flag errors, a missing --config file and an override of a field the config
    does not have (`--config.data.foo=1`) are reported while flags are parsed;
  * the main first validates its input with the checks below (and those of
    workflows/config_checks.py, which need the core), which raise BadInput.

Both print `error: MESSAGE` on stderr and exit with status 1. Errors raised
later, from inside training or evaluation, keep their tracebacks: those are
bugs or data problems to debug, not bad input.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
from typing import Any, Callable, Iterator, NoReturn

import ml_collections
from absl import app, flags
from ml_collections import config_flags

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


def check_known_fields(section: ml_collections.ConfigDict, known: Any, where: str) -> None:
  unknown = sorted(set(section) - set(known))
  if unknown:
    raise BadInput(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}")
