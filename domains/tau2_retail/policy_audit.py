"""The policy rules a dialogue's form shows, checked turn by turn (policy.md).

τ²'s reward does not check them (only the final database and what was said); this audit lets
an evaluation count an agent's breaches beside its reward:

  mixed_turn         words to the customer and a tool call in one agent turn
  unauthenticated    a tool call other than the two user lookups before a lookup succeeded
  write_without_yes  a write call without an explicit yes from the customer (its first yes-word
                     or no-word a yes, reading.confirmation: "Yes, go ahead.", "sure, do it")
                     since the agent's last words (each write needs its own yes)
  transfer_message   a transfer call not followed by the policy's message
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from data_pipelines.dialogue import Turn
from domains.tau2_retail import phrases, reading, tools, turns

LOOKUPS = ("find_user_id_by_email", "find_user_id_by_name_zip")


@dataclasses.dataclass(frozen=True)
class Breach:
  turn: int  # Index of the agent turn.
  rule: str
  detail: str = ""


def _is_yes(text: str) -> bool:
  return reading.confirmation(text) is True


def audit(dialogue: Sequence[Turn]) -> list[Breach]:
  breaches = []
  authenticated = False
  yes_pending = False  # The customer said yes and no write has used it yet.
  for i, turn in enumerate(dialogue):
    if turn.speaker == turns.CUSTOMER:
      yes_pending = _is_yes(turn.text)
      continue
    if turn.speaker != turns.AGENT:
      continue
    parsed = turns.parse_agent_turn(turn.text)
    if parsed.call is None:
      if parsed.speech and not parsed.is_tool_turn:
        yes_pending = False  # New words ask anew.
      continue
    name = parsed.call.name
    if parsed.speech:
      breaches.append(Breach(i, "mixed_turn"))
    result = dialogue[i + 1].text if i + 1 < len(dialogue) else ""
    if name in LOOKUPS:
      authenticated = authenticated or not result.startswith("Error")
    elif not authenticated:
      breaches.append(Breach(i, "unauthenticated", name))
    tool = tools.TOOLS.get(name)
    if tool is not None and tool.writes:
      if not yes_pending:
        breaches.append(Breach(i, "write_without_yes", name))
      yes_pending = False
    if name == "transfer_to_human_agents":
      after = next((t.text for t in dialogue[i + 2:] if t.speaker == turns.AGENT), "")
      if phrases.TRANSFER_MESSAGE not in after:
        breaches.append(Breach(i, "transfer_message"))
  return breaches
