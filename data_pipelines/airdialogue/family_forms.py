"""What only the held-out phrasing families say: the forms a leak check looks for.

No training stream may hold a held-out family's value form (an ordinal day
word, a formal airport name, a fare in USD) or its sentence forms, or the
generalization gap measured on held-out families means nothing. These lists
are derived from the family definitions, so they follow every edit of a
family instead of drifting like a hand-kept list:

  value forms  every held-out renderer enumerated over every value the
               generator draws (customer_families.Choices lists its forms);
  key words    words of the held-out patterns that no training pattern
               (customer or agent) and no training value contains;
  n-grams      word n-grams of the held-out patterns, fields removed, that
               no training pattern contains.

Text is compared as lower-cased word tokens (`tokens`), so punctuation and
case, which typing noise changes, never hide a form.
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Iterable

import numpy as np

from data_pipelines.airdialogue import agent_families
from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import customer_families
from data_pipelines.airdialogue import family_split
from data_pipelines.airdialogue import gazetteer
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import typing_noise

# Renderer attribute -> every value the generator draws for it.
VALUES = {
    "date": tuple((m, str(d)) for m in schema.MONTHS for d in range(1, 32)),
    "airport": tuple((c,) for c in context.AIRPORTS),
    "price": tuple((p,) for p in schema.MAX_PRICES),
    "time_of_day": tuple((t,) for t in schema.TIMES_OF_DAY),
    "flight_class": tuple((c,) for c in schema.CLASSES),
}
_DRAWS = 16  # Draws per value of a renderer that lists no options (the training ones).
_TOKEN_RE = re.compile(r"[\w$][\w$'./:-]*\w|[\w$]")
_CHOICE_RE = re.compile(r"\[([^\[\]]*)\]")
_FIELD_RE = re.compile(r"\{\w+\}")


def tokens(text: str) -> tuple[str, ...]:
  """Lower-cased words; inner punctuation stays ("sea-tac", "$500.00", "05/12", "o'hare")."""
  return tuple(_TOKEN_RE.findall(text.lower()))


def find(text: str, forms: Iterable[str]) -> set[str]:
  """The forms (token strings, as `held_out_forms` gives them) that occur in `text`."""
  by_length: dict[int, set[tuple[str, ...]]] = {}
  for form in forms:
    words = tuple(form.split())
    by_length.setdefault(len(words), set()).add(words)
  words = tokens(text)
  return {" ".join(words[i:i + n]) for n, wanted in by_length.items()
          for i in range(len(words) - n + 1) if words[i:i + n] in wanted}


def renderings(family: customer_families.CustomerFamily, kind: str) -> set[str]:
  """Every form `family` writes a value of `kind` in (drawn, where it lists no options)."""
  render = getattr(family, kind)
  if isinstance(render, customer_families.Choices):
    return {form for value in VALUES[kind] for form in render.options(*value)}
  rng = np.random.default_rng(0)
  return {render(*value, rng) for value in VALUES[kind] for _ in range(_DRAWS)}


def _expansions(pattern: str) -> Iterable[str]:
  pieces = _CHOICE_RE.split(pattern)  # Odd pieces are the insides of [a|b] choices.
  options = [piece.split("|") if i % 2 else [piece] for i, piece in enumerate(pieces)]
  return ("".join(combo) for combo in itertools.product(*options))


def sentence_forms(role: str, name: str) -> set[tuple[tuple[str, ...], frozenset[str]]]:
  """(tokens, fields) of each expansion of each of a family's patterns, its fields left out."""
  return {(tuple(w for segment in _FIELD_RE.split(text) for w in tokens(segment)),
           frozenset(f[1:-1] for f in _FIELD_RE.findall(text)))
          for pattern in _patterns(role, name) for text in _expansions(pattern)}


def _patterns(role: str, name: str) -> Iterable[str]:
  if role == "agent":
    return (p for patterns in agent_families.FAMILIES[name].parts.values() for p in patterns)
  family = customer_families.FAMILIES[name]
  return (p for part in family.parts for verbosity in customer_families.VERBOSITIES
          for p in family.patterns(part, verbosity))


def _segments(role: str, names: Iterable[str]) -> set[tuple[str, ...]]:
  """The pattern text between fields, as token tuples, over every expansion."""
  return {tokens(segment) for name in names for pattern in _patterns(role, name)
          for text in _expansions(pattern) for segment in _FIELD_RE.split(text)}


def _ngrams(segments: Iterable[tuple[str, ...]], n: int) -> set[tuple[str, ...]]:
  return {s[i:i + n] for s in segments for i in range(len(s) - n + 1)}


def _training_words(train: dict[str, tuple[str, ...]]) -> set[str]:
  """Every word a training stream can hold outside the held-out patterns."""
  words = {w for role, names in train.items() for s in _segments(role, names) for w in s}
  for name in train["customer"]:
    for kind in VALUES:
      words |= {w for form in renderings(customer_families.FAMILIES[name], kind)
                for w in tokens(form)}
  fixed = [*context.FIRST_NAMES, *context.LAST_NAMES, *context.AIRPORTS, *schema.AIRLINES,
           *gazetteer.CITY.values(), *(a for names in gazetteer.ALIASES.values() for a in names),
           *gazetteer.MONTH_BY_SPELLING, *gazetteer.MONTH_NAMES.values(), *schema.STATUSES,
           *(t for typos in typing_noise.MISSPELLINGS.values() for t in typos),
           "action status flight name none"]
  return words | {w for text in fixed for w in tokens(text)}


@functools.lru_cache(maxsize=8)
def _forms(role: str, held_out: tuple[str, ...], customer_train: tuple[str, ...],
           agent_train: tuple[str, ...]) -> frozenset[str]:
  seen = _training_words({"customer": customer_train, "agent": agent_train})
  forms = {w for s in _segments(role, held_out) for w in s if w not in seen and not w.isdigit()}
  if role == "customer":
    forms |= {" ".join(tokens(form)) for name in held_out for kind in VALUES
              for form in renderings(customer_families.FAMILIES[name], kind)}
  return frozenset(forms)


def held_out_forms(role: str = "customer",
                   split: family_split.FamilySplit = family_split.SPLIT) -> frozenset[str]:
  """Distinctive strings only `role`'s held-out families produce, as space-joined tokens.

  Customers: their value forms ("march the fifth", "sea-tac", "usd 500",
  "9am") and the key words of their patterns ("anxious", "legacy",
  "reckon"); agents: the key words of their patterns.
  """
  return _forms(role, split.held_out(role), split.train("customer"), split.train("agent"))


def held_out_ngrams(n: int = 4, role: str = "customer",
                    split: family_split.FamilySplit = family_split.SPLIT) -> frozenset[str]:
  """Word n-grams of `role`'s held-out patterns (fields removed) no training pattern has."""
  trained = set()
  for side in ("customer", "agent"):
    trained |= _ngrams(_segments(side, split.train(side)), n)
  held = _ngrams(_segments(role, split.held_out(role)), n)
  return frozenset(" ".join(g) for g in held - trained)
