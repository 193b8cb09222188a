"""The shop's database as typed dataclasses: products, users, orders.

Read once from db.json (a field of the wrong type, missing or unknown is an error naming the
file and the field's path, e.g. `db.json: orders['#W2611340'].items[0].price: expected a number,
got str`). Every episode mutates its own deep copy (snapshot.Snapshot.fresh), so the loaded
one stays as the file says. `state_hash` is the sha256 of the whole state as canonical JSON
(sorted keys, no spaces): two databases hash equal exactly when every field is equal, which is
how the reward compares an episode's database with the gold one.

`to_json` keeps τ²'s field order (its pydantic models' order, optional order fields included as
null), so a tool's result reads as τ²'s tools print it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
from typing import Any, MutableMapping

from data_pipelines import files
from domains.tau2_retail import json_fields, paths

ORDER_STATUSES = ("processed", "pending", "pending (item modified)", "delivered", "cancelled",
                  "exchange requested", "return requested")
CANCEL_REASONS = ("no longer needed", "ordered by mistake")
TRANSACTION_TYPES = ("payment", "refund")
GIFT_CARD, PAYPAL, CREDIT_CARD = "gift_card", "paypal", "credit_card"
# The fields each payment method source has, in τ²'s order.
PAYMENT_FIELDS = {GIFT_CARD: ("source", "id", "balance"), PAYPAL: ("source", "id"),
                  CREDIT_CARD: ("source", "id", "brand", "last_four")}
COLLECTIONS = ("products", "users", "orders")  # A Database's fields.


class DatabaseFormatError(json_fields.FormatError):
  """A db.json that cannot be read; the message names the file and the field."""


@dataclasses.dataclass
class Variant:
  item_id: str
  options: dict[str, str]
  available: bool
  price: float

  def to_json(self) -> dict[str, Any]:
    return {"item_id": self.item_id, "options": dict(self.options), "available": self.available,
            "price": self.price}


@dataclasses.dataclass
class Product:
  name: str
  product_id: str
  variants: dict[str, Variant]  # By item id.

  def to_json(self) -> dict[str, Any]:
    return {"name": self.name, "product_id": self.product_id,
            "variants": {k: v.to_json() for k, v in self.variants.items()}}


@dataclasses.dataclass
class UserName:
  first_name: str
  last_name: str

  def to_json(self) -> dict[str, Any]:
    return {"first_name": self.first_name, "last_name": self.last_name}


@dataclasses.dataclass
class Address:
  address1: str
  address2: str
  city: str
  country: str
  state: str
  zip: str

  def to_json(self) -> dict[str, Any]:
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclasses.dataclass
class PaymentMethod:
  """A gift card (with a balance), a PayPal account or a credit card (brand, last four)."""

  source: str  # One of PAYMENT_FIELDS.
  id: str
  balance: float | None = None
  brand: str | None = None
  last_four: str | None = None

  @property
  def is_gift_card(self) -> bool:
    return self.source == GIFT_CARD

  def to_json(self) -> dict[str, Any]:
    return {name: getattr(self, name) for name in PAYMENT_FIELDS[self.source]}


@dataclasses.dataclass
class User:
  user_id: str
  name: UserName
  address: Address
  email: str
  payment_methods: dict[str, PaymentMethod]  # By payment method id.
  orders: list[str]

  def to_json(self) -> dict[str, Any]:
    return {"user_id": self.user_id, "name": self.name.to_json(),
            "address": self.address.to_json(), "email": self.email,
            "payment_methods": {k: p.to_json() for k, p in self.payment_methods.items()},
            "orders": list(self.orders)}


@dataclasses.dataclass
class OrderItem:
  name: str
  product_id: str
  item_id: str
  price: float
  options: dict[str, str]

  def to_json(self) -> dict[str, Any]:
    return {"name": self.name, "product_id": self.product_id, "item_id": self.item_id,
            "price": self.price, "options": dict(self.options)}


@dataclasses.dataclass
class Fulfillment:
  tracking_id: list[str]
  item_ids: list[str]

  def to_json(self) -> dict[str, Any]:
    return {"tracking_id": list(self.tracking_id), "item_ids": list(self.item_ids)}


@dataclasses.dataclass
class Payment:
  transaction_type: str  # One of TRANSACTION_TYPES.
  amount: float
  payment_method_id: str

  def to_json(self) -> dict[str, Any]:
    return {"transaction_type": self.transaction_type, "amount": self.amount,
            "payment_method_id": self.payment_method_id}


@dataclasses.dataclass
class Order:
  """An order; the optional fields record what a write tool did to it."""

  order_id: str
  user_id: str
  address: Address
  items: list[OrderItem]
  status: str  # One of ORDER_STATUSES.
  fulfillments: list[Fulfillment]
  payment_history: list[Payment]
  cancel_reason: str | None = None
  exchange_items: list[str] | None = None
  exchange_new_items: list[str] | None = None
  exchange_payment_method_id: str | None = None
  exchange_price_difference: float | None = None
  return_items: list[str] | None = None
  return_payment_method_id: str | None = None

  def to_json(self) -> dict[str, Any]:
    return {
        "order_id": self.order_id, "user_id": self.user_id, "address": self.address.to_json(),
        "items": [i.to_json() for i in self.items], "status": self.status,
        "fulfillments": [f.to_json() for f in self.fulfillments],
        "payment_history": [p.to_json() for p in self.payment_history],
        "cancel_reason": self.cancel_reason,
        "exchange_items": _copy_list(self.exchange_items),
        "exchange_new_items": _copy_list(self.exchange_new_items),
        "exchange_payment_method_id": self.exchange_payment_method_id,
        "exchange_price_difference": self.exchange_price_difference,
        "return_items": _copy_list(self.return_items),
        "return_payment_method_id": self.return_payment_method_id,
    }


@dataclasses.dataclass
class Database:
  """The three collections, each a mapping by id: a dict, or an episode's snapshot.Records."""

  products: MutableMapping[str, Product]  # By product id.
  users: MutableMapping[str, User]  # By user id.
  orders: MutableMapping[str, Order]  # By order id.

  def to_json(self) -> dict[str, Any]:
    return {"products": {k: p.to_json() for k, p in self.products.items()},
            "users": {k: u.to_json() for k, u in self.users.items()},
            "orders": {k: o.to_json() for k, o in self.orders.items()}}

  def copy(self) -> "Database":
    """An independent deep copy (a collection may copy itself lazily: snapshot.Records)."""
    return Database(*(_copy_records(getattr(self, name)) for name in COLLECTIONS))

  def find_item(self, item_id: str) -> tuple[Product, Variant] | None:
    """The product and variant of an item id, or None."""
    for product in self.products.values():
      if item_id in product.variants:
        return product, product.variants[item_id]
    return None


