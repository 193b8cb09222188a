"""Scripted customers and agents, the self-play corpus, and conversion to Dialogue."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from data_pipelines import dialogue as dialogue_lib
from data_pipelines.airdialogue import action_grammar
from data_pipelines.airdialogue import agent_families
from data_pipelines.airdialogue import agents
from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import customer_families
from data_pipelines.airdialogue import customers
from data_pipelines.airdialogue import official_io
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import scorer
from data_pipelines.airdialogue import selfplay
from data_pipelines.airdialogue import solver
from data_pipelines.airdialogue import to_dialogue

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FIELD_SLOT = agents.SLOT_OF_FIELD


@pytest.fixture(scope="module")
def contexts():
  return context.sample_contexts(np.random.default_rng(123), 200)


def _play_all(contexts, style, skill, seed=0):
  rng = np.random.default_rng(seed)
  results = []
  for intent, table in contexts:
    lines, action, error = selfplay.play(
        customers.Customer(intent, style, rng), agents.ScriptedAgent(table, skill, rng))
    ok = action is not None and scorer.is_success(action, solver.expected_action(intent, table))
    results.append((intent, lines, action, error, ok))
  return results


def _rate(results):
  return sum(r[-1] for r in results) / len(results)


@pytest.mark.parametrize("style", sorted(customers.STYLES))
def test_oracle_succeeds_against_every_style(contexts, style):
  results = _play_all(contexts, style, "oracle")
  failures = [r[1] for r in results if not r[-1]]
  assert not failures, "\n".join(failures[0])


def test_degraded_agents_fall_below_the_oracle(contexts):
  mixed = [(c, style) for c, style in zip(contexts, sorted(customers.STYLES) * 40)]
  by_agent = {}
  for skill in agents.AGENTS:
    rng = np.random.default_rng(7)
    outcomes, lengths = [], []
    for (intent, table), style in mixed:
      lines, action, _ = selfplay.play(
          customers.Customer(intent, style, rng), agents.ScriptedAgent(table, skill, rng))
      expected = solver.expected_action(intent, table)
      outcomes.append(action is not None and scorer.is_success(action, expected))
      lengths.append(len(lines))
    by_agent[skill] = (np.mean(outcomes), np.mean(lengths))
  assert by_agent["oracle"][0] == 1.0
  for skill in ("forget_constraint", "not_cheapest", "wrong_status", "misspell_name", "give_up"):
    assert by_agent[skill][0] < 0.97, (skill, by_agent[skill])
  assert by_agent["wrong_status"][0] == 0.0 and by_agent["misspell_name"][0] == 0.0
  # The redundant agent still gets there, only slower.
  assert by_agent["redundant"][0] == 1.0
  assert by_agent["redundant"][1] > by_agent["oracle"][1] + 4


def test_customers_only_ever_state_their_own_intent(contexts):
  """Whatever an agent hears from any style agrees with the intent: templates parse back exactly."""
  for style in customers.STYLES:
    for intent, lines, *_ in _play_all(contexts[:100], style, "redundant", seed=3):
      truth = intent.to_json()
      truth["flight_class"] = truth.pop("class", None)
      for line in lines:
        speaker, _, text = line.partition(": ")
        if speaker != "customer":
          continue
        for key, value in agents.extract_slots(text).items():
          if key == "goal" and value == "book" and intent.goal != "book":
            pytest.fail(f"{style}: {text!r} sounds like a booking for goal {intent.goal}")
          if key != "goal":
            assert truth.get(key) == value, (style, text, key, value)


def _truth(intent):
  truth = intent.to_json()
  truth["flight_class"] = truth.pop("class", None)
  return {k: v for k, v in truth.items() if v is not None}


@pytest.mark.parametrize("style", ["answer_only", "terse", "chatty"])
def test_every_answer_is_heard_in_full(contexts, style):
  """Each slot question gets an answer the agents extract completely (all paraphrases)."""
  rng = np.random.default_rng(9)
  questions = {slot: agent_families.TEMPLATE.parts[f"ask_{slot}"] for slot in customers.SLOTS}
  for intent, _ in contexts[:100]:
    truth = _truth(intent)
    for slot, asks in questions.items():
      for ask in asks:
        heard = agents.extract_slots(customers.Customer(intent, style, rng).respond(ask))
        want = {k: v for k, v in truth.items() if _FIELD_SLOT[k] == slot}
        assert heard == want, (style, ask, heard)


@pytest.mark.parametrize("style", ["answer_only", "terse"])
@pytest.mark.parametrize("skill", ["oracle", "redundant"])
def test_answer_only_customers_reveal_only_what_is_asked(contexts, style, skill):
  for intent, lines, *_ in _play_all(contexts[:100], style, skill, seed=5):
    assert not agents.extract_slots(lines[0].partition(": ")[2]), lines[0]
    for prev, line in zip(lines, lines[1:]):
      if not line.startswith("customer:") or action_grammar.contains_action(prev):
        continue
      move = customers.understand(prev.partition(": ")[2])
      revealed = {_FIELD_SLOT[k] for k in agents.extract_slots(line.partition(": ")[2])}
      if move.kind == "proposal":
        revealed -= {customers.GOAL}  # "Yes, please book it."
      assert revealed <= set(move.slots), (prev, line)


def test_volunteer_states_everything_at_once(contexts):
  rng = np.random.default_rng(0)
  for intent, _ in contexts:
    if intent.goal == "cancel":
      continue
    heard = agents.extract_slots(customers.Customer(intent, "volunteer", rng).opening())
    assert heard == _truth(intent)


def test_late_reveal_withholds_constraints_until_a_proposal():
  intent = schema.Intent(
      name="Amy Lee", goal="book", departure_airport="ATL", return_airport="SFO",
      departure_month="Jan", departure_day="5", return_month="Jan", return_day="7", max_price=500,
      max_connections=0, departure_time="morning", flight_class="economy")
  customer = customers.Customer(intent, "late_reveal", np.random.default_rng(0))
  broad = agents.extract_slots(
      customer.respond("Any preferences on time, class, budget, connections or airline?"))
  assert len(broad) == 1
  revealed = set(broad)
  for _ in range(3):
    late = agents.extract_slots(
        customer.respond("I found flight 1003 on UA for $300. Shall I book it?"))
    assert len(late) == 1 and not set(late) & revealed
    revealed |= set(late)
  assert revealed == {"departure_time", "flight_class", "max_price", "max_connections"}
  yes = customer.respond("Flight 1003 still fits. Shall I book it?")
  assert agents._ACCEPT_RE.search(yes) and not agents.extract_slots(yes)
  # A question about one constraint is always answered.
  fresh = customers.Customer(intent, "late_reveal", np.random.default_rng(1))
  assert agents.extract_slots(fresh.respond("What class would you like?")) == {
      "flight_class": "economy"}


@pytest.mark.parametrize("utterance, kind, slots", [
    ("What's your name?", "questions", {"name"}),
    ("When do you want to travel?", "questions", {"dates"}),
    ("Where would you like to go?", "questions", {"airports"}),
    ("What is your budget?", "questions", {"price"}),
    ("Do you need a direct flight?", "questions", {"connections"}),
    ("Any other requirements?", "questions", set(customers.CONSTRAINT_SLOTS)),
    ("Do you prefer a normal-cost airline?", "questions", {"airline"}),
    ("Shall I book flight 1003 for you?", "proposal", set()),
    ("Done. [action] status=book flight=1003 name=A B [/action]", "final", set()),
    ("Unfortunately nothing is available.", "bad_news", set()),
    ("Blue whales are large.", "unknown", set()),
])
def test_customers_understand_free_wording(utterance, kind, slots):
  move = customers.understand(utterance)
  assert (move.kind, set(move.slots)) == (kind, slots)


def test_small_talk_carries_no_slots():
  template = customer_families.TEMPLATE
  chatter = (template.parts["small_talk"] + template.parts["interjection"]
             + template.parts["greeting"]["chatty"])
  for line in chatter:
    assert not agents.extract_slots(line), line


def test_agent_learns_everything_by_asking():
  table = context.sample_contexts(np.random.default_rng(0), 1)[0][1]
  table = dataclasses.replace(table, reservation=schema.NO_RESERVATION)
  agent = agents.ScriptedAgent(table, "oracle", np.random.default_rng(0))
  assert customers.understand(agent.respond("Hi.")).slots == {"goal"}
  assert customers.understand(agent.respond("I need to cancel my reservation.")).slots == {"name"}
  final = agent.respond("My name is Amy Lee.")
  assert action_grammar.parse_action(final) == schema.Action("no_reservation", "Amy Lee")
  assert agent.action == schema.Action("no_reservation", "Amy Lee")


def test_play_records_missing_or_broken_actions():
  intent, table = context.sample_contexts(np.random.default_rng(0), 1)[0]

  class Silent:
    def respond(self, customer_utterance):
      return "Hmm."

  class Broken:
    def respond(self, customer_utterance):
      return "Done [action] status=book flight=x name=A [/action]"

  rng = np.random.default_rng(0)
  lines, action, error = selfplay.play(
      customers.Customer(intent, "chatty", rng), Silent(), max_turns=9)
  assert action is None and len(lines) == 9 and "no action" in error
  lines, action, error = selfplay.play(customers.Customer(intent, "chatty", rng), Broken())
  assert action is None and "flight 'x'" in error and len(lines) == 3


def test_default_corpus_success_rate_and_stats():
  samples = list(selfplay.generate_samples(seed=11, n=1000))
  stats = selfplay.corpus_stats(samples)
  assert 0.55 <= stats["success_rate"] <= 0.75
  assert stats["n"] == 1000 and stats["no_action"] == 0
  assert set(stats["per_agent"]) == set(selfplay.DEFAULT_AGENT_MIX)
  assert set(stats["per_customer_style"]) == set(selfplay.DEFAULT_CUSTOMER_MIX)
  assert stats["per_agent"]["oracle"]["success_rate"] == 1.0
  assert abs(sum(stats["expected_status"].values()) - 1) < 1e-9
  assert 0.45 < stats["expected_status"]["book"] < 0.63
  for s in samples:
    assert s.correct_sample == scorer.is_success(s.action, s.expected_action)
    assert s.expected_action == solver.expected_action(s.intent, s.table)
    ts = s.extra["timestamps"]
    assert len(ts) == len(s.dialogue) and all(isinstance(t, int) for t in ts) and ts == sorted(ts)
    last_agent = [line for line in s.dialogue if line.startswith("agent:")][-1]
    assert action_grammar.parse_action(last_agent) == s.action


def test_mixes_are_configurable_and_checked():
  only_oracle = selfplay.corpus_stats(list(selfplay.generate_samples(1, 60, agent_mix="oracle:1")))
  assert only_oracle["success_rate"] == 1.0 and set(only_oracle["per_agent"]) == {"oracle"}
  stats = selfplay.corpus_stats(list(selfplay.generate_samples(
      1, 60, customer_mix={"terse": 0.5, "chatty": 0.5}, agent_mix={"misspell_name": 1})))
  assert stats["success_rate"] == 0.0 and set(stats["per_customer_style"]) == {"terse", "chatty"}
  with pytest.raises(ValueError, match="unknown names"):
    selfplay.parse_mix("oracle:1,genius:2", agents.AGENTS, "agent")
  with pytest.raises(ValueError, match="not a number"):
    selfplay.parse_mix("oracle:x", agents.AGENTS, "agent")
  with pytest.raises(ValueError, match="positive sum"):
    selfplay.parse_mix({"oracle": 0.0}, agents.AGENTS, "agent")


def test_cli_output_is_deterministic_and_official(tmp_path):
  a = selfplay.write_corpus(str(tmp_path / "a"), 40, seed=3, kb_size=12)
  selfplay.write_corpus(str(tmp_path / "b"), 40, seed=3, kb_size=12)
  selfplay.write_corpus(str(tmp_path / "c"), 40, seed=4, kb_size=12)
  for name in ("data.json", "kb.json", "stats.json"):
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
  assert (tmp_path / "a" / "data.json").read_bytes() != (tmp_path / "c" / "data.json").read_bytes()
  stats = json.loads((tmp_path / "a" / "stats.json").read_text())
  assert stats == json.loads(json.dumps(a))
  for key in ("n", "success_rate", "expected_status", "per_agent", "per_customer_style"):
    assert key in stats
  read = list(official_io.read_samples(tmp_path / "a" / "data.json", tmp_path / "a" / "kb.json"))
  assert len(read) == 40 and all(len(s.table.flights) == 12 for s in read)
  assert stats["success_rate"] == np.mean([s.correct_sample for s in read])


def test_to_dialogue_of_selfplay_samples(tmp_path):
  samples = list(selfplay.generate_samples(seed=5, n=30))
  official_io.write_samples(samples, tmp_path / "data.json", tmp_path / "kb.json")
  dialogues = list(to_dialogue.read_dialogues(tmp_path / "data.json", tmp_path / "kb.json"))
  assert [d.dialogue_id for d in dialogues[:2]] == ["data.json:1", "data.json:2"]
  for s, d in zip(samples, dialogues):
    assert d.roles == ("customer", "agent")
    assert [f"{t.speaker}: {t.text}" for t in d.turns] == list(s.dialogue)
    assert d.outcome == float(s.correct_sample)
    assert d.context == {"agent": s.table.to_json(), "customer": s.intent.to_json()}
    assert d.meta["action_in_text"] == "present"
    assert d.meta["expected_action"] == s.expected_action.to_json()
    last_agent = [t for t in d.turns if t.speaker == "agent"][-1]
    assert action_grammar.parse_action(last_agent.text) == s.action
    assert dialogue_lib.Dialogue.from_json(json.loads(json.dumps(d.to_json()))) == d


def _official_sample(**overrides):
  intent, table = context.sample_contexts(np.random.default_rng(2), 1)[0]
  expected = solver.expected_action(intent, table)
  fields = dict(
      intent=intent, table=table, expected_action=expected, action=expected, correct_sample=True,
      dialogue=("customer: Hi.", "agent: Hello, how can I help?", "customer: Book me something.",
                "agent: Done, it is booked.", "customer: Thank you.", "customer: Bye."),
      extra={"timestamps": [1, 2, 3, 4, 5, 6]})
  fields.update(overrides)
  return schema.Sample(**fields)


def test_to_dialogue_appends_the_action_to_the_last_agent_utterance():
  sample = _official_sample()
  d = to_dialogue.sample_to_dialogue(sample, "x")
  assert [t.speaker for t in d.turns] == [
      "customer", "agent", "customer", "agent", "customer", "customer"]
  assert d.turns[3].text.startswith("Done, it is booked. [action]")
  assert action_grammar.parse_action(d.turns[3].text) == sample.action
  assert d.meta["action_in_text"] == "appended" and d.meta["timestamps"] == [1, 2, 3, 4, 5, 6]
  no_agent = to_dialogue.sample_to_dialogue(_official_sample(dialogue=("customer: Hi.",)), "y")
  assert no_agent.turns[-1].speaker == "agent"
  assert action_grammar.parse_action(no_agent.turns[-1].text) == sample.action


def test_to_dialogue_outcome_is_recomputed_when_absent():
  expected = _official_sample().expected_action
  wrong = dataclasses.replace(expected, name=expected.name + "x")
  assert to_dialogue.sample_to_dialogue(_official_sample(correct_sample=None), "a").outcome == 1.0
  wrong_sample = _official_sample(correct_sample=None, action=wrong)
  assert to_dialogue.sample_to_dialogue(wrong_sample, "b").outcome == 0.0
  assert to_dialogue.sample_to_dialogue(_official_sample(correct_sample=False), "c").outcome == 0.0
  with pytest.raises(to_dialogue.ConversionError, match="'correct_sample'"):
    to_dialogue.sample_to_dialogue(_official_sample(correct_sample=None, action=None), "d")


@pytest.mark.parametrize("overrides, match", [
    ({"dialogue": ("customer: Hi.", "robot: Beep.")}, r"f\.json:7: field 'dialogue\[1\]'"),
    ({"table": None}, "field 'kb'"),
    ({"dialogue": ("agent: ok [action] status=cancel flight=none name=Z Z [/action]",)},
     "field 'action'"),
    ({"dialogue": ("agent: ok [action] status=cancel [/action]",)}, "dialogue\\[0\\]"),
])
def test_to_dialogue_errors_name_the_record(overrides, match):
  with pytest.raises(to_dialogue.ConversionError, match=match):
    to_dialogue.sample_to_dialogue(_official_sample(**overrides), "x", where="f.json:7")


def test_serialize_context():
  d = to_dialogue.sample_to_dialogue(_official_sample(), "x")
  agent_text = to_dialogue.serialize_context("agent", d.context["agent"])
  lines = agent_text.splitlines()
  assert len(lines) == 1 + len(d.context["agent"]["kb"])
  assert lines[0] in ("reservation: none", f"reservation: {d.context['agent']['reservation']}")
  f = d.context["agent"]["kb"][0]
  route = f"{f['departure_airport']}>{f['return_airport']}"
  assert lines[1].startswith(f"{f['flight_number']} {f['airline']} {route}")
  assert lines[1].endswith(f"${f['price']}")
  customer_text = to_dialogue.serialize_context("customer", d.context["customer"])
  assert f"name: {d.context['customer']['name']}" in customer_text.splitlines()
  assert len(customer_text.splitlines()) == len(d.context["customer"])
  with pytest.raises(to_dialogue.ConversionError, match="field 'goal'"):
    no_goal = {k: v for k, v in d.context["customer"].items() if k != "goal"}
    to_dialogue.serialize_context("customer", no_goal)
  with pytest.raises(to_dialogue.ConversionError, match="unknown role"):
    to_dialogue.serialize_context("pilot", {})


def test_flaw_rate_sets_how_often_a_flaw_shows(contexts):
  sloppy = agents.AgentSkill("sloppy", "misspell_name", flaw_rate=0.5)
  results = _play_all(contexts, "answer_only", sloppy)
  assert 0.35 < _rate(results) < 0.65
  with pytest.raises(ValueError, match="flaw 'rude'"):
    agents.AgentSkill("x", "rude")


def test_cli_runs(tmp_path):
  out = tmp_path / "corpus"
  subprocess.run([sys.executable, "-m", "data_pipelines.airdialogue.generate", f"--out_dir={out}",
                  "--num_dialogues=20", "--seed=1", "--kb_size=8", "--agent_mix=oracle:1"],
                 check=True, capture_output=True, cwd=_REPO_ROOT)
  stats = json.loads((out / "stats.json").read_text())
  assert stats["n"] == 20 and stats["success_rate"] == 1.0 and stats["config"]["kb_size"] == 8
  assert len((out / "kb.json").read_text().splitlines()) == 20
