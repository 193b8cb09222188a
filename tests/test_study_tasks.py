"""The tasks' study hooks (registry.StudySpec): the person's card shows its private context in
readable labels, the closing turn is what the environment's ending reads, and the outcome of a
dialogue is what the evaluation summary counts for it."""

import math

import ml_collections
import numpy as np
import pytest

from data_pipelines.airdialogue import gazetteer
from data_pipelines.dialogue import Dialogue, Turn
from data_pipelines.persuasion import loader
from domains.airdialogue import environment as airdialogue_env
from domains.airdialogue import study as airdialogue_study
from domains.airdialogue.parties import AGENT, CUSTOMER, ScriptedAgent, ScriptedCustomer
from domains.persuasion import environment as persuasion_env
from domains.persuasion import study as persuasion_study
from domains.persuasion.environment import PERSUADEE, PERSUADER
from ilql_dialogue import environment, registry
from ilql_dialogue.parties import make_party


def test_each_task_registers_its_study():
  air, p4g = registry.task("airdialogue").study, registry.task("persuasion").study
  assert air is airdialogue_study.STUDY and air.human_role == CUSTOMER
  assert air.closing_field is None and air.closing_turn is None and not air.env_options
  assert p4g is persuasion_study.STUDY and p4g.human_role == PERSUADEE
  assert (p4g.closing_field, p4g.closing_range) == ("donation", (0.0, 2.0))
  assert dict(p4g.env_options) == {"split": "eval"}
  for study in (air, p4g):
    paragraphs = study.instructions.split("\n\n")
    assert len(paragraphs) >= 3 and all(p.strip() for p in paragraphs)


# --- AirDialogue ------------------------------------------------------------------------------


def test_the_airdialogue_card_shows_every_intent_field_readably():
  for scenario in airdialogue_env.make_scenarios(1000, 20):
    intent = scenario.intent
    card = dict(airdialogue_study.card(scenario.context(CUSTOMER)))
    assert card["Your name"] == intent.name
    assert card["Goal"] == airdialogue_study.GOALS[intent.goal]
    for code in (intent.departure_airport, intent.return_airport):
      assert f"{gazetteer.CITY[code]} ({code})" in card["Trip"]
    assert card["Departure date"] == (f"{gazetteer.MONTH_NAMES[intent.departure_month]} "
                                      f"{int(intent.departure_day)}")
    assert card["Return date"].startswith(gazetteer.MONTH_NAMES[intent.return_month])
    assert card["Maximum price"] == f"${intent.max_price}"
    assert card["Class"] == (intent.flight_class or "any")
    assert card["Departure time"] == (intent.departure_time or "any")
    assert card["Return time"] == (intent.return_time or "any")
    assert (card["Connections"] == "any") == (intent.max_connections in (None, 2))
    assert (card["Airline"] == "any") == (intent.airline_preference is None)
  assert airdialogue_study.connections(0) == "direct flights only"
  assert "Delta" in airdialogue_study.airline("normal-cost")
  assert airdialogue_study.airport("XYZ") == "XYZ"  # No city known: the code alone.


def test_the_airdialogue_outcome_is_what_the_evaluation_summary_counts():
  """Every dialogue's outcome against summarize's: per dialogue, and their means against the
  summary of all (oracle and a degraded agent, so success, failure and each field vary)."""
  env = airdialogue_env.AirDialogueEnv()
  scenarios = env.sample(1000, 12)
  episodes = []
  for agent in ("oracle", "wrong_status", "misspell_name", "not_cheapest"):
    episodes += environment.play(
        env, {AGENT: ScriptedAgent(agent), CUSTOMER: make_party("scripted:volunteer", CUSTOMER)},
        scenarios, max_turns=airdialogue_env.DEFAULT_MAX_TURNS, seed=1000)
  results = [airdialogue_env.to_result(e) for e in episodes]
  outcomes = [airdialogue_study.outcome(env, e) for e in episodes]
  for result, outcome in zip(results, outcomes):
    assert list(outcome) == ["success", "booking_success", "status", "flight", "name"]
    assert outcome["success"] == float(result.success)
    booking = result.expected_action.status in airdialogue_env.BOOKING_STATUSES
    assert outcome["booking_success"] == (float(result.success) if booking else None)
    assert {k: outcome[k] for k in ("status", "flight", "name")} == {
        k: float(v) for k, v in result.field_correct().items()}
  summary = airdialogue_env.summarize(results)
  mean = lambda key: np.mean([o[key] for o in outcomes if o[key] is not None])
  assert mean("success") == pytest.approx(summary["success_rate"])
  assert mean("booking_success") == pytest.approx(summary["booking_success"])
  for key in ("status", "flight", "name"):
    assert mean(key) == pytest.approx(summary[f"{key}_acc"])
  assert 0 < summary["success_rate"] < 1 and 0 < summary["booking_success"] < 1


def test_the_oracle_against_a_scripted_customer_succeeds_in_the_study_outcome():
  env = airdialogue_env.AirDialogueEnv()
  episodes = environment.play(env, {AGENT: ScriptedAgent("oracle"),
                                    CUSTOMER: ScriptedCustomer("answer_only")},
                              env.sample(1000, 6), max_turns=40, seed=1000)
  for e in episodes:
    assert e.end_reason == env.OUTCOME  # The agent's action block ended it.
    outcome = airdialogue_study.outcome(env, e)
    assert outcome["success"] == outcome["status"] == outcome["flight"] == outcome["name"] == 1.0


