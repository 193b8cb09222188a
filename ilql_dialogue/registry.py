"""The registries the core defines and plug-ins fill: algorithms, tasks and party kinds.

The core names no plug-in. A plug-in module registers what it brings when it
is imported. `load_plugins` imports every module declared under the
entry-point group `ilql_dialogue.plugins` (pyproject.toml declares the
built-in domains, CALM and co-training), and a task named `module:attr`
(e.g. `examples.guess_city.task:TASK`) is imported on first use, so a new
task is a new package and edits no existing file.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import types
from typing import TYPE_CHECKING, Any, Callable, Mapping

import ml_collections

from data_pipelines import mdp
from ilql_dialogue import baselines, bc, ilql

if TYPE_CHECKING:
  from ilql_dialogue.environment import Episode

PLUGIN_GROUP = "ilql_dialogue.plugins"


def _empty() -> Mapping[str, Any]:
  return types.MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class StudySpec:
  """What a task shows a person who plays one of its roles in a human study.

  A study serves the task's environment with a person in `human_role` and
  agent parties in the other; these fields are all it needs to know of the
  task beyond the environment.

  human_role: the role the person plays.
  instructions: plain text the person reads first, paragraphs split by blank lines.
  card: the person's private context (as `env.context` gives it) -> labelled lines
    [(label, value), ...] the page shows beside the chat.
  outcome: (env, finished Episode) -> named numbers, scored as the task's evaluation
    scores the same dialogue; the first is the headline ("success", "donation"). A number
    is None where that evaluation leaves the dialogue out of it (AirDialogue's booking
    success of a scenario without a flight to book, P4G's donation never stated).
  closing_field: the number a person states to end the dialogue (e.g. "donation"),
    or None when only the agent ends it.
  closing_turn: that number -> the person's closing turn, text `env.ending` reads.
  closing_range: the allowed values of that number, (low, high).
  env_options: `make_env` options for the study's scenarios (P4G: {"split": "eval"}).
  """

  human_role: str
  instructions: str
  card: Callable[[Mapping[str, Any]], list[tuple[str, str]]]
  outcome: Callable[[Any, "Episode"], dict[str, float | None]]
  closing_field: str | None = None
  closing_turn: Callable[[float], str] | None = None
  closing_range: tuple[float, float] | None = None
  env_options: Mapping[str, Any] = dataclasses.field(default_factory=_empty)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """Everything the framework needs to know about one task (a corpus and its game).

  roles: the parties of a dialogue, in turn order.
  contexts: each dataset role -> the context layouts its data can be built with
    (a dataset role may be a party role or e.g. a dialogue LM reading both).
  serialize_context: (role, private context) -> the text a model reads.
  make_task: config.task -> `ilql_dialogue.tasks.Task` (datasets built on first use).
  make_env: an options ConfigDict (config.rl / config.online_eval) -> an
    `ilql_dialogue.environment.Environment` for online RL and evaluation.
  block_markers: role -> the markers of the closing block only that role may
    write; every other role's decoding is forbidden them.
  check_data: (config.task, where) -> None; raises ValueError naming what is
    missing, so a run fails at start-up rather than at its first batch.
  study: what a person playing one role is shown and scored by (StudySpec), or
    None for a task without a human study.
  """

  name: str
  roles: tuple[str, ...]
  contexts: Mapping[str, tuple[str, ...]]
  serialize_context: mdp.SerializeContext
  make_task: Callable[[ml_collections.ConfigDict], Any] | None = None
  make_env: Callable[[ml_collections.ConfigDict], Any] | None = None
  block_markers: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=_empty)
  check_data: Callable[[ml_collections.ConfigDict, str], None] | None = None
  study: StudySpec | None = None

  def other_role(self, role: str) -> str:
    """The opponent of `role` in a two-party task."""
    others = [r for r in self.roles if r != role]
    if role not in self.roles or len(others) != 1:
      raise ValueError(f"task {self.name!r}: no single opponent for role {role!r} "
                       f"(roles {list(self.roles)})")
    return others[0]


@dataclasses.dataclass(frozen=True)
class PartyKind:
  """A family of parties named by a spec prefix `NAME:` (ilql_dialogue/party_spec.py).

  target: "name" (`NAME:[OPTIONS:]TEXT`, e.g. a scripted style), "party"
    (`NAME:[OPTIONS:]SPEC`, a wrapper around another party spec) or "none"
    (`NAME:OPTIONS`, e.g. an endpoint).
  make: (spec, role, **lm_options) -> a Party.
  check: (spec, role) -> None, a start-up check that loads no weights.
  """

  name: str
  make: Callable[..., Any]
  options: Mapping[str, Callable[[str], Any]] = dataclasses.field(default_factory=_empty)
  target: str = "name"
  check: Callable[[Any, str], None] | None = None
  usage: str = ""


_ALGORITHMS: dict[str, Callable[[ml_collections.ConfigDict], Any]] = {}
_TASKS: dict[str, TaskSpec] = {}
_PARTY_KINDS: dict[str, PartyKind] = {}
_loaded = False


def register_algorithm(name: str, make: Callable[[ml_collections.ConfigDict], Any]) -> None:
  _ALGORITHMS[name] = make


def register_task(spec: TaskSpec) -> TaskSpec:
  _TASKS[spec.name] = spec
  return spec


def register_party_kind(kind: PartyKind) -> PartyKind:
  if kind.target not in ("name", "party", "none"):
    raise ValueError(f"party kind {kind.name!r}: target {kind.target!r}")
  _PARTY_KINDS[kind.name] = kind
  return kind


def load_plugins() -> None:
  """Imports the plug-ins declared under PLUGIN_GROUP (once)."""
  global _loaded
  if _loaded:
    return
  _loaded = True
  for entry in importlib.metadata.entry_points(group=PLUGIN_GROUP):
    try:
      entry.load()
    except ImportError as e:
      raise ImportError(f"plug-in {entry.name!r} ({entry.value}) failed to import: {e}") from e


def _only_fields(fields: tuple[str, ...], make: Callable[[ml_collections.ConfigDict], Any]
                 ) -> Callable[[ml_collections.ConfigDict], Any]:
  """`make`, refusing config.algorithm fields it would silently ignore (a typo such as
  `top_fration` must not train plain BC)."""

  def checked(config: ml_collections.ConfigDict) -> Any:
    unknown = sorted(set(config.algorithm) - {"name", *fields})
    if unknown:
      raise ValueError(f"config.algorithm: unknown fields {unknown}; known: {sorted(fields)}")
    return make(config)

  return checked


register_algorithm("bc", _only_fields((), lambda config: bc.BC()))
register_algorithm("ilql", ilql.ILQL.from_config)
register_algorithm("filtered_bc", _only_fields(("top_fraction",), baselines.FilteredBC.from_config))
register_algorithm("mc_value", baselines.MCValue.from_config)


def algorithm_names() -> list[str]:
  load_plugins()
  return sorted(_ALGORITHMS)


def make_algorithm(config: ml_collections.ConfigDict, where: str = "config") -> Any:
  load_plugins()
  name = config.algorithm.name
  if name not in _ALGORITHMS:
    raise ValueError(f"{where}: field 'algorithm.name': {name!r}; known: {sorted(_ALGORITHMS)}")
  return _ALGORITHMS[name](config)


def task(name: str) -> TaskSpec:
  """The task a config names: a registered name, or `module:attr` holding a TaskSpec."""
  load_plugins()
  if name in _TASKS:
    return _TASKS[name]
  module_name, sep, attr = name.partition(":")
  if not sep:
    raise ValueError(f"unknown task {name!r}; known: {sorted(_TASKS)} or module:attr")
  try:
    spec = getattr(importlib.import_module(module_name), attr, None)
  except ImportError as e:
    raise ValueError(f"task {name!r}: cannot import {module_name!r} ({e})") from None
  if not isinstance(spec, TaskSpec):
    raise ValueError(f"task {name!r}: {module_name}.{attr} is not a TaskSpec")
  _TASKS[name] = spec
  return spec


def tasks() -> dict[str, TaskSpec]:
  load_plugins()
  return dict(_TASKS)


def party_kind(name: str) -> PartyKind | None:
  load_plugins()
  return _PARTY_KINDS.get(name)


def party_kinds() -> dict[str, PartyKind]:
  load_plugins()
  return dict(_PARTY_KINDS)


def serializations() -> dict[str, mdp.SerializeContext]:
  """Every registered task's context serialization, then plain JSON: what a dataset
  without a task in its config may have been built with."""
  return {**{name: spec.serialize_context for name, spec in tasks().items()},
          "json": mdp.json_context}


def block_markers(task_name: str | None = None) -> dict[str, tuple[str, ...]]:
  """role -> the closing-block markers only it may write: of one task, or of every
  registered task when the task is unknown."""
  specs = [task(task_name)] if task_name else list(tasks().values())
  out: dict[str, tuple[str, ...]] = {}
  for spec in specs:
    for role, markers in spec.block_markers.items():
      out[role] = tuple(dict.fromkeys(out.get(role, ()) + tuple(markers)))
  return out
