"""Phrasing families, the held-out family split, and understanding that survives them."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from data_pipelines.airdialogue import agent_families
from data_pipelines.airdialogue import agents
from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import customer_families
from data_pipelines.airdialogue import customers
from data_pipelines.airdialogue import family_split
from data_pipelines.airdialogue import phrase_grammar
from data_pipelines.airdialogue import phrasing_eval
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import scorer
from data_pipelines.airdialogue import selfplay
from data_pipelines.airdialogue import slot_parser
from data_pipelines.airdialogue import solver
from data_pipelines.airdialogue import typing_noise
from ilql_dialogue.parties import make_party

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FIELD_SLOT = agents.SLOT_OF_FIELD
_SPLIT = family_split.SPLIT


def _truth(intent, slot):
  """The intent's fields that `slot` states, as the parser names them."""
  truth = intent.to_json()
  truth["flight_class"] = truth.pop("class", None)
  if truth.get("max_connections") == 2:
    del truth["max_connections"]
  return {k: v for k, v in truth.items() if v is not None and _FIELD_SLOT.get(k) == slot}


def _airports(table):
  return {a for f in table.flights for a in (f.departure_airport, f.return_airport)}


def _heard(utterance, slot, table):
  heard = agents.extract_slots(utterance, {slot}, _airports(table))
  if "name" in heard:
    heard["name"] = heard["name"].lower()
  return {k: v for k, v in heard.items() if _FIELD_SLOT[k] == slot}


# --- Round trips ----------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), family=st.sampled_from(sorted(customer_families.FAMILIES)),
       style=st.sampled_from(sorted(customers.STYLES)))
def test_every_family_round_trips_every_slot(seed, family, style):
  """A customer of any family states each slot; the scripted agent hears exactly that value."""
  rng = np.random.default_rng(seed)
  (intent, table), = context.sample_contexts(rng, 1)
  for slot in customers.SLOTS:
    question = agent_families.TEMPLATE.parts[f"ask_{slot}"][0]
    answer = customers.Customer(intent, style, rng, family).respond(question)
    want = _truth(intent, slot)
    if slot == customers.NAME:
      want = {"name": intent.name.lower()}
    assert _heard(answer, slot, table) == want, (family, slot, answer)


@pytest.mark.parametrize("family", sorted(agent_families.FAMILIES))
def test_customers_understand_every_agent_family(family):
  parts = agent_families.FAMILIES[family].parts
  rng = np.random.default_rng(0)
  for slot in customers.SLOTS:
    for question in parts[f"ask_{slot}"]:
      move = customers.understand(phrase_grammar.expand(question, rng))
      assert move.kind == "questions" and slot in move.slots, (question, move)
  for question in parts["ask_preferences"]:
    move = customers.understand(question)
    assert set(customers.CONSTRAINT_SLOTS) <= move.slots, (question, move)
  for wait in parts["wait"]:
    assert customers.understand(wait).kind == "wait", wait
  fields = dict(flight="1003", airline="UA", dep_date="Jan 5", dep_hour="9", ret_date="Jan 7",
                ret_hour="15", cls="economy", stops="1 connection", price="300", verb="book it")
  for part in ("propose", "propose_again", "propose_cancel"):
    for pattern in parts[part]:
      text = phrase_grammar.expand(pattern, rng, fields)
      assert customers.understand(text).kind == "proposal", text


# --- The held-out split (tests/test_family_leak.py checks no training stream holds its forms) ---


def test_the_generator_refuses_held_out_families():
  with pytest.raises(ValueError, match=r"\['spoken'\] are held out"):
    selfplay.generate_samples(0, 5, customer_family_mix="template:1,spoken:1")
  with pytest.raises(ValueError, match=r"\['formal'\] are held out"):
    selfplay.generate_samples(0, 5, agent_family_mix={"formal": 1})
  with pytest.raises(ValueError, match="unknown names"):
    selfplay.generate_samples(0, 5, customer_family_mix="shakespeare:1")


