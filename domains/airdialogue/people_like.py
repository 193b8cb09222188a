"""Scripted evaluation customers in the habits of AirDialogue's human customers.

The training corpus's customers speak through phrasing families
(customer_families); an agent that only learned those may fail on people.
These customers are written apart from every family, in the crowd workers'
own loose habits: numeric ("05/12") or day-first ("12 May") dates, codes
joined by a hyphen ("HOU-SEA"), "source and destination", a city or a reason
for the trip instead of a code, prices with no currency ("below 500"), names
in many forms, often lower-cased or only when asked, loose constraint
wording ("single connection", "one lay-by"), short filler turns.

Personas (spec `people:PERSONA`):

  silent   opens with a bare greeting and volunteers nothing; answers only
           what it is asked, the name too
  partial  opens with its goal and part of the trip (the airports, the
           destination or the dates), the rest when asked; its name in the
           opening, when asked, or at the very end (in its accept turn)

Each row draws its habits (date form, airport form, price wording, name form,
case and timing, constraint wording, filler) once from its own seed, so a
population of rows covers every habit and a row replays in any batch.
What the agent asked is read by `customers.understand`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

import numpy as np

from data_pipelines.airdialogue import action_grammar, customers, gazetteer, schema
from data_pipelines.dialogue import Turn
from domains.airdialogue.parties import AGENT, CUSTOMER, intent_from_json
from ilql_dialogue.party import check_rows
from ilql_dialogue.party_spec import PartySpec

PERSONAS = ("silent", "partial")
KIND = "people"

# Habit -> how often a row has it (roughly as often as people in the dataset do).
DATE_FORMS = {"numeric": 0.45, "unpadded": 0.15, "day_first": 0.3, "month_first": 0.1}
AIRPORT_FORMS = {"hyphen": 0.25, "codes": 0.2, "source_destination": 0.15, "cities": 0.2,
                 "reason": 0.2}
PRICE_FORMS = {"under": 0.3, "below": 0.3, "less_than": 0.2, "limit": 0.1, "within": 0.1}
NAME_FORMS = {"i_am": 0.3, "this_is": 0.2, "my_name": 0.25, "myself": 0.1, "bare": 0.15}
NAME_TIMINGS = {"opening": 0.35, "asked": 0.4, "end": 0.25}  # The partial persona's.
OPENING_REVEALS = {"airports": 0.5, "destination": 0.25, "dates": 0.25}  # Ditto.
LOWER_NAME_P = 0.3

_ABBREVIATIONS = {"June": "Jun", "July": "Jul", "Sept": "Sep"}
_SHARED_CITIES = frozenset(c for c in gazetteer.CITY.values()
                           if list(gazetteer.CITY.values()).count(c) > 1)
REASONS = ("see my son", "visit my parents", "attend my cousin's wedding", "meet my friends",
           "attend a conference", "see my grandmother", "join my family for the holidays")

# --- Sentences ------------------------------------------------------------------

GREETINGS = ("Hi.", "Hello.", "Hi there.")
GOAL_CLAUSES = {
    "book": ("I want to book a ticket", "I need to book a flight ticket",
             "I would like to book a flight", "Can you book a ticket for me"),
    "change": ("I want to change my reservation", "I need to change my existing ticket",
               "Can you change my ticket"),
    "cancel": ("I want to cancel my reservation", "I need to cancel my ticket",
               "Can you cancel my flight"),
}
NAME_FRAMES = {"i_am": "I am {n}.", "this_is": "This is {n}.", "my_name": "My name is {n}.",
               "myself": "Myself {n}.", "bare": "{n}."}
AIRPORT_FRAMES = {
    "hyphen": ("{a}-{b}.", "My journey is {a}-{b}.", "Airport codes are {a}-{b}."),
    "codes": ("From {a} to {b}.", "I am flying from {a} to {b}.", "{a} to {b}."),
    "source_destination": ("My source and destination are {a} and {b}.",
                           "Source is {a} and destination is {b}.",
                           "My source airport is {a} and my destination is {b}."),
    "cities": ("From {a} to {b}.", "I am travelling from {a} to {b}.",
               "I need to go from {a} to {b}."),
    "reason": ("I am going to {b} to {why}, from {a}.",
               "I live in {a} and I am going to {b} to {why}.",
               "I want to go to {b} to {why}. I will start from {a}."),
}
DATE_FRAMES = ("My travelling dates are {d} and {r}.", "{d} and {r}.",
               "I will travel on {d} and return on {r}.", "Dates are {d} to {r}.",
               "I want to depart on {d} and return on {r}.")
PRICE_FRAMES = {
    "under": ("Price should be under {p}.", "Under {p}.", "I want a ticket under {p}."),
    "below": ("Price should be below {p}.", "Below {p}.", "Fare should be below {p}."),
    "less_than": ("Price should be less than {p}.", "Less than {p}."),
    "limit": ("My price limit is {p}.", "Price limit is {p}."),
    "within": ("Within {p}.", "I can pay within {p}."),
}
# Per constraint, the row's wording is one index into each of its tables.
TIME_FRAMES = {
    "both": ("I prefer {d} departure and {r} return.",
             "Departure should be in the {d} and return in the {r}.",
             "I want to leave in the {d} and come back in the {r}."),
    "departure": ("I prefer {d} departure.", "I want to leave in the {d}.",
                  "Departure time should be {d}."),
    "return": ("I prefer {r} return.", "I want to come back in the {r}.",
               "Return time should be {r}."),
}
CLASS_FRAMES = ("I need {c} class.", "Class should be {c}.", "I want to travel in {c} class.")
CONNECTION_FRAMES = {
    0: ("I want a direct flight.", "I need a flight with no stops.",
        "It should be a non stop flight.", "I prefer a flight without lay-by."),
    1: ("I need a single connection flight.", "1 connection is fine.", "I can take one lay-by.",
        "Maximum one stop."),
}
AIRLINE_FRAMES = ("I prefer normal cost airlines.", "Please avoid low cost airlines.",
                  "I want a standard airline.", "Airline should be normal cost.")
UNRESTRICTED = {
    customers.TIME: ("Any timing works for me.", "I have no preference for the time."),
    customers.CLASS: ("Class is not an issue.", "I have no preference for the class."),
    customers.CONNECTIONS: ("Connections are not an issue.",
                            "I have no preference for the connections."),
    customers.AIRLINE: ("Airline is not an issue.", "I have no preference for the airline."),
}
NOTHING_MORE = ("That is all.", "Nothing more than that.")
FILLERS = ("Sure, take your time.", "Ok.", "Sure.", "Ok, I will wait.", "Sure, no problem.")
ACCEPTS = {
    "book": ("Yes, please proceed.", "Ok, please book it.", "Yes, go ahead.", "Sure, proceed."),
    "change": ("Yes, please proceed.", "Ok, please change it.", "Yes, go ahead."),
    "cancel": ("Yes, please cancel it.", "Yes, proceed.", "Ok, go ahead."),
}
THANKS = ("Thank you.", "Thanks.", "Thank you for your help.", "Thank you so much.")
THANKS_ANYWAY = ("Ok, no problem. Thank you.", "That's ok, thanks.", "Ok. Thank you for checking.")
ACKNOWLEDGEMENTS = ("Ok.", "Oh, ok.")
# What tells a person the agent's closing words are bad news.
_BAD_NEWS_RE = re.compile(r"sorry|unfortunately|regret|\bno (?:flights?|reservation)|"
                          r"(?:could|can)(?:n't| ?not) find|not available", re.IGNORECASE)


def _draw(rng: np.random.Generator, weights: Mapping[str, float]) -> str:
  names = list(weights)
  p = np.asarray([weights[n] for n in names])
  return names[rng.choice(len(names), p=p / p.sum())]


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
  return options[rng.integers(len(options))]


@dataclasses.dataclass(frozen=True)
class Habits:
  """How one row speaks, drawn once from its seed."""

  date: str
  airports: str
  price: str
  name_form: str
  lower_name: bool
  name_timing: str
  opening_reveal: str
  reason: str
  time_wording: int
  class_wording: int
  connections_wording: int
  airline_wording: int
  filler: str

  @classmethod
  def draw(cls, persona: str, rng: np.random.Generator) -> Habits:
    habits = cls(
        date=_draw(rng, DATE_FORMS), airports=_draw(rng, AIRPORT_FORMS),
        price=_draw(rng, PRICE_FORMS), name_form=_draw(rng, NAME_FORMS),
        lower_name=bool(rng.random() < LOWER_NAME_P), name_timing=_draw(rng, NAME_TIMINGS),
        opening_reveal=_draw(rng, OPENING_REVEALS), reason=_pick(rng, REASONS),
        time_wording=int(rng.integers(len(TIME_FRAMES["both"]))),
        class_wording=int(rng.integers(len(CLASS_FRAMES))),
        connections_wording=int(rng.integers(len(CONNECTION_FRAMES[0]))),
        airline_wording=int(rng.integers(len(AIRLINE_FRAMES))), filler=_pick(rng, FILLERS))
    return dataclasses.replace(habits, name_timing="asked") if persona == "silent" else habits


def date_text(form: str, month: str, day: str) -> str:
  """'05/12', '5/12', '12 May' or 'May 12th'."""
  m, d = schema.MONTHS.index(month) + 1, int(day)
  abbreviation = _ABBREVIATIONS.get(month, month)
  return {"numeric": f"{m:02d}/{d:02d}", "unpadded": f"{m}/{d}",
          "day_first": f"{d} {abbreviation}",
          "month_first": f"{abbreviation} {gazetteer.ordinal(d)}"}[form]


def airport_text(form: str, code: str) -> str:
  """The city for the city forms, unless it has two airports; else the code."""
  city = gazetteer.CITY.get(code)
  if form in ("cities", "reason") and city is not None and city not in _SHARED_CITIES:
    return city
  return code


class Person:
  """One customer of a persona: `opening()` once, then `respond()` to every agent turn."""

  def __init__(self, intent: schema.Intent, persona: str, rng: np.random.Generator):
    if persona not in PERSONAS:
      raise ValueError(f"unknown persona {persona!r}; known: {list(PERSONAS)}")
    self.intent, self.persona, self.rng = intent, persona, rng
    self.habits = Habits.draw(persona, rng)
    self.done = False
    self._named = False
    self._constraints = customers.constraints_of(intent)

  # Values and sentences.

  def _name(self, asked: bool) -> str:
    self._named = True
    name = self.intent.name.lower() if self.habits.lower_name else self.intent.name
    form = self.habits.name_form if asked or self.habits.name_form != "bare" else "i_am"
    return NAME_FRAMES[form].format(n=name)

  def _goal_clause(self) -> str:
    return _pick(self.rng, GOAL_CLAUSES[self.intent.goal])

  def _goal(self) -> str:
    clause = self._goal_clause()
    return clause + ("?" if clause.startswith("Can you") else ".")

  def _airport(self, code: str) -> str:
    return airport_text(self.habits.airports, code)

  def _airports(self) -> str:
    it = self.intent
    frame = _pick(self.rng, AIRPORT_FRAMES[self.habits.airports])
    return frame.format(a=self._airport(it.departure_airport), b=self._airport(it.return_airport),
                        why=self.habits.reason)

  def _dates(self) -> str:
    it, form = self.intent, self.habits.date
    return _pick(self.rng, DATE_FRAMES).format(
        d=date_text(form, it.departure_month, it.departure_day),
        r=date_text(form, it.return_month, it.return_day))

  def _constraint(self, slot: str) -> str:
    """One constraint in the row's wording, or a 'no preference' line if unrestricted."""
    it, habits = self.intent, self.habits
    if slot not in self._constraints:
      return _pick(self.rng, UNRESTRICTED[slot])
    if slot == customers.TIME:
      d, r = it.departure_time, it.return_time
      leg = "both" if d and r else "departure" if d else "return"
      return TIME_FRAMES[leg][habits.time_wording].format(d=d, r=r)
    if slot == customers.CLASS:
      return CLASS_FRAMES[habits.class_wording].format(c=it.flight_class)
    if slot == customers.PRICE:
      return _pick(self.rng, PRICE_FRAMES[habits.price]).format(p=it.max_price)
    if slot == customers.CONNECTIONS:
      return CONNECTION_FRAMES[it.max_connections][habits.connections_wording]
    return AIRLINE_FRAMES[habits.airline_wording]

  # The conversation.

  def opening(self) -> str:
    if self.persona == "silent":
      return _pick(self.rng, GREETINGS)
    sentences = [_pick(self.rng, GREETINGS)] if self.rng.random() < 0.5 else []
    if self.habits.name_timing == "opening":
      sentences.append(self._name(asked=False))
    sentences.append(self._partial_goal())
    return " ".join(sentences)

  def _partial_goal(self) -> str:
    """The goal with part of the trip: the airports, the destination or the dates."""
    it, form, reveal = self.intent, self.habits.airports, self.habits.opening_reveal
    if it.goal == "cancel":
      return self._goal()
    if reveal == "destination":
      why = f" to {self.habits.reason}" if form == "reason" else ""
      return f"{self._goal_clause()} to {self._airport(it.return_airport)}{why}."
    if reveal == "airports" and form in ("codes", "cities"):
      return (f"{self._goal_clause()} from {self._airport(it.departure_airport)} to "
              f"{self._airport(it.return_airport)}.")
    trip = self._airports() if reveal == "airports" else self._dates()
    return f"{self._goal()} {trip}"

  def respond(self, agent_utterance: str) -> str:
    if self.done:
      raise RuntimeError("the customer has already ended the dialogue")
    move = customers.understand(agent_utterance)
    if move.kind == "final":
      self.done = True
      bad_news = _BAD_NEWS_RE.search(action_grammar.strip_action(agent_utterance))
      return _pick(self.rng, THANKS_ANYWAY if bad_news else THANKS)
    if move.kind == "proposal":
      return self._accept()
    if move.kind == "wait":
      return self.habits.filler
    if move.kind == "questions":
      return self._answer(move.slots)
    return _pick(self.rng, ACKNOWLEDGEMENTS)  # Bad news before the action, or not understood.

  def _accept(self) -> str:
    accept = _pick(self.rng, ACCEPTS[self.intent.goal])
    if self.habits.name_timing == "end" and not self._named:
      return f"{accept} {self._name(asked=False)}"
    return accept

  def _answer(self, asked: frozenset[str]) -> str:
    """Exactly what was asked: a broad question gets every restricted constraint it names."""
    sentences = []
    if customers.GOAL in asked:
      sentences.append(self._goal())
    if customers.NAME in asked:
      sentences.append(self._name(asked=True))
    if customers.AIRPORTS in asked:
      sentences.append(self._airports())
    if customers.DATES in asked:
      sentences.append(self._dates())
    constraints = [s for s in customers.CONSTRAINT_SLOTS if s in asked]
    if len(constraints) == 1:
      sentences.append(self._constraint(constraints[0]))
    elif constraints:
      restricted = [s for s in constraints if s in self._constraints]
      sentences += [self._constraint(s) for s in restricted] or [_pick(self.rng, NOTHING_MORE)]
    return " ".join(sentences)