def canonical_json(obj: Any) -> str:
  return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_text(db: Database) -> str:
  """`canonical_json(db.to_json())`, put together from each record's canonical text, so a
  collection that keeps its untouched records' texts (snapshot.Records) need not redo them."""
  parts = []
  for name in sorted(COLLECTIONS):
    records = getattr(db, name)
    items = (records.canonical_items() if hasattr(records, "canonical_items")
             else ((k, canonical_json(records[k].to_json())) for k in sorted(records)))
    body = ",".join(f"{canonical_json(key)}:{text}" for key, text in items)
    parts.append(f'"{name}":{{{body}}}')
  return "{" + ",".join(parts) + "}"


def state_hash(db: Database) -> str:
  """sha256 (hex) of the whole database as canonical JSON."""
  return hashlib.sha256(canonical_text(db).encode("utf-8")).hexdigest()


def _copy_records(records: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
  if isinstance(records, dict):
    return pickle.loads(pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL))
  return records.copy()  # A snapshot.Records copies itself.


def _copy_list(values: list[str] | None) -> list[str] | None:
  return None if values is None else list(values)


def _address(r: json_fields.Reader, value: Any, where: str) -> Address:
  fields = tuple(f.name for f in dataclasses.fields(Address))
  obj = r.record(value, where, fields)
  return Address(*(r.string(obj[k], f"{where}.{k}") for k in fields))


def _variant(r: json_fields.Reader, value: Any, where: str) -> Variant:
  obj = r.record(value, where, ("item_id", "options", "available", "price"))
  return Variant(r.string(obj["item_id"], f"{where}.item_id"),
                 r.string_map(obj["options"], f"{where}.options"),
                 r.boolean(obj["available"], f"{where}.available"),
                 r.number(obj["price"], f"{where}.price"))


def _product(r: json_fields.Reader, value: Any, where: str) -> Product:
  obj = r.record(value, where, ("name", "product_id", "variants"))
  return Product(r.string(obj["name"], f"{where}.name"),
                 r.string(obj["product_id"], f"{where}.product_id"),
                 r.keyed(obj["variants"], f"{where}.variants", "item_id",
                         lambda v, w: _variant(r, v, w)))


def _payment_method(r: json_fields.Reader, value: Any, where: str) -> PaymentMethod:
  if not isinstance(value, dict):
    raise r.fail(where, f"expected an object, got {type(value).__name__}")
  source = r.string(value.get("source"), f"{where}.source", tuple(PAYMENT_FIELDS))
  obj = r.record(value, where, PAYMENT_FIELDS[source])
  return PaymentMethod(
      source, r.string(obj["id"], f"{where}.id"),
      balance=r.number(obj["balance"], f"{where}.balance") if source == GIFT_CARD else None,
      brand=r.string(obj["brand"], f"{where}.brand") if source == CREDIT_CARD else None,
      last_four=r.string(obj["last_four"], f"{where}.last_four") if source == CREDIT_CARD
      else None)