def test_split_config_errors_name_the_field():
  good = json.load(open(family_split.DEFAULT_PATH))
  split = family_split.from_json(good, "x.json")
  assert split.resolve("customer", "held_out") == tuple(good["customer"]["held_out"])
  assert split.resolve("agent", "formal") == ("formal",)
  with pytest.raises(ValueError, match="unknown agent phrasing family 'poetic'"):
    split.resolve("agent", "poetic")
  twice = json.loads(json.dumps(good))
  twice["customer"]["held_out"].append("template")
  with pytest.raises(ValueError, match=r"x\.json: field 'customer' must list each"):
    family_split.from_json(twice, "x.json")
  unknown = json.loads(json.dumps(good))
  unknown["agent"]["train"] = ["template", "crowd", "pirate"]
  with pytest.raises(ValueError, match=r"field 'agent\.train' names unknown families \['pirate'\]"):
    family_split.from_json(unknown, "x.json")
  with pytest.raises(ValueError, match="expected an object"):
    family_split.from_json([], "x.json")


def test_corpus_uses_every_training_family_and_records_it():
  stats = selfplay.corpus_stats(selfplay.generate_samples(seed=2, n=200))
  assert set(stats["per_customer_family"]) == set(_SPLIT.train("customer"))
  assert set(stats["per_agent_family"]) == set(_SPLIT.train("agent"))


def test_generation_is_deterministic_and_utc_only():
  def corpus():
    return [s.data_json() for s in selfplay.generate_samples(seed=[7, 1], n=40)]

  first = corpus()
  script = ("import json; from data_pipelines.airdialogue import selfplay; print(json.dumps("
            "[s.data_json() for s in selfplay.generate_samples(seed=[7, 1], n=40)]))")
  elsewhere = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             check=True, cwd=_REPO_ROOT,
                             env={**os.environ, "TZ": "Pacific/Kiritimati"}).stdout
  assert json.loads(elsewhere) == json.loads(json.dumps(first)) == json.loads(json.dumps(corpus()))


def test_families_make_many_distinct_utterances():
  lines = {line for s in selfplay.generate_samples(seed=3, n=300) for line in s.dialogue
           if line.startswith("customer:")}
  assert len(lines) > 1000


# --- The oracle against every style x family ----------------------------------------


@pytest.fixture(scope="module")
def scenes():
  return context.sample_contexts(np.random.default_rng(2024), 40)


@pytest.mark.parametrize("family", sorted(customer_families.FAMILIES))
@pytest.mark.parametrize("style", sorted(customers.STYLES))
def test_oracle_succeeds_for_every_style_and_family(scenes, style, family):
  agent_names = sorted(agent_families.FAMILIES)
  for i, (intent, table) in enumerate(scenes):
    rng = np.random.default_rng(i)
    agent = agents.ScriptedAgent(table, "oracle", rng, agent_names[i % len(agent_names)])
    lines, action, _ = selfplay.play(customers.Customer(intent, style, rng, family), agent)
    assert action is not None and scorer.is_success(
        action, solver.expected_action(intent, table)), "\n".join(lines)


def test_party_specs_select_a_family_or_a_group():
  customer = make_party("scripted:terse/numeric", "customer")
  assert customer.families == ("numeric",)
  assert make_party("scripted:chatty/held_out", "customer").families == (
      _SPLIT.held_out("customer"))
  assert make_party("scripted:chatty", "customer").families == ("template",)
  agent = make_party("scripted_agent:oracle/formal", "agent")
  assert agent.families == ("formal",)
  with pytest.raises(ValueError, match="unknown customer phrasing family 'klingon'"):
    make_party("scripted:terse/klingon", "customer")
  with pytest.raises(ValueError, match="empty phrasing family"):
    make_party("scripted:terse/", "customer")
  scenes = context.sample_contexts(np.random.default_rng(3), 6)
  group = make_party("scripted:volunteer/held_out", "customer")
  group.reset([i.to_json() for i, _ in scenes], list(range(6)))
  again = make_party("scripted:volunteer/held_out", "customer")
  again.reset([i.to_json() for i, _ in scenes], list(range(6)))
  assert group.respond([[]] * 6) == again.respond([[]] * 6)
  assert {c.family.name for c in group._rows} <= set(_SPLIT.held_out("customer"))


