"""The scripted AirDialogue parties: a customer of one style, an agent of one skill.

Each row draws its phrasing family (a group such as `held_out` resolves to
several) from the row's own seed, so a dialogue replays in any batch.
Spec forms (registered in domains/airdialogue/plugin.py):

    scripted:STYLE[/FAMILY]       a customer (customers.STYLES, or `any`: one per row)
    scripted_agent:NAME[/FAMILY]  an agent (agents.AGENTS; `oracle` always succeeds)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from data_pipelines.airdialogue import agents, customers, family_split, schema, to_dialogue
from data_pipelines.dialogue import Turn
from ilql_dialogue.party import check_rows
from ilql_dialogue.party_spec import PartySpec

CUSTOMER, AGENT = to_dialogue.ROLES


def _typed(cls: type, obj: Mapping[str, Any]) -> Any:
  """A schema dataclass from its official JSON (key "class" is `flight_class`)."""
  known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
  fields, extra = {}, {}
  for key, value in obj.items():
    attr = "flight_class" if key == "class" else key
    if attr in known:
      fields[attr] = value
    else:
      extra[key] = value
  return cls(**fields, extra=extra)


def intent_from_json(obj: Mapping[str, Any]) -> schema.Intent:
  return _typed(schema.Intent, obj)


def table_from_json(obj: Mapping[str, Any]) -> schema.FlightTable:
  flights = tuple(_typed(schema.Flight, f) for f in obj["kb"])
  return schema.FlightTable(flights=flights, reservation=obj["reservation"])


DEFAULT_FAMILY = "template"


def _row_family(families: tuple[str, ...], rng: np.random.Generator) -> str:
  """A row's phrasing family: the only one, or one drawn from the row's own generator."""
  return families[0] if len(families) == 1 else families[rng.integers(len(families))]


# `scripted:any[/FAMILY]`: each row's style drawn from its seed among every style, as the
# corpus and the scenes mix them: the training population, e.g. to select agents against.
ANY_STYLE = "any"


class ScriptedCustomer:
  """`customers.Customer` of one style in every row (or of one drawn per row: ANY_STYLE):
  opens, then answers each agent turn.

  `family` is a customer phrasing family or a group of them (family_split).
  """

  def __init__(self, style: str, family: str = DEFAULT_FAMILY):
    if style != ANY_STYLE and style not in customers.STYLES:
      raise ValueError(f"unknown customer style {style!r}; known: {sorted(customers.STYLES)} "
                       f"or {ANY_STYLE!r}")
    self.style = style
    self.families = family_split.SPLIT.resolve("customer", family)
    self._rows: list[customers.Customer] = []

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    self._rows = []
    for c, s in zip(contexts, seeds, strict=True):
      rng = np.random.default_rng(s)
      style = customers.draw_style(rng) if self.style == ANY_STYLE else self.style
      family = _row_family(self.families, rng)
      self._rows.append(customers.Customer(intent_from_json(c), style, rng, family))

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    check_rows("ScriptedCustomer", histories, len(self._rows))
    replies = []
    for b, (customer, history) in enumerate(zip(self._rows, histories)):
      if history is None:
        replies.append(None)
      elif not history:
        replies.append(customer.opening())
      elif history[-1].speaker != AGENT:
        raise ValueError(f"ScriptedCustomer, row {b}: last turn is {history[-1].speaker!r}'s, "
                         f"not the agent's")
      else:
        replies.append(customer.respond(history[-1].text))
    return replies


class ScriptedAgent:
  """`agents.ScriptedAgent` of one skill in every row (`oracle` always succeeds).

  `family` is an agent phrasing family or a group of them (family_split).
  """

  def __init__(self, skill: str, family: str = DEFAULT_FAMILY):
    if skill not in agents.AGENTS:
      raise ValueError(f"unknown scripted agent {skill!r}; known: {sorted(agents.AGENTS)}")
    self.skill = skill
    self.families = family_split.SPLIT.resolve("agent", family)
    self._rows: list[agents.ScriptedAgent] = []

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    self._rows = []
    for c, s in zip(contexts, seeds, strict=True):
      rng = np.random.default_rng(s)
      family = _row_family(self.families, rng)
      self._rows.append(agents.ScriptedAgent(table_from_json(c), self.skill, rng, family))

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    check_rows("ScriptedAgent", histories, len(self._rows))
    replies = []
    for b, (agent, history) in enumerate(zip(self._rows, histories)):
      if history is None:
        replies.append(None)
      elif history and history[-1].speaker != CUSTOMER:
        raise ValueError(f"ScriptedAgent, row {b}: last turn is {history[-1].speaker!r}'s, "
                         f"not the customer's")
      else:
        replies.append(agent.respond(history[-1].text if history else ""))
    return replies


def _name_and_family(spec: PartySpec) -> tuple[str, str]:
  """'terse/numeric' -> ('terse', 'numeric'); no '/FAMILY' -> the template family."""
  name, sep, family = spec.target.partition("/")
  if sep and not family:
    raise ValueError(f"party spec {spec}: empty phrasing family after '/'")
  return name, family or DEFAULT_FAMILY


def make_customer(spec: PartySpec, role: str, **_: Any) -> ScriptedCustomer:
  if role != CUSTOMER:
    raise ValueError(f"party spec {spec} is a scripted customer, asked to play {role!r}")
  return ScriptedCustomer(*_name_and_family(spec))


def make_agent(spec: PartySpec, role: str, **_: Any) -> ScriptedAgent:
  if role != AGENT:
    raise ValueError(f"party spec {spec} is a scripted agent, asked to play {role!r}")
  return ScriptedAgent(*_name_and_family(spec))
