"""Reads intent fields out of what a customer writes, whatever phrasing family it uses.

Not one regex per template: each slot has a small recognizer that finds the
*values* first (any date format, including ordinal words and airline
shorthand; airport codes, spelled out or not, cities and airport names;
amounts in digits or words; clock times) and then decides their role from cue
words around them ("from", "back", "below", ...). Constraints said as reasons
are read from the few words that carry them ("anxious on layovers",
"lie-flat seat", "big carriers"). What the listener knows helps,
as it would help a person: the slots it just asked about (a bare "500" after
"what is your budget?" is a price, a bare "amy lee" after "your name?" is a
name), and the airports it can see (a customer saying "Chicago" means
whichever Chicago airport is in the flight table).

City names may be misspelled: they are matched with `difflib` from the
standard library when no exact name is found. Common typing slips ("teh",
"pls", "gonna") are read back as the words they stand for first.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Collection, Iterable

from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import gazetteer
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import typing_noise

# Common misspellings (typing_noise's list), read back as the words they stand for.
_TYPOS = {typo: word for word, typos in typing_noise.MISSPELLINGS.items() for typo in typos}
# Not inside a spelled-out code: the U of "H-O-U" is no "you".
_TYPO_RE = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, _TYPOS)) + r")(?![\w-])",
                      re.IGNORECASE)

# Slot groups a listener may have asked about (the names customers.SLOTS uses).
NAME, PRICE = "name", "price"

_GREETING_RE = re.compile(r"\bgood (?:morning|afternoon|evening|day|night)\b", re.IGNORECASE)

# --- Goal ---------------------------------------------------------------------

_GOAL_RES = (
    ("cancel", re.compile(r"\bcancel|\bcall off\b|\bdrop my\b|no longer need", re.IGNORECASE)),
    ("change", re.compile(r"\bchange|\bmodify|\breschedul|\bmove my\b|\bamend|\brebook",
                          re.IGNORECASE)),
    ("book", re.compile(r"\bbook|\breserv|\bticket|\bpurchase\b|\bbuy\b", re.IGNORECASE)),
)


def _goal(text: str) -> str | None:
  return next((goal for goal, r in _GOAL_RES if r.search(text)), None)


# --- Names --------------------------------------------------------------------

_STOPWORDS = frozenset("""
a an the and or but so to from for of in on at by with my your our his her their its it is
are was be been am i im i'm me we you he she they this that these those there here not no
yes yep yeah ok okay sure please pls just also very really too all any some one two flight
flights trip ticket booking reservation would like want need go going fly flying leave
leaving travel travelling traveling back return returning out will can could should may
have has had do does did get got make made first last next new only still looking heading
hoping planning trying calling happy glad sorry afraid fine good great thanks thank what
when where which who how why about around up down over under into onto off after before
early late morning afternoon evening night class economy business direct nonstop cabin
dates date airport airports source destination time come again take wait hang sounds works
ahead thats that's done nope nothing more else everything confirm proceed lovely much
obliged cheers appreciate worries pardon catch repeat alright right then well oh hmm
myself name passenger traveller traveler quite based near headed free tied ticket ticketed
passport route routing outbound inbound seat cabin fare total segment segments carrier carriers
""".split())
_NAME_WORD = r"[A-Za-z][A-Za-z'-]*"
_NAME_PAIR = rf"({_NAME_WORD})\s+({_NAME_WORD})"
# Cues before a name, most specific first ("my name is", then "I'm", "under", ...).
_LEFT_CUE_NAME_RE = re.compile(
    rf"(?:\bname\s*(?:is|'s|:|-)|\bmyself|\bin the name of|\bunder the name(?: of)?|"
    rf"\bpassport\s*:|\bfor me\s*[,:]|"
    rf"\b(?:traveller|traveler|passenger)\s*:|\bi'm|\bim|\bi am|\bthis is|\bit's|\bits|"
    rf"\bit is|\bunder|\bfor|\bcall me)\s*{_NAME_PAIR}", re.IGNORECASE)
_RIGHT_CUE_NAME_RE = re.compile(
    rf"{_NAME_PAIR}\s*,?\s+(?:here\b|speaking\b|is the (?:traveller|traveler|passenger)\b|"
    rf"that's (?:the|my) name\b)",
    re.IGNORECASE)
_BARE_NAME_RE = re.compile(rf"\s*{_NAME_PAIR}\s*[.!]?\s*")
_CHUNK_RE = re.compile(r"[.!?,;]")
_NAME_WORD_RE = re.compile(_NAME_WORD)
_CONTRACTION_RE = re.compile(r"n't$|'(?:s|d|ll|m|re|ve)$")


_NUMBER_WORDS = frozenset({*gazetteer.NUMBER_WORDS, *gazetteer.MULTIPLIERS,
                           *gazetteer.DAY_BY_ORDINAL_WORD})  # "under five hundred" is no name.


def _not_a_name_word(word: str) -> bool:
  low = word.lower()
  return (low in _STOPWORDS or low in gazetteer.MONTH_BY_SPELLING or low in _PLACE_WORDS
          or low in _NUMBER_WORDS
          or (low.endswith("ing") and len(low) > 4) or _CONTRACTION_RE.search(low) is not None
          or len(low) < 2)


def _plausible(first: str, last: str, capitalized_only: bool) -> bool:
  if capitalized_only and not (first[0].isupper() and last[0].isupper()):
    return False
  return not (_not_a_name_word(first) or _not_a_name_word(last))


def _name(text: str, asked: Collection[str]) -> str | None:
  """A two-word name introduced by a cue, or said on its own (capitalized, or when asked).

  After a cue the words only have to look like a name (not everyday words,
  months or places), so lower-cased names are heard too.
  """
  for r in (_LEFT_CUE_NAME_RE, _RIGHT_CUE_NAME_RE):
    for m in r.finditer(text):
      if _plausible(m[1], m[2], capitalized_only=False):
        return f"{m[1]} {m[2]}".title()
  for chunk in _CHUNK_RE.split(text):
    m = _BARE_NAME_RE.fullmatch(chunk)
    if m and _plausible(m[1], m[2], capitalized_only=NAME not in asked):
      return f"{m[1]} {m[2]}".title()
  if NAME in asked:  # The answer holds it among other words: "sure eric stewart".
    for chunk in _CHUNK_RE.split(text):
      words = chunk.split()
      for first, last in zip(words, words[1:]):
        if _NAME_WORD_RE.fullmatch(first) and _NAME_WORD_RE.fullmatch(last) and _plausible(
            first, last, capitalized_only=False):
          return f"{first} {last}".title()
  return None


# --- Airports -----------------------------------------------------------------

_PLACES = gazetteer.names_by_text()
_PLACE_NAMES = sorted(_PLACES, key=len, reverse=True)
_PLACE_WORDS = frozenset(w for name in _PLACE_NAMES for w in name.split())
_PLACE_RE = re.compile(r"\b(" + "|".join(re.escape(n) for n in _PLACE_NAMES) + r")\b",
                       re.IGNORECASE)
_TOKEN_RE = re.compile(r"[A-Za-z][A-Za-z'.]*")
_FUZZY_MIN_LEN, _FUZZY_CUTOFF = 6, 0.85
_DEPARTURE_CUES = ("from", "out of", "leaving", "leave", "departing", "depart", "source",
                   "origin", "starting in", "starting from", "live in", "based in", "based near")
_RETURN_CUES = ("to", "into", "destination", "going to", "heading to", "get to", "visiting",
                "seeing", "in", "near")
# A code read out letter by letter: "S-E-A", "s e a".
_SPELLED_CODE_RE = re.compile(r"(?<![\w-])([A-Za-z])[- ]([A-Za-z])[- ]([A-Za-z])(?![\w-])")
_CUE_RE = re.compile(r"\b(" + "|".join(sorted(_DEPARTURE_CUES + _RETURN_CUES, key=len,
                                              reverse=True)) + r")\b", re.IGNORECASE)
_PAIR_JOIN_RE = re.compile(r"\s*(?:-|>|to|and)\s*$", re.IGNORECASE)
_ORDERED_PAIR_RE = re.compile(r"(?:source|origin|from)\s+and\s+(?:destination|to)\b[^.!?]*$",
                              re.IGNORECASE)
_CUE_WINDOW = 24  # Characters before a mention searched for its cue.


def _resolve(codes: tuple[str, ...], visible: Collection[str]) -> str:
  seen = [c for c in codes if c in visible]
  return seen[0] if seen else codes[0]


def airport_mentions(text: str, visible: Collection[str]) -> list[tuple[int, int, str]]:
  """(start, end, code) of every airport named by code, city, airport name or a near-miss."""
  found: list[tuple[int, int, str]] = []
  taken = [False] * len(text)

  def add(start, end, code):
    if not any(taken[start:end]):
      found.append((start, end, code))
      taken[start:end] = [True] * (end - start)

  for m in _PLACE_RE.finditer(text):
    add(m.start(), m.end(), _resolve(_PLACES[m[1].lower()], visible))
  known = set(context.AIRPORTS) | set(visible)
  for m in _SPELLED_CODE_RE.finditer(text):
    code = "".join(m.groups()).upper()
    if code in known:
      add(m.start(), m.end(), code)
  for m in re.finditer(r"\b([A-Za-z]{3})\b", text):
    code = m[1].upper()
    if code in known and (m[1].isupper() or m[1].lower() not in _STOPWORDS):
      add(m.start(), m.end(), code)
  for m in _TOKEN_RE.finditer(text):
    word = m[0].rstrip(".")
    if len(word) < _FUZZY_MIN_LEN or word.lower() in _STOPWORDS or any(taken[m.start():m.end()]):
      continue
    close = difflib.get_close_matches(word.lower(), _PLACE_NAMES, n=1, cutoff=_FUZZY_CUTOFF)
    if close and close[0][0] == word[0].lower():
      add(m.start(), m.start() + len(word), _resolve(_PLACES[close[0]], visible))
  return sorted(found)


def _cue_role(before: str) -> str | None:
  """'departure' / 'return' from the last cue word just before a mention in its sentence."""
  cues = list(_CUE_RE.finditer(re.split(r"[.!?]\s", before[-_CUE_WINDOW:])[-1]))
  if not cues:
    return None
  cue = cues[-1][1].lower()
  return "departure" if cue in _DEPARTURE_CUES else "return"


def _airports(text: str, visible: Collection[str]) -> dict[str, str]:
  mentions = airport_mentions(text, visible)
  out: dict[str, str] = {}
  if len(mentions) >= 2:
    (s1, e1, a), (s2, _, b) = mentions[:2]
    between = text[e1:s2]
    if _PAIR_JOIN_RE.fullmatch(between) and (
        between.strip().lower() != "and" or _ORDERED_PAIR_RE.search(text[:s1])
        or _cue_role(text[:s1]) is None):
      return {"departure_airport": a, "return_airport": b}
  unassigned = []
  for start, _, code in mentions:
    role = _cue_role(text[:start])
    key = f"{role}_airport" if role else None
    if key and key not in out:
      out[key] = code
    else:
      unassigned.append(code)
  for code in unassigned:
    for key in ("departure_airport", "return_airport"):
      if key not in out:
        out[key] = code
        break
  if len(out) == 1 and len(mentions) == 1 and _cue_role(text[:mentions[0][0]]) is None:
    return {}  # One airport with no cue: too little to tell which end it is.
  return out


# --- Dates --------------------------------------------------------------------

_MONTH = "|".join(sorted(gazetteer.MONTH_BY_SPELLING, key=len, reverse=True))
_DAY_WORD = "|".join(w.replace("-", "[- ]") for w in sorted(gazetteer.DAY_BY_ORDINAL_WORD,
                                                              key=len, reverse=True))
_DAY = rf"(\d{{1,2}}|{_DAY_WORD})(?:st|nd|rd|th)?"
_DATE_RES = (
    ("numeric", re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})(?![\d/])")),
    ("month_first", re.compile(rf"\b({_MONTH})\.?\s+(?:the\s+)?{_DAY}\b", re.IGNORECASE)),
    ("day_first", re.compile(rf"\b(?:the\s+)?{_DAY}\s+(?:of\s+)?({_MONTH})\b", re.IGNORECASE)),
    ("day_first", re.compile(rf"\b(\d{{1,2}})({_MONTH})\b", re.IGNORECASE)),  # Airline "05JUN".
)
_RETURN_RE = re.compile(r"\b(?:return\w*|back|home|ret|inbound)\b", re.IGNORECASE)


def _day_number(text: str) -> int:
  """'5' or 'fifth' or 'twenty third' -> the day."""
  if text.isdigit():
    return int(text)
  return gazetteer.DAY_BY_ORDINAL_WORD[re.sub(r"\s+", "-", text.lower())]


def date_mentions(text: str) -> list[tuple[int, int, str, str]]:
  """(start, end, month, day) of every date, earliest first, overlaps dropped."""
  found = []
  for kind, r in _DATE_RES:
    for m in r.finditer(text):
      if kind == "numeric":
        month, day = int(m[1]), int(m[2])
        if not 1 <= month <= 12:
          continue
        month_name = schema.MONTHS[month - 1]
      elif kind == "month_first":
        month_name, day = gazetteer.MONTH_BY_SPELLING[m[1].lower()], _day_number(m[2])
      else:
        month_name, day = gazetteer.MONTH_BY_SPELLING[m[2].lower()], _day_number(m[1])
      if 1 <= day <= 31:
        found.append((m.start(), m.end(), month_name, str(day)))
  kept, end = [], -1
  for mention in sorted(found):
    if mention[0] >= end:
      kept.append(mention)
      end = mention[1]
  return kept


def _dates(text: str) -> tuple[dict[str, str], list[tuple[int, int]]]:
  mentions = date_mentions(text)
  spans = [(s, e) for s, e, *_ in mentions]
  if len(mentions) >= 2:
    (_, _, m1, d1), (_, _, m2, d2) = mentions[:2]
    return {"departure_month": m1, "departure_day": d1, "return_month": m2,
            "return_day": d2}, spans
  if len(mentions) == 1:
    start, _, month, day = mentions[0]
    leg = "return" if _RETURN_RE.search(text[max(0, start - _CUE_WINDOW):start]) else "departure"
    return {f"{leg}_month": month, f"{leg}_day": day}, spans
  return {}, spans


# --- Times of day -------------------------------------------------------------

_TIME_WORDS = (
    ("morning", r"morning|early in the day|\bearly\b"),
    ("afternoon", r"afternoon|after lunch|midday"),
    ("evening", r"evening|at night|\bnight\b"),
)
_TIME_RE = re.compile("|".join(f"(?P<{t}>{p})" for t, p in _TIME_WORDS), re.IGNORECASE)
# A leg word right after the time ("morning departure", "evening flight back"), unless it
# starts the next phrase ("afternoon back in the morning": "back" is the morning's).
_LEG_AFTER_RE = re.compile(
    r"^\s*(?:[\w']+\s+)?"
    r"(?:(?P<ret>return|back|home|inbound)|(?P<dep>departure|out|outbound|going))"
    r"\b(?!\s+(?:in|at|on|around|about)\b)", re.IGNORECASE)
_LEG_BEFORE_RE = re.compile(
    r"(?P<ret>return\w*|back|home|\bret|inbound)|"
    r"(?P<dep>leav\w*|depart\w*|\bdep|\bout\b|set off|go\b|outbound)", re.IGNORECASE)
# Clock times, read as the part of the day they fall in: "9am", "2 p.m.", "1400 hrs".
_CLOCK_RE = re.compile(r"\b(\d{1,2})\s?([ap])\.?m\b\.?|\b([01]\d|2[0-3])[0-5]\d\s?hrs\b",
                       re.IGNORECASE)
_TIME_CUE_WINDOW = 32
# Where the phrase holding a time of day starts, when punctuation is missing too:
# after a number ("back Dec 12th Morning flight") or at a capitalized word.
_PHRASE_START_RE = re.compile(r"[.!?;,]\s*|\d\w*\s*|(?=\b[A-Z][a-z'])")


def _phrase_tail(before: str) -> str:
  starts = [m.end() for m in _PHRASE_START_RE.finditer(before)]
  return before[starts[-1]:] if starts else before


def _time_mentions(text: str) -> list[tuple[int, int, str]]:
  """(start, end, part of the day) of every time of day, in words or on the clock."""
  found = [(m.start(), m.end(), m.lastgroup) for m in _TIME_RE.finditer(text)]
  for m in _CLOCK_RE.finditer(text):
    hour = int(m[1]) % 12 + 12 * (m[2].lower() == "p") if m[1] else int(m[3])
    found.append((m.start(), m.end(), schema.time_of_day(hour)))
  return sorted(found)


def _times(text: str) -> dict[str, str]:
  """Each time's leg: a leg word right after it, else the last cue before it in its phrase,
  else the first cue after it in its sentence ("... until 2pm, so I'd fly home then")."""
  out = {}
  mentions = _time_mentions(text)
  for i, (start, end, part) in enumerate(mentions):
    after = _LEG_AFTER_RE.match(text[end:end + 16])
    before = list(_LEG_BEFORE_RE.finditer(
        _phrase_tail(text[max(0, start - _TIME_CUE_WINDOW):start])))
    stop = mentions[i + 1][0] if i + 1 < len(mentions) else len(text)
    later = _LEG_BEFORE_RE.search(re.split(r"[.!?]", text[end:stop], maxsplit=1)[0])
    if after:
      leg = "return" if after["ret"] else "departure"
    elif before:
      leg = "return" if before[-1]["ret"] else "departure"
    else:
      leg = "return" if later and later["ret"] else "departure"
    out[f"{leg}_time"] = part
  return out


# --- Class, connections, airline ------------------------------------------------

_ECONOMY_RE = re.compile(r"\beconomy\b|\bcoach\b|\bmain cabin\b|\bcheap seats\b",
                         re.IGNORECASE)
# "Business", but not a business trip or meeting (a reason to travel, not a class).
_BUSINESS_RE = re.compile(
    r"\bbusiness\b(?!\s+(?:trip|meeting|conference|travel|reasons?))|\bup front\b|"
    r"\bfront cabin\b|\blie-?\s?flat\b", re.IGNORECASE)
_STOP = (r"(?:connections?|connecting flights?|stops?|stopovers?|layovers?|lay-?bys?|halts?|"
         r"transfers?)")
# A flight of one segment each way is direct, of two has one connection.
_DIRECT_RE = re.compile(
    rf"\bdirect\b|\bnon-?\s?stop\b|\bno\s+{_STOP}|\b(?:zero|0)\s+{_STOP}|"
    rf"\bwithout\s+(?:any\s+)?{_STOP}|\bstraight\s+through\b|"
    rf"\b(?:anxious|nervous|scared)\s+(?:on|about|of)\s+{_STOP}|"
    rf"\b(?:single|one|1)[- ]segment\b", re.IGNORECASE)
_ONE_STOP_RE = re.compile(
    rf"\b(?:one|1|single|a)\s+{_STOP}|\bat most one\b|\bmax(?:imum)?\s+(?:of\s+)?(?:one|1)\b|"
    rf"\b(?:two|2)[- ]segments?\b", re.IGNORECASE)
_CHEAP = r"(?:budget|low[- ]cost|cheap)"
_CARRIER = r"(?:airlines?|carriers?)"
_AIRLINE_RE = re.compile(
    rf"normal[- ]cost|\b(?:regular|standard|major|mainline|full[- ]service|big|legacy)\s+"
    rf"{_CARRIER}|"
    rf"\bmainline\b|\b(?:no|not a|avoid|none of (?:those|the))\s+{_CHEAP}\s+{_CARRIER}",
    re.IGNORECASE)

# --- Prices -------------------------------------------------------------------

_WORD_AMOUNT = (r"(?:" + "|".join(w for w in gazetteer.NUMBER_WORDS if w not in ("no", "single"))
                + r")\s+(?:hundred|thousand|grand)")
_AMOUNT_RE = re.compile(rf"(\$\s?|\busd\s?)?(\d[\d,]*|{_WORD_AMOUNT})(\s?k\b)?", re.IGNORECASE)
_PRICE_BEFORE_RE = re.compile(
    r"(?:under|below|budget|max|maximum|most|limit|cap|spend|pay|up to|upto|within|less than|"
    r"more than|over|afford|price|fare|cost)\W*(?:is|of|at)?\W*$", re.IGNORECASE)
_PRICE_AFTER_RE = re.compile(
    r"^\s*(?:dollars?|bucks|usd|max\b|maximum|tops|or less|is my (?:limit|max|budget)|"
    r"is the most|at the (?:very )?most)", re.IGNORECASE)
_NOT_PRICE_AFTER_RE = re.compile(
    rf"^(?:\s*{_STOP}|:\d|st\b|nd\b|rd\b|th\b|\s*(?:[ap]\.?m\b|hrs\b)|\s*segments?\b)",
    re.IGNORECASE)
_FLIGHT_BEFORE_RE = re.compile(r"flight\s*(?:number\s*)?$", re.IGNORECASE)


def _amount(m: re.Match) -> int:
  digits = m[2].replace(",", "")
  if digits.isdigit():
    value = int(digits)
  else:
    count, unit = m[2].lower().split()
    value = gazetteer.NUMBER_WORDS[count] * gazetteer.MULTIPLIERS[unit]
  return value * 1000 if m[3] else value


def _price(text: str, asked: Collection[str], taken: Iterable[tuple[int, int]]) -> int | None:
  taken = list(taken)
  bare = []
  for m in _AMOUNT_RE.finditer(text):
    if any(s < m.end() and m.start() < e for s, e in taken):
      continue
    after, before = text[m.end():m.end() + 24], text[max(0, m.start() - 24):m.start()]
    if _NOT_PRICE_AFTER_RE.match(after):
      continue
    if m[1] or m[3] or _PRICE_AFTER_RE.match(after):
      return _amount(m)
    if _FLIGHT_BEFORE_RE.search(before):
      continue  # "flight 1003"
    if _PRICE_BEFORE_RE.search(before):
      return _amount(m)
    bare.append(_amount(m))
  return bare[0] if PRICE in asked and len(bare) == 1 else None


# --- Everything ---------------------------------------------------------------


def parse(utterance: str, asked: Collection[str] = (),
          airports: Collection[str] = ()) -> dict[str, Any]:
  """Every Intent field `utterance` states, keyed by Intent attribute name.

  `asked`: the slot groups (customers.SLOTS) the listener just asked about.
  `airports`: the codes the listener can see (its flight table), used to
  resolve a city with two airports and to admit codes outside the gazetteer.
  """
  text = _TYPO_RE.sub(lambda m: _TYPOS[m[1].lower()], _GREETING_RE.sub(" ", utterance))
  out: dict[str, Any] = {}
  if goal := _goal(text):
    out["goal"] = goal
  if name := _name(text, asked):
    out["name"] = name
  dates, date_spans = _dates(text)
  out.update(_airports(text, airports))
  out.update(dates)
  out.update(_times(text))
  if _ECONOMY_RE.search(text):
    out["flight_class"] = "economy"
  elif _BUSINESS_RE.search(text):
    out["flight_class"] = "business"
  if (price := _price(text, asked, date_spans)) is not None:
    out["max_price"] = price
  if _DIRECT_RE.search(text):
    out["max_connections"] = 0
  elif _ONE_STOP_RE.search(text):
    out["max_connections"] = 1
  if _AIRLINE_RE.search(text):
    out["airline_preference"] = "normal-cost"
  return out
