"""Which phrasing families a training corpus may use, and which are kept for evaluation.

The split lives in a config file (family_split.json next to this module by
default): for each role, `train` and `held_out` lists that together name
every family of that role exactly once. The corpus generator only ever draws
from `train`; evaluation may pick any family, or a whole group by its name
(`scripted:terse/held_out`), so a learned agent's generalization gap is the
difference between the two groups.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

from data_pipelines import files
from data_pipelines.airdialogue import agent_families
from data_pipelines.airdialogue import customer_families

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "family_split.json")
GROUPS = ("train", "held_out")
_REGISTRIES = {"customer": customer_families.FAMILIES, "agent": agent_families.FAMILIES}


@dataclasses.dataclass(frozen=True)
class FamilySplit:
  """role -> group -> family names."""

  groups: Mapping[str, Mapping[str, tuple[str, ...]]]

  def train(self, role: str) -> tuple[str, ...]:
    return self.groups[role]["train"]

  def held_out(self, role: str) -> tuple[str, ...]:
    return self.groups[role]["held_out"]

  def resolve(self, role: str, name: str) -> tuple[str, ...]:
    """A family name -> (name,); a group name (train, held_out) -> its families."""
    if role not in self.groups:
      raise ValueError(f"family split: unknown role {role!r}; known: {sorted(self.groups)}")
    if name in GROUPS:
      return self.groups[role][name]
    if name not in _REGISTRIES[role]:
      raise ValueError(f"unknown {role} phrasing family {name!r}; known: "
                       f"{sorted(_REGISTRIES[role])} or a group {list(GROUPS)}")
    return (name,)


def from_json(obj: object, where: str) -> FamilySplit:
  """Checks that every role lists each of its families in exactly one group."""
  if not isinstance(obj, dict) or set(obj) != set(_REGISTRIES):
    raise ValueError(f"{where}: expected an object with keys {sorted(_REGISTRIES)}")
  groups = {}
  for role, registry in _REGISTRIES.items():
    entry = obj[role]
    if not isinstance(entry, dict) or set(entry) != set(GROUPS):
      raise ValueError(f"{where}: field {role!r} must have exactly the keys {list(GROUPS)}")
    listed = []
    for group in GROUPS:
      names = entry[group]
      if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{where}: field '{role}.{group}' must be a list of family names")
      unknown = sorted(set(names) - set(registry))
      if unknown:
        raise ValueError(f"{where}: field '{role}.{group}' names unknown families {unknown}; "
                         f"known: {sorted(registry)}")
      listed += names
    if sorted(listed) != sorted(registry):
      raise ValueError(f"{where}: field {role!r} must list each of {sorted(registry)} exactly "
                       f"once across {list(GROUPS)}, got {listed}")
    if not entry["train"]:
      raise ValueError(f"{where}: field '{role}.train' is empty")
    groups[role] = {g: tuple(entry[g]) for g in GROUPS}
  return FamilySplit(groups)


def load(path: str = DEFAULT_PATH) -> FamilySplit:
  return from_json(files.read_json(path), path)


SPLIT = load()
