"""People-like evaluation customers: the oracle reads them, their openings, their habits across
rows, replay in any batch, and the agent-behaviour metrics of environment.summarize."""

import dataclasses
import functools
import re

import numpy as np
import pytest

from data_pipelines.airdialogue import action_grammar, context, customers, gazetteer, schema
from data_pipelines.airdialogue import slot_parser
from data_pipelines.dialogue import Turn
from domains.airdialogue import environment as airdialogue_env
from domains.airdialogue import people_like
from domains.airdialogue.parties import ScriptedAgent
from ilql_dialogue import parties

SEED = 1000


@functools.cache
def scenarios(n):
  return airdialogue_env.make_scenarios(SEED, n)


@functools.cache
def played(persona, n=200, batch_size=16):
  return tuple(airdialogue_env.run_dialogues(
      ScriptedAgent("oracle"), people_like.PeopleLikeCustomer(persona), scenarios(n),
      batch_size=batch_size, seed=SEED))


def customer_lines(results):
  return [t.text for r in results for t in r.turns if t.speaker == "customer"]


@pytest.mark.parametrize("persona", people_like.PERSONAS)
def test_the_oracle_reads_every_persona(persona):
  summary = airdialogue_env.summarize(played(persona, n=60))
  assert summary["success_rate"] >= 0.95, summary
  assert summary["end_reasons"]["action"] == 60


def test_a_silent_opening_says_nothing_of_the_intent():
  customer = people_like.PeopleLikeCustomer("silent")
  scenes = scenarios(200)
  customer.reset([s.context("customer") for s in scenes], range(len(scenes)))
  openings = customer.respond([[]] * len(scenes))
  places = set(context.AIRPORTS) | set(gazetteer.CITY.values())
  for scene, opening in zip(scenes, openings):
    assert slot_parser.parse(opening, customers.SLOTS, context.AIRPORTS) == {}, opening
    assert scene.intent.name.split()[0].lower() not in opening.lower()
    assert not re.search(r"\d", opening) and not any(p in opening for p in places), opening


def test_every_habit_appears_across_rows():
  results = played("silent") + played("partial")
  text = "\n".join(customer_lines(results))
  months = "|".join(sorted(gazetteer.MONTH_BY_SPELLING, key=len, reverse=True))
  cities = {c for c in gazetteer.CITY.values() if list(gazetteer.CITY.values()).count(c) == 1}
  assert re.search(r"\b\d{2}/\d{2}\b", text), "numeric dates"
  assert re.search(rf"\b\d{{1,2}} (?:{months})\b", text, re.IGNORECASE), "day-first dates"
  assert re.search(r"\b[A-Z]{3}-[A-Z]{3}\b", text), "hyphen-joined codes"
  assert "source and destination" in text.lower(), "source and destination"
  assert any(city in text for city in cities), "cities"
  assert any(reason in text for reason in people_like.REASONS), "reasons"
  assert re.search(r"\bunder \d+", text) and re.search(r"\bbelow \d+", text), "under / below"
  assert "$" not in text and "dollar" not in text.lower(), "no currency"
  assert any(r.intent.name.lower() in line for r in results for line in customer_lines([r])), \
      "lower-case names"
  assert any(r.intent.name.lower() in customer_lines([r])[0].lower()
             for r in played("partial")), "a name in the opening"


def test_silent_gives_its_name_only_when_asked():
  for r in played("silent"):
    said = [i for i, t in enumerate(r.turns)
            if t.speaker == "customer" and r.intent.name.lower() in t.text.lower()]
    assert said, r.turns
    asked = customers.understand(r.turns[said[0] - 1].text)
    assert customers.NAME in asked.slots, r.turns[:said[0] + 1]


def test_a_late_namer_says_its_name_when_it_accepts():
  scene = scenarios(1)[0]
  person = people_like.Person(scene.intent, "partial", np.random.default_rng(0))
  person.habits = dataclasses.replace(person.habits, name_timing="end", name_form="my_name",
                                      lower_name=False)
  assert scene.intent.name not in person.opening()
  accept = person.respond("I found flight 1003 for 300. Shall I book it?")
  assert f"My name is {scene.intent.name}." in accept
  assert scene.intent.name not in person.respond("Shall I go ahead?")


def test_rows_replay_in_any_batch():
  whole = played("partial", n=40, batch_size=40)
  split = played("partial", n=40, batch_size=7)
  assert [r.turns for r in whole] == [r.turns for r in split]
  customer = people_like.PeopleLikeCustomer("silent")
  scenes = scenarios(12)
  seeds = airdialogue_env.row_seeds(SEED, scenes, 1)
  customer.reset([s.context("customer") for s in scenes], seeds)
  together = customer.respond([[]] * 12)
  customer.reset([s.context("customer") for s in scenes[5:]][::-1], seeds[5:][::-1])
  assert customer.respond([[]] * 7) == together[5:][::-1]


def test_the_spec_names_a_known_persona_playing_the_customer():
  assert isinstance(parties.make_party("people:silent", "customer"),
                    people_like.PeopleLikeCustomer)
  with pytest.raises(ValueError, match="unknown persona 'shy'"):
    parties.check("people:shy", "customer")
  with pytest.raises(ValueError, match="asked to play 'agent'"):
    parties.check("people:partial", "agent")


def _result(intent, agent_lines):
  action = schema.Action("book", intent.name, (1001,))
  turns = []
  for line in agent_lines + [f"Done. {action_grammar.format_action(action)}"]:
    turns += [Turn("customer", "Hello."), Turn("agent", line)]
  return airdialogue_env.DialogueResult(
      scenario_id="hand", turns=tuple(turns), end_reason="action", expected_action=action,
      action=action, intent=intent)


def test_asked_metrics_tell_an_agent_that_asks_from_one_that_closes_at_once():
  intent = schema.Intent(name="Sarah Anderson", goal="book", departure_airport="HOU",
                         return_airport="SEA", departure_month="Nov", departure_day="28",
                         return_month="Nov", return_day="30", max_price=500, max_connections=1)
  assert airdialogue_env.slots_that_matter(intent, schema.Action("book", "x", (1,))) == (
      "goal", "name", "airports", "dates", "price", "connections")
  asks = _result(intent, ["Hello, how may I help you?", "May I know your name?",
                          "Please share your travelling dates and source and destination.",
                          "Do you have any other specifications?", "Please wait for a moment."])
  closes = _result(intent, [])
  assert (asks.asked_share, closes.asked_share) == (1.0, 0.0)
  assert asks.to_json()["asked_slots"] == sorted(customers.SLOTS)
  summary = airdialogue_env.summarize([asks, closes])
  assert summary["asked_share"] == 0.5 and summary["asked_before_closing"] == 0.5
  assert summary["mean_agent_turns"] == 3.5 and summary["mean_turns"] == 7.0

  only_name = _result(intent, ["May I know your name?"])
  assert only_name.asked_share == 1 / 6
  cancel = dataclasses.replace(intent, goal="cancel")
  assert dataclasses.replace(only_name, intent=cancel).asked_share == 0.5
