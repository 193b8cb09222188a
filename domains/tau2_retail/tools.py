"""The 16 tools of the retail policy, with τ²-bench's semantics, and `call`, their one entry.

A tool reads or changes the episode's `db.Database` and returns the text the agent sees: an
object as JSON in τ²'s field order (`json.dumps` of the record, as τ²'s environment prints a
tool's result), a plain string for ids and messages. A call that cannot be made never raises:
`call` returns an `Observation` whose text is what τ² shows the agent (`Error: ...`) and whose
`error` says which kind of failure it was, so an environment can count them:

  malformed_json   the arguments are not a JSON object
  unknown_tool     no tool of that name
  bad_arguments    a required argument missing, an unknown one, or one of the wrong type
                   (our wording: τ² passes them to Python, whose TypeError it shows)
  tool_error       the tool refused: something not found, a wrong order status, a payment
                   method that cannot pay, ... (τ²'s ValueError texts, word for word)

Write tools check every precondition before changing anything, so a refused call leaves the
database as it was.

Semantics kept from τ² on purpose (the reward replays the gold calls through these tools, and
a state must hash as τ²'s would for the same calls):
  * cancel and modify_items need status exactly "pending"; modify_address and modify_payment
    accept any status containing "pending" (so also "pending (item modified)").
  * modify_pending_order_items gives every changed item the price and options of the LAST new
    item of the call (τ²'s loop reuses its last variant); with one item, or items of one
    variant, this is the natural result.
  * the price difference of modify_items is recorded unrounded; exchange rounds it to cents.
  * exchange does not require a new item to differ from the old one; modify_items does.
  * a return refunds to the order's first payment method or any gift card of the user.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import operator
from typing import Any, Callable, Mapping

from domains.tau2_retail import db as db_lib

MALFORMED_JSON = "malformed_json"
UNKNOWN_TOOL = "unknown_tool"
BAD_ARGUMENTS = "bad_arguments"
TOOL_ERROR = "tool_error"
ERROR_KINDS = (MALFORMED_JSON, UNKNOWN_TOOL, BAD_ARGUMENTS, TOOL_ERROR)

STRING, STRING_LIST = "string", "array"
TRANSFER_RESULT = "Transfer successful"


class ToolError(Exception):
  """A tool's refusal; its message is what the agent reads after `Error: `."""


@dataclasses.dataclass(frozen=True)
class Param:
  name: str
  type: str  # STRING or STRING_LIST.
  description: str


@dataclasses.dataclass(frozen=True)
class Tool:
  """A tool: its function `(database, **arguments) -> text` and its argument schema."""

  name: str
  function: Callable[..., str]
  params: tuple[Param, ...]
  description: str
  writes: bool  # Whether it may change the database (the policy asks for a yes first).

  def schema(self) -> dict[str, Any]:
    """The JSON schema of the tool, in the function-calling form LLM APIs take."""
    properties = {}
    for p in self.params:
      properties[p.name] = ({"type": "string", "description": p.description} if p.type == STRING
                            else {"type": "array", "items": {"type": "string"},
                                  "description": p.description})
    return {"name": self.name, "description": self.description,
            "parameters": {"type": "object", "properties": properties,
                           "required": [p.name for p in self.params]}}


@dataclasses.dataclass(frozen=True)
class Observation:
  """What the agent sees after a call; `error` is None or one of ERROR_KINDS."""

  text: str
  error: str | None = None

  @property
  def ok(self) -> bool:
    return self.error is None


# Lookups (τ²'s messages).

def _order(db: db_lib.Database, order_id: str) -> db_lib.Order:
  if order_id not in db.orders:
    raise ToolError("Order not found")
  return db.orders[order_id]


def _user(db: db_lib.Database, user_id: str) -> db_lib.User:
  if user_id not in db.users:
    raise ToolError("User not found")
  return db.users[user_id]


def _product(db: db_lib.Database, product_id: str) -> db_lib.Product:
  if product_id not in db.products:
    raise ToolError("Product not found")
  return db.products[product_id]


def _variant(db: db_lib.Database, product_id: str, item_id: str) -> db_lib.Variant:
  product = _product(db, product_id)
  if item_id not in product.variants:
    raise ToolError("Variant not found")
  return product.variants[item_id]


