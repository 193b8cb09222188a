"""The reward of a retail episode, as τ²-bench computes its parts.

  db            1 when the episode's database hashes equal to the gold database, else 0. The
                gold database is the task's gold actions replayed, in order, through our tools
                on a fresh copy of db.json; a gold call that fails changes nothing, as in τ²
                (which logs and goes on), and is listed in `gold_errors`. So only the final
                state counts: reads, refused calls and their order do not.
  communicate   1 when every `communicate_info` string is in some agent utterance to the
                customer, case-insensitively, after removing commas from the utterance (τ²'s
                check, so "1,000" says "1000"); tool blocks are not utterances. 1 when the task
                has none.
  reward        db * communicate.

Not judged here: natural-language assertions (`nl_assertions`, which τ² has an LLM judge). The
task files of this snapshot list ["DB", "NL_ASSERTION"] (two tasks: ["DB"]) as the reward
basis: τ²'s own reward for them is db times an LLM's verdict, with communicate_info reported
but not multiplied in. `Reward.unjudged` names the basis parts left out, so a report can say
so. An episode that did not end properly (turn limit, a party giving up) is τ²'s reward 0;
that is the environment's to apply.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from domains.tau2_retail import db as db_lib
from domains.tau2_retail import snapshot as snapshot_lib
from domains.tau2_retail import tasks as tasks_lib
from domains.tau2_retail import tools

JUDGED = ("DB", "COMMUNICATE")


@dataclasses.dataclass(frozen=True)
class GoldError:
  """A gold call that failed on replay, and the text it returned."""

  action_id: str
  name: str
  text: str


@dataclasses.dataclass(frozen=True)
class Gold:
  """The database a task's gold actions lead to."""

  database: db_lib.Database
  state_hash: str
  errors: tuple[GoldError, ...]


@dataclasses.dataclass(frozen=True)
class CommunicateCheck:
  info: str
  met: bool


@dataclasses.dataclass(frozen=True)
class Reward:
  db: float
  communicate: float
  reward: float  # db * communicate.
  communicate_checks: tuple[CommunicateCheck, ...]
  gold_errors: tuple[GoldError, ...]
  unjudged: tuple[str, ...]  # The task's reward basis parts not judged here.
  state_hash: str
  gold_hash: str


def replay(task: tasks_lib.Task, snapshot: snapshot_lib.Snapshot) -> Gold:
  """The task's gold actions on a fresh database."""
  database = snapshot.fresh()
  errors = []
  for action in task.actions:
    observation = tools.call(database, action.name, action.arguments)
    if not observation.ok:
      errors.append(GoldError(action.action_id, action.name, observation.text))
  return Gold(database, db_lib.state_hash(database), tuple(errors))


def communicate_checks(infos: Iterable[str],
                       agent_utterances: Sequence[str]) -> tuple[CommunicateCheck, ...]:
  said = [u.lower().replace(",", "") for u in agent_utterances]
  return tuple(CommunicateCheck(info, any(info.lower() in u for u in said)) for info in infos)


def score(task: tasks_lib.Task, database: db_lib.Database, agent_utterances: Sequence[str],
          snapshot: snapshot_lib.Snapshot, gold: Gold | None = None) -> Reward:
  """The reward of an episode that left `database` and said `agent_utterances` (the agent's
  words to the customer, e.g. `turns.agent_speech(dialogue.turns)`). `gold`: the task's
  `replay(task, snapshot)`, when the caller keeps it (it costs a copy and a hash)."""
  gold = gold or replay(task, snapshot)
  state_hash = db_lib.state_hash(database)
  db_reward = float(state_hash == gold.state_hash)
  checks = communicate_checks(task.communicate_info, agent_utterances)
  communicate = float(all(c.met for c in checks))
  return Reward(db_reward, communicate, db_reward * communicate, checks, gold.errors,
                tuple(b for b in task.reward_basis if b not in JUDGED), state_hash,
                gold.state_hash)