def test_any_style_draws_every_style_per_row_and_replays():
  """`scripted:any/train`, the training population: each row's style comes from its seed."""
  scenes = context.sample_contexts(np.random.default_rng(4), 60)
  contexts = [i.to_json() for i, _ in scenes]
  parties = [make_party("scripted:any/train", "customer") for _ in range(2)]
  for party in parties:
    party.reset(contexts, list(range(60)))
  assert parties[0].respond([[]] * 60) == parties[1].respond([[]] * 60)
  assert {c.style.name for c in parties[0]._rows} == set(customers.STYLES)
  assert {c.family.name for c in parties[0]._rows} <= set(_SPLIT.train("customer"))
  with pytest.raises(ValueError, match="unknown customer style 'every'"):
    make_party("scripted:every", "customer")


# --- The parser on the real dataset's habits ------------------------------------------


@pytest.mark.parametrize("utterance, asked, want", [
    ("my dates are 04/03 to 04/05", (), {"departure_month": "Apr", "departure_day": "3",
                                         "return_month": "Apr", "return_day": "5"}),
    ("3 Apr - 5 Apr", (), {"departure_month": "Apr", "departure_day": "3",
                           "return_month": "Apr", "return_day": "5"}),
    ("the 3rd of April and back on Apr 5th", (), {"departure_month": "Apr", "departure_day": "3",
                                                  "return_month": "Apr", "return_day": "5"}),
    ("ATL-SFO", (), {"departure_airport": "ATL", "return_airport": "SFO"}),
    ("source and destination are atl and sfo", (),
     {"departure_airport": "ATL", "return_airport": "SFO"}),
    ("going to see my mom in Denver, flying out of Pittsburg", (),
     {"departure_airport": "PIT", "return_airport": "DEN"}),
    ("under 500", (), {"max_price": 500}),
    ("below 1k", (), {"max_price": 1000}),
    ("500", ("price",), {"max_price": 500}),
    ("single connection", (), {"max_connections": 1}),
    ("a lay-by is ok", (), {"max_connections": 1}),
    ("direct", (), {"max_connections": 0}),
    ("up to 1 connection", (), {"max_connections": 1}),
    ("name is sharon smith", (), {"name": "Sharon Smith"}),
    ("sharon smith", ("name",), {"name": "Sharon Smith"}),
    ("Jason Hill I am in a bit of a hurry", ("name",), {"name": "Jason Hill"}),
    ("sure eric stewart", ("name",), {"name": "Eric Stewart"}),
    ("I didn't quite catch that", ("name",), {}),
    ("Afternoon flight 200 dollars max", (), {"departure_time": "afternoon", "max_price": 200}),
    ("I found flight 1003 for you", (), {}),
    ("Sure, take your time.", (), {}),
    ("Ok.", (), {}),
    ("Good morning! heading to a business meeting", (), {}),
])
def test_parser_reads_the_real_customers_habits(utterance, asked, want):
  assert slot_parser.parse(utterance, asked) == want


