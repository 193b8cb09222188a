"""The 20 cities, the yes/no questions about them, and the phrases of the game.

Every city has a unique (region, coastal, capital, big) signature, so the
seven questions below always single one out: the game is solvable by asking
alone, and a failure is the asker's.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, NamedTuple


ASKER, ANSWERER = ROLES = ("asker", "answerer")


class City(NamedTuple):
  name: str
  region: str  # europe | asia | americas | africa
  coastal: bool  # On a sea coast.
  capital: bool  # A national capital.
  big: bool  # Over five million people in its metropolitan area.


CITIES = (
    City("Paris", "europe", False, True, True),
    City("Lisbon", "europe", True, True, False),
    City("Barcelona", "europe", True, False, False),
    City("Istanbul", "europe", True, False, True),
    City("Vienna", "europe", False, True, False),
    City("Tokyo", "asia", True, True, True),
    City("Shanghai", "asia", True, False, True),
    City("Beijing", "asia", False, True, True),
    City("Kyoto", "asia", False, False, False),
    City("Busan", "asia", True, False, False),
    City("New York", "americas", True, False, True),
    City("Mexico City", "americas", False, True, True),
    City("Lima", "americas", True, True, True),
    City("Denver", "americas", False, False, False),
    City("Ottawa", "americas", False, True, False),
    City("Cairo", "africa", False, True, True),
    City("Lagos", "africa", True, False, True),
    City("Cape Town", "africa", True, False, False),
    City("Nairobi", "africa", False, True, False),
    City("Dakar", "africa", True, True, False),
)
BY_NAME = {c.name.lower(): c for c in CITIES}


class Question(NamedTuple):
  keyword: str  # The word an answerer recognizes the question by.
  phrasings: tuple[str, ...]
  holds: Callable[[City], bool]


QUESTIONS = (
    Question("europe", ("is it in europe?", "is your city in europe?"),
             lambda c: c.region == "europe"),
    Question("asia", ("is it in asia?", "is your city in asia?"), lambda c: c.region == "asia"),
    Question("america", ("is it in the americas?", "is your city in america?"),
             lambda c: c.region == "americas"),
    Question("africa", ("is it in africa?", "is your city in africa?"),
             lambda c: c.region == "africa"),
    Question("coast", ("is it on the coast?", "does it lie on a coast?"), lambda c: c.coastal),
    Question("capital", ("is it a capital?", "is it the capital of its country?"),
             lambda c: c.capital),
    Question("million", ("does it have over five million people?",
                         "are there more than five million people there?"), lambda c: c.big),
)
YES = ("yes.", "yes, it is.", "that's right.")
NO = ("no.", "no, it isn't.", "nope.")
UNCLEAR = "i can only answer about region, coast, capital or size."
GUESS_OPEN, GUESS_CLOSE = "[guess]", "[/guess]"
_GUESS_RE = re.compile(re.escape(GUESS_OPEN) + r"(.*?)" + re.escape(GUESS_CLOSE), re.S)


def question_in(text: str) -> Question | None:
  """The question `text` asks (the first keyword it holds), if any."""
  text = text.lower()
  return next((q for q in QUESTIONS if q.keyword in text), None)


def answer_in(text: str) -> bool | None:
  """True / False for an answer phrased as YES / NO, else None."""
  text = text.strip().lower()
  if text in YES:
    return True
  return False if text in NO else None


def guess_text(city: City) -> str:
  return f"{GUESS_OPEN} {city.name} {GUESS_CLOSE}"


def has_guess(text: str) -> bool:
  return GUESS_OPEN in text


def guessed_city(text: str) -> City | None:
  """The city a guess block names (case and spaces aside), or None."""
  match = _GUESS_RE.search(text)
  return BY_NAME.get(" ".join(match[1].split()).lower()) if match else None


def context_of(city: City) -> Mapping[str, object]:
  """The answerer's private context: its city and what it knows about it."""
  return city._asdict()