def _payment_method(db: db_lib.Database, user_id: str,
                    payment_method_id: str) -> db_lib.PaymentMethod:
  user = _user(db, user_id)
  if payment_method_id not in user.payment_methods:
    raise ToolError("Payment method not found")
  return user.payment_methods[payment_method_id]


def _check_counts(order: db_lib.Order, item_ids: list[str], message: Callable[[str], str]) -> None:
  """Each item id at most as often as the order holds it (a list may repeat an id)."""
  held = [item.item_id for item in order.items]
  for item_id in item_ids:
    if item_ids.count(item_id) > held.count(item_id):
      raise ToolError(message(item_id))


def _json(record: Any) -> str:
  return json.dumps(record.to_json())


# Read tools.

def find_user_id_by_email(db: db_lib.Database, email: str) -> str:
  for user_id, user in db.users.items():
    if user.email.lower() == email.lower():
      return user_id
  raise ToolError("User not found")


def find_user_id_by_name_zip(db: db_lib.Database, first_name: str, last_name: str,
                             zip: str) -> str:
  for user_id, user in db.users.items():
    if (user.name.first_name.lower() == first_name.lower()
        and user.name.last_name.lower() == last_name.lower() and user.address.zip == zip):
      return user_id
  raise ToolError("User not found")


def get_user_details(db: db_lib.Database, user_id: str) -> str:
  return _json(_user(db, user_id))


def get_order_details(db: db_lib.Database, order_id: str) -> str:
  return _json(_order(db, order_id))


def get_product_details(db: db_lib.Database, product_id: str) -> str:
  return _json(_product(db, product_id))


def get_item_details(db: db_lib.Database, item_id: str) -> str:
  found = db.find_item(item_id)
  if found is None:
    raise ToolError("Item not found")
  return _json(found[1])


def list_all_product_types(db: db_lib.Database) -> str:
  return json.dumps({p.name: p.product_id for p in db.products.values()}, sort_keys=True)


# Write tools.

def cancel_pending_order(db: db_lib.Database, order_id: str, reason: str) -> str:
  order = _order(db, order_id)
  if order.status != "pending":
    raise ToolError("Non-pending order cannot be cancelled")
  if reason not in db_lib.CANCEL_REASONS:
    raise ToolError("Invalid reason")
  methods = [_payment_method(db, order.user_id, p.payment_method_id)
             for p in order.payment_history]
  refunds = []
  for payment, method in zip(order.payment_history, methods):
    refunds.append(db_lib.Payment("refund", payment.amount, payment.payment_method_id))
    if method.is_gift_card:  # A gift card is refunded at once.
      method.balance = round(method.balance + payment.amount, 2)
  order.status = "cancelled"
  order.cancel_reason = reason
  order.payment_history.extend(refunds)
  return _json(order)


def _new_address(address1: str, address2: str, city: str, state: str, country: str,
                 zip: str) -> db_lib.Address:
  return db_lib.Address(address1=address1, address2=address2, city=city, country=country,
                        state=state, zip=zip)


def modify_pending_order_address(db: db_lib.Database, order_id: str, address1: str,
                                 address2: str, city: str, state: str, country: str,
                                 zip: str) -> str:
  order = _order(db, order_id)
  if "pending" not in order.status:
    raise ToolError("Non-pending order cannot be modified")
  order.address = _new_address(address1, address2, city, state, country, zip)
  return _json(order)


