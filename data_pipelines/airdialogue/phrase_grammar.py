"""A tiny phrase grammar: patterns whose bracketed parts are alternatives, drawn at random.

`"[I'd like|I want] to [book|reserve] a flight[ please|]"` stands for eight
sentences. Writing forms as parts to combine, not as whole sentences, is what
makes a phrasing family produce thousands of distinct utterances from a page
of patterns. `{field}` slots are filled after the alternatives are drawn.
Brackets do not nest.
"""

from __future__ import annotations

import math
import re
import string
from typing import Mapping

import numpy as np

_CHOICE_RE = re.compile(r"\[([^\[\]]*)\]")


def check(pattern: str) -> None:
  """Raises ValueError when a pattern's brackets are unbalanced or nested."""
  if "[" in _CHOICE_RE.sub("", pattern) or "]" in _CHOICE_RE.sub("", pattern):
    raise ValueError(f"phrase pattern {pattern!r}: unbalanced or nested brackets")


def check_fields(pattern: str, allowed: set[str] | tuple[str, ...], where: str) -> None:
  """`check`, and a ValueError naming `where` when the pattern fills a field not `allowed`."""
  check(pattern)
  fields = {f for _, f, _, _ in string.Formatter().parse(pattern) if f}
  if not fields <= set(allowed):
    raise ValueError(f"{where}: pattern {pattern!r} uses fields {sorted(fields - set(allowed))}")


def expand(pattern: str, rng: np.random.Generator, fields: Mapping[str, str] = {}) -> str:
  """One sentence of the pattern: each [a|b|c] replaced by one of its parts, then fields filled."""
  def choose(m: re.Match) -> str:
    options = m[1].split("|")
    return options[rng.integers(len(options))]

  text = _CHOICE_RE.sub(choose, pattern)
  try:
    text = text.format(**fields)
  except KeyError as e:
    raise ValueError(f"phrase pattern {pattern!r}: no value for field {e.args[0]!r}") from None
  return " ".join(text.split())


def count(pattern: str) -> int:
  """How many sentences the pattern stands for (before fields are filled)."""
  return math.prod(len(m[1].split("|")) for m in _CHOICE_RE.finditer(pattern))
