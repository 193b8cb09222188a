"""What a learned party reads of a retail dialogue: tool results shortened, the customer blind
to tools.

τ²'s tool results are whole JSON records (an order with its address, fulfillments and ten null
fields; a product with every variant), so a dialogue runs to thousands of tokens: more than a
laptop-sized model can be trained on or play in its window (docs/RESULTS.md 27 has the
lengths). Only a learned party's READING is shortened: the environment, its reward and the
scripted parties keep the full records, and the view is applied the same way to the datasets
(`dialogue_view`, task.py) and in play (`LMParty(read_turn=...)`, through `Task.read_turn`), so
a model plays on the text it was trained on.

  agent     reads every turn; a tool result becomes one line of what the policy acts on:
              user     its id, payment methods (id, brand and last four / balance), orders
              order    id, status, items (item id, name, options, price, product id),
                       payments and refunds (method, amount), an exchange or return once set
              product  name and id, the option names once, then each AVAILABLE variant's item
                       id, option values and price; unavailable ones are counted, not listed
              item     item id, option values, price, availability
            anything else (an id, an error, a sum, the transfer's text) as it is.
  customer  reads the agent's words only: no tool result, and an agent turn's tool block left
            out (τ²'s user never sees tool calls); a turn with nothing left is not shown.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Mapping

from data_pipelines.dialogue import Dialogue, Turn
from domains.tau2_retail import turns

ReadTurn = Callable[[Turn], "str | None"]


def _amount(value: Any) -> str:
  return f"{float(value):.2f}" if isinstance(value, (int, float)) else str(value)


def _options(options: Mapping[str, Any]) -> str:
  return ", ".join(f"{k}: {v}" for k, v in options.items())


def _payment_method(method: Mapping[str, Any]) -> str:
  parts = [str(method.get("id", "?"))]
  if method.get("brand"):
    parts.append(f"{method['brand']} {method.get('last_four', '')}".strip())
  if method.get("balance") is not None:
    parts.append(f"balance {_amount(method['balance'])}")
  return " ".join(parts)


def _user(record: Mapping[str, Any]) -> str:
  methods = "; ".join(_payment_method(m) for m in record["payment_methods"].values())
  return (f"user {record['user_id']} | payment methods: {methods} | orders: "
          f"{' '.join(record['orders'])}")


def _order(record: Mapping[str, Any]) -> str:
  items = "; ".join(f"{i['item_id']} {i['name']} ({_options(i['options'])}) "
                    f"{_amount(i['price'])} product {i['product_id']}" for i in record["items"])
  payments = "; ".join(f"{p['transaction_type']} {_amount(p['amount'])} {p['payment_method_id']}"
                       for p in record.get("payment_history", ()))
  out = [f"order {record['order_id']} status {record['status']}", f"items: {items}",
         f"payments: {payments}"]
  if record.get("exchange_items"):
    out.append(f"exchange {' '.join(record['exchange_items'])} -> "
               f"{' '.join(record.get('exchange_new_items') or ())} difference "
               f"{_amount(record.get('exchange_price_difference'))} via "
               f"{record.get('exchange_payment_method_id')}")
  if record.get("return_items"):
    out.append(f"return {' '.join(record['return_items'])} to "
               f"{record.get('return_payment_method_id')}")
  if record.get("cancel_reason"):
    out.append(f"cancel reason: {record['cancel_reason']}")
  return " | ".join(out)


def _product(record: Mapping[str, Any]) -> str:
  variants = list(record["variants"].values())
  available = [v for v in variants if v.get("available")]
  names = list(variants[0]["options"]) if variants else []
  listed = "; ".join(f"{v['item_id']} {', '.join(str(x) for x in v['options'].values())} "
                     f"{_amount(v['price'])}" for v in available)
  return (f"product {record['name']} {record['product_id']} | options: {', '.join(names)} | "
          f"available: {listed} | {len(variants) - len(available)} unavailable")


def _item(record: Mapping[str, Any]) -> str:
  state = "available" if record.get("available") else "unavailable"
  return (f"item {record['item_id']} ({_options(record['options'])}) "
          f"{_amount(record['price'])} {state}")


def observation(text: str) -> str:
  """A tool result as the agent model reads it (module docstring); never raises."""
  try:
    record = json.loads(text)
  except (json.JSONDecodeError, ValueError):
    return text
  if not isinstance(record, dict):
    return text
  try:
    if "payment_methods" in record and "orders" in record:
      return _user(record)
    if "order_id" in record and "items" in record:
      return _order(record)
    if "variants" in record:
      return _product(record)
    if "item_id" in record and "options" in record:
      return _item(record)
  except (KeyError, TypeError, AttributeError):
    return text
  return text


def agent_reads(turn: Turn) -> str | None:
  return observation(turn.text) if turn.speaker == turns.TOOL else turn.text


def customer_reads(turn: Turn) -> str | None:
  if turn.speaker == turns.TOOL:
    return None
  if turn.speaker == turns.AGENT:
    return turns.parse_agent_turn(turn.text).speech or None
  return turn.text


READERS: dict[str, ReadTurn] = {turns.AGENT: agent_reads, turns.CUSTOMER: customer_reads}


def dialogue_view(dialogue: Dialogue, role: str) -> Dialogue:
  """The dialogue as a model of `role` reads it: its own turns unchanged, the others read by
  READERS[role] (left out where that gives None)."""
  read = READERS[role]
  kept = []
  for turn in dialogue.turns:
    text = turn.text if turn.speaker == role else read(turn)
    if text is not None:
      kept.append(dataclasses.replace(turn, text=text))
  return dataclasses.replace(dialogue, turns=tuple(kept))