class PeopleLikeCustomer:
  """`Person`s of one persona as a party; each row's habits come from its seed."""

  def __init__(self, persona: str):
    if persona not in PERSONAS:
      raise ValueError(f"unknown persona {persona!r}; known: {list(PERSONAS)}")
    self.persona = persona
    self._rows: list[Person] = []

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    self._rows = [Person(intent_from_json(c), self.persona, np.random.default_rng(s))
                  for c, s in zip(contexts, seeds, strict=True)]

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    check_rows("PeopleLikeCustomer", histories, len(self._rows))
    replies = []
    for b, (person, history) in enumerate(zip(self._rows, histories)):
      if history is None:
        replies.append(None)
      elif not history:
        replies.append(person.opening())
      elif history[-1].speaker != AGENT:
        raise ValueError(f"PeopleLikeCustomer, row {b}: last turn is {history[-1].speaker!r}'s, "
                         f"not the agent's")
      else:
        replies.append(person.respond(history[-1].text))
    return replies


def check(spec: PartySpec, role: str) -> None:
  """`people:PERSONA` names a known persona and plays the customer."""
  if spec.target not in PERSONAS:
    raise ValueError(f"party spec {spec}: unknown persona {spec.target!r}; known: "
                     f"{list(PERSONAS)}")
  if role != CUSTOMER:
    raise ValueError(f"party spec {spec} is a customer, asked to play {role!r}")


def make_customer(spec: PartySpec, role: str, **_: Any) -> PeopleLikeCustomer:
  check(spec, role)
  return PeopleLikeCustomer(spec.target)
