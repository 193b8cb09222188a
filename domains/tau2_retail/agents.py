"""Scripted agents for the scripted customer (users.py): an oracle that follows policy.md, and
agents of one degraded skill each (AGENTS: `no_auth` skips authentication, `no_confirm` forgets
confirmation, `wrong_item` picks the wrong item), so a corpus holds good and bad behaviour.

It sees only the dialogue: the customer's words and its own tool results (never the task). Its
procedure is the policy's:

  1. greet; authenticate with the identity the customer gives (email, else name and zip), asking
     again while the lookup fails; then read the user's details (orders, payment methods);
  2. for each wish the customer states: find the order it means by reading the user's orders
     (get_order_details, each once) and keeping those whose status allows the change and whose
     items are the ones named; ask the order id when none or several match; refuse, saying why,
     when the order's status does not allow the change;
  3. ask, one question a turn, what the change needs: the new options of each item (then read
     the product and pick the variant with exactly the options asked, refusing when it is not
     available), the payment method, the cancellation reason, the new address;
  4. list the action's details and ask for a yes (reminding, for item changes, to list every
     item first); make the one write call only after a yes; say what it did and the amount
     refunded or charged, then ask what else;
  5. transfer to a human (the tool call, then the policy's message) when asked for one.

One tool call a turn and never words with it. The agent's wording is phrases.py's; it reads the
customer's turns in any phrasing family (reading.py: values and key words, the items named
matched against the account's orders), takes an identity the customer volunteers in its first
turn, and asks again once about a turn it cannot read, then drops the wish. A degraded agent
is the oracle with one step replaced (the classes at the end say which and what follows).
"""

from __future__ import annotations

import collections
import json
from typing import Any, Generator, Mapping, Sequence

from data_pipelines.dialogue import Turn
from domains.tau2_retail import phrases, reading, turns

_Script = Generator[str, str, None]  # Yields the agent's turns; is sent what came back.
_STATUS_OK = {
    phrases.CANCEL: lambda s: s == "pending", phrases.MODIFY_ITEMS: lambda s: s == "pending",
    phrases.ORDER_ADDRESS: lambda s: "pending" in s,
    phrases.ORDER_PAYMENT: lambda s: "pending" in s,
    phrases.RETURN: lambda s: s == "delivered", phrases.EXCHANGE: lambda s: s == "delivered",
}
_VERBS = {phrases.CANCEL: "cancel", phrases.MODIFY_ITEMS: "modify the items of",
          phrases.ORDER_ADDRESS: "change the address of",
          phrases.ORDER_PAYMENT: "change the payment method of",
          phrases.RETURN: "return items of", phrases.EXCHANGE: "exchange items of"}
_MAX_IDENTITY_TRIES = 5


class _Dropped(Exception):
  """The current wish cannot go on; the message is what the agent tells the customer."""


