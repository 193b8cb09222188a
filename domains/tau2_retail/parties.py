"""The scripted retail parties in the batched party protocol (ilql_dialogue/party.py).

Each row holds its own one-dialogue party (users.ScriptedCustomer, an agent of agents.AGENTS),
built at `reset`; `respond` hands each live row's history to its party. Both scripts are
deterministic, so a row's seed changes nothing and a row replays in any batch. Spec forms
(registered in plugin.py):

    tau2_customer:scripted   the customer that plays its profile (its context)
    tau2_agent:SKILL         an agent of one skill: oracle, no_auth, no_confirm, wrong_item
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from data_pipelines.dialogue import Turn
from domains.tau2_retail import agents, turns, users
from ilql_dialogue.party import check_rows
from ilql_dialogue.party_spec import PartySpec

CUSTOMER_STYLES = ("scripted",)


def _respond(name: str, rows: Sequence[Any],
             histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
  check_rows(name, histories, len(rows))
  return [None if h is None else row.respond(h) for row, h in zip(rows, histories)]


class ScriptedCustomer:
  """users.ScriptedCustomer in every row, each playing the profile of its context."""

  role = turns.CUSTOMER

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    del seeds  # Deterministic.
    self._rows = [users.ScriptedCustomer(users.Profile.from_json(c["profile"]))
                  for c in contexts]

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    return _respond("tau2 ScriptedCustomer", self._rows, histories)


class ScriptedAgent:
  """An agent of one skill (agents.AGENTS) in every row; it reads no context."""

  role = turns.AGENT

  def __init__(self, skill: str = "oracle"):
    if skill not in agents.AGENTS:
      raise ValueError(f"unknown retail agent skill {skill!r}; known: {sorted(agents.AGENTS)}")
    self.skill = skill

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    del seeds  # Deterministic.
    self._rows = [agents.AGENTS[self.skill]() for _ in contexts]

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    return _respond(f"tau2 ScriptedAgent({self.skill})", self._rows, histories)


def make_customer(spec: PartySpec, role: str, **_: Any) -> ScriptedCustomer:
  if role != turns.CUSTOMER:
    raise ValueError(f"party spec {spec} is a retail customer, asked to play {role!r}")
  if spec.target not in CUSTOMER_STYLES:
    raise ValueError(f"party spec {spec}: customer {spec.target!r} is not one of "
                     f"{list(CUSTOMER_STYLES)}")
  return ScriptedCustomer()


def make_agent(spec: PartySpec, role: str, **_: Any) -> ScriptedAgent:
  if role != turns.AGENT:
    raise ValueError(f"party spec {spec} is a retail agent, asked to play {role!r}")
  return ScriptedAgent(spec.target)


def check_customer(spec: PartySpec, role: str) -> None:
  make_customer(spec, role)


def check_agent(spec: PartySpec, role: str) -> None:
  make_agent(spec, role)