def _user(r: json_fields.Reader, value: Any, where: str) -> User:
  obj = r.record(value, where,
                 ("user_id", "name", "address", "email", "payment_methods", "orders"))
  name = r.record(obj["name"], f"{where}.name", ("first_name", "last_name"))
  return User(
      r.string(obj["user_id"], f"{where}.user_id"),
      UserName(r.string(name["first_name"], f"{where}.name.first_name"),
               r.string(name["last_name"], f"{where}.name.last_name")),
      _address(r, obj["address"], f"{where}.address"),
      r.string(obj["email"], f"{where}.email"),
      r.keyed(obj["payment_methods"], f"{where}.payment_methods", "id",
              lambda v, w: _payment_method(r, v, w)),
      r.strings(obj["orders"], f"{where}.orders"))


def _order_item(r: json_fields.Reader, value: Any, where: str) -> OrderItem:
  obj = r.record(value, where, ("name", "product_id", "item_id", "price", "options"))
  return OrderItem(r.string(obj["name"], f"{where}.name"),
                   r.string(obj["product_id"], f"{where}.product_id"),
                   r.string(obj["item_id"], f"{where}.item_id"),
                   r.number(obj["price"], f"{where}.price"),
                   r.string_map(obj["options"], f"{where}.options"))


def _fulfillment(r: json_fields.Reader, value: Any, where: str) -> Fulfillment:
  obj = r.record(value, where, ("tracking_id", "item_ids"))
  return Fulfillment(r.strings(obj["tracking_id"], f"{where}.tracking_id"),
                     r.strings(obj["item_ids"], f"{where}.item_ids"))


def _payment(r: json_fields.Reader, value: Any, where: str) -> Payment:
  obj = r.record(value, where, ("transaction_type", "amount", "payment_method_id"))
  return Payment(r.string(obj["transaction_type"], f"{where}.transaction_type", TRANSACTION_TYPES),
                 r.number(obj["amount"], f"{where}.amount"),
                 r.string(obj["payment_method_id"], f"{where}.payment_method_id"))


_ORDER_OPTIONAL = tuple(f.name for f in dataclasses.fields(Order) if f.default is None)


def _order(r: json_fields.Reader, value: Any, where: str) -> Order:
  obj = r.record(value, where, ("order_id", "user_id", "address", "items", "status",
                                "fulfillments", "payment_history"), _ORDER_OPTIONAL)
  return Order(
      r.string(obj["order_id"], f"{where}.order_id"),
      r.string(obj["user_id"], f"{where}.user_id"),
      _address(r, obj["address"], f"{where}.address"),
      r.list_of(obj["items"], f"{where}.items", lambda v, w: _order_item(r, v, w)),
      r.string(obj["status"], f"{where}.status", ORDER_STATUSES),
      r.list_of(obj["fulfillments"], f"{where}.fulfillments", lambda v, w: _fulfillment(r, v, w)),
      r.list_of(obj["payment_history"], f"{where}.payment_history",
                lambda v, w: _payment(r, v, w)),
      cancel_reason=r.optional(obj, "cancel_reason", where,
                               lambda v, w: r.string(v, w, CANCEL_REASONS)),
      exchange_items=r.optional(obj, "exchange_items", where, r.strings),
      exchange_new_items=r.optional(obj, "exchange_new_items", where, r.strings),
      exchange_payment_method_id=r.optional(obj, "exchange_payment_method_id", where, r.string),
      exchange_price_difference=r.optional(obj, "exchange_price_difference", where, r.number),
      return_items=r.optional(obj, "return_items", where, r.strings),
      return_payment_method_id=r.optional(obj, "return_payment_method_id", where, r.string))


def from_json(obj: Any, path: str = paths.DB_FILE) -> Database:
  """A Database from parsed db.json; `path` names the file in errors."""
  r = json_fields.Reader(path, DatabaseFormatError)
  top = r.record(obj, "<top>", ("products", "users", "orders"))
  db = Database(
      r.keyed(top["products"], "products", "product_id", lambda v, w: _product(r, v, w)),
      r.keyed(top["users"], "users", "user_id", lambda v, w: _user(r, v, w)),
      r.keyed(top["orders"], "orders", "order_id", lambda v, w: _order(r, v, w)))
  for order_id, order in db.orders.items():
    if order.user_id not in db.users:
      raise r.fail(f"orders[{order_id!r}].user_id", f"{order.user_id!r} is not a user")
  return db


def load(data_dir: str | None = None) -> Database:
  """The database of `data_dir` (else $TAU2_RETAIL_DATA_DIR), as the file says.

  Episodes should not share it: wrap it in a snapshot.Snapshot, give each episode `fresh()`."""
  path = paths.data_file(paths.DB_FILE, data_dir)
  return from_json(files.read_json(path, DatabaseFormatError), path)
