"""Reading a Persuasion for Good donation from what a persuadee says, robustly and explicitly.

Why: the persuader's reward (donation / 2) is read off the persuadee's own
words, and a simulator (learned, scripted or an LLM) may word its amount in
many ways. A reading either yields an amount or says it could not: an
unparsable donation is a counted outcome (`Donation.parsed` False, with the
reason), never a silent 0.

Two readers:

  read_amount(phrase)  a phrase that IS an amount: digits ("0.5", "$0.50",
                       ".50", "$1"), cents ("50 cents", "50c", "50¢"), words
                       ("one dollar", "twenty-five cents", "a dollar fifty",
                       "two"), coins ("a quarter"), the whole payment ("all of
                       it", "my whole payment", "everything": 2), half of it (1),
                       refusals ("nothing", "no", "none", "zero": 0). A bare
                       number is dollars.
  parse_donation(text) an utterance: the body of its `[donate] ... [/donate]`
                       block (loader.format_donation's form, which the BC
                       persuadee is trained to end with; also `[donate $1]`)
                       read by read_amount; without a block, the LAST amount the
                       free text commits to ("I'll donate $0.50", "I will give
                       one dollar", "I won't donate" = 0).

Amounts are clipped into [0, MAX_DONATION] as the loader clips the recorded
donations; `Donation.stated` keeps the amount as written.
"""

from __future__ import annotations

import dataclasses
import re

from data_pipelines.persuasion import loader

MAX_DONATION = loader.MAX_DONATION

_UNITS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
          "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
          "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
          "nineteen": 19}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
         "eighty": 80, "ninety": 90}
_ARTICLES = {"a": 1, "an": 1}
_COINS = {"penny": 0.01, "nickel": 0.05, "dime": 0.10, "quarter": 0.25}
_WHOLE = re.compile(
    r"^(?:all|all of it|everything|the whole thing|the whole amount|the full amount|"
    r"the entire amount|(?:all of |the whole |the full |the entire )?(?:my |the )?"
    r"(?:whole |full |entire )?(?:payment|pay|earnings|bonus|task payment|hit payment))$")
_HALF = re.compile(r"^half(?: of it| of (?:my|the) (?:payment|pay|earnings|bonus)| my "
                   r"(?:payment|pay|earnings|bonus))?$")
_NONE = re.compile(r"^(?:nothing|no|none|zero|nada|not|no donation|not a cent|not anything|"
                   r"no money|nothing at all|0 dollars|no thanks|pass)$")
_NUMBER = r"(?:\d+(?:\.\d+)?|\.\d+)"
_WORD = "|".join(sorted([*_UNITS, *_TENS, *_ARTICLES], key=len, reverse=True))
_WORD_NUMBER = rf"(?:(?:{_WORD})(?:[\s-]+(?:{_WORD}))?)"
_CENT_UNIT = r"(?:cents?|c|¢)"
_DOLLAR_UNIT = r"(?:dollars?|bucks?|usd)"
_BLOCK_RE = re.compile(r"\[donate\](.*?)(?:\[/donate\]|$)|\[donate\s+([^\]\[]*)\]",
                       re.IGNORECASE | re.DOTALL)
# Free text: a donation verb, then (within a few words) an amount or a whole-payment phrase.
_VERB = r"(?:donat\w*|dotate|give|giving|gave|contribut\w*|offer\w*|spare|put in|send)"
_MONEY = (rf"\$\s*{_NUMBER}|{_NUMBER}\s*{_CENT_UNIT}\b|{_NUMBER}\s*{_DOLLAR_UNIT}\b|"
          rf"\b{_WORD_NUMBER}\s+(?:{_CENT_UNIT}|{_DOLLAR_UNIT})\b(?:\s+(?:and\s+)?"
          rf"{_WORD_NUMBER}(?:\s+{_CENT_UNIT})?\b)?|\b(?:a|one)\s+(?:{'|'.join(_COINS)})\b|"
          r"\ball of it\b|\bthe (?:whole|full|entire) (?:\$?2|two dollars|amount|thing|payment)\b|"
          r"\b(?:my|the) (?:whole|full|entire) (?:payment|pay|earnings|bonus)\b|"
          r"\beverything\b|\bhalf(?: of it| of my \w+| my \w+)?\b")
_COMMIT_RE = re.compile(rf"\b{_VERB}\b[^.?!]{{0,40}}?(?P<amount>{_MONEY}|\b{_NUMBER}\b)",
                        re.IGNORECASE)
_REFUSAL_RE = re.compile(
    r"\b(?:(?:won'?t|will not|wont|not going to|don'?t want to|do not want to|can'?t|cannot|"
    r"can not|won't be|will not be|rather not|not able to|unable to|decline to|not)\s+"
    r"(?:be\s+)?(?:\w+\s+)?(?:donat\w*|contribut\w*|giv\w*))\b(?!\s+(?:much|more|a lot|all))|"
    r"\bno donation\b|"
    r"\bdonate nothing\b|\bgive nothing\b|\bnot donating\b|\bnot giving\b",
    re.IGNORECASE)


class DonationParseError(ValueError):
  """The text holds no readable donation; the message says why."""


@dataclasses.dataclass(frozen=True)
class Donation:
  """One reading: the amount in [0, 2] dollars, or why there is none (`error`)."""

  amount: float | None
  stated: float | None = None  # As written, before clipping.
  source: str = ""  # "statement" (a [donate] block) or "text" (free text).
  error: str | None = None

  @property
  def parsed(self) -> bool:
    return self.amount is not None


