"""τ² retail tools on a tiny hand-made shop: semantics, preconditions, and `call`'s error kinds.

Needs no data folder. That our tools match τ²'s on the real data is checked by
test_tau2_retail_reward.py (every gold call's outcome, every task's final state).
"""

from __future__ import annotations

import json

import pytest

from domains.tau2_retail import db as db_lib
from domains.tau2_retail import tools

SHIRT, BOTTLE = "1000000001", "1000000002"
BLUE, RED, GREEN = "2000000001", "2000000002", "2000000003"  # T-shirt variants; green sold out.
SMALL, BIG = "3000000001", "3000000002"  # Water bottle variants.
POLICY_TOOLS = (
    "find_user_id_by_email", "find_user_id_by_name_zip", "get_user_details", "get_order_details",
    "get_product_details", "get_item_details", "list_all_product_types", "cancel_pending_order",
    "modify_pending_order_address", "modify_pending_order_items", "modify_pending_order_payment",
    "modify_user_address", "return_delivered_order_items", "exchange_delivered_order_items",
    "calculate", "transfer_to_human_agents")


def _address(zip_code: str) -> dict:
  return {"address1": "1 Main St", "address2": "", "city": "Springfield", "country": "USA",
          "state": "IL", "zip": zip_code}


def _item(product: str, item_id: str, price: float, options: dict) -> dict:
  return {"name": {SHIRT: "T-Shirt", BOTTLE: "Water Bottle"}[product], "product_id": product,
          "item_id": item_id, "price": price, "options": options}


def _order(order_id: str, user: str, status: str, items: list, method: str) -> dict:
  return {"order_id": order_id, "user_id": user, "address": _address("10001"), "items": items,
          "status": status, "fulfillments": [],
          "payment_history": [{"transaction_type": "payment",
                               "amount": round(sum(i["price"] for i in items), 2),
                               "payment_method_id": method}]}


def tiny_shop() -> dict:
  blue = _item(SHIRT, BLUE, 50.0, {"color": "blue"})
  small = _item(BOTTLE, SMALL, 20.0, {"capacity": "500ml"})
  return {
      "products": {
          SHIRT: {"name": "T-Shirt", "product_id": SHIRT, "variants": {
              BLUE: {"item_id": BLUE, "options": {"color": "blue"}, "available": True,
                     "price": 50.0},
              RED: {"item_id": RED, "options": {"color": "red"}, "available": True, "price": 55.0},
              GREEN: {"item_id": GREEN, "options": {"color": "green"}, "available": False,
                      "price": 40.0}}},
          BOTTLE: {"name": "Water Bottle", "product_id": BOTTLE, "variants": {
              SMALL: {"item_id": SMALL, "options": {"capacity": "500ml"}, "available": True,
                      "price": 20.0},
              BIG: {"item_id": BIG, "options": {"capacity": "1000ml"}, "available": True,
                    "price": 35.0}}}},
      "users": {
          "ann_lee_1": {
              "user_id": "ann_lee_1", "name": {"first_name": "Ann", "last_name": "Lee"},
              "address": _address("10001"), "email": "Ann.Lee@example.com",
              "payment_methods": {
                  "gift_card_1": {"source": "gift_card", "id": "gift_card_1", "balance": 10.0},
                  "credit_card_1": {"source": "credit_card", "id": "credit_card_1",
                                    "brand": "visa", "last_four": "1234"},
                  "paypal_1": {"source": "paypal", "id": "paypal_1"}},
              "orders": ["#W1", "#W2", "#W3", "#W4"]},
          "bob_ray_2": {
              "user_id": "bob_ray_2", "name": {"first_name": "Bob", "last_name": "Ray"},
              "address": _address("20002"), "email": "bob@example.com",
              "payment_methods": {
                  "gift_card_2": {"source": "gift_card", "id": "gift_card_2", "balance": 500.0}},
              "orders": []}},
      "orders": {
          "#W1": _order("#W1", "ann_lee_1", "pending", [blue, small], "credit_card_1"),
          "#W2": _order("#W2", "ann_lee_1", "pending", [blue], "gift_card_1"),
          "#W3": _order("#W3", "ann_lee_1", "delivered", [blue, blue, small], "paypal_1"),
          "#W4": _order("#W4", "ann_lee_1", "processed", [blue], "credit_card_1")},
  }


@pytest.fixture
def shop() -> db_lib.Database:
  return db_lib.from_json(tiny_shop())


def ok(shop: db_lib.Database, name: str, **arguments) -> str:
  observation = tools.call(shop, name, arguments)
  assert observation.ok, observation.text
  return observation.text


