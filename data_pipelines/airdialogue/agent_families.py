"""How a scripted agent words things: phrasing families for the agent side of the corpus.

An agent's skill (agents.AGENTS) decides what it does; its family decides how
it says it: how it asks for each slot, proposes a flight, asks the customer to
wait while it searches, and announces the outcome. Varying the agent side
matters twice: learned agents imitate the corpus's agents, and the scripted
customers must understand agents whose wording they were not written against
(held-out families, see `family_split`).
"""

from __future__ import annotations

import dataclasses
import types
from typing import Mapping

import numpy as np

from data_pipelines.airdialogue import phrase_grammar

_PROPOSAL_FIELDS = ("flight", "airline", "dep_date", "dep_hour", "ret_date", "ret_hour", "cls",
                    "stops", "price", "verb")
# Every part an agent can say, and the fields its patterns may use.
PARTS = types.MappingProxyType({
    "greeting": (), "ask_goal": (), "ask_name": (), "ask_trip": (), "ask_airports": (),
    "ask_dates": (), "ask_preferences": (), "ask_time": (), "ask_class": (), "ask_price": (),
    "ask_connections": (), "ask_airline": (), "confirm_name": (), "confirm_dates": (),
    "wait": (), "propose": _PROPOSAL_FIELDS, "propose_again": ("flight", "verb"),
    "propose_cancel": ("flight",), "verb_book": (), "verb_change": (),
    "done_book": (), "done_change": (), "done_cancel": (), "done_no_flight": (),
    "done_no_reservation": (),
})


@dataclasses.dataclass(frozen=True)
class AgentFamily:
  """One way of speaking for an agent; `wait_p` is the chance it asks the customer to hold on."""

  name: str
  about: str
  parts: Mapping[str, tuple[str, ...]]
  wait_p: float = 0.0

  def __post_init__(self):
    missing = sorted(set(PARTS) - set(self.parts))
    unknown = sorted(set(self.parts) - set(PARTS))
    if missing or unknown:
      raise ValueError(f"agent family {self.name!r}: parts missing {missing}, unknown {unknown}")
    for part, patterns in self.parts.items():
      if not patterns:
        raise ValueError(f"agent family {self.name!r}, part {part!r}: no patterns")
      for pattern in patterns:
        phrase_grammar.check_fields(pattern, PARTS[part],
                                    f"agent family {self.name!r}, part {part!r}")
    if not 0.0 <= self.wait_p <= 1.0:
      raise ValueError(f"agent family {self.name!r}: wait_p {self.wait_p} not in [0, 1]")

  def say(self, part: str, rng: np.random.Generator, **fields: str) -> str:
    options = self.parts[part]
    return phrase_grammar.expand(options[rng.integers(len(options))], rng, fields)


TEMPLATE = AgentFamily(
    name="template",
    about="The original agent wording.",
    parts={
        "greeting": ("Hello.", "Hi there.", "Good day."),
        "ask_goal": ("How can I help you?", "How may I help you today?", "What can I do for you?"),
        "ask_name": ("May I have your name, please?", "Could you tell me your name?",
                     "Can I get your full name?"),
        "ask_trip": ("Where are you flying from and to, and what are your travel dates?",
                     "Could you give me your origin and destination airports and your travel "
                     "dates?"),
        "ask_airports": ("Which airports are you flying from and to?",
                         "What are your origin and destination airports?"),
        "ask_dates": ("What are your travel dates?", "When would you like to leave and come back?"),
        "ask_preferences": (
            "Do you have any preferences on departure or return time, class, budget, number of "
            "connections or airline?",
            "Any requirements for time of travel, class, price, connections or airline?"),
        "ask_time": ("What time of day would you like to fly?",),
        "ask_class": ("Do you prefer economy or business class?",),
        "ask_price": ("What is your budget for this trip?",),
        "ask_connections": ("How many connections can you accept?",),
        "ask_airline": ("Do you have an airline preference?",),
        "confirm_name": ("Sorry, could you confirm your name once more?",),
        "confirm_dates": ("Could you confirm your travel dates again?",),
        "wait": ("Let me check.",),
        "propose": ("I found flight {flight} on {airline}, leaving {dep_date} at {dep_hour}:00 and "
                    "returning {ret_date} at {ret_hour}:00, {cls} class, {stops}, ${price}. "
                    "Shall I {verb}?",),
        "propose_again": ("Flight {flight} still meets all your requirements. Shall I {verb}?",),
        "propose_cancel": ("I found your reservation, flight {flight}. Shall I cancel it?",),
        "verb_book": ("book it",),
        "verb_change": ("change your reservation to it",),
        "done_book": ("Your ticket is booked.", "Done, your flight is booked."),
        "done_change": ("Your reservation has been changed.", "Done, I changed your reservation."),
        "done_cancel": ("Your reservation has been cancelled.",
                        "Done, your reservation is cancelled."),
        "done_no_flight": ("Sorry, there are no flights matching your requirements.",
                           "Unfortunately I could not find a flight that meets your needs."),
        "done_no_reservation": ("Sorry, I could not find a reservation under your name.",
                                "Unfortunately there is no reservation under your name."),
    },
)