@pytest.mark.parametrize("utterance, asked, want", [
    ("The way out is on March the fifth and the way back is on the twenty-third of March", (),
     {"departure_month": "Mar", "departure_day": "5", "return_month": "Mar",
      "return_day": "23"}),
    ("Outbound 05JUN, inbound 07JUN.", (), {"departure_month": "June", "departure_day": "5",
                                            "return_month": "June", "return_day": "7"}),
    ("on the 12th of May", (), {"departure_month": "May", "departure_day": "12"}),
    ("Going out of H-O-U and into E-W-R.", (), {"departure_airport": "HOU",
                                                "return_airport": "EWR"}),
    ("Routing Sea-Tac to Hartsfield-Jackson.", (), {"departure_airport": "SEA",
                                                    "return_airport": "ATL"}),
    ("Logan is my home airport, and I'm headed to Denver International for work.", (),
     {"departure_airport": "BOS", "return_airport": "DEN"}),
    ("No more than five hundred, if I can help it.", (), {"max_price": 500}),
    ("Keep it under a grand if you can.", (), {"max_price": 1000}),
    ("Fare cap USD 5000.", (), {"max_price": 5000}),
    ("My company caps the fare at $200.00.", (), {"max_price": 200}),
    ("Outbound around 0900 hrs, inbound around 2100 hrs.", (),
     {"departure_time": "morning", "return_time": "evening"}),
    ("On the last day I'm tied up until 2pm, so I'd fly home after that.", (),
     {"return_time": "afternoon"}),
    ("My meetings end by 9am, so I can fly out then.", (), {"departure_time": "morning"}),
    ("Going out about one in the afternoon, and coming home around eight in the evening.", (),
     {"departure_time": "afternoon", "return_time": "evening"}),
    ("Put me in the cheap seats, please.", (), {"flight_class": "economy"}),
    ("I have to sleep on the way, so I need a lie-flat seat.", (), {"flight_class": "business"}),
    ("I get anxious on layovers, so I want to stay on one plane the whole way.", (),
     {"max_connections": 0}),
    ("Zero stops, if possible.", (), {"max_connections": 0}),
    ("Single segment each way.", (), {"max_connections": 0}),
    ("Up to two segments per direction.", (), {"max_connections": 1}),
    ("My back can manage one transfer, but no more.", (), {"max_connections": 1}),
    ("A budget airline lost my bag once, so I stick to the big carriers.", (),
     {"airline_preference": "normal-cost"}),
    ("A legacy carrier, please.", (), {"airline_preference": "normal-cost"}),
    ("Emma Adams, that's the name.", (), {"name": "Emma Adams"}),
    ("The trip is for me, paul turner.", (), {"name": "Paul Turner"}),
    ("Passenger name as on my passport: Edward Jones.", (), {"name": "Edward Jones"}),
    ("I need to rebook an existing itinerary.", (), {"goal": "change"}),
])
def test_parser_reads_the_held_out_families_forms(utterance, asked, want):
  assert slot_parser.parse(utterance, asked) == want


def test_training_corpus_holds_the_real_customers_habits():
  """Every habit of the real dataset's customers (docs/METHODS.md) is in the training corpus."""
  samples = list(selfplay.generate_samples(seed=4, n=400, typing_noise_scale=0))
  lines = [line.partition(": ")[2] for s in samples for line in s.dialogue
           if line.startswith("customer:")]
  text = "\n".join(lines)
  months = "|".join(schema.MONTHS)
  habits = {
      "numeric dates": rf"\b\d\d/\d\d\b",
      "day-first dates": rf"\b\d{{1,2}} (?:{months})\b",
      "Apr 3rd": rf"\b(?:{months}) \d{{1,2}}(?:st|nd|rd|th)\b",
      "hyphen-joined codes": r"\b[A-Z]{3}-[A-Z]{3}\b",
      "source and destination": r"(?i)\bsource and destination\b",
      "a trip reason with a city": r"(?i)\b(?:visiting|seeing) my \w+(?: \w+)? in [A-Z]",
      "under N": r"(?i)\bunder \d+\b(?! dollars)",
      "below N": r"(?i)\bbelow \d+\b(?! dollars)",
      "single connection": r"(?i)\bsingle connection\b",
      "lay-by": r"(?i)\blay-by\b",
      "direct": r"(?i)\bdirect\b",
      "filler: take your time": r"(?m)^Sure, take your time\.$",
      "filler: ok": r"(?m)^Ok\.$",
  }
  missing = [habit for habit, pattern in habits.items() if not re.search(pattern, text)]
  assert not missing, missing
  lower = [s for s in samples if any(s.intent.name.lower() in line for line in s.dialogue)]
  assert lower, "no lower-cased name"
  rng = np.random.default_rng(0)
  (intent, _), = context.sample_contexts(rng, 1)
  intent = dataclasses.replace(intent, goal="book")
  for style in ("answer_only", "terse"):  # Volunteers nothing.
    assert not agents.extract_slots(customers.Customer(intent, style, rng, "numeric").opening())
  asked_first = customers.Customer(intent, "volunteer", rng, "dayfirst").opening()
  assert intent.name.lower() not in asked_first.lower()  # The name only when asked.
  name_last = customers.Customer(intent, "volunteer", rng, "numeric").opening()
  assert name_last.lower().rstrip(".").endswith(intent.name.lower())  # The name at the end.


