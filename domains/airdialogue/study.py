"""AirDialogue in a human study: a person plays the customer against an agent party.

The person reads its intent as a card of labelled lines (airports with their
cities, dates with month names, every constraint, "any" where there is none),
the agent's action block ends the dialogue (AirDialogueEnv.ending), and the
outcome is the evaluation's own per-dialogue score: `summarize` of the one
dialogue's DialogueResult, so a study arm and `evaluate_env` of the same agent
count success the same way.
"""

from __future__ import annotations

from typing import Any, Mapping

from data_pipelines.airdialogue import gazetteer, schema
from domains.airdialogue import environment, parties
from ilql_dialogue import registry
from ilql_dialogue.environment import Episode

INSTRUCTIONS = """\
You are a customer chatting with an airline's travel agent. The card beside the chat says who \
you are and what you need: to book a new flight, to change your reservation or to cancel it, \
with the trip's airports and dates and what the flight must satisfy.

Tell the agent what it asks for, in your own words; you may also say more than it asks. Answer \
only from your card: where the card says "any", you have no preference.

The agent ends the conversation when it books, changes or cancels a flight, or tells you it \
cannot. A few questions about the conversation follow.

Please do not share anything about yourself that is not on the card."""

GOALS = {"book": "Book a new flight", "change": "Change your existing reservation",
         "cancel": "Cancel your existing reservation"}
ANY = "any"


def airport(code: str) -> str:
  """`Boston (BOS)`; the bare code for an airport without a city in the gazetteer."""
  city = gazetteer.CITY.get(code)
  return f"{city} ({code})" if city else code


def date(month: str, day: str) -> str:
  """`March 3` from the official month abbreviation and day."""
  return f"{gazetteer.MONTH_NAMES.get(month, month)} {int(day)}"


def connections(limit: int | None) -> str:
  if limit is None or limit >= 2:  # 2 is the official "any number".
    return ANY
  return "direct flights only" if limit == 0 else "at most 1 connection"


def airline(preference: str | None) -> str:
  if preference is None:
    return ANY
  if preference == "normal-cost":
    return f"a normal-cost airline ({', '.join(schema.NORMAL_COST_AIRLINES)})"
  return preference


def card(context: Mapping[str, Any]) -> list[tuple[str, str]]:
  """The customer's intent (its `context`, as AirDialogueEnv gives it) as labelled lines."""
  intent = parties.intent_from_json(context)
  return [
      ("Your name", intent.name),
      ("Goal", GOALS.get(intent.goal, intent.goal)),
      ("Trip", f"{airport(intent.departure_airport)} to {airport(intent.return_airport)}, "
               "round trip"),
      ("Departure date", date(intent.departure_month, intent.departure_day)),
      ("Return date", date(intent.return_month, intent.return_day)),
      ("Maximum price", f"${intent.max_price}"),
      ("Connections", connections(intent.max_connections)),
      ("Class", intent.flight_class or ANY),
      ("Airline", airline(intent.airline_preference)),
      ("Departure time", intent.departure_time or ANY),
      ("Return time", intent.return_time or ANY),
  ]


def outcome(env: Any, episode: Episode) -> dict[str, float | None]:
  """The dialogue's numbers as the evaluation summary scores it: success, booking success
  (None on a scenario without a flight to book or change, which that summary leaves out),
  and whether the action's status, flight and name were right."""
  del env  # Scored against the scenario's expected action alone.
  summary = environment.summarize([environment.to_result(episode)])
  return {"success": summary["success_rate"], "booking_success": summary["booking_success"],
          "status": summary["status_acc"], "flight": summary["flight_acc"],
          "name": summary["name_acc"]}


STUDY = registry.StudySpec(human_role=parties.CUSTOMER, instructions=INSTRUCTIONS, card=card,
                           outcome=outcome)
