"""The final-action text grammar: round trip, tolerance and clear errors."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from data_pipelines.airdialogue import action_grammar
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue.action_grammar import ActionParseError

_NAME_CHARS = st.characters(
    blacklist_characters="[]\n\r", blacklist_categories=("Cs", "Zl", "Zp", "Cc"))
_NAMES = st.text(_NAME_CHARS, max_size=30).map(str.strip)
_ACTIONS = st.builds(
    schema.Action,
    status=st.sampled_from(schema.STATUSES),
    name=_NAMES,
    flights=st.lists(st.integers(0, 10**6), max_size=3).map(tuple),
)


_NO_BRACKET_TEXT = st.text(max_size=20).filter(lambda s: "[" not in s)


@given(_ACTIONS, _NO_BRACKET_TEXT, _NO_BRACKET_TEXT)
def test_round_trip_inside_any_utterance(action, before, after):
  text = f"{before} {action_grammar.format_action(action)} {after}"
  assert action_grammar.parse_action(text) == action
  assert action_grammar.contains_action(text)
  assert "[action]" not in action_grammar.strip_action(text)


def test_format_is_short_and_fixed():
  action = schema.Action("book", "John Smith", (1012,))
  assert (action_grammar.format_action(action)
          == "[action] status=book flight=1012 name= John Smith [/action]")
  no_flight = schema.Action("no_flight", "Amy Lee")
  assert (action_grammar.format_action(no_flight)
          == "[action] status=no_flight flight=none name= Amy Lee [/action]")


def test_parse_tolerates_case_and_spacing():
  text = "ok.  [ACTION]  status=Book   flight=1003,1004 name=  Mary  Garcia  [/Action] bye"
  assert action_grammar.parse_action(text) == schema.Action("book", "Mary  Garcia", (1003, 1004))


@pytest.mark.parametrize("text, reason", [
    ("I booked it for you.", "no '[action]"),
    ("[action] status=book flight=1000 name=A B", "never closed"),
    ("[action] status=book flight=1000 name=A [/action] "
     "[action] status=book flight=1 name=A [/action]", "2 action blocks"),
    ("[action] status=bok flight=1000 name=A B [/action]", "status 'bok'"),
    ("[action] status=book flight=10a0 name=A B [/action]", "flight '10a0'"),
    ("[action] status=book flight=1000, name=A B [/action]", "flight '1000,'"),
    ("[action] status=book name=A B [/action]", "is not 'status=S flight=F name=N'"),
    ("[action] flight=1000 status=book name=A B [/action]", "is not 'status=S flight=F name=N'"),
    ("[action][/action]", "is not 'status=S flight=F name=N'"),
])
def test_parse_errors_say_why(text, reason):
  with pytest.raises(ActionParseError, match=reason.replace("[", r"\[")):
    action_grammar.parse_action(text)


@pytest.mark.parametrize("action", [
    schema.Action("booked", "A B", (1,)),
    schema.Action("book", " A B", (1,)),
    schema.Action("book", "A [B]", (1,)),
    schema.Action("book", "A\nB", (1,)),
])
def test_format_rejects_what_cannot_round_trip(action):
  with pytest.raises(ValueError):
    action_grammar.format_action(action)


@given(_ACTIONS, _ACTIONS, _NO_BRACKET_TEXT)
def test_replace_action_swaps_only_the_block(first, second, before):
  text = before + action_grammar.format_action(first) + " Bye."
  replaced = action_grammar.replace_action(text, second)
  assert action_grammar.parse_action(replaced) == second
  assert action_grammar.strip_action(replaced) == action_grammar.strip_action(text)
  with pytest.raises(ValueError, match="no"):
    action_grammar.replace_action(before, second)
