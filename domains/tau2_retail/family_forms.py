"""What only the held-out customer phrasing families say: the forms a leak check looks for.

No training stream may hold a held-out family's forms, or the gap measured on held-out families
means nothing. The forms are derived from the family definitions (family_split.json names the
groups), so they follow every edit of a family instead of drifting like a hand-kept list:

  value forms  the writings of a value only held-out families use: four or more digits said as
               words, an email spelled with " at " and " dot " (value_forms.SPELLED_DIGITS,
               SPELLED_EMAIL)
  key words    words the held-out families write (every expansion of their patterns, their value
               forms rendered over PROBES) that no training family, no style's small talk and no
               probe value holds
  n-grams      word n-grams of the held-out patterns (fields left out) no training pattern holds

Key words and n-grams are a customer's phrasing: a check looks for them in what customers say
and read; value forms in every turn. Text is compared as lower-cased word tokens (`tokens`).
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Iterable

import numpy as np

from domains.tau2_retail import customer_families, customer_styles, family_split, value_forms

_TOKEN = re.compile(r"[\w$][\w$'./:-]*\w|[\w$]")
_CHOICE = re.compile(r"\[([^\[\]]*)\]")
_FIELD = re.compile(r"\{\w+\}")
_DRAWS = 24  # Renderings of each probe per family (its forms are drawn at random).
NGRAM = 4

# Values to render every family's value forms with; their own words are no family's.
PROBE_ITEMS = (("Water Bottle", {"capacity": "750ml", "color": "red"}),
               ("Sunglasses", {"frame color": "black", "lens color": "brown",
                               "lens type": "polarized"}),
               ("Hiking Boots", {"size": "11", "waterproof": "yes", "material": "leather"}))
PROBE_CHANGES = ({"capacity": "1000ml", "color": "blue"}, {"size": "12"}, {"lens color": "black"})
PROBE_ADDRESSES = ({"address1": "986 Sunset Drive", "address2": "Suite 259", "city": "Denver",
                    "state": "CO", "country": "USA", "zip": "80279"},
                   {"address1": "101 Highway", "address2": "", "city": "New York",
                    "state": "NY", "country": "USA", "zip": "10001"})
PROBE_METHODS = (("credit_card", "9212"), ("paypal", ""), ("gift_card", "gift_card_4374071"),
                 ("original", ""))
PROBE_PEOPLE = (("mei.kovacs8232@example.com", "Mei", "Kovacs", "28236"),)


def tokens(text: str) -> tuple[str, ...]:
  """Lower-cased words; inner punctuation stays ("don't", "gift_card_1", "750ml")."""
  return tuple(_TOKEN.findall(text.lower()))


def _expansions(pattern: str) -> Iterable[str]:
  pieces = _CHOICE.split(pattern)  # Odd pieces are the insides of [a|b] choices.
  options = [piece.split("|") if i % 2 else [piece] for i, piece in enumerate(pieces)]
  return ("".join(combo) for combo in itertools.product(*options))


def _segments(names: Iterable[str]) -> set[tuple[str, ...]]:
  """The families' pattern text between fields, as token tuples, over every expansion."""
  out = set()
  for name in names:
    family = customer_families.FAMILIES[name]
    for pattern in (p for table in (family.plain, family.terse) for ps in table.values()
                    for p in ps):
      out |= {tokens(s) for text in _expansions(pattern) for s in _FIELD.split(text)}
  return out


def renderings(name: str) -> set[str]:
  """Every value form of family `name` over the probes (drawn _DRAWS times each)."""
  family = customer_families.FAMILIES[name]
  out = set()
  for draw in range(_DRAWS):
    rng = np.random.default_rng(draw)
    out |= {family.item(n, o, rng) for n, o in PROBE_ITEMS}
    out.add(family.items(PROBE_ITEMS, rng))
    out.add(family.order([n for n, _ in PROBE_ITEMS], rng))
    out |= {family.options(c, o, rng) for c, (_, o) in zip(PROBE_CHANGES, PROBE_ITEMS)}
    out |= {family.address(a, rng) for a in PROBE_ADDRESSES}
    out |= {family.method(source, key, rng) for source, key in PROBE_METHODS}
    for email, first, last, zip_code in PROBE_PEOPLE:
      out |= {family.email(email, rng), family.zip(zip_code, rng), family.person(first, rng),
              family.person(last, rng)}
  return out


def _probe_words() -> set[str]:
  values = [v for _, o in PROBE_ITEMS for v in (*o, *o.values())] + [n for n, _ in PROBE_ITEMS]
  values += [v for c in PROBE_CHANGES for v in c.values()]
  values += [v for a in PROBE_ADDRESSES for v in a.values()] + [k for _, k in PROBE_METHODS]
  values += [v for person in PROBE_PEOPLE for v in person]
  return {w for v in values for w in (*tokens(v), *re.findall(r"[a-z0-9]+", v.lower()))}


def _words(names: Iterable[str]) -> set[str]:
  names = list(names)
  out = {w for s in _segments(names) for w in s}
  return out | {w for name in names for text in renderings(name) for w in tokens(text)}


def _style_words() -> set[str]:
  talk = customer_styles.SMALL_TALK + customer_styles.LEAD_INS
  return {w for pattern in talk for text in _expansions(pattern) for w in tokens(text)}


@functools.lru_cache(maxsize=4)
def _key_words(held_out: tuple[str, ...], train: tuple[str, ...]) -> frozenset[str]:
  seen = _words(train) | _style_words() | _probe_words()
  return frozenset(w for w in _words(held_out) - seen if not w.isdigit())


def held_out_words(split: family_split.FamilySplit = family_split.SPLIT) -> frozenset[str]:
  """The key words only held-out families write ("um", "mother", "commute", ...)."""
  return _key_words(split.held_out, split.train)


def _ngrams(segments: Iterable[tuple[str, ...]], n: int) -> set[tuple[str, ...]]:
  return {s[i:i + n] for s in segments for i in range(len(s) - n + 1)}


def held_out_ngrams(n: int = NGRAM, split: family_split.FamilySplit = family_split.SPLIT
                    ) -> frozenset[tuple[str, ...]]:
  """Word n-grams of the held-out patterns (fields left out) that no training pattern has."""
  return frozenset(_ngrams(_segments(split.held_out), n) - _ngrams(_segments(split.train), n))


def found(text: str, split: family_split.FamilySplit = family_split.SPLIT,
          phrasing: bool = True) -> set[str]:
  """The held-out forms in `text`: value forms always, key words and n-grams when `phrasing`
  (a customer's words)."""
  out = {m[0] for pattern in (value_forms.SPELLED_DIGITS, value_forms.SPELLED_EMAIL)
         for m in pattern.finditer(text)}
  if phrasing:
    words = tokens(text)
    out |= set(words) & held_out_words(split)
    grams = held_out_ngrams(split=split)
    out |= {" ".join(g) for g in _ngrams([words], NGRAM) if g in grams}
  return out
