"""Scripted AirDialogue customers: they know only their Intent and answer an agent turn by turn.

A customer reads each agent utterance, works out by keywords what it is being
asked (which slots, a flight proposal, a request to wait, or the final
action), and answers in its phrasing family. Styles differ in *what* a customer discloses and *how*
it says it, so that a corpus mixes easy and hard conversations:

  disclosure  volunteer    states goal, name, trip and every constraint at once
              trip_first   states goal and trip up front, the rest when asked
              part_trip    states the goal and half the trip (airports or dates)
                           up front, the rest when asked
              answer_only  says exactly what was asked, nothing more
              late_reveal  gives one constraint per question and springs the
                           others on the agent when it proposes a flight
  verbosity   terse / plain / chatty (chatty adds interjections and small talk)

How a customer words things is its phrasing family (customer_families), an
axis independent of the style. Keyword matching with synonyms (not exact
templates) is what lets agents of any wording, learned or scripted in a
held-out family, talk to these customers. All randomness comes from the
numpy Generator a customer is given.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping

import numpy as np

from data_pipelines.airdialogue import action_grammar
from data_pipelines.airdialogue import customer_families
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import typing_noise

# Slot groups an agent can ask about. The last five are constraints.
GOAL, NAME, AIRPORTS, DATES = "goal", "name", "airports", "dates"
TIME, CLASS, PRICE, CONNECTIONS, AIRLINE = "time", "class", "price", "connections", "airline"
CONSTRAINT_SLOTS = (TIME, CLASS, PRICE, CONNECTIONS, AIRLINE)
SLOTS = (GOAL, NAME, AIRPORTS, DATES) + CONSTRAINT_SLOTS

DISCLOSURES = ("volunteer", "trip_first", "part_trip", "answer_only", "late_reveal")
VERBOSITIES = ("terse", "plain", "chatty")


@dataclasses.dataclass(frozen=True)
class CustomerStyle:
  name: str
  disclosure: str
  verbosity: str
  small_talk_p: float = 0.0  # Chance that an answer carries a line of small talk.

  def __post_init__(self):
    if self.disclosure not in DISCLOSURES:
      raise ValueError(f"style {self.name!r}: disclosure {self.disclosure!r} not in {DISCLOSURES}")
    if self.verbosity not in VERBOSITIES:
      raise ValueError(f"style {self.name!r}: verbosity {self.verbosity!r} not in {VERBOSITIES}")
    if not 0.0 <= self.small_talk_p <= 1.0:
      raise ValueError(f"style {self.name!r}: small_talk_p {self.small_talk_p} not in [0, 1]")


STYLES: Mapping[str, CustomerStyle] = {
    s.name: s for s in (
        CustomerStyle("volunteer", "volunteer", "plain", 0.05),
        CustomerStyle("answer_only", "answer_only", "plain", 0.05),
        CustomerStyle("late_reveal", "late_reveal", "plain", 0.05),
        CustomerStyle("terse", "answer_only", "terse", 0.0),
        CustomerStyle("chatty", "trip_first", "chatty", 0.4),
        # Opens with the goal and half of the trip (the airports or the dates), as people
        # often do: the agent must ask for the other half before it can search.
        CustomerStyle("part_trip", "part_trip", "plain", 0.05),
    )
}


def draw_style(rng: np.random.Generator) -> CustomerStyle:
  """One of STYLES, uniformly: how scenes and `scripted:any` mix them."""
  return STYLES[list(STYLES)[rng.integers(len(STYLES))]]


# --- Understanding the agent ------------------------------------------------
# Keywords per slot, with the synonyms agents of any phrasing family use
# ("journey dates", "source", "cabin", "stopovers", "carrier", ...).

_ASK_PATTERNS = {
    GOAL: (r"how (?:can|may|could) i (?:help|assist)|what can i do for you|help you|assist you|"
           r"reason for your call|of service|brings you"),
    NAME: r"\bname\b",
    AIRPORTS: (r"airport|\bwhere\b|destination|origin|\bsource\b|\bcit(?:y|ies)\b|itinerary|"
               r"(?:flying|leaving|departing|travell?ing) from|\broute\b"),
    DATES: r"\bdates?\b|\bwhen\b|which days?\b|\bdays\b|days? of travel|itinerary",
    TIME: r"\btimes?\b|\btiming\b|\bhour\b|morning|afternoon|evening",
    CLASS: r"\bclass\b|economy|business|cabin",
    PRICE: r"budget|price|\bfares?\b|spend|afford|how much|(?<![-\w])cost|\bpay\b",
    CONNECTIONS: r"connect|\bstops?\b|stopovers?|direct|layover|lay-?by",
    AIRLINE: r"airline|carrier",
}
_ASK_RES = {slot: re.compile(p, re.IGNORECASE) for slot, p in _ASK_PATTERNS.items()}
_OPEN_RE = re.compile(
    r"preference|requirement|restriction|specification|anything else|particular|other",
    re.IGNORECASE)
_FLIGHT_NUMBER_RE = re.compile(r"\bflight (?:number )?\d+", re.IGNORECASE)
# An offer to act ("Shall I book it?"), unless it is a question about a slot
# ("Which cabin shall I reserve?").
_OFFER_RE = re.compile(
    r"would you like me to|do you want me to|"
    r"(?:shall|should|can|may) i (?:go ahead|proceed|book|reserve|change|move|cancel|confirm)|"
    r"(?:go ahead|proceed) (?:and|with)",
    re.IGNORECASE)
_WH_QUESTION_RE = re.compile(r"^\W*(?:which|what|how|when|where|who|under what)\b", re.IGNORECASE)
_WAIT_RE = re.compile(
    r"\bwait\b|\bmoment\b|hold on|bear with me|let me (?:check|look|search)|searching|checking",
    re.IGNORECASE)
_BAD_NEWS_RE = re.compile(
    r"sorry|unfortunately|regret|no flights?\b|(?:could|can)(?:n't| ?not) find|not available",
    re.IGNORECASE)
_GREETING_RE = re.compile(r"\bgood (?:morning|afternoon|evening|day)\b", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class AgentMove:
  """What a customer understood an agent utterance to be."""

  kind: str  # "final", "proposal", "questions", "wait", "bad_news" or "unknown".
  slots: frozenset[str] = frozenset()


def understand(agent_utterance: str) -> AgentMove:
  """Classifies an agent utterance by keywords, most decisive reading first."""
  if action_grammar.contains_action(agent_utterance):
    return AgentMove("final")
  text = _GREETING_RE.sub(" ", agent_utterance)
  if _FLIGHT_NUMBER_RE.search(text) or (
      _OFFER_RE.search(text) and not _WH_QUESTION_RE.search(text)):
    return AgentMove("proposal")
  slots = {slot for slot, r in _ASK_RES.items() if r.search(text)}
  if not slots & set(CONSTRAINT_SLOTS) and _OPEN_RE.search(text):
    slots |= set(CONSTRAINT_SLOTS)
  if slots:
    return AgentMove("questions", frozenset(slots))
  if _WAIT_RE.search(text):
    return AgentMove("wait")
  if _BAD_NEWS_RE.search(text):
    return AgentMove("bad_news")
  return AgentMove("unknown")


# --- What the customer knows -------------------------------------------------


def constraints_of(intent: schema.Intent) -> tuple[str, ...]:
  """The constraint slots this intent actually restricts (price always does)."""
  present = []
  if intent.departure_time is not None or intent.return_time is not None:
    present.append(TIME)
  if intent.flight_class is not None:
    present.append(CLASS)
  present.append(PRICE)
  if intent.max_connections is not None and intent.max_connections < 2:
    present.append(CONNECTIONS)
  if intent.airline_preference is not None:
    present.append(AIRLINE)
  return tuple(present)


def _with_article(word: str | None) -> str | None:
  return None if word is None else f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


class Customer:
  """A scripted customer; call `opening()` once, then `respond()` to every agent turn.

  `family` (customer_families.FAMILIES) sets the wording, `noise` overrides
  the family's typing noise (typing_noise.NONE for clean text).
  """

  def __init__(self, intent: schema.Intent, style: CustomerStyle | str, rng: np.random.Generator,
               family: customer_families.CustomerFamily | str = "template",
               noise: typing_noise.TypingNoise | None = None):
    self.intent = intent
    self.style = STYLES[style] if isinstance(style, str) else style
    if isinstance(family, str) and family not in customer_families.FAMILIES:
      raise ValueError(f"unknown customer phrasing family {family!r}; "
                       f"known: {sorted(customer_families.FAMILIES)}")
    self.family = customer_families.FAMILIES[family] if isinstance(family, str) else family
    self.noise = self.family.noise if noise is None else noise
    self.rng = rng
    self.done = False
    self._constraints = constraints_of(intent)
    self._revealed: set[str] = set()

  # Phrasing helpers.

  def _say(self, part: str, **fields: str) -> str:
    return self.family.say(part, self.style.verbosity, self.rng, **fields)

  def _typed(self, text: str) -> str:
    return self.noise.apply(text, self.rng)

  def _date(self, month: str, day: str) -> str:
    return self.family.date(month, day, self.rng)

  def _name(self) -> str:
    lower = self.rng.random() < self.family.lowercase_name_p
    return self.intent.name.lower() if lower else self.intent.name

  def _sentence(self, slot: str) -> str:
    """States one slot of the intent (a 'no preference' line if it is unconstrained)."""
    it, family, rng = self.intent, self.family, self.rng
    self._revealed.add(slot)
    if slot == GOAL:
      return self._say(f"goal_{it.goal}")
    if slot == NAME:
      return self._say("name", n=self._name())
    if slot == AIRPORTS:
      return self._say("airports", a=family.airport(it.departure_airport, rng),
                       b=family.airport(it.return_airport, rng))
    if slot == DATES:
      return self._say("dates", d=self._date(it.departure_month, it.departure_day),
                       r=self._date(it.return_month, it.return_day))
    if slot not in self._constraints:
      return self._say(f"no_{slot}")
    if slot == TIME:
      d, r = it.departure_time, it.return_time
      times = dict(d=d and family.time_of_day(d, rng), r=r and family.time_of_day(r, rng),
                   ad=_with_article(d), ar=_with_article(r))
      if d and r:
        return self._say("time_both", **times)
      leg = "departure" if d else "return"
      return self._say(f"time_{leg}", **{k: v for k, v in times.items() if v is not None})
    if slot == CLASS:
      return self._say("class", c=family.flight_class(it.flight_class, rng))
    if slot == PRICE:
      return self._say("price", p=family.price(it.max_price, rng))
    if slot == CONNECTIONS:
      return self._say(f"connections_{it.max_connections}")
    return self._say("airline")

  def _utter(self, sentences: list[str], interject: bool = False) -> str:
    """Joins sentences in the style's voice, maybe adding an interjection and small talk."""
    if interject and self.style.verbosity == "chatty" and self.rng.random() < 0.5:
      sentences = [self._say("interjection")] + sentences
    if self.rng.random() < self.style.small_talk_p:
      sentences = sentences + [self._say("small_talk")]
    return " ".join(sentences)

  def _trip_slots(self) -> list[str]:
    return [AIRPORTS, DATES] if self.intent.goal != "cancel" else []

  # The conversation.

  def opening(self) -> str:
    """The customer speaks first: a greeting, and more for the forthcoming styles."""
    disclosure = self.style.disclosure
    sentences = [self._say("greeting")]
    if disclosure == "volunteer":
      family = self.family
      slots = ([] if family.name_when_asked or family.name_last else [NAME]) + [GOAL]
      slots += self._trip_slots()
      if self.intent.goal != "cancel":
        slots += list(self._constraints)
      if family.name_last and not family.name_when_asked:
        slots.append(NAME)
      sentences += [self._sentence(s) for s in slots]
    elif disclosure == "trip_first":
      sentences += [self._sentence(s) for s in [GOAL] + self._trip_slots()]
    elif disclosure == "part_trip":
      trip = self._trip_slots()
      sentences += [self._sentence(s) for s in [GOAL] + trip[self.rng.integers(2):][:1]]
    return self._typed(self._utter(sentences))

  def respond(self, agent_utterance: str) -> str:
    if self.done:
      raise RuntimeError("the customer has already ended the dialogue")
    return self._typed(self._reply(understand(agent_utterance), agent_utterance))

  def _reply(self, move: AgentMove, agent_utterance: str) -> str:
    if move.kind == "final":
      self.done = True
      bad_news = _BAD_NEWS_RE.search(action_grammar.strip_action(agent_utterance))
      return self._say("thanks_anyway" if bad_news else "thanks")
    if move.kind == "proposal":
      return self._answer_proposal()
    if move.kind == "wait":
      return self._say("filler")
    if move.kind == "bad_news":
      return self._say("bad_news_reply")
    if move.kind == "unknown":
      return self._say("confused")
    return self._answer(move.slots)

  def _withheld(self) -> list[str]:
    return [s for s in self._constraints if s not in self._revealed]

  def _answer_proposal(self) -> str:
    withheld = self._withheld() if self.intent.goal != "cancel" else []
    if self.style.disclosure == "late_reveal" and withheld:
      return " ".join([self._say("late_prefix"), self._sentence(withheld[0])])
    return self._utter([self._say("accept")])

  def _answer(self, asked: frozenset[str]) -> str:
    sentences = [self._sentence(s) for s in (GOAL, NAME, AIRPORTS, DATES) if s in asked]
    asked_constraints = [s for s in CONSTRAINT_SLOTS if s in asked]
    if asked_constraints:
      sentences += self._answer_constraints(asked_constraints)
    return self._utter(sentences, interject=True)

  def _answer_constraints(self, asked: list[str]) -> list[str]:
    """Constraints asked about: all of them, or one at a time for late revealers.

    A question naming one slot always gets its answer; a broad one (several
    slots) gets every asked constraint, except that a late revealer gives only
    the first it has not mentioned yet and keeps the rest for later.
    """
    present = [s for s in asked if s in self._constraints]
    if len(asked) == 1:
      return [self._sentence(asked[0])]
    if self.style.disclosure == "late_reveal":
      fresh = [s for s in present if s not in self._revealed]
      return [self._sentence(fresh[0])] if fresh else [self._say("nothing_else")]
    return [self._sentence(s) for s in present] + [self._say("nothing_else")]
