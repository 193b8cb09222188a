"""The 114 retail tasks (tasks.json) as typed records, with their split (split_tasks.json).

A task is a customer's scenario and how a dialogue with that customer is judged:

  scenario     what the person (or simulator) playing the customer is told, in τ²'s
               structured parts: `known_info` (who they are: a name and zip, or an email),
               `unknown_info` (what they do not remember), `reason_for_call` (what they want,
               in words) and `task_instructions` (how to behave).
  actions      the gold tool calls; replayed on a fresh database they give the state the
               episode's database must end in (reward.py). Some are meant to fail (a wrong
               email the customer gives first, an exchange the gift card cannot pay).
  communicate_info, nl_assertions, reward_basis   as in τ² (reward.py says which are judged).

Splits: "train" (74 tasks) and "test" (40), disjoint, and "base" (all 114), as in
split_tasks.json. A file of the wrong form raises TaskFormatError naming file and field.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from domains.tau2_retail import json_fields, paths, tools

TRAIN, TEST, BASE = "train", "test", "base"
SPLITS = (TRAIN, TEST, BASE)
REWARD_TYPES = ("DB", "ENV_ASSERTION", "NL_ASSERTION", "COMMUNICATE", "ACTION")
REQUESTORS = ("assistant", "user")


class TaskFormatError(json_fields.FormatError):
  """A tasks.json or split_tasks.json that cannot be read; names the file and the field."""


@dataclasses.dataclass(frozen=True)
class Action:
  """A gold tool call. `compare_args`: the arguments τ²'s action check compares (None: all)."""

  action_id: str
  name: str  # A tool of tools.TOOLS.
  arguments: Mapping[str, Any]
  info: str | None = None
  compare_args: tuple[str, ...] | None = None
  requestor: str = "assistant"

  @property
  def writes(self) -> bool:
    return tools.TOOLS[self.name].writes


@dataclasses.dataclass(frozen=True)
class Scenario:
  """The customer's instructions, in τ²'s structured parts."""

  reason_for_call: str
  known_info: str | None
  unknown_info: str | None
  task_instructions: str
  domain: str
  persona: str | None = None


@dataclasses.dataclass(frozen=True)
class Task:
  task_id: str
  split: str  # TRAIN or TEST.
  scenario: Scenario
  actions: tuple[Action, ...]
  communicate_info: tuple[str, ...]
  nl_assertions: tuple[str, ...]
  reward_basis: tuple[str, ...]
  purpose: str | None = None
  notes: str | None = None
  issues: tuple[str, ...] = ()  # Titles of the issues τ²'s maintainers filed on the task.

  @property
  def write_actions(self) -> tuple[Action, ...]:
    return tuple(a for a in self.actions if a.writes)


def _action(r: json_fields.Reader, value: Any, where: str) -> Action:
  obj = r.record(value, where, ("action_id", "name", "arguments"),
                 ("info", "compare_args", "requestor"))
  name = r.string(obj["name"], f"{where}.name", tuple(tools.TOOLS))
  if not isinstance(obj["arguments"], dict):
    raise r.fail(f"{where}.arguments", "expected an object")
  compare = r.optional(obj, "compare_args", where, r.strings)
  return Action(r.string(obj["action_id"], f"{where}.action_id"), name, dict(obj["arguments"]),
                r.optional(obj, "info", where, r.string),
                None if compare is None else tuple(compare),
                r.string(obj.get("requestor", "assistant"), f"{where}.requestor", REQUESTORS))


def _scenario(r: json_fields.Reader, value: Any, where: str) -> Scenario:
  obj = r.record(value, where, ("instructions",), ("persona",))
  at = f"{where}.instructions"
  if not isinstance(obj["instructions"], dict):
    raise r.fail(at, "expected the structured form (an object), got "
                 f"{type(obj['instructions']).__name__}")
  ins = r.record(obj["instructions"], at, ("reason_for_call", "task_instructions", "domain"),
                 ("known_info", "unknown_info"))
  return Scenario(r.string(ins["reason_for_call"], f"{at}.reason_for_call"),
                  r.optional(ins, "known_info", at, r.string),
                  r.optional(ins, "unknown_info", at, r.string),
                  r.string(ins["task_instructions"], f"{at}.task_instructions"),
                  r.string(ins["domain"], f"{at}.domain"),
                  r.optional(obj, "persona", where, r.string))