def _word_number(words: str) -> float:
  parts = [p for p in re.split(r"[\s-]+", words.strip()) if p]
  if not parts or len(parts) > 2:
    raise DonationParseError(f"{words!r} is not a number in words")
  total = 0
  for k, part in enumerate(parts):
    if part in _UNITS:
      total += _UNITS[part]
    elif part in _TENS and k == 0:
      total += _TENS[part]
    elif part in _ARTICLES and len(parts) == 1:
      total += _ARTICLES[part]
    else:
      raise DonationParseError(f"{words!r} is not a number in words")
  if len(parts) == 2 and not (parts[0] in _TENS and parts[1] in _UNITS):
    raise DonationParseError(f"{words!r} is not a number in words")
  return float(total)


def _number(token: str) -> float:
  token = token.strip()
  if re.fullmatch(_NUMBER, token):
    return float(token)
  return _word_number(token)


_AMOUNT_RE = re.compile(
    rf"^(?P<dollar_sign>\$)?\s*(?P<major>{_NUMBER}|{_WORD_NUMBER})\s*"
    rf"(?P<unit>{_CENT_UNIT}|{_DOLLAR_UNIT})?"
    rf"(?:\s*(?:and\s+)?(?P<minor>{_NUMBER}|{_WORD_NUMBER})\s*(?P<minor_unit>{_CENT_UNIT})?)?$")


def _stated_amount(phrase: str) -> float:
  """The dollars a whole phrase names, unclipped; DonationParseError otherwise."""
  text = re.sub(r"\s+", " ", phrase.strip().lower()).rstrip(" .,!;:\"'").lstrip(" ,!;:\"'")
  text = re.sub(r"^(?:i will donate|i'll donate|i will give|i'll give|donate|give)\s+", "", text)
  if not text:
    raise DonationParseError("empty amount")
  if _NONE.match(text):
    return 0.0
  if _WHOLE.match(text) or re.fullmatch(r"the (?:whole|full|entire) (?:\$?2|two dollars)", text):
    return MAX_DONATION
  if _HALF.match(text):
    return MAX_DONATION / 2
  if re.fullmatch(r"half (?:a|of a) dollar", text):
    return 0.5
  coin = re.fullmatch(rf"(?:a|one) ({'|'.join(_COINS)})", text)
  if coin:
    return _COINS[coin[1]]
  m = _AMOUNT_RE.match(text)
  if m is None:
    raise DonationParseError(f"{phrase.strip()!r} is not an amount")
  major = _number(m["major"])
  if m["unit"] and re.fullmatch(_CENT_UNIT, m["unit"]):
    if m["dollar_sign"] or m["minor"]:
      raise DonationParseError(f"{phrase.strip()!r} mixes dollars and cents")
    # ".30 cents" (as real persuadees write): the digits are dollars, the unit a misnomer.
    return major if m["major"].startswith(".") else major / 100
  if m["minor"] is None:
    return major
  minor = _number(m["minor"])
  if m["dollar_sign"] is None and m["unit"] is None and m["minor_unit"] is None:
    raise DonationParseError(f"{phrase.strip()!r}: two numbers without a unit")
  if minor >= 100 or major != int(major):
    raise DonationParseError(f"{phrase.strip()!r}: cents part {minor:g} is not in 0..99")
  return major + minor / 100


def _clipped(stated: float, source: str) -> Donation:
  return Donation(amount=min(max(stated, 0.0), MAX_DONATION), stated=stated, source=source)


def read_amount(phrase: str) -> float:
  """The amount a phrase names (module docstring), clipped into [0, 2]."""
  return _clipped(_stated_amount(phrase), "statement").amount


def find_statement(text: str) -> str | None:
  """The body of the single donation block of `text`, None without one; two blocks: error."""
  bodies = [m[1] if m[1] is not None else m[2] for m in _BLOCK_RE.finditer(text)]
  if len(bodies) > 1:
    raise DonationParseError(f"{len(bodies)} donation statements; exactly one is allowed")
  return bodies[0] if bodies else None


def has_statement(text: str) -> bool:
  """Whether `text` opens a donation block (whether or not it parses)."""
  return loader.DONATION_OPEN in text.lower() or re.search(r"\[donate\s", text, re.I) is not None


def read_free_text(text: str) -> Donation:
  """The last amount the free text commits to give; a refusal is 0 (module docstring)."""
  last_amount = None
  for m in _COMMIT_RE.finditer(text):
    last_amount = m
  last_refusal = None
  for m in _REFUSAL_RE.finditer(text):
    last_refusal = m
  if last_amount is None and last_refusal is None:
    return Donation(None, source="text", error="no donation amount or refusal in the text")
  if last_amount is None or (last_refusal is not None and last_refusal.start() > last_amount.end()):
    return _clipped(0.0, "text")
  try:
    return _clipped(_stated_amount(last_amount["amount"]), "text")
  except DonationParseError as e:
    return Donation(None, source="text", error=str(e))


def parse_donation(text: str) -> Donation:
  """The donation an utterance states: its block if it has one, else its free text."""
  try:
    body = find_statement(text)
  except DonationParseError as e:
    return Donation(None, source="statement", error=str(e))
  if body is None:
    if has_statement(text):
      return Donation(None, source="statement", error="malformed donation block")
    return read_free_text(text)
  try:
    return _clipped(_stated_amount(body), "statement")
  except DonationParseError as e:
    return Donation(None, source="statement", error=f"statement body: {e}")
