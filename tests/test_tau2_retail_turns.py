"""τ² retail turns: a tool call as an agent turn's `[tool] {...} [/tool]` block; its result."""

from __future__ import annotations

import pytest

from domains.tau2_retail import db as db_lib
from domains.tau2_retail import tools, turns
from test_tau2_retail_tools import tiny_shop


def test_a_call_round_trips():
  text = turns.format_call("get_order_details", {"order_id": "#W1"})
  assert text == '[tool] {"name": "get_order_details", "arguments": {"order_id": "#W1"}} [/tool]'
  parsed = turns.parse_agent_turn(text)
  assert parsed == turns.AgentTurn("", turns.ToolCall("get_order_details", {"order_id": "#W1"}))
  assert parsed.is_tool_turn
  assert turns.parse_agent_turn('[tool]{"name": "list_all_product_types"}[/tool]').call == (
      turns.ToolCall("list_all_product_types", {}))
  speech = turns.parse_agent_turn("  Hello,\n how can I help?  ")
  assert speech == turns.AgentTurn("Hello, how can I help?") and not speech.is_tool_turn


@pytest.mark.parametrize("text, why", [
    ('[tool] {"name": "calculate", "arguments": {"expression": "1"} [/tool]', "not JSON"),
    ('[tool] ["calculate"] [/tool]', "expected {"),
    ('[tool] {"arguments": {}} [/tool]', "expected {"),
    ('[tool] {"name": "calculate", "arguments": "1+1"} [/tool]', "must be a JSON object"),
    ('[tool] {"name": "calculate", "arguments": {"expression": "1"}}', "no [/tool]"),
    ('[tool] {"name": "a", "arguments": {}} [/tool] [tool] {"name": "b", "arguments": {}} '
     '[/tool]', "one tool call per turn"),
])
def test_malformed_blocks_are_an_observation_not_an_exception(text, why):
  parsed = turns.parse_agent_turn(text)
  assert parsed.call is None and parsed.error == tools.MALFORMED_JSON and parsed.is_tool_turn
  assert parsed.error_text.startswith("Error: malformed tool call: ") and why in parsed.error_text
  observation = turns.execute(db_lib.from_json(tiny_shop()), parsed)
  assert observation == tools.Observation(parsed.error_text, tools.MALFORMED_JSON)


def test_execute_runs_the_call_and_speech_is_what_the_customer_hears():
  shop = db_lib.from_json(tiny_shop())
  text = "Let me check. " + turns.format_call("find_user_id_by_email",
                                               {"email": "bob@example.com"})
  parsed = turns.parse_agent_turn(text)
  assert parsed.speech == "Let me check."
  observation = turns.execute(shop, parsed)
  assert observation == tools.Observation("bob_ray_2")
  assert turns.observation_turn(observation) == turns.Turn(turns.TOOL, "bob_ray_2")
  assert turns.execute(shop, turns.parse_agent_turn("Hi!")) is None
  unknown = turns.execute(shop, turns.parse_agent_turn(turns.format_call("refund", {})))
  assert unknown.error == tools.UNKNOWN_TOOL
  assert turns.agent_speech([turns.Turn(turns.AGENT, text), turns.Turn(turns.TOOL, "x"),
                             turns.Turn(turns.CUSTOMER, "ok")]) == ["Let me check."]
