"""Builds the party a spec names (ilql_dialogue/party_spec.py) to play one role.

Checkpoints and user classes are the core's own kinds; every other kind is
registered by a plug-in (registry.PartyKind): the tasks' scripted parties,
CALM's planner, the k-sample picker, an LLM endpoint.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
from typing import Any

from ilql_dialogue import party_spec, policy_io, registry
from ilql_dialogue.party import Party
from ilql_dialogue.party_spec import PartySpec


def _spec(spec: str | PartySpec) -> PartySpec:
  return party_spec.parse(spec) if isinstance(spec, str) else spec


def load_class(spec: PartySpec, role: str) -> Party:
  """Instantiates `module.path:Class` with the spec's options and checks it speaks the protocol."""
  module_name, _, class_name = spec.target.partition(":")
  try:
    module = importlib.import_module(module_name)
  except ImportError as e:
    raise ValueError(f"party spec {spec}: cannot import module {module_name!r} ({e})") from None
  cls = getattr(module, class_name, None)
  if not callable(cls):
    raise ValueError(f"party spec {spec}: module {module_name!r} has no class {class_name!r}")
  try:
    parameters = inspect.signature(cls).parameters
  except (TypeError, ValueError):
    parameters = {}
  options = dict(spec.options)
  if "role" in parameters:
    options["role"] = role
  try:
    party = cls(**options)
  except TypeError as e:
    raise ValueError(f"party spec {spec}: {class_name}({', '.join(options)}): {e}") from None
  missing = [m for m in ("reset", "respond") if not callable(getattr(party, m, None))]
  if missing:
    raise TypeError(f"party spec {spec}: {class_name} lacks {missing} (see the Party protocol "
                    f"in ilql_dialogue/party.py)")
  return party


def make_party(spec: str | PartySpec, role: str, **lm_options: Any) -> Party:
  """The party `spec` names, playing `role`.

  `lm_options` go to the checkpoint's LMParty (sampling controls, beta,
  max_new_tokens, ...); scripted parties and user classes take none.
  """
  spec = _spec(spec)
  if spec.kind == party_spec.CHECKPOINT:
    if not os.path.isdir(spec.target):
      raise ValueError(f"party spec {spec}: no such directory (expected {party_spec.usage()})")
    return policy_io.lm_party(policy_io.load_policy(spec.target, step=spec.step), role,
                              **lm_options)
  if spec.kind == party_spec.CLASS:
    return load_class(spec, role)
  return registry.party_kind(spec.kind).make(spec, role, **lm_options)


def check(spec: str | PartySpec, role: str) -> PartySpec:
  """A start-up check that loads no weights: the kind's own check, a class's module
  importable, a checkpoint's directory present. Returns the parsed spec."""
  spec = _spec(spec)
  if spec.kind == party_spec.CLASS:
    module = spec.target.partition(":")[0]
    try:
      found = importlib.util.find_spec(module) is not None
    except ImportError:
      found = False
    if not found:
      raise ValueError(f"party spec {spec}: no module {module!r}")
  elif spec.kind == party_spec.CHECKPOINT:
    if not os.path.isdir(spec.target):
      raise ValueError(f"party spec {spec}: no such directory (expected {party_spec.usage()})")
  else:
    kind = registry.party_kind(spec.kind)
    if kind.check is not None:
      kind.check(spec, role)
    if spec.inner is not None:
      check(spec.inner, role)
  return spec
