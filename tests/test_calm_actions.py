"""The 63 final-action classes of CALM's action head (calm/actions.py)."""

import hypothesis
from hypothesis import strategies as st
import numpy as np
import pytest

from calm import actions
from data_pipelines.airdialogue import action_grammar
from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import scorer
from data_pipelines.airdialogue import solver


def test_there_are_63_classes_in_the_documented_order():
  assert actions.NUM_ACTIONS == 63
  assert actions.class_action(0) == schema.Action("book", "", (1000,))
  assert actions.class_action(29) == schema.Action("book", "", (1029,))
  assert actions.class_action(30) == schema.Action("change", "", (1000,))
  assert actions.class_action(59) == schema.Action("change", "", (1029,))
  assert [actions.class_action(i).status for i in (60, 61, 62)] == [
      "cancel", "no_flight", "no_reservation"]


def test_every_class_round_trips_through_the_action_and_its_text():
  seen = set()
  for index in range(actions.NUM_ACTIONS):
    action = actions.class_action(index, "Jane Doe")
    assert actions.action_class(action) == index
    parsed = action_grammar.parse_action(action_grammar.format_action(action))
    assert parsed == action and actions.action_class(parsed) == index
    seen.add((action.status, action.flights))
  assert len(seen) == actions.NUM_ACTIONS


_NAMES = st.text(st.characters(whitelist_categories=("Lu", "Ll")), min_size=1, max_size=12)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(index=st.integers(0, actions.NUM_ACTIONS - 1), first=_NAMES, last=_NAMES)
def test_class_round_trip_keeps_the_name(index, first, last):
  action = actions.class_action(index, f"{first} {last}")
  assert action.name == f"{first} {last}"
  assert actions.action_class(action_grammar.parse_action(
      action_grammar.format_action(action))) == index


def test_expected_actions_map_to_the_classes_that_succeed():
  """Every tied flight of a solver's expected action is a class, and each one succeeds."""
  for intent, table in context.sample_contexts(np.random.default_rng(0), 300):
    expected = solver.expected_action(intent, table)
    classes = actions.action_classes(expected)
    assert len(classes) == max(1, len(expected.flights))
    for index in classes:
      assert scorer.is_success(actions.class_action(index, expected.name), expected)
    others = set(range(actions.NUM_ACTIONS)) - set(classes)
    assert not any(scorer.is_success(actions.class_action(i, expected.name), expected)
                   for i in others)


@pytest.mark.parametrize("action,match", [
    (schema.Action("book", "A B"), "needs a flight"),
    (schema.Action("change", "A B", (1030,)), "outside 1000..1029"),
    (schema.Action("book", "A B", (999,)), "outside 1000..1029"),
    (schema.Action("cancel", "A B", (1003,)), "lists no flight"),
    (schema.Action("upgrade", "A B"), "not one of"),
])
def test_actions_without_a_class_raise(action, match):
  with pytest.raises(ValueError, match=match):
    actions.action_class(action)


def test_a_submitted_action_names_one_flight():
  tied = schema.Action("book", "A B", (1001, 1004))
  assert actions.action_classes(tied) == (1, 4)
  with pytest.raises(ValueError, match="2 flights"):
    actions.action_class(tied)


@pytest.mark.parametrize("index", [-1, 63])
def test_class_out_of_range_raises(index):
  with pytest.raises(ValueError, match="outside 0..62"):
    actions.class_action(index)
