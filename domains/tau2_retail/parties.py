"""The scripted retail parties in the batched party protocol (ilql_dialogue/party.py).

Each row holds its own one-dialogue party (users.ScriptedCustomer, an agent of agents.AGENTS),
built at `reset`; `respond` hands each live row's history to its party. The agents are
deterministic; a customer draws its style and family (when the spec leaves a choice) and its
words from the row's own seed, so a row replays in any batch. Spec forms (registered in
plugin.py):

    tau2_customer:STYLE[/FAMILY]  the customer that plays its profile (its context), in
        STYLE: `scripted` (the original customer: answer_only, family template), a style of
               customer_styles.STYLES (volunteer, answer_only, terse, chatty), `any` (one
               drawn per row), or `profile` (each profile's own: a generated task's drawn
               from its seed, a real task's the default)
        FAMILY: a phrasing family of customer_families.FAMILIES, a group of family_split
               (`train`, `held_out`: one drawn per row), or `profile`; by default `template`
               (`profile` after STYLE `profile`)
    tau2_agent:SKILL              an agent of one skill: oracle, no_auth, no_confirm, wrong_item

`tau2_customer:scripted` is the customer every result before the families was measured with.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from data_pipelines.dialogue import Turn
from domains.tau2_retail import (agents, customer_families, customer_styles, family_split,
                                 turns, users)
from ilql_dialogue.party import check_rows
from ilql_dialogue.party_spec import PartySpec

SCRIPTED, ANY, PROFILE = "scripted", "any", "profile"
CUSTOMER_STYLES = (SCRIPTED, *customer_styles.STYLES, ANY, PROFILE)


def _respond(name: str, rows: Sequence[Any],
             histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
  check_rows(name, histories, len(rows))
  return [None if h is None else row.respond(h) for row, h in zip(rows, histories)]


class ScriptedCustomer:
  """users.ScriptedCustomer in every row, each playing the profile of its context in a style
  and a family (module docstring: the spec's STYLE and FAMILY)."""

  role = turns.CUSTOMER

  def __init__(self, style: str = SCRIPTED, family: str | None = None):
    if style not in CUSTOMER_STYLES:
      raise ValueError(f"unknown retail customer style {style!r}; known: {list(CUSTOMER_STYLES)}")
    if family is None:
      family = PROFILE if style == PROFILE else customer_families.DEFAULT_FAMILY
    self.style = customer_styles.DEFAULT_STYLE if style == SCRIPTED else style
    self.families = None if family == PROFILE else family_split.SPLIT.resolve(family)

  def _row(self, context: Mapping[str, Any], seed: int) -> users.ScriptedCustomer:
    rng = np.random.default_rng(seed)
    profile = users.Profile.from_json(context["profile"])
    if self.style == PROFILE:
      style = profile.style
    else:
      style = customer_styles.draw(rng) if self.style == ANY else self.style
    families = self.families or (profile.family,)
    family = families[rng.integers(len(families))] if len(families) > 1 else families[0]
    return users.ScriptedCustomer(profile, rng, style=style, family=family)

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    self._rows = [self._row(c, s) for c, s in zip(contexts, seeds, strict=True)]

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
  style, sep, family = spec.target.partition("/")
  if sep and not family:
    raise ValueError(f"party spec {spec}: empty phrasing family after '/'")
  try:
    return ScriptedCustomer(style, family or None)
  except ValueError as e:
    raise ValueError(f"party spec {spec}: {e}") from None


def make_agent(spec: PartySpec, role: str, **_: Any) -> ScriptedAgent:
  if role != turns.AGENT:
    raise ValueError(f"party spec {spec} is a retail agent, asked to play {role!r}")
  return ScriptedAgent(spec.target)


def check_customer(spec: PartySpec, role: str) -> None:
  make_customer(spec, role)


def check_agent(spec: PartySpec, role: str) -> None:
  make_agent(spec, role)
