"""How the scripted agent reads a customer's turn, in any phrasing family (customer_families.py).

The agent is not told a customer's family; it reads values, which every family keeps as the
database holds them (value_forms.py), and a few key words, those of every family, the held-out
ones included (the oracle must solve what it solved in any wording; held-out families measure
learned agents, not this reader):

  identity      an email (spelled " at " / " dot " too), or a zip code (five digits, or spoken
                digit by digit) and the two words before it (`Last, First` when a comma splits
                them), or `first name X, last name Y` labels
  wish          its kind by key words (cancel, return or send back, exchange or swap, the
                default address, an address, pay, change), and the sentence that says it
  products      the order's product names the sentence holds, case aside
  items         each product name with the words around it up to the separator before the next
                one; the item of the customer's orders whose every option value those words
                hold (a value that says nothing alone only with its key beside it)
  new options   the variant of the product whose changed values the answer holds (the most of
                them), or none when it says "same"
  address       `label: value` fields, or a postal line `street, [apartment,] city, ST zip,
                country`
  payment       a gift card id, a card's last four digits, PayPal, or the original method
  confirmation  the first yes-word or no-word

Every reader returns None on text it cannot read, never raises.
"""

from __future__ import annotations

import collections
import re
from typing import Iterable, Mapping, Sequence

from domains.tau2_retail import phrases
from domains.tau2_retail import value_forms as vf

Item = tuple[str, dict[str, str]]
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_ZIP = re.compile(r"(?<![\w.@-])\d{5}(?![\w@-]|\.\d)")
_WORD = r"[A-Za-z][A-Za-z'-]*"
_LABELLED_NAMES = (
    (re.compile(rf"(?:first|given) name:?\s+({_WORD})[,;.]?\s+(?:and\s+)?(?:last name|surname)"
                rf":?\s+({_WORD})", re.I), False),
    (re.compile(rf"(?:last name|surname):?\s+({_WORD})[,;.]?\s+(?:and\s+)?(?:first|given) name"
                rf":?\s+({_WORD})", re.I), True))
_BEFORE_ZIP = re.compile(r"(?:[\s,.;:!-]+|\b(?:and|my|the|zip|zipcode|code|postcode|postal|is|"
                         r"here)\b)+$", re.I)