def refused(shop: db_lib.Database, name: str, **arguments) -> str:
  """The refusal text; the database must be left as it was."""
  before = db_lib.state_hash(shop)
  observation = tools.call(shop, name, arguments)
  assert observation.error == tools.TOOL_ERROR, observation
  assert observation.text.startswith("Error: ")
  assert db_lib.state_hash(shop) == before
  return observation.text[len("Error: "):]


def test_registry_holds_the_policy_tools_with_schemas():
  assert tuple(tools.TOOLS) == POLICY_TOOLS
  writes = {n for n, t in tools.TOOLS.items() if t.writes}
  assert writes == {n for n in POLICY_TOOLS if n.split("_")[0] in
                    ("cancel", "modify", "return", "exchange")}
  schema = tools.TOOLS["modify_pending_order_items"].schema()
  assert schema["parameters"]["required"] == ["order_id", "item_ids", "new_item_ids",
                                              "payment_method_id"]
  assert schema["parameters"]["properties"]["item_ids"]["type"] == "array"
  assert tools.TOOLS["list_all_product_types"].schema()["parameters"]["required"] == []


def test_call_sorts_failures_by_kind(shop):
  cases = [
      ("get_order_details", '{"order_id": "#W1"', tools.MALFORMED_JSON),
      ("get_order_details", "[1, 2]", tools.MALFORMED_JSON),
      ("get_order_details", None, tools.MALFORMED_JSON),
      ("get_order_status", {"order_id": "#W1"}, tools.UNKNOWN_TOOL),
      ("get_order_details", {}, tools.BAD_ARGUMENTS),
      ("get_order_details", {"order_id": "#W1", "verbose": True}, tools.BAD_ARGUMENTS),
      ("get_order_details", {"order_id": 1}, tools.BAD_ARGUMENTS),
      ("return_delivered_order_items",
       {"order_id": "#W3", "item_ids": BLUE, "payment_method_id": "paypal_1"},
       tools.BAD_ARGUMENTS),
      ("get_order_details", {"order_id": "#W9"}, tools.TOOL_ERROR),
  ]
  for name, arguments, kind in cases:
    observation = tools.call(shop, name, arguments)
    assert observation.error == kind, (name, arguments, observation)
    assert observation.text.startswith("Error: ")
  assert tools.call(shop, "nope", {}).text == "Error: Tool 'nope' not found."
  assert "missing argument(s): order_id" in tools.call(shop, "get_order_details", {}).text
  assert tools.call(shop, "get_order_details", '{"order_id": "#W1"}').ok
  assert tools.call(shop, "list_all_product_types", "").ok  # No arguments: an empty text.


def test_lookups(shop):
  assert ok(shop, "find_user_id_by_email", email="ann.lee@EXAMPLE.com") == "ann_lee_1"
  assert ok(shop, "find_user_id_by_name_zip", first_name="ann", last_name="LEE",
            zip="10001") == "ann_lee_1"
  assert refused(shop, "find_user_id_by_name_zip", first_name="Ann", last_name="Lee",
                 zip="10002") == "User not found"
  assert refused(shop, "find_user_id_by_email", email="ann@example.com") == "User not found"
  order = json.loads(ok(shop, "get_order_details", order_id="#W1"))
  assert order == shop.orders["#W1"].to_json() and order["cancel_reason"] is None
  assert list(order) == ["order_id", "user_id", "address", "items", "status", "fulfillments",
                         "payment_history", "cancel_reason", "exchange_items",
                         "exchange_new_items", "exchange_payment_method_id",
                         "exchange_price_difference", "return_items",
                         "return_payment_method_id"]
  user = json.loads(ok(shop, "get_user_details", user_id="ann_lee_1"))
  assert user["payment_methods"]["paypal_1"] == {"source": "paypal", "id": "paypal_1"}
  assert json.loads(ok(shop, "get_item_details", item_id=GREEN))["available"] is False
  assert refused(shop, "get_item_details", item_id=SHIRT) == "Item not found"
  assert refused(shop, "get_product_details", product_id=BLUE) == "Product not found"
  assert len(json.loads(ok(shop, "get_product_details", product_id=SHIRT))["variants"]) == 3
  assert ok(shop, "list_all_product_types") == json.dumps(
      {"T-Shirt": SHIRT, "Water Bottle": BOTTLE})
  assert refused(shop, "get_user_details", user_id="ann") == "User not found"


def test_cancel_needs_pending_and_a_listed_reason_and_refunds_gift_cards(shop):
  assert refused(shop, "cancel_pending_order", order_id="#W4",
                 reason="no longer needed") == "Non-pending order cannot be cancelled"
  assert refused(shop, "cancel_pending_order", order_id="#W1",
                 reason="found it cheaper") == "Invalid reason"
  order = json.loads(ok(shop, "cancel_pending_order", order_id="#W1",
                        reason="ordered by mistake"))
  assert order["status"] == "cancelled" and order["cancel_reason"] == "ordered by mistake"
  assert order["payment_history"][-1] == {"transaction_type": "refund", "amount": 70.0,
                                          "payment_method_id": "credit_card_1"}
  ok(shop, "cancel_pending_order", order_id="#W2", reason="no longer needed")
  assert shop.users["ann_lee_1"].payment_methods["gift_card_1"].balance == 60.0
  assert refused(shop, "cancel_pending_order", order_id="#W2",
                 reason="no longer needed") == "Non-pending order cannot be cancelled"