CROWD = AgentFamily(
    name="crowd",
    about="Like the real dataset's agents: 'May I know your name?', 'Please wait for a moment.'",
    wait_p=0.5,
    parts={
        "greeting": ("Hello.", "Hi."),
        "ask_goal": ("How may I assist you?", "How can I help you [today|]?"),
        "ask_name": ("May I know your name?", "Can I have your name [please|]?"),
        "ask_trip": ("Please share your [travelling|travel] dates and [source and destination|"
                     "airport codes].",),
        "ask_airports": ("Can you please provide your source and destination airport codes?",
                         "May I know your origin and destination?"),
        "ask_dates": ("Please share your travelling dates.", "May I know your journey dates?"),
        "ask_preferences": ("Do you have any other specifications?",
                            "Do you have any connection limit, class, time, budget or airline "
                            "preference?"),
        "ask_time": ("Do you prefer any departure or return time?",),
        "ask_class": ("Which class do you prefer?",),
        "ask_price": ("What is your price limit?",),
        "ask_connections": ("Do you need a connecting flight or a direct flight?",),
        "ask_airline": ("Any airline preference?",),
        "confirm_name": ("Please tell me your name once again.",),
        "confirm_dates": ("Can you repeat your travel dates?",),
        "wait": ("Please wait for a moment.", "Sure, please wait while I check."),
        "propose": ("There is a flight {flight} of {airline} airline with {stops}, fare {price}. "
                    "Shall I {verb}?",
                    "I found a flight {flight} with {airline}, {stops}, price {price}. "
                    "[Shall I|Can I] {verb}?"),
        "propose_again": ("Flight {flight} is still the best option. Shall I {verb}?",),
        "propose_cancel": ("Your reservation with flight {flight} is found. Shall I cancel it?",),
        "verb_book": ("proceed with the booking", "book it"),
        "verb_change": ("proceed with the change",),
        "done_book": ("Your ticket has been booked.",),
        "done_change": ("Your ticket has been changed.",),
        "done_cancel": ("Your ticket has been cancelled.",),
        "done_no_flight": ("Sorry, no flights found with your details.",),
        "done_no_reservation": ("Sorry, there is no reservation found on your name.",),
    },
)

FORMAL = AgentFamily(
    name="formal",
    about="A formal call-centre register: 'Kindly state your full name.', 'One moment please.'",
    wait_p=0.5,
    parts={
        "greeting": ("Good afternoon.", "Welcome."),
        "ask_goal": ("How may I be of service?", "What brings you to us today?"),
        "ask_name": ("Kindly state your full name.", "Under what name shall I look?"),
        "ask_trip": ("Please tell me your itinerary: the cities and days of travel.",),
        "ask_airports": ("Between which cities will you be travelling?",),
        "ask_dates": ("On which days do you intend to depart and return?",),
        "ask_preferences": ("Have you any requirements regarding timing, cabin, fare, stops or "
                            "carrier?",),
        "ask_time": ("At what hour of the day would you like to travel?",),
        "ask_class": ("Which cabin shall I reserve?",),
        "ask_price": ("What is the most you wish to pay?",),
        "ask_connections": ("How many stopovers can you tolerate?",),
        "ask_airline": ("Which carrier do you favour?",),
        "confirm_name": ("Would you kindly repeat your full name?",),
        "confirm_dates": ("Would you kindly repeat your days of travel?",),
        "wait": ("One moment please, I am searching our system.",
                 "Kindly bear with me while I search."),
        "propose": ("I have located flight {flight}, operated by {airline}, departing {dep_date} "
                    "at {dep_hour}:00, returning {ret_date} at {ret_hour}:00, {cls} cabin, "
                    "{stops}, at a fare of {price} dollars. Would you like me to {verb}?",),
        "propose_again": ("Flight {flight} remains the best match. Would you like me to {verb}?",),
        "propose_cancel": ("Your reservation on flight {flight} is in our system. Would you like "
                           "me to cancel it?",),
        "verb_book": ("confirm this booking",),
        "verb_change": ("move your reservation to it",),
        "done_book": ("Your booking is confirmed.",),
        "done_change": ("Your reservation has been amended.",),
        "done_cancel": ("Your reservation is now void.",),
        "done_no_flight": ("I regret that no flight meets your requirements.",),
        "done_no_reservation": ("I regret that I find no reservation in your name.",),
    },
)

FAMILIES: Mapping[str, AgentFamily] = types.MappingProxyType(
    {f.name: f for f in (TEMPLATE, CROWD, FORMAL)})