_LAST_TWO = re.compile(rf"({_WORD})(,?)\s+({_WORD})$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ORDER_ID = re.compile(r"#W\d+")
_KINDS = (
    (phrases.TRANSFER, r"\bhuman\b|\breal person\b|\brepresentative\b"),
    (phrases.CANCEL, r"\bcancel"),
    (phrases.RETURN, r"\breturn\b|\bsend back\b"),
    (phrases.EXCHANGE, r"\bexchange\b|\bswap\b"),
    (phrases.USER_ADDRESS, r"(?<!email )\baddress\b.*\b(?:default|account|profile|on file)\b|"
                           r"\b(?:default|home) address\b"),
    (phrases.ORDER_ADDRESS, r"(?<!email )\baddress\b"),
    (phrases.ORDER_PAYMENT, r"\bpay(?:ment|ing)?\b"),
    (phrases.MODIFY_ITEMS, r"\b(?:change|modify|switch)\b"),
)
_SEPARATOR = re.compile(r",\s+and\s+|\s+and\s+|,\s+|;\s+")
_ADDRESS_LABELS = {"address1": r"street(?: address)?|address line 1",
                   "address2": r"apartment|apt|unit|address line 2", "city": r"city|town",
                   "state": r"state", "zip": r"zip(?: code)?|postcode|postal code",
                   "country": r"country"}
_ADDRESS_LABEL = re.compile(r"\b(?:" + "|".join(f"(?P<{field}>{labels})" for field, labels in
                                                _ADDRESS_LABELS.items()) + r")\s*:", re.I)
_STATE_ZIP = re.compile(r"\b([A-Z]{2}),?\s+(?:zip(?: code)?:?\s+)?(\d{5})(?!\w|\.\d)")
_MISTAKE = re.compile(r"mistake|by accident|accidental|wrong button|never meant|didn't mean", re.I)
_NOT_NEEDED = re.compile(r"no longer need|(?:don't|do not|doesn't) need|not needed|no need", re.I)
_ORIGINAL = re.compile(r"\boriginal|\bpaid with\b", re.I)
_CONFIRM = re.compile(
    r"\b(?:(?P<yes>yes|yeah|yep|yup|sure|ok|okay|correct|right|certainly|absolutely|confirmed|"
    r"proceed|go ahead|do it|exactly|agrees)|(?P<no>no|nope|nah|not|don't|declined|wrong))\b",
    re.I)


def _digits(spelled: re.Match) -> str:
  return "".join(str(vf.DIGIT_WORDS.index(w.lower())) for w in re.findall(r"[a-z]+", spelled[0],
                                                                          re.I))


def _email(spelled: re.Match) -> str:
  return f"{spelled[1].replace(' dot ', '.')}@{spelled[2].replace(' dot ', '.')}"


def spoken(text: str) -> str:
  """Digits said word by word (four or more) as digits, a spelled email as an email."""
  return vf.SPELLED_EMAIL.sub(_email, vf.SPELLED_DIGITS.sub(_digits, text))


def sentences(text: str) -> list[str]:
  return [s for s in _SENTENCE_END.split(text) if s]


def identity(text: str) -> dict[str, str] | None:
  """{"email": ...} or {"first_name", "last_name", "zip"}, or None."""
  text = spoken(text)
  zip_code = _ZIP.search(text)
  if zip_code:
    before = text[:zip_code.start()]
    for pattern, inverted in _LABELLED_NAMES:
      named = pattern.search(before)
      if named:
        first, last = (named[2], named[1]) if inverted else (named[1], named[2])
        return {"first_name": first, "last_name": last, "zip": zip_code[0]}
    named = _LAST_TWO.search(_BEFORE_ZIP.sub("", before))
    if named:
      first, last = (named[3], named[1]) if named[2] else (named[1], named[3])
      return {"first_name": first, "last_name": last, "zip": zip_code[0]}
  email = _EMAIL.search(text)
  return {"email": email[0].rstrip(".")} if email else None


def wish(text: str) -> tuple[str, str] | None:
  """(kind, the sentence stating it) of a customer's wish, or None."""
  said = sentences(text)
  for kind, pattern in _KINDS:
    for sentence in said:
      if re.search(pattern, sentence.lower()):
        return kind, sentence
  return None


# Products, items and options.

def _spans(text: str, wanted: Iterable[str], ignore_case: bool) -> list[tuple[int, int, str]]:
  """Where each wanted phrase occurs as whole words, longest first, no two overlapping, in
  order of place."""
  taken: list[tuple[int, int, str]] = []
  flags = re.I if ignore_case else 0
  for phrase in sorted(set(wanted), key=len, reverse=True):
    for m in re.finditer(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", text, flags):
      if not any(m.start() < end and start < m.end() for start, end, _ in taken):
        taken.append((m.start(), m.end(), phrase))
  return sorted(taken)


def _keyed(text: str, start: int, end: int, keys: Sequence[str]) -> list[str]:
  """The keys said right before the value at text[start:end] (`key: v`, `key v`, `key of v`),
  else right after it (`v key`)."""
  before = [k for k in keys if re.search(rf"\b{re.escape(k)}\s*(?::|\bis\b|\bof\b)?\s*$",
                                         text[:start], re.I)]
  return before or [k for k in keys if re.match(rf"\s+{re.escape(k)}\b", text[end:], re.I)]


def option_values(text: str, universe: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
  """key -> the values of `universe` (key -> possible values) that `text` says for that key."""
  keys_of = collections.defaultdict(list)
  for key, values in universe.items():
    for value in values:
      keys_of[value].append(key)
  out = collections.defaultdict(set)
  for start, end, value in _spans(text, keys_of, ignore_case=False):
    keys = _keyed(text, start, end, keys_of[value])
    if not keys and not vf.says_nothing_alone(value):
      keys = keys_of[value]
    for key in keys:
      out[key].add(value)
  return out


def products(text: str, names: Iterable[str]) -> list[str]:
  """The product names of `names` the text holds (any case), in order, each once."""
  return list(dict.fromkeys(name for _, _, name in _spans(text, names, ignore_case=True)))


def _universe(options: Iterable[Mapping[str, str]]) -> dict[str, set[str]]:
  out = collections.defaultdict(set)
  for opts in options:
    for key, value in opts.items():
      out[key].add(value)
  return out


def _item(chunk: str, name: str, candidates: Sequence[Item]) -> Item | None:
  """The one candidate of that name whose every option value the chunk says."""
  options = [dict(o) for n, o in candidates if n == name]
  said = option_values(chunk, _universe(options))
  held = [o for o in options if all(v in said.get(k, ()) for k, v in o.items())]
  distinct = {tuple(sorted(o.items())): o for o in held}
  return (name, next(iter(distinct.values()))) if len(distinct) == 1 else None


def _chunks(text: str, spots: Sequence[tuple[int, int, str]]) -> list[str]:
  """The text around each product name, cut at the last separator between two names."""
  cuts = [0]
  for (_, end, _), (start, _, _) in zip(spots, spots[1:]):
    separators = list(_SEPARATOR.finditer(text, end, start))
    cuts.append(separators[-1].end() if separators else start)
  return [text[a:b] for a, b in zip(cuts, cuts[1:] + [len(text)])]


def items(text: str, candidates: Sequence[Item]) -> list[Item] | None:
  """The items a wish names, among `candidates` (name, options) of the customer's orders, in
  order (an item named twice twice); None unless every name found reads as one of them. A name
  that is also an option value ("laptop" compartment) is dropped when that reads better."""
  names = {name for name, _ in candidates}
  values = {v.lower() for _, options in candidates for v in options.values()}
  spots = _spans(text, names, ignore_case=True)
  for kept in (spots, [s for s in spots if text[s[0]:s[1]].lower() not in values]):
    chunks = _chunks(text, kept)
    read = [_item(chunk, name, candidates) for chunk, (_, _, name) in zip(chunks, kept)]
    if kept and all(read):
      return read
  return None


def new_options(text: str, current: Mapping[str, str],
                variants: Iterable[Mapping[str, str]]) -> dict[str, str] | None:
  """The options to change from `current`: those of the variant whose changed values the text
  says (the most of them, one such variant); {} when it says "same"; else None."""
  variants = [dict(v) for v in variants]
  said = option_values(text, _universe(variants))
  changes = [{k: v for k, v in variant.items() if current.get(k) != v} for variant in variants]
  fitting = [c for c in changes if c and all(v in said.get(k, ()) for k, v in c.items())]
  most = max(map(len, fitting), default=0)
  best = {tuple(sorted(c.items())): c for c in fitting if len(c) == most}
  if len(best) == 1:
    return next(iter(best.values()))
  if not fitting and re.search(r"\bsame\b", text, re.I):
    return {}
  return None


# Addresses, payment, reasons, order ids, confirmations.

def _labelled_address(text: str) -> dict[str, str] | None:
  for sentence in sentences(text):
    labels = list(_ADDRESS_LABEL.finditer(sentence))
    out = {}
    for label, after in zip(labels, labels[1:] + [None]):
      value = sentence[label.end():after.start() if after else len(sentence)]
      out[label.lastgroup] = value.strip(" ,;.\n")
    if set(out) == set(_ADDRESS_LABELS):
      return out
  return None


def _postal_address(text: str) -> dict[str, str] | None:
  for sentence in sentences(text):
    state_zip = _STATE_ZIP.search(sentence)
    if state_zip is None:
      continue
    pieces = [p.strip() for p in sentence[:state_zip.start()].rstrip(" ,").split(",")]
    street = next((i for i, p in enumerate(pieces) if re.search(r"\d", p)), None)
    country = re.match(r"[\s,]*([A-Za-z][A-Za-z .]*?)\s*(?:[,.;!?]|$)", sentence[state_zip.end():])
    if street is None or len(pieces) - street < 2 or country is None:
      return None
    line1 = pieces[street][re.search(r"\d", pieces[street]).start():]
    return {"address1": line1, "address2": ", ".join(pieces[street + 1:-1]),
            "city": pieces[-1], "state": state_zip[1], "country": country[1],
            "zip": state_zip[2]}
  return None


def address(text: str) -> dict[str, str] | None:
  """The address fields (the tools' names) a customer gives, or None."""
  text = spoken(text)
  out = _labelled_address(text) or _postal_address(text)
  if out is not None and out["address2"].lower() == phrases.NO_APARTMENT:
    out["address2"] = ""
  return out


def payment(text: str) -> tuple[str, str] | None:
  """(source, key): ("gift_card", id), ("credit_card", last four), ("paypal", ""),
  ("original", ""); or None."""
  text = spoken(text)
  gift = re.search(r"gift_card_\d+", text)
  if gift:
    return "gift_card", gift[0]
  last_four = re.search(r"(?<![\w.])(\d{4})(?!\w|\.\d)", text)
  if last_four and re.search(r"card|ending", text, re.I):
    return "credit_card", last_four[1]
  if re.search("paypal", text, re.I):
    return "paypal", ""
  return ("original", "") if _ORIGINAL.search(text) else None


def reason(text: str) -> str | None:
  """One of the two cancellation reasons the policy allows, or None."""
  if _MISTAKE.search(text):
    return "ordered by mistake"
  return "no longer needed" if _NOT_NEEDED.search(text) else None


def order_id(text: str) -> str | None:
  match = _ORDER_ID.search(text)
  return match[0] if match else None


def confirmation(text: str) -> bool | None:
  """True for a yes, False for a no (the first such word decides), None for neither."""
  match = _CONFIRM.search(text)
  return None if match is None else match["yes"] is not None
