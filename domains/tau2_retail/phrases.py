"""The wording the scripted customer (users.py) and the scripted agent (agents.py) share.

The agent writes its turns from these templates and the customer reads them with the matching
parsers (question_kind, parse_items), so the two scripts can talk without either seeing the
other's private context: the customer knows its wishes, the agent knows only the dialogue and
its tool results. The customer's original wording (the `template` phrasing family) is here too,
as its profile shows it (wish_text, email_text, address_text, describe_payment); how customers
of every family are read is reading.py's. Every parser returns None on text it does not know,
never raises.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

STOP = "###STOP###"  # Ends a customer's last turn, as τ²'s user simulator does.
TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."

# What a customer may want: one write tool each, or a transfer.
CANCEL, ORDER_ADDRESS, ORDER_PAYMENT, MODIFY_ITEMS = "cancel", "order_address", "order_payment", \
    "modify_items"
USER_ADDRESS, RETURN, EXCHANGE, TRANSFER = "user_address", "return", "exchange", "transfer"
WISH_TOOLS = {
    CANCEL: "cancel_pending_order", ORDER_ADDRESS: "modify_pending_order_address",
    ORDER_PAYMENT: "modify_pending_order_payment", MODIFY_ITEMS: "modify_pending_order_items",
    USER_ADDRESS: "modify_user_address", RETURN: "return_delivered_order_items",
    EXCHANGE: "exchange_delivered_order_items", TRANSFER: "transfer_to_human_agents",
}
ORDER_LEVEL = (CANCEL, ORDER_ADDRESS, ORDER_PAYMENT)  # The order is named by its products.
ITEM_LEVEL = (MODIFY_ITEMS, RETURN, EXCHANGE)  # The items are named with their options.
ADDRESS_FIELDS = (("street", "address1"), ("apartment", "address2"), ("city", "city"),
                  ("state", "state"), ("country", "country"), ("zip", "zip"))
NO_APARTMENT = "none"

# The agent's questions, each recognized by its marker phrase (question_kind).
GREETING = "Hi! How can I help you today?"
ASK_IDENTITY = ("Before I can help, I need to verify your identity. Could you give me your "
                "email address, or your first name, last name and zip code?")
IDENTITY_NOT_FOUND = ("I could not find an account with those details. Could you check them, "
                      "or give me another email address or your name and zip code?")
ASK_PAYMENT = "Which payment method should be used"
ASK_REASON = ("What is the reason for the cancellation: 'no longer needed' or "
              "'ordered by mistake'?")
ASK_ADDRESS = ("What is the new address? Please give the street, apartment (or none), city, "
               "state, country and zip code.")
ASK_ORDER_ID = "Could you tell me the order id?"
ANYTHING_ELSE = "Is there anything else I can help you with?"
CONFIRM = "Please answer yes or no."
ITEMS_REMINDER = "Please make sure you have listed every item you want to change. "
QUESTIONS = (("confirm", CONFIRM), ("identity", "verify your identity"),
             ("identity_retry", "could not find an account"),
             ("new_options", "Which options would you like"), ("payment", ASK_PAYMENT),
             ("reason", "reason for the cancellation"), ("address", "What is the new address"),
             ("order_id", ASK_ORDER_ID), ("anything_else", ANYTHING_ELSE),
             ("greeting", "How can I help you"), ("transfer", TRANSFER_MESSAGE))

_ITEM = re.compile(r"the ([A-Z][A-Za-z\- ]*?) \(([^()]*)\)")


def question_kind(agent_text: str) -> str | None:
  """Which of QUESTIONS an agent turn asks (the first marker found), or None."""
  for kind, marker in QUESTIONS:
    if marker in agent_text:
      return kind
  return None


def pairs_text(pairs: Mapping[str, str]) -> str:
  return ", ".join(f"{k}: {v}" for k, v in pairs.items())


def parse_pairs(text: str) -> dict[str, str] | None:
  """`key: value, key: value` (keys and values hold neither ',' nor ':')."""
  out = {}
  for part in text.split(","):
    key, sep, value = part.partition(":")
    if not sep or not key.strip():
      return None
    out[key.strip()] = value.strip()
  return out


def item_text(name: str, options: Mapping[str, str]) -> str:
  return f"the {name} ({pairs_text(options)})"


def parse_items(text: str) -> list[tuple[str, dict[str, str]]]:
  """Every `the NAME (key: value, ...)` in the text, in order."""
  out = []
  for name, body in _ITEM.findall(text):
    options = parse_pairs(body)
    if options is not None:
      out.append((name, options))
  return out


def join(parts: Sequence[str]) -> str:
  """`a`, `a and b`, `a, b and c`; "" for none."""
  if len(parts) <= 1:
    return "".join(parts)
  return ", ".join(parts[:-1]) + " and " + parts[-1]


def wish_text(kind: str, names: Sequence[str] = (),
              items: Sequence[tuple[str, Mapping[str, str]]] = ()) -> str:
  """The customer's statement of one wish."""
  order = "my pending order with " + join([f"the {n}" for n in names])
  listed = join([item_text(n, o) for n, o in items]) if items else ""
  return {
      CANCEL: f"I want to cancel {order}.",
      ORDER_ADDRESS: f"I want to change the shipping address of {order}.",
      ORDER_PAYMENT: f"I want to change the payment method of {order}.",
      MODIFY_ITEMS: f"I want to change the options of {listed} in my pending order.",
      USER_ADDRESS: "I want to update my default address.",
      RETURN: f"I want to return {listed} from my delivered order.",
      EXCHANGE: f"I want to exchange {listed} from my delivered order.",
      TRANSFER: "I want to talk to a human agent.",
  }[kind]


def email_text(email: str) -> str:
  return f"My email is {email}."


def name_zip_text(first_name: str, last_name: str, zip_code: str) -> str:
  return f"My name is {first_name} {last_name} and my zip code is {zip_code}."


def address_pairs(address: Mapping[str, str]) -> str:
  """`street: ..., apartment: ..., city: ...` of an address in the tools' field names."""
  return pairs_text({label: address[field] or NO_APARTMENT for label, field in ADDRESS_FIELDS})


def address_text(address: Mapping[str, str]) -> str:
  return f"The new address is {address_pairs(address)}."


ORIGINAL_PAYMENT = "the original payment method"


def describe_payment(source: str, method_id: str, last_four: str | None = None) -> str:
  """How a customer names one of its payment methods (parse_payment reads it back)."""
  if source == "credit_card":
    return f"my credit card ending in {last_four}"
  if source == "paypal":
    return "my PayPal account"
  return f"my gift card {method_id}"


def parse_payment(text: str) -> tuple[str, str] | None:
  """(source, key) of a method as a profile holds it (describe_payment, ORIGINAL_PAYMENT):
  ("original", ""), ("credit_card", last four), ("paypal", ""), ("gift_card", id); or None."""
  if ORIGINAL_PAYMENT in text:
    return "original", ""
  match = re.search(r"credit card ending in (\d{4})", text)
  if match:
    return "credit_card", match[1]
  if "PayPal" in text:
    return "paypal", ""
  match = re.search(r"gift card (gift_card_\d+)", text)
  return ("gift_card", match[1]) if match else None


def new_options_question(name: str, options: Mapping[str, str]) -> str:
  return f"Which options would you like instead for {item_text(name, options)}?"


# The original customer's answers to a confirmation (customer_families.TEMPLATE).
YES, NO = "Yes, please go ahead.", "No, that is not what I want."
DECLINE = "No, I have changed my mind. Please leave it as it is."