def test_modify_items_same_product_other_option_once(shop):
  def modify(items, new, method="credit_card_1", order="#W1"):
    return dict(order_id=order, item_ids=items, new_item_ids=new, payment_method_id=method)

  assert refused(shop, "modify_pending_order_items", **modify([BLUE], [BLUE])) == (
      "The new item id should be different from the old item id")
  assert refused(shop, "modify_pending_order_items", **modify([BLUE], [BIG])) == (
      "Variant not found")  # Another product.
  assert refused(shop, "modify_pending_order_items", **modify([BLUE], [GREEN])) == (
      f"New item {GREEN} not found or available")
  assert refused(shop, "modify_pending_order_items", **modify([BLUE, BLUE], [RED, RED])) == (
      f"{BLUE} not found")  # The order holds one.
  assert refused(shop, "modify_pending_order_items", **modify([BLUE], [RED, RED])) == (
      "The number of items to be exchanged should match")
  assert refused(shop, "modify_pending_order_items",
                 **modify([BLUE, SMALL], [RED, BIG], "gift_card_1")) == (
      "Insufficient gift card balance to pay for the new item")  # 20 more, 10 on the card.
  assert refused(shop, "modify_pending_order_items", **modify([BLUE], [RED], order="#W4")) == (
      "Non-pending order cannot be modified")
  order = json.loads(ok(shop, "modify_pending_order_items", **modify([BLUE], [RED],
                                                                   "gift_card_1")))
  assert order["status"] == "pending (item modified)"
  assert order["items"][0] == {"name": "T-Shirt", "product_id": SHIRT, "item_id": RED,
                               "price": 55.0, "options": {"color": "red"}}
  assert order["payment_history"][-1] == {"transaction_type": "payment", "amount": 5.0,
                                          "payment_method_id": "gift_card_1"}
  assert shop.users["ann_lee_1"].payment_methods["gift_card_1"].balance == 5.0
  assert refused(shop, "modify_pending_order_items", **modify([SMALL], [BIG])) == (
      "Non-pending order cannot be modified")  # Only once.
  assert refused(shop, "cancel_pending_order", order_id="#W1",
                 reason="no longer needed") == "Non-pending order cannot be cancelled"
  ok(shop, "modify_pending_order_address", order_id="#W1", **_address("60601"))  # Still allowed.
  assert shop.orders["#W1"].address.zip == "60601"


def test_modify_items_gives_every_item_the_last_new_items_price_and_options(shop):
  """τ²'s loop reuses its last variant; kept so a state hashes as τ²'s would."""
  order = json.loads(ok(shop, "modify_pending_order_items", order_id="#W1",
                        item_ids=[BLUE, SMALL], new_item_ids=[RED, BIG],
                        payment_method_id="paypal_1"))
  assert [i["item_id"] for i in order["items"]] == [RED, BIG]
  assert [i["price"] for i in order["items"]] == [35.0, 35.0]
  assert order["items"][0]["options"] == {"capacity": "1000ml"}
  assert order["payment_history"][-1]["amount"] == 20.0


def test_modify_payment(shop):
  assert refused(shop, "modify_pending_order_payment", order_id="#W1",
                 payment_method_id="credit_card_1") == (
      "The new payment method should be different from the current one")
  assert refused(shop, "modify_pending_order_payment", order_id="#W1",
                 payment_method_id="gift_card_1") == (
      "Insufficient gift card balance to pay for the order")
  assert refused(shop, "modify_pending_order_payment", order_id="#W1",
                 payment_method_id="gift_card_2") == "Payment method not found"  # Bob's.
  assert refused(shop, "modify_pending_order_payment", order_id="#W3",
                 payment_method_id="credit_card_1") == "Non-pending order cannot be modified"
  order = json.loads(ok(shop, "modify_pending_order_payment", order_id="#W2",
                        payment_method_id="paypal_1"))
  assert order["payment_history"][1:] == [
      {"transaction_type": "payment", "amount": 50.0, "payment_method_id": "paypal_1"},
      {"transaction_type": "refund", "amount": 50.0, "payment_method_id": "gift_card_1"}]
  assert shop.users["ann_lee_1"].payment_methods["gift_card_1"].balance == 60.0
  assert refused(shop, "modify_pending_order_payment", order_id="#W2",
                 payment_method_id="credit_card_1") == (
      "There should be exactly one payment for a pending order")


