"""The retail domain as an `ilql_dialogue.environment.Environment`, with tool calls as turns.

  scenarios   tasks of a split: the real "train" (74) / "test" (40) / "base" (114), or
              "generated" (generate.py; task i of seed s its own draw). A real split's
              scenarios are its tasks in an order drawn from the seed, round after round
              (`default_rng([seed, r])` permutes round r), so a seed's first n are the same
              for any n and n = the split's size plays each task once.
  contexts    the customer's profile and instructions; the agent's the policy summary
              (contexts.py; a model may read it or not).
  turn order  the agent first (τ²'s greeting), then the customer. An agent turn holding a
              tool call (turns.py) is executed on the row's own database (`start`: a fresh
              copy per row, so no two rows share one) and answered by a turn of speaker
              "tool"; the agent speaks again.
  ending      "customer_stop": the customer's turn holds phrases.STOP; "transfer": the agent's
              first words after a transfer_to_human_agents call that succeeded (the policy's
              message; the row remembers the call). These are τ²'s proper endings; a dialogue
              that ends otherwise (turn limit, a party giving up) scores 0, as in τ².
  reward      τ²'s db part x communicate part (reward.py), both parts in the episode info with
              the tool calls, their errors by kind (tools.ERROR_KINDS: malformed JSON, unknown
              tool, wrong arguments, a tool's refusal) and the policy breaches the transcript
              shows (policy_audit.py).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Sequence

import numpy as np

from domains.tau2_retail import (contexts, generate, phrases, policy_audit, reward, snapshot,
                                 tasks, tools, turns, users)
from domains.tau2_retail import db as db_lib
from ilql_dialogue import environment

CUSTOMER_STOP, TRANSFER = "customer_stop", "transfer"
PROPER_ENDINGS = (CUSTOMER_STOP, TRANSFER)
SPLITS = (tasks.TRAIN, tasks.TEST, tasks.BASE, generate.SPLIT)
DEFAULT_MAX_TURNS = 200  # τ²'s step limit; tool turns count.
_TRANSFER_TOOL = phrases.WISH_TOOLS[phrases.TRANSFER]


@dataclasses.dataclass(frozen=True)
class Scenario:
  """One task and its customer's profile; `key` names it (and seeds its rows)."""

  key: str
  task: tasks.Task
  profile: users.Profile


@dataclasses.dataclass
class Row:
  """One played dialogue's own state: its database and what its tool calls did."""

  scenario: Scenario
  database: db_lib.Database
  calls: int = 0
  errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  transferred: bool = False  # A transfer call succeeded: the agent's next words end it.


