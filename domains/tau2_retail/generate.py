"""Synthetic retail tasks from the same database, as many as wanted, each from its own seed.

The 114 real tasks stay for evaluation; training corpora are played on these. Task i of seed s
is drawn from `default_rng([s, i])` (the first n of a seed are the same for any n):

  customer   a user of the shop, who knows its email or its name and zip code (`known_info`,
             read back by users.identities)
  intents    one, or two on different orders (`second_intent`), each of the kinds a customer
             may want (phrases: cancel, modify items, order address, order payment, return,
             exchange, default address), on an order in the status the policy allows (pending
             for cancel and modify, delivered for return and exchange)
  details    by the policy's rules: a cancellation reason of the two allowed; a new item an
             available other variant of the same product (one item for a modify, one or two
             for a return or an exchange); a payment method of the user's (for a return the
             original one or a gift card); a new address another user's
  gold       the lookups an agent needs, then each intent's write call; a draw whose write the
             tools refuse (a gift card that cannot pay) is drawn again
  declines   with probability `decline_rate` the customer changes its mind at the
             confirmation: the intent has no gold write, and its wish says so
             (users.Wish.declines), so an agent that writes without a yes misses the gold
  communicate  the refund of a cancel (the order's payments) and of a return (the items'
             prices), as amounts with two decimals: what the policy has the agent tell
  voice      the customer's style (customer_styles.STYLES) and phrasing family, among the
             training families only (family_split.json), drawn from `default_rng([s, i, 1])`,
             apart from the task's own draws, so a task is the same whatever its voice

The customer's profile is built as users.profile builds it for a real task (each wish read off
the database before its write); for a task without a declined intent the two are equal.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from domains.tau2_retail import customer_styles
from domains.tau2_retail import db as db_lib
from domains.tau2_retail import family_split, phrases, snapshot, tasks, tools, users

SPLIT = "generated"
KINDS = (phrases.CANCEL, phrases.MODIFY_ITEMS, phrases.ORDER_ADDRESS, phrases.ORDER_PAYMENT,
         phrases.RETURN, phrases.EXCHANGE, phrases.USER_ADDRESS)
STATUS = {phrases.CANCEL: "pending", phrases.MODIFY_ITEMS: "pending",
          phrases.ORDER_ADDRESS: "pending", phrases.ORDER_PAYMENT: "pending",
          phrases.RETURN: "delivered", phrases.EXCHANGE: "delivered"}
_ADDRESS_FIELDS = ("address1", "address2", "city", "state", "country", "zip")
_MAX_DRAWS = 50
_VOICE_STREAM = 1  # default_rng([seed, index, _VOICE_STREAM]) draws the customer's voice.


@dataclasses.dataclass(frozen=True)
class Generated:
  """A generated task and its customer's profile (which holds what the gold cannot: a wish the
  customer declines)."""

  task: tasks.Task
  profile: users.Profile


def _action(task_id: str, k: int, name: str, **arguments: Any) -> tasks.Action:
  return tasks.Action(f"{task_id}_{k}", name, arguments)


def _pick(rng: np.random.Generator, values: list[Any]) -> Any:
  return values[rng.integers(len(values))]


class Generator:
  """Draws tasks from one frozen database (module docstring)."""

  def __init__(self, frozen: snapshot.Snapshot, *, decline_rate: float = 0.2,
               second_intent: float = 0.3):
    self.frozen = frozen
    self.decline_rate, self.second_intent = decline_rate, second_intent
    database = frozen.fresh()
    self._users = sorted(database.users)
    self._by_status: dict[str, list[str]] = {}
    for order_id in sorted(database.orders):
      self._by_status.setdefault(database.orders[order_id].status, []).append(order_id)

  def tasks(self, seed: int, num: int) -> list[Generated]:
    return [self.task(seed, i) for i in range(num)]

  def task(self, seed: int, index: int) -> Generated:
    rng = np.random.default_rng([seed, index])
    task_id = f"gen{seed}_{index}"
    for _ in range(_MAX_DRAWS):
      drawn = self._draw(rng, task_id)
      if drawn is not None:
        return dataclasses.replace(drawn, profile=_voiced(drawn.profile, seed, index))
    raise RuntimeError(f"generate: task {task_id}: no valid draw in {_MAX_DRAWS} tries")

  def _draw(self, rng: np.random.Generator, task_id: str) -> Generated | None:
    database = self.frozen.fresh()
    kind = _pick(rng, KINDS)
    if kind == phrases.USER_ADDRESS:
      user, order = database.users[_pick(rng, self._users)], None
    else:
      order = database.orders[_pick(rng, self._by_status[STATUS[kind]])]
      user = database.users[order.user_id]
    intents = [(kind, order)]
    if rng.random() < self.second_intent:
      second = self._second(rng, database, user, kind, order)
      if second is not None:
        intents.append(second)
    by_email = rng.random() < 0.5
    known_info = (f"You are {user.name.first_name} {user.name.last_name}; your email is "
                  f"{user.email}." if by_email else
                  f"You are {user.name.first_name} {user.name.last_name} in zip code "
                  f"{user.address.zip}.")
    unknown_info = None if by_email else "You do not remember your email address."
    lookup = (_action(task_id, 0, "find_user_id_by_email", email=user.email) if by_email else
              _action(task_id, 0, "find_user_id_by_name_zip", first_name=user.name.first_name,
                      last_name=user.name.last_name, zip=user.address.zip))
    actions = [lookup, _action(task_id, 1, "get_user_details", user_id=user.user_id)]
    wishes, communicate = [], []
    for kind, order in intents:
      if order is not None:
        actions.append(_action(task_id, len(actions), "get_order_details",
                               order_id=order.order_id))
      write = self._write(rng, database, task_id, len(actions), kind, user, order)
      if write is None:
        return None
      wish = users.wish_of(database, write)
      if rng.random() < self.decline_rate:
        wishes.append(dataclasses.replace(wish, declines=True))
        continue
      refund = _refund(database, write)
      if not tools.call(database, write.name, write.arguments).ok:
        return None
      actions.append(write)
      wishes.append(wish)
      if refund is not None:
        communicate.append(f"{refund:.2f}")
    reason = " ".join(w.statement() + (" (You change your mind when asked to confirm.)"
                                       if w.declines else "") for w in wishes)
    scenario = tasks.Scenario(reason, known_info, unknown_info,
                              "Answer what you are asked; say yes to a correct summary.",
                              "retail")
    task = tasks.Task(task_id, SPLIT, scenario, tuple(actions), tuple(communicate), (),
                      ("DB", "COMMUNICATE"), purpose="generated")
    profile = users.Profile(task_id, users.identities(known_info), tuple(wishes), unknown_info)
    return Generated(task, profile)

  def _second(self, rng: np.random.Generator, database: db_lib.Database, user: db_lib.User,
              first: str, order: db_lib.Order | None) -> tuple[str, db_lib.Order | None] | None:
    """Another intent of the same user on another order (or its default address)."""
    kind = _pick(rng, KINDS)
    if kind == phrases.USER_ADDRESS:
      return None if first == kind else (kind, None)
    taken = order.order_id if order is not None else None
    candidates = [o for o in user.orders if o != taken and database.orders[o].status ==
                  STATUS[kind]]
    return (kind, database.orders[_pick(rng, candidates)]) if candidates else None

  def _write(self, rng: np.random.Generator, database: db_lib.Database, task_id: str, k: int,
             kind: str, user: db_lib.User, order: db_lib.Order | None) -> tasks.Action | None:
    """The intent's write call by the policy's rules, or None when the draw has none."""
    name = phrases.WISH_TOOLS[kind]
    methods = sorted(user.payment_methods)
    if kind == phrases.USER_ADDRESS:
      return _action(task_id, k, name, user_id=user.user_id, **self._address(rng, database,
                                                                            user.user_id))
    if kind == phrases.CANCEL:
      return _action(task_id, k, name, order_id=order.order_id,
                     reason=_pick(rng, list(db_lib.CANCEL_REASONS)))
    if kind == phrases.ORDER_ADDRESS:
      return _action(task_id, k, name, order_id=order.order_id,
                     **self._address(rng, database, user.user_id))
    current = order.payment_history[0].payment_method_id
    if kind == phrases.ORDER_PAYMENT:
      others = [m for m in methods if m != current]
      return _action(task_id, k, name, order_id=order.order_id,
                     payment_method_id=_pick(rng, others)) if others else None
    count = 1 if kind == phrases.MODIFY_ITEMS else int(rng.integers(1, 3))
    if count > len(order.items):
      return None
    positions = sorted(rng.choice(len(order.items), count, replace=False))
    item_ids = [order.items[p].item_id for p in positions]
    if kind == phrases.RETURN:
      gift_cards = [m for m in methods if user.payment_methods[m].is_gift_card]
      method = current if not gift_cards or rng.random() < 0.7 else _pick(rng, gift_cards)
      return _action(task_id, k, name, order_id=order.order_id, item_ids=item_ids,
                     payment_method_id=method)
    new_ids = []
    for p in positions:
      item = order.items[p]
      others = [v.item_id for v in database.products[item.product_id].variants.values()
                if v.available and v.item_id != item.item_id]
      if not others:
        return None
      new_ids.append(_pick(rng, others))
    return _action(task_id, k, name, order_id=order.order_id, item_ids=item_ids,
                   new_item_ids=new_ids, payment_method_id=_pick(rng, methods))

  def _address(self, rng: np.random.Generator, database: db_lib.Database,
               user_id: str) -> dict[str, str]:
    other = database.users[_pick(rng, [u for u in self._users if u != user_id])]
    return {field: getattr(other.address, field) for field in _ADDRESS_FIELDS}


def _voiced(profile: users.Profile, seed: int, index: int) -> users.Profile:
  """The profile with a style and a training family drawn for task `index` of `seed`."""
  rng = np.random.default_rng([seed, index, _VOICE_STREAM])
  families = family_split.SPLIT.train
  return dataclasses.replace(profile, style=customer_styles.draw(rng),
                             family=families[rng.integers(len(families))])


def _refund(database: db_lib.Database, write: tasks.Action) -> float | None:
  """What a cancel or a return gives back, read before the write; None for other writes."""
  if write.name == phrases.WISH_TOOLS[phrases.CANCEL]:
    order = database.orders[write.arguments["order_id"]]
    return sum(p.amount for p in order.payment_history)
  if write.name == phrases.WISH_TOOLS[phrases.RETURN]:
    order = database.orders[write.arguments["order_id"]]
    free = list(order.items)
    prices = []
    for item_id in write.arguments["item_ids"]:
      item = next(i for i in free if i.item_id == item_id)
      free.remove(item)
      prices.append(item.price)
    return sum(prices)
  return None