def modify_pending_order_items(db: db_lib.Database, order_id: str, item_ids: list[str],
                               new_item_ids: list[str], payment_method_id: str) -> str:
  order = _order(db, order_id)
  if order.status != "pending":
    raise ToolError("Non-pending order cannot be modified")
  _check_counts(order, item_ids, lambda item_id: f"{item_id} not found")
  if len(item_ids) != len(new_item_ids):
    raise ToolError("The number of items to be exchanged should match")
  diff_price = 0.0
  variant = None
  for item_id, new_item_id in zip(item_ids, new_item_ids):
    if item_id == new_item_id:
      raise ToolError("The new item id should be different from the old item id")
    item = next(i for i in order.items if i.item_id == item_id)  # Present: counts checked.
    variant = _variant(db, item.product_id, new_item_id)
    if not variant.available:
      raise ToolError(f"New item {new_item_id} not found or available")
    diff_price += variant.price - item.price
  method = _payment_method(db, order.user_id, payment_method_id)
  if method.is_gift_card and method.balance < diff_price:
    raise ToolError("Insufficient gift card balance to pay for the new item")
  order.payment_history.append(db_lib.Payment("payment" if diff_price > 0 else "refund",
                                              abs(diff_price), payment_method_id))
  if method.is_gift_card:
    method.balance = round(method.balance - diff_price, 2)
  for item_id, new_item_id in zip(item_ids, new_item_ids):
    item = next(i for i in order.items if i.item_id == item_id)
    item.item_id = new_item_id
    item.price = variant.price  # The last new item's, as τ² does (module docstring).
    item.options = dict(variant.options)
  order.status = "pending (item modified)"
  return _json(order)


def modify_pending_order_payment(db: db_lib.Database, order_id: str,
                                 payment_method_id: str) -> str:
  order = _order(db, order_id)
  if "pending" not in order.status:
    raise ToolError("Non-pending order cannot be modified")
  method = _payment_method(db, order.user_id, payment_method_id)
  history = order.payment_history
  if len(history) != 1 or history[0].transaction_type != "payment":
    raise ToolError("There should be exactly one payment for a pending order")
  old_id = history[0].payment_method_id
  if old_id == payment_method_id:
    raise ToolError("The new payment method should be different from the current one")
  amount = history[0].amount
  if method.is_gift_card and method.balance < amount:
    raise ToolError("Insufficient gift card balance to pay for the order")
  old_method = _payment_method(db, order.user_id, old_id)
  history.extend([db_lib.Payment("payment", amount, payment_method_id),
                  db_lib.Payment("refund", amount, old_id)])
  if method.is_gift_card:
    method.balance = round(method.balance - amount, 2)
  if old_method.is_gift_card:
    old_method.balance = round(old_method.balance + amount, 2)
  return _json(order)


def modify_user_address(db: db_lib.Database, user_id: str, address1: str, address2: str,
                        city: str, state: str, country: str,
                        zip: str) -> str:
  user = _user(db, user_id)
  user.address = _new_address(address1, address2, city, state, country, zip)
  return _json(user)


def return_delivered_order_items(db: db_lib.Database, order_id: str, item_ids: list[str],
                                 payment_method_id: str) -> str:
  order = _order(db, order_id)
  if order.status != "delivered":
    raise ToolError("Non-delivered order cannot be returned")
  method = _payment_method(db, order.user_id, payment_method_id)
  if not method.is_gift_card and payment_method_id != order.payment_history[0].payment_method_id:
    raise ToolError("Payment method should be the original payment method")
  _check_counts(order, item_ids, lambda item_id: "Some item not found")
  order.status = "return requested"
  order.return_items = sorted(item_ids)
  order.return_payment_method_id = payment_method_id
  return _json(order)


def exchange_delivered_order_items(db: db_lib.Database, order_id: str, item_ids: list[str],
                                   new_item_ids: list[str], payment_method_id: str) -> str:
  order = _order(db, order_id)
  if order.status != "delivered":
    raise ToolError("Non-delivered order cannot be exchanged")
  _check_counts(order, item_ids, lambda item_id: f"Number of {item_id} not found.")
  if len(item_ids) != len(new_item_ids):
    raise ToolError("The number of items to be exchanged should match.")
  diff_price = 0.0
  for item_id, new_item_id in zip(item_ids, new_item_ids):
    item = next(i for i in order.items if i.item_id == item_id)
    variant = _variant(db, item.product_id, new_item_id)
    if not variant.available:
      raise ToolError(f"New item {new_item_id} not found or available")
    diff_price += variant.price - item.price
  diff_price = round(diff_price, 2)
  method = _payment_method(db, order.user_id, payment_method_id)
  if method.is_gift_card and method.balance < diff_price:
    raise ToolError("Insufficient gift card balance to pay for the price difference")
  order.status = "exchange requested"
  order.exchange_items = sorted(item_ids)
  order.exchange_new_items = sorted(new_item_ids)
  order.exchange_payment_method_id = payment_method_id
  order.exchange_price_difference = diff_price
  return _json(order)