def _key(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
  return tuple(sorted(options.items()))


def _money(amount: float) -> str:
  return f"${amount:.2f}"


def _signed(amount: float) -> str:
  return f"{'-' if amount < 0 else '+'}${abs(amount):.2f}"


class OracleAgent:
  """Plays one dialogue as the agent; `respond` sees the whole history each turn."""

  def __init__(self):
    self._script: _Script | None = None
    self._user: dict[str, Any] = {}
    self._orders: dict[str, dict[str, Any]] = {}  # Order details read so far, kept current.
    self._products: dict[str, dict[str, Any]] = {}
    self._money_back: list[float] = []  # Per write that moved money: + refunded, - charged.

  def respond(self, history: Sequence[Turn]) -> str | None:
    if self._script is None:
      self._script = self._run()
      return next(self._script)
    try:
      return self._script.send(history[-1].text if history else "")
    except StopIteration:
      return None

  # Steps that take turns (generators: `result = yield from step(...)`).

  def _call(self, name: str, **arguments: Any) -> Generator[str, str, str]:
    return (yield turns.format_call(name, arguments))

  def _ask(self, question: str, parse) -> Generator[str, str, Any]:
    """Asks, and once more if the answer cannot be read; raises _Dropped after that."""
    value = parse((yield question))
    if value is None:
      value = parse((yield f"Sorry, I did not understand. {question}"))
    if value is None:
      raise _Dropped("I am sorry, I could not understand your answer.")
    return value

  def _order(self, order_id: str) -> Generator[str, str, dict[str, Any] | None]:
    if order_id not in self._orders:
      text = yield from self._call("get_order_details", order_id=order_id)
      if text.startswith("Error"):
        return None
      self._orders[order_id] = json.loads(text)
    return self._orders[order_id]

  def _product(self, product_id: str) -> Generator[str, str, dict[str, Any]]:
    if product_id not in self._products:
      self._products[product_id] = json.loads(
          (yield from self._call("get_product_details", product_id=product_id)))
    return self._products[product_id]

  def _run(self) -> _Script:
    reply = yield phrases.GREETING
    wish = reading.wish(reply)
    if not (yield from self._authenticate(reply)):
      return
    while True:
      if wish is None:
        reply = yield "Thank you, you are verified. How can I help you today?"
      else:
        if wish[0] == phrases.TRANSFER:
          yield from self._call("transfer_to_human_agents",
                                summary="The customer asked to talk to a human agent.")
          yield phrases.TRANSFER_MESSAGE
          return
        try:
          outcome = yield from self._serve(*wish)
        except _Dropped as e:
          outcome = str(e)
        reply = yield f"{outcome} {phrases.ANYTHING_ELSE}"
      wish = reading.wish(reply)

  def _authenticate(self, opening: str) -> Generator[str, str, bool]:
    """Looks the customer up by the identity it gives (in its opening, else when asked),
    asking again while the lookup fails; then reads the account. False when it gives up."""
    reply = opening if reading.identity(opening) else (yield phrases.ASK_IDENTITY)
    for _ in range(_MAX_IDENTITY_TRIES):
      identity = reading.identity(reply)
      if identity is not None:
        tool = "find_user_id_by_email" if "email" in identity else "find_user_id_by_name_zip"
        user_id = yield from self._call(tool, **identity)
        if not user_id.startswith("Error"):
          break
      reply = yield phrases.IDENTITY_NOT_FOUND
    else:
      return False
    self._user = json.loads((yield from self._call("get_user_details", user_id=user_id)))
    return True

  # One wish.

  def _serve(self, kind: str, said: str) -> Generator[str, str, str]:
    """One wish of `kind`, stated in the sentence `said`."""
    if kind == phrases.USER_ADDRESS:
      address = yield from self._ask(phrases.ASK_ADDRESS, reading.address)
      yield from self._confirm(f"I will change your default address to "
                               f"{phrases.address_pairs(address)}.")
      text = yield from self._call("modify_user_address", user_id=self._user_id(),
                                   **address)
      return self._done(text, "Your default address is updated.")
    order, names, items = yield from self._find_order(kind, said)
    order_id = order["order_id"]
    if kind == phrases.CANCEL:
      reason = yield from self._ask(phrases.ASK_REASON, reading.reason)
      yield from self._confirm(f"I will cancel order {order_id} with "
                               f"{phrases.join(names)} because it is {reason}.")
      text = yield from self._call("cancel_pending_order", order_id=order_id, reason=reason)
      refund = sum(p["amount"] for p in order["payment_history"])
      return self._done(text, f"Order {order_id} is cancelled; {_money(refund)} will be "
                        "refunded to the original payment method.", refund)
    if kind == phrases.ORDER_ADDRESS:
      address = yield from self._ask(phrases.ASK_ADDRESS, reading.address)
      yield from self._confirm(f"I will change the shipping address of order {order_id} to "
                               f"{phrases.address_pairs(address)}.")
      text = yield from self._call("modify_pending_order_address", order_id=order_id, **address)
      return self._done(text, f"The shipping address of order {order_id} is updated.")
    if kind == phrases.ORDER_PAYMENT:
      method = yield from self._payment(order, f"{phrases.ASK_PAYMENT} for order {order_id}?")
      yield from self._confirm(f"I will pay order {order_id} with {method} instead.")
      text = yield from self._call("modify_pending_order_payment", order_id=order_id,
                                   payment_method_id=method)
      return self._done(text, f"Order {order_id} is now paid with {method}.")
    return (yield from self._change_items(kind, order, items))

  def _change_items(self, kind: str, order: dict[str, Any],
                    items: list[tuple[str, dict[str, str]]]) -> Generator[str, str, str]:
    order_id = order["order_id"]
    chosen = self._pick_items(order, items)
    if kind == phrases.RETURN:
      method = yield from self._payment(order, f"{phrases.ASK_PAYMENT} to receive the refund?")
      listed = phrases.join([phrases.item_text(n, o) for n, o in items])
      yield from self._confirm(f"I will return {listed} of order {order_id}, refunded to "
                               f"{method}.")
      text = yield from self._call("return_delivered_order_items", order_id=order_id,
                                   item_ids=[i["item_id"] for i in chosen],
                                   payment_method_id=method)
      refund = sum(i["price"] for i in chosen)
      return self._done(text, f"The return is requested; {_money(refund)} will be refunded "
                        f"to {method}. You will get an email on how to send the items back.",
                        refund)
    new_ids, lines = [], []
    for item in chosen:
      changes = yield from self._new_options(item)
      product = yield from self._product(item["product_id"])
      wanted = {**item["options"], **changes}
      variant = self._variant(product, item, changes)
      if variant is None or not variant["available"]:
        raise _Dropped(f"I am sorry, there is no available {item['name']} with "
                       f"{phrases.pairs_text(wanted)}.")
      new_ids.append(variant["item_id"])
      lines.append(f"{phrases.item_text(item['name'], item['options'])} to "
                   f"{phrases.item_text(item['name'], variant['options'])} "
                   f"({_signed(variant['price'] - item['price'])})")
    method = yield from self._payment(
        order, f"{phrases.ASK_PAYMENT} to pay or receive the price difference?")
    verb = "change" if kind == phrases.MODIFY_ITEMS else "exchange"
    yield from self._confirm(f"I will {verb} {phrases.join(lines)} in order {order_id}, with "
                             f"the price difference paid or refunded through {method}. "
                             f"{phrases.ITEMS_REMINDER}")
    tool = ("modify_pending_order_items" if kind == phrases.MODIFY_ITEMS
            else "exchange_delivered_order_items")
    text = yield from self._call(tool, order_id=order_id, item_ids=[i["item_id"] for i in chosen],
                                 new_item_ids=new_ids, payment_method_id=method)
    if text.startswith("Error"):
      return self._done(text, "")
    updated = json.loads(text)
    difference = (updated["exchange_price_difference"] if kind == phrases.EXCHANGE else
                  sum(p["amount"] * (1 if p["transaction_type"] == "payment" else -1)
                      for p in updated["payment_history"][len(order["payment_history"]):]))
    owed = (f"you pay {_money(difference)}" if difference > 0
            else f"you get {_money(-difference)} back")
    return self._done(text, f"Order {order_id} is now '{updated['status']}'; {owed}.",
                      -difference)

  # Helpers of a wish.

  def _new_options(self, item: dict[str, Any]) -> Generator[str, str, dict[str, str]]:
    """The options the customer wants changed on `item`, read against its product's variants
    (read after the first answer), asking once more when the answer names none of them."""
    question = phrases.new_options_question(item["name"], item["options"])
    reply = yield question
    product = yield from self._product(item["product_id"])
    variants = [v["options"] for v in product["variants"].values()]
    changes = reading.new_options(reply, item["options"], variants)
    if changes is None:
      reply = yield f"Sorry, I did not understand. {question}"
      changes = reading.new_options(reply, item["options"], variants)
    if changes is None:
      raise _Dropped("I am sorry, I could not understand your answer.")
    return changes

  def _done(self, text: str, success: str, money_back: float | None = None) -> str:
    """What to tell after a write call: its success (with the running total once money moved
    twice), or the tool's refusal."""
    if text.startswith("Error"):
      return f"I am sorry, that did not work ({text[len('Error: '):]})."
    record = json.loads(text)
    if "order_id" in record:
      self._orders[record["order_id"]] = record
    if money_back is None:
      return success
    self._money_back.append(money_back)
    if len(self._money_back) < 2:
      return success
    total = round(sum(self._money_back), 2)
    owed = f"you get {_money(total)} back" if total >= 0 else f"you pay {_money(-total)}"
    return f"{success} In total, over these changes, {owed}."

  def _confirm(self, details: str) -> Generator[str, str, None]:
    reply = yield f"{details.strip()} Do you confirm? {phrases.CONFIRM}"
    if reading.confirmation(reply) is not True:
      raise _Dropped("All right, I will not make this change.")

  def _matches(self, kind: str, order: dict[str, Any], names: list[str],
               items: list[tuple[str, dict[str, str]]]) -> bool:
    if not _STATUS_OK[kind](order["status"]):
      return False
    held = collections.Counter((i["name"], _key(i["options"])) for i in order["items"])
    if kind in phrases.ORDER_LEVEL:
      return set(names) == {name for name, _ in held}
    asked = collections.Counter((n, _key(o)) for n, o in items)
    return all(held[k] >= count for k, count in asked.items())

  def _named(self, kind: str, said: str, orders: Sequence[dict[str, Any]]
             ) -> tuple[list[str], list[tuple[str, dict[str, str]]]]:
    """(product names, items) the wish names, read against the items of `orders`."""
    held = [(i["name"], i["options"]) for order in orders for i in order["items"]]
    if kind in phrases.ORDER_LEVEL:
      return reading.products(said, {name for name, _ in held}), []
    items = reading.items(said, held)
    if items is None:
      raise _Dropped("I am sorry, I could not tell which items of your orders you mean.")
    return [], items

  def _find_order(self, kind: str, said: str) -> Generator[str, str, tuple]:
    """(order, product names, items): the one order of the account that fits the wish, else
    the one whose id the customer gives."""
    orders = []
    for order_id in self._user["orders"]:
      order = yield from self._order(order_id)
      if order is not None:
        orders.append(order)
    names, items = self._named(kind, said, orders)
    matches = [order for order in orders if self._matches(kind, order, names, items)]
    if len(matches) == 1:
      return matches[0], names, items
    order_id = yield from self._ask(
        f"I found {'several orders' if matches else 'no order'} that could match. "
        f"{phrases.ASK_ORDER_ID}", reading.order_id)
    order = (yield from self._order(order_id)) if order_id in self._user["orders"] else None
    return self._checked(kind, order_id, order, names, items), names, items

  def _checked(self, kind: str, order_id: str, order: dict[str, Any] | None, names: list[str],
               items: list[tuple[str, dict[str, str]]]) -> dict[str, Any]:
    """The order the customer named, or _Dropped saying why the wish cannot go on with it."""
    if order is None:
      raise _Dropped(f"I am sorry, I cannot find order {order_id} in your account.")
    if not _STATUS_OK[kind](order["status"]):
      raise _Dropped(f"I am sorry, order {order_id} is '{order['status']}', so I cannot "
                     f"{_VERBS[kind]} it.")
    if not self._matches(kind, order, names, items):
      raise _Dropped(f"I am sorry, order {order_id} does not hold those items.")
    return order

  def _pick_items(self, order: dict[str, Any],
                  items: list[tuple[str, dict[str, str]]]) -> list[dict[str, Any]]:
    """The order's item for each named one, in the customer's order (repeats take copies)."""
    free = list(order["items"])
    chosen = []
    for name, options in items:
      item = next(i for i in free if i["name"] == name and _key(i["options"]) == _key(options))
      free.remove(item)
      chosen.append(item)
    return chosen

  def _variant(self, product: dict[str, Any], item: dict[str, Any],
               changes: Mapping[str, str]) -> dict[str, Any] | None:
    """The product's variant with exactly the item's options changed as asked, or None."""
    wanted = _key({**item["options"], **changes})
    return next((v for v in product["variants"].values() if _key(v["options"]) == wanted),
                None)

  def _user_id(self) -> str:
    return self._user["user_id"]

  def _payment(self, order: dict[str, Any], question: str) -> Generator[str, str, str]:
    choice = yield from self._ask(question, reading.payment)
    source, key = choice
    if source == "original":
      return order["payment_history"][0]["payment_method_id"]
    for method_id, method in self._user.get("payment_methods", {}).items():
      if method["source"] == source and (
          source == "paypal" or method.get("last_four") == key or method_id == key):
        return method_id
    raise _Dropped("I am sorry, I cannot find that payment method in your account.")


class NoAuthAgent(OracleAgent):
  """Skips authentication: never looks the customer up, so it never reads the account. It asks
  for the order id of each wish and acts on that order; without the account it cannot use a
  payment method the customer names by description (only the original one, or a gift card by
  its id), nor change the default address."""

  def _authenticate(self, opening: str) -> Generator[str, str, bool]:
    del opening
    yield from ()
    return True

  def _find_order(self, kind: str, said: str) -> Generator[str, str, tuple]:
    order_id = yield from self._ask(phrases.ASK_ORDER_ID, reading.order_id)
    order = yield from self._order(order_id)
    names, items = self._named(kind, said, [order]) if order is not None else ([], [])
    return self._checked(kind, order_id, order, names, items), names, items

  def _user_id(self) -> str:
    raise _Dropped("I am sorry, I cannot find your account.")

  def _payment(self, order: dict[str, Any], question: str) -> Generator[str, str, str]:
    source, key = yield from self._ask(question, reading.payment)
    if source == "original":
      return order["payment_history"][0]["payment_method_id"]
    if source == "gift_card":
      return key
    raise _Dropped("I am sorry, I cannot find that payment method.")


class NoConfirmAgent(OracleAgent):
  """Forgets confirmation: makes each write as soon as it has the details, without listing
  them and waiting for a yes (so a customer who would have said no gets the change anyway)."""

  def _confirm(self, details: str) -> Generator[str, str, None]:
    del details
    yield from ()


class WrongItemAgent(OracleAgent):
  """Picks the wrong item: takes an order's items by product name alone (the first of that
  name, whatever its options), and as a new item the first other available variant with the
  options asked for, whatever its other options."""

  def _pick_items(self, order: dict[str, Any],
                  items: list[tuple[str, dict[str, str]]]) -> list[dict[str, Any]]:
    free = list(order["items"])
    chosen = []
    for name, _ in items:
      item = next(i for i in free if i["name"] == name)
      free.remove(item)
      chosen.append(item)
    return chosen

  def _variant(self, product: dict[str, Any], item: dict[str, Any],
               changes: Mapping[str, str]) -> dict[str, Any] | None:
    return next((v for v in product["variants"].values()
                 if v["available"] and v["item_id"] != item["item_id"]
                 and all(v["options"].get(k) == value for k, value in changes.items())), None)


# The scripted agents by skill: the oracle, and one degraded skill each.
AGENTS = {"oracle": OracleAgent, "no_auth": NoAuthAgent, "no_confirm": NoConfirmAgent,
          "wrong_item": WrongItemAgent}