def test_a_shared_city_resolves_to_the_airport_the_listener_sees():
  assert slot_parser.parse("from Chicago to Boston", (), {"MDW", "BOS", "ATL"})[
      "departure_airport"] == "MDW"
  assert slot_parser.parse("from Chicago to Boston", (), {"ORD", "BOS", "ATL"})[
      "departure_airport"] == "ORD"


def test_every_generator_name_reads_as_a_name():
  for first in context.FIRST_NAMES:
    for last in context.LAST_NAMES[::7]:
      for said in (f"my name is {first} {last}", f"{first.lower()} {last.lower()} here"):
        assert slot_parser.parse(said).get("name") == f"{first} {last}", said


def test_typing_noise_rates_are_checked_and_noise_spares_values():
  with pytest.raises(ValueError, match="typo=1.5"):
    typing_noise.TypingNoise(typo=1.5)
  noise = typing_noise.TypingNoise(lowercase=1.0, no_punctuation=1.0, typo=1.0)
  text = noise.apply("Thanks, please book flight ATL to SFO on Jan 5 for $500.",
                     np.random.default_rng(0))
  assert text == text.lower() and "," not in text and "atl to sfo on jan 5 for $500" in text
  assert typing_noise.NONE.apply("Keep Me.", np.random.default_rng(0)) == "Keep Me."


def test_family_definitions_are_checked():
  parts = dict(customer_families.NUMERIC.parts)
  with pytest.raises(ValueError, match="parts missing \\['filler'\\]"):
    customer_families.CustomerFamily("x", "", {k: v for k, v in parts.items() if k != "filler"},
                                     date=None, airport=None, price=None)
  with pytest.raises(ValueError, match="part 'price'.*uses fields \\['n'\\]"):
    customer_families.CustomerFamily("x", "", {**parts, "price": ("{n}",)},
                                     date=None, airport=None, price=None)
  with pytest.raises(ValueError, match="unbalanced"):
    agent_families.AgentFamily("x", "", {**agent_families.CROWD.parts, "wait": ("[a|b",)})


def test_cli_takes_family_mixes(tmp_path):
  out = tmp_path / "corpus"
  ok = subprocess.run([sys.executable, "-m", "data_pipelines.airdialogue.generate",
                       f"--out_dir={out}", "--num_dialogues=10", "--customer_family_mix=casual:1",
                       "--typing_noise_scale=0"], capture_output=True, text=True, cwd=_REPO_ROOT)
  assert ok.returncode == 0, ok.stderr
  stats = json.loads((out / "stats.json").read_text())
  assert set(stats["per_customer_family"]) == {"casual"}
  bad = subprocess.run([sys.executable, "-m", "data_pipelines.airdialogue.generate",
                        f"--out_dir={tmp_path / 'bad'}", "--customer_family_mix=reasons:1"],
                       capture_output=True, text=True, cwd=_REPO_ROOT)
  assert bad.returncode == 1 and "--customer_family_mix" in bad.stderr and "held out" in bad.stderr


def test_phrasing_eval_measures_held_out_families(tmp_path):
  accuracy = phrasing_eval.slot_accuracy(_SPLIT.held_out("customer"), 10, every_constraint=True)
  for family in _SPLIT.held_out("customer"):
    assert set(accuracy[family]) == set(customers.SLOTS)
    assert all(cell == {"n": 10, "accuracy": 1.0} for cell in accuracy[family].values())
  oracle = phrasing_eval.oracle_success(["terse"], ["spoken"], 10)
  assert oracle["terse/spoken"]["n"] == 10 and oracle["terse/spoken"]["success_rate"] == 1.0
  assert phrasing_eval.probe_accuracy()["accuracy"] >= 0.95
  broken = tmp_path / "probe.jsonl"
  broken.write_text('{"text": "hi"}\n')
  with pytest.raises(ValueError, match=r"probe\.jsonl:1: field 'want' missing"):
    phrasing_eval.probe_accuracy(str(broken))