# Generic tools.

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
              ast.USub: operator.neg, ast.UAdd: operator.pos}
_CALCULATOR_CHARS = frozenset("0123456789+-*/(). ")
_MAX_EXPONENT = 64  # `**` is spelled with allowed characters; a bound keeps 9**9**9 cheap.


def _evaluate(node: ast.AST) -> float:
  if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
    return node.value
  if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
    return _OPERATORS[type(node.op)](_evaluate(node.operand))
  if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
    left, right = _evaluate(node.left), _evaluate(node.right)
    if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
      raise ToolError("Exponent too large")
    return _OPERATORS[type(node.op)](left, right)
  raise ToolError("Invalid expression")


def calculate(db: db_lib.Database, expression: str) -> str:
  """Arithmetic on + - * / ( ) and numbers, rounded to 2 decimals (τ²: `str(round(x, 2))`)."""
  del db
  if not all(char in _CALCULATOR_CHARS for char in expression):
    raise ToolError("Invalid characters in expression")
  try:
    tree = ast.parse(expression, filename="<string>", mode="eval")  # τ²'s eval names it so.
  except SyntaxError as e:
    raise ToolError(str(e)) from None
  except RecursionError:
    raise ToolError("Invalid expression") from None
  try:
    return str(round(float(_evaluate(tree.body)), 2))
  except (ArithmeticError, ValueError) as e:
    raise ToolError(str(e)) from None


def transfer_to_human_agents(db: db_lib.Database, summary: str) -> str:
  del db, summary
  return TRANSFER_RESULT


# The registry.

def _s(name: str, description: str) -> Param:
  return Param(name, STRING, description)


def _l(name: str, description: str) -> Param:
  return Param(name, STRING_LIST, description)


_ORDER_ID = _s("order_id", "The order id, starting with '#', such as '#W0000000'.")
_USER_ID = _s("user_id", "The user id, such as 'sara_doe_496'.")
_PAYMENT = _s("payment_method_id", "A payment method id of the user, such as "
              "'gift_card_0000000' or 'credit_card_0000000' (see the user's or order's details).")
_ADDRESS = (_s("address1", "First address line, such as '123 Main St'."),
            _s("address2", "Second address line, such as 'Apt 1', or ''."),
            _s("city", "City, such as 'San Francisco'."), _s("state", "State, such as 'CA'."),
            _s("country", "Country, such as 'USA'."), _s("zip", "Zip code, such as '12345'."))
_ITEMS = _l("item_ids", "The item ids in the order to change, each such as '1008292230'; an id "
            "may repeat.")
_NEW_ITEMS = _l("new_item_ids", "For each item id at the same position, the new item id: an "
                "available variant of the same product.")

