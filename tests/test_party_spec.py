"""The one party-spec grammar and the registries that give it its kinds."""

import pytest

from cotraining import panels
from ilql_dialogue import parties, party_spec, registry


class Echo:
  """A user's party class with options (built from `tests.test_party_spec:Echo?...`)."""

  def __init__(self, role: str, epsilon: float = 0.0, word: str = "hi"):
    self.role, self.epsilon, self.word = role, epsilon, word

  def reset(self, contexts, seeds):
    self.rows = len(contexts)

  def respond(self, histories):
    return [None if h is None else self.word for h in histories]


def test_every_form_parses_to_one_typed_value():
  spec = party_spec.parse("scripted:terse/held_out")
  assert (spec.kind, spec.target, spec.inner, spec.checkpoint) == (
      "scripted", "terse/held_out", None, None)
  spec = party_spec.parse("calm:n=4,score=head:pick:k=2:runs/a@30")
  assert (spec.kind, dict(spec.options)) == ("calm", {"n": 4, "score": "head"})
  assert (spec.inner.kind, dict(spec.inner.options)) == ("pick", {"k": 2})
  assert (spec.checkpoint.target, spec.checkpoint.step) == ("runs/a", 30)
  spec = party_spec.parse("vs_llm:k=5,base_url=http://127.0.0.1:8000/v1,model=m")
  assert dict(spec.options) == {"k": 5, "base_url": "http://127.0.0.1:8000/v1", "model": "m"}
  spec = party_spec.parse("pkg.mod:Party?epsilon=0.1,word=yes,greedy=True")
  assert (spec.kind, spec.target, dict(spec.options)) == (
      "class", "pkg.mod:Party", {"epsilon": 0.1, "word": "yes", "greedy": True})
  spec = party_spec.parse("runs/customer")
  assert (spec.kind, spec.target, spec.step, spec.checkpoint) == (
      "checkpoint", "runs/customer", None, spec)


@pytest.mark.parametrize("text, message", [
    ("calm:n=four:runs/a", "n='four' is not a int"),
    ("calm:q=1:runs/a", "unknown calm option 'q'"),
    ("pick:k=2:", "nothing after pick:"),
    ("pkg.mod:Party?oops", "class option 'oops' is not name=value"),
    ("", "empty"),
])
def test_bad_specs_name_the_spec(text, message):
  with pytest.raises(ValueError, match=message):
    party_spec.parse(text)


def test_class_options_reach_the_constructor():
  party = parties.make_party("test_party_spec:Echo?epsilon=0.25,word=yes", "customer")
  assert (party.role, party.epsilon, party.word) == ("customer", 0.25, "yes")
  party.reset([{}], [0])
  assert party.respond([[]]) == ["yes"]
  with pytest.raises(ValueError, match="unexpected keyword"):
    parties.make_party("test_party_spec:Echo?nope=1", "customer")


def test_start_up_checks_load_nothing_and_name_the_problem(tmp_path):
  parties.check("scripted:terse", "customer")
  with pytest.raises(ValueError, match="no such directory"):
    parties.check("pick:k=2:" + str(tmp_path / "missing"), "customer")
  with pytest.raises(ValueError, match="no module"):
    parties.check("no_such_package.mod:Party", "customer")
  with pytest.raises(ValueError, match="needs"):
    parties.check("vs_llm:k=2,model=m", "customer")


def test_panels_see_through_wrappers_and_families(tmp_path):
  run = str(tmp_path)
  assert panels.source(f"pick:k=3:{run}") == panels.source(run)
  assert panels.source(f"calm:n=2:pick:k=2:{run}@5") == panels.source(f"{run}@5")
  assert panels.source("scripted:terse/held_out") == panels.source("scripted:terse")
  assert panels.source("vs_llm:k=2,base_url=http://h/v1/,model=m") == "vs_llm:http://h/v1/m"


def test_tasks_come_from_the_registry_or_a_module_attr():
  assert {"airdialogue", "persuasion"} <= set(registry.tasks())
  spec = registry.task("airdialogue")
  assert spec.other_role("agent") == "customer"
  markers = registry.block_markers("airdialogue")
  assert set(markers) == {"agent"}
  assert set(registry.block_markers()) >= {"agent", "persuadee"}
  assert registry.task("domains.persuasion.plugin:TASK").name == "persuasion"
  with pytest.raises(ValueError, match="unknown task 'nope'"):
    registry.task("nope")
  with pytest.raises(ValueError, match="is not a TaskSpec"):
    registry.task("ilql_dialogue.registry:PLUGIN_GROUP")