# --- Persuasion for Good ------------------------------------------------------------------------


SURVEY_PERSONA = {"extrovert": 1.4, "agreeable": 3.2, "care": 4.4, "loyalty": 3.666666667,
                  "self_direction": 6.0, "rational": 3.5, "age": 37.0, "sex": "Female",
                  "edu": "Four-year college", "religion": None, "hobby": "chess"}


def test_the_persuasion_card_shows_the_persona_and_the_payment():
  card = persuasion_study.card(SURVEY_PERSONA)
  lines = dict(card)
  assert lines["Age"] == "37" and lines["Sex"] == "Female"
  assert lines["Education"] == "Four-year college"
  assert lines["Personality"] == "extraversion 1.4, agreeableness 3.2"
  assert lines["Moral foundations"] == "care 4.4, loyalty 3.7"
  assert lines["Values"] == "self-direction 6"
  assert lines["Decision style"] == "rational 3.5"
  assert lines["Hobby"] == "chess"  # A trait of no known group keeps a line of its own.
  assert "Religion" not in lines  # The survey left it empty.
  assert card[-1] == ("Payment", persuasion_study.PAYMENT) and "$2" in card[-1][1]
  assert "Save the Children" in card[-1][1]


class ClosingPersuadee:
  """The person's part as the study plays it: chats, then closes with the study's closing
  turn at a turn and amount drawn from its row seed."""

  def reset(self, contexts, seeds):
    rngs = [np.random.default_rng(s) for s in seeds]
    self.plans = [(int(rng.integers(1, 4)), float(rng.choice([0.0, 0.25, 1.5, 2.0])))
                  for rng in rngs]
    self.turns = [0] * len(seeds)

  def respond(self, histories):
    replies = []
    for b, history in enumerate(histories):
      if history is None:
        replies.append(None)
        continue
      self.turns[b] += 1
      at, amount = self.plans[b]
      replies.append(persuasion_study.closing_turn(amount) if self.turns[b] == at else "hm.")
    return replies


class Persuader:
  def reset(self, contexts, seeds):
    pass

  def respond(self, histories):
    return [None if h is None else "would you give to save the children?" for h in histories]


def hand_made_env(n=4):
  return persuasion_env.PersuasionEnv([
      Dialogue(f"d{i}", loader.ROLES, (Turn(PERSUADER, "hello"), Turn(PERSUADEE, "hi")),
               context={PERSUADER: {"age": 30.0}, PERSUADEE: dict(SURVEY_PERSONA, age=20.0 + i)},
               meta={"donation": 0.5}) for i in range(n)])


@pytest.mark.parametrize("amount", [0.0, 0.01, 0.5, 1.5, 1.999, 2.0])
def test_the_closing_turn_is_the_statement_the_ending_reads(amount):
  env = hand_made_env()
  text = persuasion_study.closing_turn(amount)
  ending = env.ending(env.sample(0, 1)[0], PERSUADEE, text)
  assert ending.reason == persuasion_env.DONATION
  assert ending.info["donation"] == pytest.approx(round(amount, 2))
  assert env.ending(env.sample(0, 1)[0], PERSUADER, text) is None  # Only the person's turn.


def test_a_closing_turn_outside_the_payment_is_refused():
  with pytest.raises(ValueError, match="outside"):
    persuasion_study.closing_turn(2.5)


def test_the_persuasion_outcome_is_the_stated_donation_as_summarize_averages_it():
  env = hand_made_env()
  episodes = environment.play(env, {PERSUADER: Persuader(), PERSUADEE: ClosingPersuadee()},
                              env.sample(0, 16), max_turns=4, seed=5)
  outcomes = [persuasion_study.outcome(env, e) for e in episodes]
  stated = [o["donation"] for o in outcomes if o["donation"] is not None]
  assert 0 < len(stated) < len(episodes)  # Some closed, some ran out of turns.
  for e, o in zip(episodes, outcomes):
    assert o["donation"] == (e.info["donation"] if e.end_reason == env.OUTCOME else None)
  summary = persuasion_env.summarize(episodes)
  assert summary["donation/stated"] == len(stated)
  assert math.isclose(np.mean(stated), summary["donation/mean"])


def test_the_study_scenarios_are_held_out_personas_with_cards(p4g_data_dir):
  study = registry.task("persuasion").study
  env = registry.task("persuasion").make_env(ml_collections.ConfigDict(
      dict(study.env_options, data_dir=p4g_data_dir)))
  held_out = persuasion_env.PersuasionEnv.from_corpus("eval", p4g_data_dir)
  assert [d.dialogue_id for d in env.dialogues] == [d.dialogue_id for d in held_out.dialogues]
  for scenario in env.sample(0, 5):
    lines = dict(study.card(env.context(scenario, PERSUADEE)))
    assert {"Age", "Personality", "Values", "Payment"} <= set(lines)
    assert "$2" in lines["Payment"]
