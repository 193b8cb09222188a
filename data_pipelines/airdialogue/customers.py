"""Scripted AirDialogue customers: they know only their Intent and answer an agent turn by turn.

A customer reads each agent utterance, works out by keywords what it is being
asked (which slots, a flight proposal, or the final action), and answers from
paraphrase templates. Styles differ in *what* a customer discloses and *how*
it says it, so that a corpus mixes easy and hard conversations:

  disclosure  volunteer    states goal, name, trip and every constraint at once
              trip_first   states goal and trip up front, the rest when asked
              answer_only  says exactly what was asked, nothing more
              late_reveal  gives one constraint per question and springs the
                           others on the agent when it proposes a flight
  verbosity   terse / plain / chatty (chatty adds interjections and small talk)

Keyword matching (not exact templates) is what lets a learned agent, whose
wording we do not control, talk to these customers as well as the scripted
agents do. All randomness comes from the numpy Generator a customer is given.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping

import numpy as np

from data_pipelines.airdialogue import action_grammar
from data_pipelines.airdialogue import schema

# Slot groups an agent can ask about. The last five are constraints.
GOAL, NAME, AIRPORTS, DATES = "goal", "name", "airports", "dates"
TIME, CLASS, PRICE, CONNECTIONS, AIRLINE = "time", "class", "price", "connections", "airline"
CONSTRAINT_SLOTS = (TIME, CLASS, PRICE, CONNECTIONS, AIRLINE)
SLOTS = (GOAL, NAME, AIRPORTS, DATES) + CONSTRAINT_SLOTS

DISCLOSURES = ("volunteer", "trip_first", "answer_only", "late_reveal")
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
    )
}

# --- Understanding the agent ------------------------------------------------

_ASK_PATTERNS = {
    GOAL: (r"how (?:can|may|could) i help|what can i do for you|help you|assist you|"
           r"reason for your call"),
    NAME: r"\bname\b",
    AIRPORTS: (r"airport|\bwhere\b|destination|origin|\bcit(?:y|ies)\b|"
               r"(?:flying|leaving|departing) from"),
    DATES: r"\bdates?\b|\bwhen\b|which days?\b",
    TIME: r"\btimes?\b|morning|afternoon|evening",
    CLASS: r"\bclass\b|economy|business|cabin",
    PRICE: r"budget|price|\bfares?\b|spend|afford|how much|(?<![-\w])cost",
    CONNECTIONS: r"connection|\bstops?\b|direct|layover",
    AIRLINE: r"airline|carrier",
}
_ASK_RES = {slot: re.compile(p, re.IGNORECASE) for slot, p in _ASK_PATTERNS.items()}
_OPEN_RE = re.compile(
    r"preference|requirement|restriction|anything else|particular|other", re.IGNORECASE)
_PROPOSAL_RE = re.compile(
    r"\bflight (?:number )?\d+|shall i|should i|would you like me to|do you want me to|"
    r"can i (?:go ahead|proceed)|may i (?:go ahead|proceed)|(?:go ahead|proceed) (?:and|with)",
    re.IGNORECASE)
_BAD_NEWS_RE = re.compile(
    r"sorry|unfortunately|no flights?\b|(?:could|can)(?:n't| ?not) find|not available",
    re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class AgentMove:
  """What a customer understood an agent utterance to be."""

  kind: str  # "final", "proposal", "bad_news", "questions" or "unknown".
  slots: frozenset[str] = frozenset()


def understand(agent_utterance: str) -> AgentMove:
  """Classifies an agent utterance by keywords, most decisive reading first."""
  if action_grammar.contains_action(agent_utterance):
    return AgentMove("final")
  if _PROPOSAL_RE.search(agent_utterance):
    return AgentMove("proposal")
  slots = {slot for slot, r in _ASK_RES.items() if r.search(agent_utterance)}
  if not slots & set(CONSTRAINT_SLOTS) and _OPEN_RE.search(agent_utterance):
    slots |= set(CONSTRAINT_SLOTS)
  if slots:
    return AgentMove("questions", frozenset(slots))
  if _BAD_NEWS_RE.search(agent_utterance):
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


def _ordinal(day: str) -> str:
  n = int(day)
  suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
  return f"{day}{suffix}"


def _with_article(word: str | None) -> str | None:
  return None if word is None else f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


# Templates per (slot, verbosity). Every one names its slot with the keywords
# the scripted agents listen for; tests check each parses back to the intent.
_GOAL = {
    "book": {
        "terse": ("Book a flight.", "New booking.", "A ticket, please."),
        "plain": ("I'd like to book a flight.", "I need to book a ticket.",
                  "I want to reserve a flight."),
        "chatty": ("I'm planning to get away for a few days and need to book a flight.",
                   "I'd love to book a ticket, if you can help me with that.",
                   "I was hoping you could help me reserve a flight."),
    },
    "change": {
        "terse": ("Change my reservation.", "Change a flight."),
        "plain": ("I need to change my reservation.", "I'd like to change my flight.",
                  "I want to change my existing booking."),
        "chatty": ("Something came up, so I need to change my reservation.",
                   "My plans moved around and I'd like to change my flight."),
    },
    "cancel": {
        "terse": ("Cancel my reservation.", "Cancellation."),
        "plain": ("I want to cancel my reservation.", "I need to cancel my flight.",
                  "Please cancel my booking."),
        "chatty": ("Sadly my plans fell through, so I need to cancel my reservation.",
                   "I'm afraid I have to cancel my flight."),
    },
}
_NAME = {
    "terse": ("{n}.", "{n}"),
    "plain": ("My name is {n}.", "It's {n}.", "I'm {n}.", "This is {n}."),
    "chatty": ("My name is {n}, by the way.", "It's {n}.", "You can put it under {n}."),
}
_AIRPORTS = {
    "terse": ("{a} to {b}.", "From {a} to {b}."),
    "plain": ("I'm flying from {a} to {b}.", "The trip is from {a} to {b}.",
              "I want to go to {b} from {a}."),
    "chatty": ("I'll be flying out of {a} and heading to {b}.",
               "I'm leaving from {a} and going to {b}."),
}
_DATES = {
    "terse": ("{d} to {r}.", "{d} - {r}."),
    "plain": ("I'm leaving on {d} and returning on {r}.", "My dates are {d} to {r}.",
              "I'd depart on {d} and come back on {r}."),
    "chatty": ("I'd like to head out on {d} and come back on {r}.",
               "I'm hoping to leave on {d} and be back on {r}."),
}
_TIME_BOTH = {
    "terse": ("{d} departure, {r} return.",),
    "plain": ("I'd like to leave in the {d} and come back in the {r}.",
              "{ad} departure and {ar} return, please."),
    "chatty": ("If possible I'd like to leave in the {d} and fly back in the {r}.",),
}
_TIME_DEPARTURE = {
    "terse": ("{d} departure.", "Leave in the {d}."),
    "plain": ("I'd prefer to depart in the {d}.", "{ad} departure would be best."),
    "chatty": ("My schedule is tight, so {ad} departure would be ideal.",
               "I'd really like to leave in the {d}."),
}
_TIME_RETURN = {
    "terse": ("{r} return.", "Return in the {r}."),
    "plain": ("I'd like to return in the {r}.", "{ar} return would be best."),
    "chatty": ("I'd really like to fly back in the {r}.",),
}
_CLASS = {
    "terse": ("{c}.", "{c} class."),
    "plain": ("I'd like {c} class.", "I need a {c} class seat.", "{c} class, please."),
    "chatty": ("I'd really prefer {c} class this time.", "Let's go with {c} class."),
}
_PRICE = {
    "terse": ("${p} max.", "Under ${p}."),
    "plain": ("My budget is ${p}.", "I can spend at most ${p}.", "Nothing over ${p}, please."),
    "chatty": ("I'd rather not spend more than ${p} on this.",
               "Money is a bit tight, so my budget is ${p}."),
}
_CONNECTIONS = {
    0: {
        "terse": ("Direct.", "Non-stop only."),
        "plain": ("I need a direct flight.", "Non-stop only, please.", "No connections, please."),
        "chatty": ("Layovers wear me out, so I need a direct flight.",),
    },
    1: {
        "terse": ("Max 1 connection.", "One stop at most."),
        "plain": ("At most one connection, please.", "One stop is fine, but no more than that."),
        "chatty": ("I can live with one connection, but not more than that.",),
    },
}
_AIRLINE = {
    "terse": ("Normal-cost airline.",),
    "plain": ("I prefer a normal-cost airline.", "A normal-cost airline, please."),
    "chatty": ("I've had bad luck before, so I'd like a normal-cost airline.",),
}
_NO_PREFERENCE = {
    TIME: ("Any time of day works.", "No time preference."),
    CLASS: ("Any class is fine.", "I don't mind the class."),
    CONNECTIONS: ("Connections don't matter.", "I don't mind the number of stops."),
    AIRLINE: ("Any airline is fine.", "No airline preference."),
}
_NOTHING_ELSE = {
    "terse": ("That's all.", "Nothing else."),
    "plain": ("No other preferences.", "That's everything.", "Nothing else matters to me."),
    "chatty": ("I think that's everything, really.", "Nope, that covers it!"),
}
_GREETING = {
    "terse": ("Hi.", "Hello."),
    "plain": ("Hi.", "Hello.", "Hello there."),
    "chatty": ("Hi there!", "Hello! Hope you're doing well.", "Hey, how are you doing?"),
}
_INTERJECTION = ("Sure!", "Of course.", "Absolutely.", "Okay, let me see.")
_SMALL_TALK = (
    "It's been such a long week.",
    "Sorry, my dog is barking in the background.",
    "I'm really looking forward to this.",
    "The weather has been lovely lately.",
    "Thanks for being so patient with me.",
    "I hope you're having a good day.",
)
_ACCEPT = {
    "terse": ("Yes.", "Okay, go ahead."),
    "plain": ("Yes, please.", "That works, go ahead.", "Sounds good, please do."),
    "chatty": ("Perfect, that sounds great! Please go ahead.", "Yes, that would be wonderful."),
}
_LATE_PREFIX = (
    "Oh wait, I forgot to mention something.", "Actually, one more thing.", "Hold on a second.",
)
_THANKS = ("Thank you!", "Thanks, bye.", "Great, thanks for your help.")
_THANKS_ANYWAY = (
    "Oh well, thanks anyway.", "That's a pity. Thanks for checking.", "Okay, thank you anyway.")
_BAD_NEWS_REPLY = ("Oh, that's a shame.", "I see.")
_CONFUSED = ("Sorry, could you say that again?", "I'm not sure what you mean.")


class Customer:
  """A scripted customer; call `opening()` once, then `respond()` to every agent turn."""

  def __init__(self, intent: schema.Intent, style: CustomerStyle | str, rng: np.random.Generator):
    self.intent = intent
    self.style = STYLES[style] if isinstance(style, str) else style
    self.rng = rng
    self.done = False
    self._constraints = constraints_of(intent)
    self._revealed: set[str] = set()

  # Phrasing helpers.

  def _pick(self, options) -> str:
    return options[self.rng.integers(len(options))]

  def _say(self, table: Mapping[str, tuple[str, ...]], **fields) -> str:
    text = self._pick(table[self.style.verbosity]).format(**fields)
    return text[0].upper() + text[1:]

  def _date(self, month: str, day: str) -> str:
    return f"{month} {_ordinal(day) if self.rng.random() < 0.3 else day}"

  def _sentence(self, slot: str) -> str:
    """States one slot of the intent (a 'no preference' line if it is unconstrained)."""
    it = self.intent
    self._revealed.add(slot)
    if slot == GOAL:
      return self._say(_GOAL[it.goal])
    if slot == NAME:
      return self._say(_NAME, n=it.name)
    if slot == AIRPORTS:
      return self._say(_AIRPORTS, a=it.departure_airport, b=it.return_airport)
    if slot == DATES:
      return self._say(_DATES, d=self._date(it.departure_month, it.departure_day),
                       r=self._date(it.return_month, it.return_day))
    if slot not in self._constraints:
      return self._pick(_NO_PREFERENCE[slot])
    if slot == TIME:
      times = dict(d=it.departure_time, r=it.return_time, ad=_with_article(it.departure_time),
                   ar=_with_article(it.return_time))
      if it.departure_time and it.return_time:
        return self._say(_TIME_BOTH, **times)
      return self._say(_TIME_DEPARTURE if it.departure_time else _TIME_RETURN, **times)
    if slot == CLASS:
      return self._say(_CLASS, c=it.flight_class)
    if slot == PRICE:
      return self._say(_PRICE, p=it.max_price)
    if slot == CONNECTIONS:
      return self._say(_CONNECTIONS[it.max_connections])
    return self._say(_AIRLINE)

  def _utter(self, sentences: list[str], interject: bool = False) -> str:
    """Joins sentences in the style's voice, maybe adding an interjection and small talk."""
    if interject and self.style.verbosity == "chatty" and self.rng.random() < 0.5:
      sentences = [self._pick(_INTERJECTION)] + sentences
    if self.rng.random() < self.style.small_talk_p:
      sentences = sentences + [self._pick(_SMALL_TALK)]
    return " ".join(sentences)

  def _trip_slots(self) -> list[str]:
    return [AIRPORTS, DATES] if self.intent.goal != "cancel" else []

  # The conversation.

  def opening(self) -> str:
    """The customer speaks first: a greeting, and more for the forthcoming styles."""
    disclosure = self.style.disclosure
    sentences = [self._say(_GREETING)]
    if disclosure == "volunteer":
      slots = [NAME, GOAL] + self._trip_slots()
      if self.intent.goal != "cancel":
        slots += list(self._constraints)
      sentences += [self._sentence(s) for s in slots]
    elif disclosure == "trip_first":
      sentences += [self._sentence(s) for s in [GOAL] + self._trip_slots()]
    return self._utter(sentences)

  def respond(self, agent_utterance: str) -> str:
    if self.done:
      raise RuntimeError("the customer has already ended the dialogue")
    move = understand(agent_utterance)
    if move.kind == "final":
      self.done = True
      bad_news = _BAD_NEWS_RE.search(action_grammar.strip_action(agent_utterance))
      return self._pick(_THANKS_ANYWAY if bad_news else _THANKS)
    if move.kind == "proposal":
      return self._answer_proposal()
    if move.kind == "bad_news":
      return self._pick(_BAD_NEWS_REPLY)
    if move.kind == "unknown":
      return self._pick(_CONFUSED)
    return self._answer(move.slots)

  def _withheld(self) -> list[str]:
    return [s for s in self._constraints if s not in self._revealed]

  def _answer_proposal(self) -> str:
    withheld = self._withheld() if self.intent.goal != "cancel" else []
    if self.style.disclosure == "late_reveal" and withheld:
      return " ".join([self._pick(_LATE_PREFIX), self._sentence(withheld[0])])
    return self._utter([self._say(_ACCEPT)])

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
      return [self._sentence(fresh[0])] if fresh else [self._say(_NOTHING_ELSE)]
    return [self._sentence(s) for s in present] + [self._say(_NOTHING_ELSE)]