TOOLS: dict[str, Tool] = {t.name: t for t in (
    Tool("find_user_id_by_email", find_user_id_by_email,
         (_s("email", "The user's email, such as 'something@example.com'."),),
         "Find a user id by email (case-insensitive).", writes=False),
    Tool("find_user_id_by_name_zip", find_user_id_by_name_zip,
         (_s("first_name", "First name, such as 'John'."),
          _s("last_name", "Last name, such as 'Doe'."), _s("zip", "Zip code, such as '12345'.")),
         "Find a user id by first name, last name and zip code; use it only when the user "
         "cannot be found by email.", writes=False),
    Tool("get_user_details", get_user_details, (_USER_ID,),
         "The details of a user: name, address, email, payment methods, order ids.",
         writes=False),
    Tool("get_order_details", get_order_details, (_ORDER_ID,),
         "The status and details of an order.", writes=False),
    Tool("get_product_details", get_product_details,
         (_s("product_id", "The product id, such as '6086499569' (not an item id)."),),
         "The inventory of a product: every variant item with its options, availability and "
         "price.", writes=False),
    Tool("get_item_details", get_item_details,
         (_s("item_id", "The item id, such as '6086499569' (not a product id)."),),
         "The options, availability and price of one item.", writes=False),
    Tool("list_all_product_types", list_all_product_types, (),
         "The name and product id of all 50 product types, as JSON sorted by name.",
         writes=False),
    Tool("cancel_pending_order", cancel_pending_order,
         (_ORDER_ID, _s("reason", "'no longer needed' or 'ordered by mistake'.")),
         "Cancel a pending order and refund its payments (a gift card at once, others in 5-7 "
         "business days). Needs the user's explicit yes.", writes=True),
    Tool("modify_pending_order_address", modify_pending_order_address, (_ORDER_ID,) + _ADDRESS,
         "Change the shipping address of a pending order. Needs the user's explicit yes.",
         writes=True),
    Tool("modify_pending_order_items", modify_pending_order_items,
         (_ORDER_ID, _ITEMS, _NEW_ITEMS, _PAYMENT),
         "Change items of a pending order to other options of the same products, paying or "
         "refunding the difference; can be done once per order. Needs the user's explicit yes.",
         writes=True),
    Tool("modify_pending_order_payment", modify_pending_order_payment, (_ORDER_ID, _PAYMENT),
         "Pay a pending order with another of the user's payment methods. Needs the user's "
         "explicit yes.", writes=True),
    Tool("modify_user_address", modify_user_address, (_USER_ID,) + _ADDRESS,
         "Change the default address of a user. Needs the user's explicit yes.", writes=True),
    Tool("return_delivered_order_items", return_delivered_order_items,
         (_ORDER_ID, _ITEMS, _PAYMENT),
         "Request the return of items of a delivered order, refunded to the original payment "
         "method or a gift card. Needs the user's explicit yes.", writes=True),
    Tool("exchange_delivered_order_items", exchange_delivered_order_items,
         (_ORDER_ID, _ITEMS, _NEW_ITEMS, _PAYMENT),
         "Exchange items of a delivered order for other options of the same products, paying "
         "or refunding the difference; can be done once per order. Needs the user's explicit "
         "yes.", writes=True),
    Tool("calculate", calculate,
         (_s("expression", "Arithmetic with numbers, + - * / and parentheses, such as "
             "'2 + 2'."),),
         "Calculate an arithmetic expression, rounded to 2 decimals.", writes=False),
    Tool("transfer_to_human_agents", transfer_to_human_agents,
         (_s("summary", "A summary of the user's issue."),),
         "Transfer the user to a human agent: only when the user asks for one or the request "
         "cannot be handled with these tools.", writes=False),
)}


def _check_arguments(tool: Tool, arguments: Mapping[str, Any]) -> str | None:
  """Why `arguments` do not fit the tool's schema, or None."""
  names = [p.name for p in tool.params]
  unknown = [k for k in arguments if k not in names]
  if unknown:
    return f"{tool.name}() got unexpected argument(s): {', '.join(map(str, unknown))}"
  missing = [n for n in names if n not in arguments]
  if missing:
    return f"{tool.name}() missing argument(s): {', '.join(missing)}"
  for p in tool.params:
    value = arguments[p.name]
    if p.type == STRING and not isinstance(value, str):
      return f"{tool.name}() argument '{p.name}' must be a string"
    if p.type == STRING_LIST and not (isinstance(value, list)
                                      and all(isinstance(v, str) for v in value)):
      return f"{tool.name}() argument '{p.name}' must be a list of strings"
  return None


def call(db: db_lib.Database, name: str, arguments: str | Mapping[str, Any]) -> Observation:
  """Runs tool `name` on `db` with `arguments` (a JSON object or its text); never raises."""
  if isinstance(arguments, str):
    try:
      arguments = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as e:
      return Observation(f"Error: arguments are not valid JSON: {e.msg}", MALFORMED_JSON)
  if not isinstance(arguments, Mapping):
    return Observation("Error: arguments must be a JSON object", MALFORMED_JSON)
  tool = TOOLS.get(name)
  if tool is None:
    return Observation(f"Error: Tool '{name}' not found.", UNKNOWN_TOOL)
  why = _check_arguments(tool, arguments)
  if why is not None:
    return Observation(f"Error: {why}", BAD_ARGUMENTS)
  try:
    return Observation(tool.function(db, **arguments))
  except ToolError as e:
    return Observation(f"Error: {e}", TOOL_ERROR)
