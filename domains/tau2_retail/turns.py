"""How a tool call and its result live inside a dialogue of `data_pipelines.dialogue.Turn`s.

One representation, kept here so the core can later learn it:

  an agent turn that calls a tool   [tool] {"name": "get_order_details", "arguments":
                                    {"order_id": "#W2378156"}} [/tool]
  the result                        a turn of the third speaker "tool" holding the
                                    observation text (a JSON record, an id, or "Error: ...")

The policy allows one tool call per turn and no words to the customer in the same turn; a turn
with words outside its block still has them read as speech (τ² reads an assistant message's
text whatever tool calls it carries), and a turn with two blocks is a malformed call.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Iterable, Mapping

from data_pipelines.dialogue import Turn
from domains.tau2_retail import db as db_lib
from domains.tau2_retail import tools

AGENT, CUSTOMER, TOOL = "agent", "customer", "tool"
ROLES = (AGENT, CUSTOMER, TOOL)
OPEN_TAG, CLOSE_TAG = "[tool]", "[/tool]"
_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(CLOSE_TAG), re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ToolCall:
  name: str
  arguments: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class AgentTurn:
  """An agent turn read: its words to the customer, and its tool call if it makes one.

  `error` (tools.MALFORMED_JSON) with `call` None: the turn opens a tool block that is not one
  well-formed call (unclosed, not JSON, no name, arguments not an object, two blocks);
  `error_text` is the observation the agent gets for it."""

  speech: str
  call: ToolCall | None = None
  error: str | None = None
  error_text: str = ""

  @property
  def is_tool_turn(self) -> bool:
    return self.call is not None or self.error is not None


def format_call(name: str, arguments: Mapping[str, Any]) -> str:
  """The agent turn text of one tool call."""
  body = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
  return f"{OPEN_TAG} {body} {CLOSE_TAG}"


def _malformed(speech: str, why: str) -> AgentTurn:
  return AgentTurn(speech, None, tools.MALFORMED_JSON, f"Error: malformed tool call: {why}")


def parse_agent_turn(text: str) -> AgentTurn:
  """Reads an agent turn; never raises."""
  blocks = _BLOCK.findall(text)
  speech = _BLOCK.sub(" ", text)
  if OPEN_TAG in speech:  # An opening tag left without its closing one.
    return _malformed(" ".join(speech.split(OPEN_TAG)[0].split()), f"no {CLOSE_TAG}")
  speech = " ".join(speech.split())
  if not blocks:
    return AgentTurn(speech)
  if len(blocks) > 1:
    return _malformed(speech, "one tool call per turn")
  try:
    body = json.loads(blocks[0])
  except json.JSONDecodeError as e:
    return _malformed(speech, f"not JSON: {e.msg}")
  if not isinstance(body, dict) or not isinstance(body.get("name"), str):
    return _malformed(speech, 'expected {"name": ..., "arguments": {...}}')
  arguments = body.get("arguments", {})
  if not isinstance(arguments, dict):
    return _malformed(speech, "arguments must be a JSON object")
  return AgentTurn(speech, ToolCall(body["name"], arguments))


def observation_turn(observation: tools.Observation) -> Turn:
  return Turn(TOOL, observation.text)


def agent_speech(turns: Iterable[Turn]) -> list[str]:
  """The agent's words to the customer, turn by turn (tool blocks left out, empty ones too)."""
  out = []
  for turn in turns:
    if turn.speaker == AGENT:
      speech = parse_agent_turn(turn.text).speech
      if speech:
        out.append(speech)
  return out


def execute(db: db_lib.Database, turn: AgentTurn) -> tools.Observation | None:
  """The observation of an agent turn's tool call on `db`, or None when it is speech."""
  if turn.error is not None:
    return tools.Observation(turn.error_text, turn.error)
  if turn.call is None:
    return None
  return tools.call(db, turn.call.name, turn.call.arguments)
