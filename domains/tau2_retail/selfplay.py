"""Plays one task's dialogue between an agent and a customer, with the tools in between.

Turn protocol (τ²'s half-duplex one): the agent speaks first; an agent turn holding a tool call
is followed by the "tool" turn with its result and the agent again; an agent turn of words is
followed by the customer. The dialogue ends when the customer's turn holds phrases.STOP
("customer_stop", the one proper ending), a party answers None ("<role>_ended"), or after
`max_turns` turns of all three speakers ("turn_limit"). As in τ², a dialogue that did not end
properly scores 0 whatever its database; `Episode.reward` keeps the parts for diagnosis.

A party is anything with `respond(history) -> str | None` (users.ScriptedCustomer,
agents.OracleAgent). This is the one-dialogue loop the scripts were written against; the
framework plays the same parties in batches through its engine (environment.py, parties.py),
which ends a transfer at the agent's message instead of waiting for the customer's stop.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Iterable, Protocol, Sequence

from data_pipelines.dialogue import Dialogue, Turn
from domains.tau2_retail import agents, phrases, reward, snapshot, tasks, turns, users

CUSTOMER_STOP, TURN_LIMIT = "customer_stop", "turn_limit"
MAX_TURNS = 200  # τ²'s default step limit.


class Party(Protocol):

  def respond(self, history: Sequence[Turn]) -> str | None:
    ...


@dataclasses.dataclass(frozen=True)
class Episode:
  task_id: str
  turns: tuple[Turn, ...]
  end_reason: str
  reward: reward.Reward
  tool_errors: dict[str, int]  # By tools.ERROR_KINDS; the gold's own failures included.

  @property
  def success(self) -> bool:
    """τ²'s pass: a proper ending and reward 1 (database and communicate_info)."""
    return self.end_reason == CUSTOMER_STOP and self.reward.reward == 1.0

  def to_dialogue(self) -> Dialogue:
    return Dialogue(f"tau2_retail/{self.task_id}", turns.ROLES, self.turns,
                    outcome=float(self.success),
                    meta={"end_reason": self.end_reason, "db": self.reward.db,
                          "communicate": self.reward.communicate})


def play(task: tasks.Task, frozen: snapshot.Snapshot, agent: Party, customer: Party,
         max_turns: int = MAX_TURNS, gold: reward.Gold | None = None) -> Episode:
  database = frozen.fresh()
  history: list[Turn] = []
  errors: collections.Counter[str] = collections.Counter()
  end_reason = TURN_LIMIT
  speaker = turns.AGENT
  while len(history) < max_turns:
    party = agent if speaker == turns.AGENT else customer
    text = party.respond(history)
    if text is None:
      end_reason = f"{speaker}_ended"
      break
    history.append(Turn(speaker, text))
    if speaker == turns.CUSTOMER:
      if phrases.STOP in text:
        end_reason = CUSTOMER_STOP
        break
      speaker = turns.AGENT
      continue
    observation = turns.execute(database, turns.parse_agent_turn(text))
    if observation is None:
      speaker = turns.CUSTOMER
    else:
      history.append(turns.observation_turn(observation))
      if observation.error:
        errors[observation.error] += 1
  result = reward.score(task, database, turns.agent_speech(history), frozen, gold)
  return Episode(task.task_id, tuple(history), end_reason, result, dict(errors))


def play_oracle(task: tasks.Task, frozen: snapshot.Snapshot, **kwargs) -> Episode:
  """The oracle agent against the scripted customer of `task`."""
  customer = users.ScriptedCustomer(users.profile(task, frozen))
  return play(task, frozen, agents.OracleAgent(), customer, **kwargs)


def summarize(episodes: Iterable[Episode]) -> dict[str, float | int | list[str]]:
  """Counts and shares: success (τ²'s pass without NL assertions), database matches, ..."""
  episodes = list(episodes)
  n = len(episodes)
  errors: collections.Counter[str] = collections.Counter()
  for e in episodes:
    errors.update(e.tool_errors)
  return {
      "tasks": n,
      "success": sum(e.success for e in episodes) / n,
      "db_match": sum(e.reward.db == 1.0 and e.end_reason == CUSTOMER_STOP for e in episodes) / n,
      "communicate": sum(e.reward.communicate == 1.0 for e in episodes) / n,
      "mean_turns": sum(len(e.turns) for e in episodes) / n,
      "tool_errors": dict(errors),
      "db_failures": [e.task_id for e in episodes if e.reward.db != 1.0],
      "not_stopped": [e.task_id for e in episodes if e.end_reason != CUSTOMER_STOP],
  }


def evaluate(all_tasks: Sequence[tasks.Task], frozen: snapshot.Snapshot,
             play_one: Callable[..., Episode] = play_oracle) -> list[Episode]:
  return [play_one(task, frozen) for task in all_tasks]
