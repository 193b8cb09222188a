"""Which customer phrasing families a corpus may use, and which are kept for evaluation.

family_split.json next to this module lists `train` and `held_out` families, each family of
customer_families.FAMILIES exactly once. Generated tasks draw their customer's family from
`train` only (generate.py); evaluation may name any family or a whole group
(`tau2_customer:answer_only/held_out`), so the gap between the groups measures how far an
agent reads wording it was never trained on.
"""

from __future__ import annotations

import dataclasses
import os

from data_pipelines import files
from domains.tau2_retail import customer_families

DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "family_split.json")
GROUPS = ("train", "held_out")


@dataclasses.dataclass(frozen=True)
class FamilySplit:
  train: tuple[str, ...]
  held_out: tuple[str, ...]

  def resolve(self, name: str) -> tuple[str, ...]:
    """A family name -> (name,); a group name (train, held_out) -> its families."""
    if name in GROUPS:
      return getattr(self, name)
    if name not in customer_families.FAMILIES:
      raise ValueError(f"unknown retail customer phrasing family {name!r}; known: "
                       f"{sorted(customer_families.FAMILIES)} or a group {list(GROUPS)}")
    return (name,)


def from_json(obj: object, where: str) -> FamilySplit:
  """Checks that the groups list each family exactly once, and that `train` is not empty."""
  if not isinstance(obj, dict) or set(obj) != set(GROUPS):
    raise ValueError(f"{where}: expected an object with exactly the keys {list(GROUPS)}")
  for group in GROUPS:
    if not isinstance(obj[group], list) or not all(isinstance(n, str) for n in obj[group]):
      raise ValueError(f"{where}: field {group!r} must be a list of family names")
  listed = obj["train"] + obj["held_out"]
  if sorted(listed) != sorted(customer_families.FAMILIES):
    raise ValueError(f"{where}: the groups must list each of "
                     f"{sorted(customer_families.FAMILIES)} exactly once, got {listed}")
  if not obj["train"]:
    raise ValueError(f"{where}: field 'train' is empty")
  return FamilySplit(tuple(obj["train"]), tuple(obj["held_out"]))


def load(path: str = DEFAULT_PATH) -> FamilySplit:
  return from_json(files.read_json(path), path)


SPLIT = load()