class RetailEnv:
  """The retail task for the engine (module docstring)."""

  turn_order = (turns.AGENT, turns.CUSTOMER)
  seed_streams = {turns.AGENT: 0, turns.CUSTOMER: 1}
  OBSERVER = turns.TOOL

  def __init__(self, split: str = generate.SPLIT, data_dir: str | None = None, *,
               frozen: snapshot.Snapshot | None = None,
               real_tasks: Sequence[tasks.Task] | None = None):
    """`frozen` and `real_tasks` replace the database and the task files (tests)."""
    if split not in SPLITS:
      raise ValueError(f"RetailEnv: split {split!r} is not one of {list(SPLITS)}")
    self.split = split
    self.frozen = frozen or snapshot.Snapshot(db_lib.load(data_dir))
    self._generator = generate.Generator(self.frozen) if split == generate.SPLIT else None
    if self._generator is None:
      self._tasks = [t for t in (real_tasks if real_tasks is not None
                                 else tasks.load(data_dir, split))
                     if split in (tasks.BASE, t.split)]
      if not self._tasks:
        raise ValueError(f"RetailEnv: no task in split {split!r}")
    self._profiles: dict[str, users.Profile] = {}
    self._gold: dict[str, reward.Gold] = {}

  def sample(self, seed: int, num: int) -> list[Scenario]:
    if self._generator is not None:
      return [Scenario(f"{generate.SPLIT}:{g.task.task_id}", g.task, g.profile)
              for g in self._generator.tasks(seed, num)]
    n = len(self._tasks)
    orders = [np.random.default_rng([seed, r]).permutation(n) for r in range(-(-num // n))]
    out = []
    for i in range(num):
      task = self._tasks[orders[i // n][i % n]]
      if task.task_id not in self._profiles:
        self._profiles[task.task_id] = users.profile(task, self.frozen)
      out.append(Scenario(f"{self.split}:{task.task_id}:{i // n}", task,
                          self._profiles[task.task_id]))
    return out

  def scenario_key(self, scenario: Scenario) -> str:
    return scenario.key

  def context(self, scenario: Scenario, role: str) -> dict[str, Any]:
    if role == turns.CUSTOMER:
      return contexts.customer(scenario.task, scenario.profile)
    if role == turns.AGENT:
      return contexts.agent()
    raise ValueError(f"unknown role {role!r}; expected one of {list(self.turn_order)}")

  def start(self, scenario: Scenario, key: str) -> Row:
    del key  # Every row starts from the same frozen database.
    return Row(scenario, self.frozen.fresh())

  def ending(self, row: Row, role: str, text: str) -> environment.Ending | None:
    if role == turns.CUSTOMER:
      return environment.Ending(CUSTOMER_STOP) if phrases.STOP in text else None
    ended = row.transferred and not turns.parse_agent_turn(text).is_tool_turn
    return environment.Ending(TRANSFER) if ended else None

  def observe(self, row: Row, role: str, text: str) -> str | None:
    if role != turns.AGENT:
      return None
    parsed = turns.parse_agent_turn(text)
    observation = turns.execute(row.database, parsed)
    if observation is None:
      return None
    row.calls += 1
    if observation.error:
      row.errors[observation.error] += 1
    row.transferred |= observation.ok and parsed.call.name == _TRANSFER_TOOL
    return observation.text

  def gold(self, task: tasks.Task) -> reward.Gold:
    if task.task_id not in self._gold:
      self._gold[task.task_id] = reward.replay(task, self.frozen)
    return self._gold[task.task_id]

  def finish(self, row: Row, episode: environment.Episode) -> dict[str, Any]:
    task = row.scenario.task
    result = reward.score(task, row.database, turns.agent_speech(episode.turns), self.frozen,
                          self.gold(task))
    proper = episode.end_reason in PROPER_ENDINGS
    return {"task_id": task.task_id, "db": result.db, "communicate": result.communicate,
            "reward": result.reward if proper else 0.0, "proper_ending": proper,
            "tool_calls": row.calls, "tool_errors": sum(row.errors.values()),
            **{f"errors/{kind}": row.errors[kind] for kind in tools.ERROR_KINDS},
            "breaches": len(policy_audit.audit(episode.turns))}

  def reward(self, episode: environment.Episode) -> float:
    if "reward" not in episode.info:
      raise ValueError(f"RetailEnv.reward: episode {episode.key!r} was not played by "
                       "environment.play (no reward in its info)")
    return float(episode.info["reward"])

  def metrics(self, episodes: Sequence[environment.Episode]) -> dict[str, float]:
    """The reward's two parts (mean ± s.e.), proper endings, tool calls and errors, and
    policy breaches, per episode."""
    out: dict[str, float] = {}
    for part in ("db", "communicate"):
      values = np.asarray([e.info[part] for e in episodes], np.float64)
      out[part] = float(values.mean())
      out[f"{part}_stderr"] = (float(values.std(ddof=1) / np.sqrt(len(values)))
                               if len(values) > 1 else float("nan"))
    for name in ("proper_ending", "tool_calls", "tool_errors", "breaches",
                 *(f"errors/{kind}" for kind in tools.ERROR_KINDS)):
      out[name] = float(np.mean([float(e.info[name]) for e in episodes]))
    return out
