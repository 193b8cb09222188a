"""What each role of a retail dialogue privately reads, as JSON and as the text a model reads.

  customer   its profile (users.Profile: identities, wishes, what it does not know, its style
             and phrasing family), the structured parts the scripted customer plays from, and
             τ²'s instructions of its task (`reason_for_call`, `known_info`, `unknown_info`,
             `task_instructions`)
  agent      nothing private: a short summary of policy.md's rules, the same in every row; a
             model reads it (dataset layout "policy") or nothing ("none"), learning the rules
             from the dialogues alone

A model reads the customer's profile as lines (`serialize_context`), never the free text of a
real task, so a customer trained on generated tasks reads real ones in the same form.
"""

from __future__ import annotations

from typing import Any, Mapping

from domains.tau2_retail import phrases, tasks, turns, users

CONTEXTS = {turns.AGENT: ("none", "policy"), turns.CUSTOMER: ("text",)}  # Dataset layouts.
POLICY_SUMMARY = (
    "Authenticate the customer first, by email or by name and zip code, and act for that "
    "account only. One tool call a turn, with no words beside it. Before each change (cancel, "
    "modify items, address or payment, return, exchange) list its details and act only after "
    "an explicit yes. Cancel or modify only pending orders; return or exchange only delivered "
    "ones, for available variants of the same products. Refunds go to the original payment "
    "method or a gift card. Transfer to a human agent only when asked or when no tool can "
    "help.")


def customer(task: tasks.Task, profile: users.Profile) -> dict[str, Any]:
  scenario = task.scenario
  return {"profile": profile.to_json(),
          "instructions": {"reason_for_call": scenario.reason_for_call,
                           "known_info": scenario.known_info,
                           "unknown_info": scenario.unknown_info,
                           "task_instructions": scenario.task_instructions}}


def agent() -> dict[str, Any]:
  return {"policy": POLICY_SUMMARY}


def _wish_line(k: int, wish: users.Wish) -> str:
  parts = [wish.statement()]
  if wish.order_id:
    parts.append(f"order {wish.order_id}")
  for change in wish.changes:
    if change.new_options:
      parts.append(f"new options of the {change.name}: {phrases.pairs_text(change.new_options)}")
  if wish.payment:
    parts.append(f"pay with {wish.payment}")
  if wish.reason:
    parts.append(f"reason: {wish.reason}")
  if wish.address:
    parts.append(phrases.address_text(wish.address))
  if wish.declines:
    parts.append("say no when asked to confirm")
  return f"Wish {k}: " + "; ".join(parts)


def serialize_context(role: str, context: Mapping[str, Any]) -> str:
  """The text a model of `role` reads (module docstring)."""
  if role == turns.AGENT:
    return str(context.get("policy", ""))
  if role != turns.CUSTOMER or "profile" not in context:
    return ""
  profile = users.Profile.from_json(context["profile"])
  lines = ["Identity: " + " Or: ".join(i.text() for i in profile.identities)]
  lines += [_wish_line(k, w) for k, w in enumerate(profile.wishes, 1)]
  if profile.unknown_info:
    lines.append(f"Unknown: {profile.unknown_info}")
  lines.append(f"Style: {profile.style}; phrasing: {profile.family}")
  return "\n".join(lines)