def _issue(r: json_fields.Reader, value: Any, where: str) -> str:
  """An issue's title; its other fields (author, dates, files) are the tracker's business."""
  if not isinstance(value, dict):
    raise r.fail(where, f"expected an object, got {type(value).__name__}")
  return r.string(value.get("title"), f"{where}.title")


def _task(r: json_fields.Reader, value: Any, where: str, split: str) -> Task:
  obj = r.record(value, where, ("id", "user_scenario", "evaluation_criteria"),
                 ("description", "initial_state", "issues"))
  if obj.get("initial_state") is not None:
    raise r.fail(f"{where}.initial_state", "not supported: every retail task starts from db.json")
  at = f"{where}.evaluation_criteria"
  crit = r.record(obj["evaluation_criteria"], at, ("actions", "reward_basis"),
                  ("communicate_info", "nl_assertions", "env_assertions"))
  if crit.get("env_assertions"):
    raise r.fail(f"{at}.env_assertions", "not supported (no retail task has any)")
  description = obj.get("description") or {}
  desc = r.record(description, f"{where}.description", (),
                  ("purpose", "relevant_policies", "notes"))
  issues = r.list_of(obj.get("issues") or [], f"{where}.issues", lambda v, w: _issue(r, v, w))
  return Task(
      r.string(obj["id"], f"{where}.id"), split, _scenario(r, obj["user_scenario"],
                                                           f"{where}.user_scenario"),
      tuple(r.list_of(crit["actions"] or [], f"{at}.actions", lambda v, w: _action(r, v, w))),
      tuple(r.strings(crit.get("communicate_info") or [], f"{at}.communicate_info")),
      tuple(r.strings(crit.get("nl_assertions") or [], f"{at}.nl_assertions")),
      tuple(r.list_of(crit["reward_basis"], f"{at}.reward_basis",
                      lambda v, w: r.string(v, w, REWARD_TYPES))),
      purpose=r.optional(desc, "purpose", f"{where}.description", r.string),
      notes=r.optional(desc, "notes", f"{where}.description", r.string),
      issues=tuple(issues))


def _read_json(path: str, error: type[json_fields.FormatError]) -> Any:
  with open(path, encoding="utf-8") as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise error(f"{path}: line {e.lineno}: not JSON: {e.msg}") from None


def read_splits(data_dir: str | None = None) -> dict[str, tuple[str, ...]]:
  """Task ids by split; train and test must be disjoint and make up base."""
  path = paths.data_file(paths.SPLITS_FILE, data_dir)
  r = json_fields.Reader(path, TaskFormatError)
  obj = r.record(_read_json(path, TaskFormatError), "<top>", SPLITS)
  splits = {s: tuple(r.strings(obj[s], s)) for s in SPLITS}
  both = set(splits[TRAIN]) & set(splits[TEST])
  if both:
    raise r.fail(TEST, f"ids also in {TRAIN}: {sorted(both)}")
  if set(splits[TRAIN]) | set(splits[TEST]) != set(splits[BASE]):
    raise r.fail(BASE, f"differs from the union of {TRAIN} and {TEST}")
  return splits


def load(data_dir: str | None = None, split: str = BASE) -> list[Task]:
  """The tasks of `split` (TRAIN, TEST or BASE), in the file's order."""
  if split not in SPLITS:
    raise ValueError(f"split {split!r} is not one of {list(SPLITS)}")
  splits = read_splits(data_dir)
  split_of = {i: s for s in (TRAIN, TEST) for i in splits[s]}
  path = paths.data_file(paths.TASKS_FILE, data_dir)
  r = json_fields.Reader(path, TaskFormatError)
  rows = _read_json(path, TaskFormatError)
  if not isinstance(rows, list):
    raise r.fail("<top>", f"expected a list of tasks, got {type(rows).__name__}")
  out = []
  for i, row in enumerate(rows):
    task_id = row.get("id") if isinstance(row, dict) else None
    if task_id not in split_of:
      raise r.fail(f"[{i}].id", f"{task_id!r} is in no split of {paths.SPLITS_FILE}")
    out.append(_task(r, row, f"[{i}]", split_of[task_id]))
  ids = [t.task_id for t in out]
  if len(set(ids)) != len(ids):
    raise r.fail("<top>", "repeated task ids")
  missing = set(split_of) - set(ids)
  if missing:
    raise r.fail("<top>", f"ids of {paths.SPLITS_FILE} without a task: {sorted(missing)}")
  return [t for t in out if split in (BASE, t.split)]