def test_modify_user_address(shop):
  user = json.loads(ok(shop, "modify_user_address", user_id="bob_ray_2", **_address("94105")))
  assert user["address"]["zip"] == "94105" and shop.users["bob_ray_2"].address.zip == "94105"
  assert refused(shop, "modify_user_address", user_id="bob", **_address("1")) == "User not found"


def test_return_to_the_original_method_or_a_gift_card(shop):
  def ret(items, method, order="#W3"):
    return dict(order_id=order, item_ids=items, payment_method_id=method)

  assert refused(shop, "return_delivered_order_items", **ret([BLUE], "paypal_1", "#W1")) == (
      "Non-delivered order cannot be returned")
  assert refused(shop, "return_delivered_order_items", **ret([BLUE], "credit_card_1")) == (
      "Payment method should be the original payment method")
  assert refused(shop, "return_delivered_order_items", **ret([BLUE] * 3, "paypal_1")) == (
      "Some item not found")
  order = json.loads(ok(shop, "return_delivered_order_items",
                        **ret([SMALL, BLUE, BLUE], "gift_card_1")))
  assert order["status"] == "return requested"
  assert order["return_items"] == sorted([SMALL, BLUE, BLUE])
  assert order["return_payment_method_id"] == "gift_card_1"
  assert refused(shop, "return_delivered_order_items", **ret([BLUE], "paypal_1")) == (
      "Non-delivered order cannot be returned")


def test_exchange(shop):
  def exchange(items, new, method="paypal_1", order="#W3"):
    return dict(order_id=order, item_ids=items, new_item_ids=new, payment_method_id=method)

  assert refused(shop, "exchange_delivered_order_items", **exchange([BLUE], [RED], order="#W1")
                 ) == "Non-delivered order cannot be exchanged"
  assert refused(shop, "exchange_delivered_order_items", **exchange([SMALL, SMALL], [BIG, BIG])
                 ) == f"Number of {SMALL} not found."
  assert refused(shop, "exchange_delivered_order_items", **exchange([BLUE], [])) == (
      "The number of items to be exchanged should match.")
  assert refused(shop, "exchange_delivered_order_items", **exchange([BLUE], [BIG])) == (
      "Variant not found")
  assert refused(shop, "exchange_delivered_order_items",
                 **exchange([BLUE, BLUE, SMALL], [RED, RED, BIG], "gift_card_1")) == (
      "Insufficient gift card balance to pay for the price difference")
  order = json.loads(ok(shop, "exchange_delivered_order_items",
                        **exchange([SMALL, BLUE], [BIG, RED])))
  assert order["status"] == "exchange requested"
  assert order["exchange_items"] == sorted([SMALL, BLUE])
  assert order["exchange_new_items"] == sorted([BIG, RED])
  assert order["exchange_price_difference"] == 20.0
  assert order["items"][0]["item_id"] == BLUE  # Items change when the old ones come back.
  assert refused(shop, "exchange_delivered_order_items", **exchange([BLUE], [RED])) == (
      "Non-delivered order cannot be exchanged")  # Only once.


def test_calculate_and_transfer(shop):
  assert ok(shop, "calculate", expression="2 + 2") == "4.0"
  assert ok(shop, "calculate", expression="(55.0 - 50.0) * 3 / 4") == "3.75"
  assert ok(shop, "calculate", expression="-(1.005 + 2) // 1") == "-4.0"
  assert refused(shop, "calculate", expression="__import__('os')") == (
      "Invalid characters in expression")
  assert refused(shop, "calculate", expression="1 / 0") == "division by zero"
  assert refused(shop, "calculate", expression="2 * (3") == (
      "'(' was never closed (<string>, line 1)")
  assert refused(shop, "calculate", expression="9 ** 9 ** 9") == "Exponent too large"
  assert ok(shop, "transfer_to_human_agents", summary="wants a refund in cash") == (
      tools.TRANSFER_RESULT)


def test_price_differences_exchange_rounds_and_modify_items_records_unrounded(shop):
  """τ²: exchange keeps the difference to cents; modify_items records the raw float sum."""
  shop.products[SHIRT].variants[RED].price = 50.1
  order = json.loads(ok(shop, "exchange_delivered_order_items", order_id="#W3", item_ids=[BLUE],
                        new_item_ids=[RED], payment_method_id="paypal_1"))
  assert order["exchange_price_difference"] == 0.1
  order = json.loads(ok(shop, "modify_pending_order_items", order_id="#W2", item_ids=[BLUE],
                        new_item_ids=[RED], payment_method_id="gift_card_1"))
  assert order["payment_history"][-1]["amount"] == 50.1 - 50.0 != 0.1
  assert shop.users["ann_lee_1"].payment_methods["gift_card_1"].balance == 9.9
