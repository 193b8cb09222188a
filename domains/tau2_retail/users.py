"""A scripted customer built from a task's structured parts.

Its private context (`Profile`) is made from the task, never from free-text instructions:

  identities   from `known_info`: each email it mentions, then first name, last name and each
               zip code it mentions (a name read from "You are First Last", "Your name is ...",
               "called ...", or a user id like `mei_kovacs_8020`); tried in that order, the next
               one each time the agent cannot find the account.
  wishes       from the gold calls: each gold write (and transfer) that succeeds on the gold
               replay becomes one wish, in gold order, turned back into what a customer would
               say through the database as it stands before that call: the products of the
               order (cancel, address, payment), the items with their current options and the
               options that change (modify, exchange) or none (return), the payment method as
               the customer names it, the cancellation reason, the new address. A gold write
               that fails changes nothing, so it is no wish.
  unknown      `unknown_info` as written: what the customer says when asked what it lacks.
  style        how much it says (customer_styles.py), and
  family       how it words it (customer_families.py): a real task's customer the defaults
               (`answer_only`, `template`: the original fixed grammar), a generated task's drawn
               from its seed (generate.py); a party may make it speak in others (parties.py).

The customer answers what it is asked (phrases.question_kind of the agent's last words; a
volunteering style states its identity and first wish in its opening), in its Voice's words
(voice.py): it states its next wish when asked what else it needs, says yes to a confirmation
only when the agent's summary names its order and items (and no to a wish that `declines`: a
generated task's customer who changes its mind, generate.py), and ends with phrases.STOP when no
wish is left.
Wishes conditioned on the dialogue ("if the agent asks twice, ...") are already resolved in
the gold calls, so this customer always wants their outcome.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

import numpy as np

from data_pipelines.dialogue import Turn
from domains.tau2_retail import customer_families, customer_styles
from domains.tau2_retail import db as db_lib
from domains.tau2_retail import phrases, snapshot, tasks, tools, turns, voice

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_NAME = re.compile(r"(?:You are|You're|[Yy]our? name is|called)\s+([A-Z][a-z]+)\s+([A-Z][a-z]+)")
_USER_ID = re.compile(r"\b([a-z]+)_([a-z]+)_\d+\b")


@dataclasses.dataclass(frozen=True)
class Identity:
  """An email, or a first name, last name and zip code."""

  email: str | None = None
  first_name: str | None = None
  last_name: str | None = None
  zip: str | None = None

  def fields(self) -> dict[str, str]:
    """The parts it has, by name (voice.Voice.identity's arguments)."""
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

  def text(self) -> str:
    """In the original wording (what a model of the customer reads in its profile)."""
    if self.email is not None:
      return phrases.email_text(self.email)
    return phrases.name_zip_text(self.first_name, self.last_name, self.zip)


@dataclasses.dataclass(frozen=True)
class Change:
  """One item as the customer names it; `new_options`: the options it wants changed (None for
  a return)."""

  name: str
  options: Mapping[str, str]
  new_options: Mapping[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class Wish:
  kind: str  # One of phrases.WISH_TOOLS.
  order_id: str | None = None
  names: tuple[str, ...] = ()  # The order's products, for an order-level wish.
  changes: tuple[Change, ...] = ()  # For an item-level wish.
  payment: str | None = None  # As the customer says it (phrases.describe_payment).
  reason: str | None = None
  address: Mapping[str, str] | None = None
  declines: bool = False  # Says no when asked to confirm (generated tasks; no gold write).

  @property
  def items(self) -> list[tuple[str, Mapping[str, str]]]:
    return [(c.name, c.options) for c in self.changes]

  def statement(self) -> str:
    """In the original wording (profiles, generated tasks' reason for calling)."""
    return phrases.wish_text(self.kind, self.names, self.items)


@dataclasses.dataclass(frozen=True)
class Profile:
  task_id: str
  identities: tuple[Identity, ...]
  wishes: tuple[Wish, ...]
  unknown_info: str | None = None
  style: str = customer_styles.DEFAULT_STYLE
  family: str = customer_families.DEFAULT_FAMILY

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, obj: Mapping[str, Any]) -> "Profile":
    wishes = tuple(Wish(**{**w, "names": tuple(w["names"]),
                           "changes": tuple(Change(**c) for c in w["changes"])})
                   for w in obj["wishes"])
    return cls(obj["task_id"], tuple(Identity(**i) for i in obj["identities"]), wishes,
               obj.get("unknown_info"), obj.get("style", customer_styles.DEFAULT_STYLE),
               obj.get("family", customer_families.DEFAULT_FAMILY))


def identities(known_info: str) -> tuple[Identity, ...]:
  """The identities `known_info` gives, emails first (the policy's default lookup)."""
  out = [Identity(email=e.rstrip(".")) for e in _EMAIL.findall(known_info)]
  name = _NAME.search(known_info) or _USER_ID.search(known_info)
  if name:
    first, last = name[1].capitalize(), name[2].capitalize()
    out += [Identity(first_name=first, last_name=last, zip=z)
            for z in re.findall(r"(?<![\d.@])\d{5}(?![\d@])", known_info)]
  return tuple(out)


def _payment(user: db_lib.User, method_id: str, original: str | None = None) -> str:
  if method_id == original:
    return phrases.ORIGINAL_PAYMENT
  method = user.payment_methods[method_id]
  return phrases.describe_payment(method.source, method.id, method.last_four)


def _changes(database: db_lib.Database, order: db_lib.Order, item_ids: Sequence[str],
             new_item_ids: Sequence[str] | None) -> tuple[Change, ...]:
  out = []
  for i, item_id in enumerate(item_ids):
    item = next(it for it in order.items if it.item_id == item_id)
    new_options = None
    if new_item_ids is not None:
      found = database.find_item(new_item_ids[i])
      variant_options = found[1].options if found else {}
      new_options = {k: v for k, v in variant_options.items() if item.options.get(k) != v}
    out.append(Change(item.name, dict(item.options), new_options))
  return tuple(out)


def wish_of(database: db_lib.Database, action: tasks.Action) -> Wish | None:
  """What the customer says it wants for one gold write, read from the state before it."""
  kind = next((k for k, name in phrases.WISH_TOOLS.items() if name == action.name), None)
  args = action.arguments
  if kind == phrases.TRANSFER:
    return Wish(kind)
  if kind == phrases.USER_ADDRESS:
    return Wish(kind, address={k: v for k, v in args.items() if k != "user_id"})
  if kind is None or args.get("order_id") not in database.orders:
    return None
  order = database.orders[args["order_id"]]
  user = database.users[order.user_id]
  names = tuple(dict.fromkeys(item.name for item in order.items))
  original = order.payment_history[0].payment_method_id
  if kind == phrases.CANCEL:
    return Wish(kind, order.order_id, names, reason=args["reason"])
  if kind == phrases.ORDER_ADDRESS:
    return Wish(kind, order.order_id, names,
                address={k: v for k, v in args.items() if k != "order_id"})
  if kind == phrases.ORDER_PAYMENT:
    return Wish(kind, order.order_id, names, payment=_payment(user, args["payment_method_id"]))
  changes = _changes(database, order, args["item_ids"], args.get("new_item_ids"))
  payment = _payment(user, args["payment_method_id"],
                     original if kind == phrases.RETURN else None)
  return Wish(kind, order.order_id, changes=changes, payment=payment)


def profile(task: tasks.Task, frozen: snapshot.Snapshot) -> Profile:
  """The customer's context for `task`: identities, wishes (see the module docstring)."""
  database = frozen.fresh()
  wishes = []
  for action in task.actions:
    wanted = action.writes or action.name == phrases.WISH_TOOLS[phrases.TRANSFER]
    wish = wish_of(database, action) if wanted else None
    if tools.call(database, action.name, action.arguments).ok and wish is not None:
      wishes.append(wish)
  return Profile(task.task_id, identities(task.scenario.known_info or ""), tuple(wishes),
                 task.scenario.unknown_info)


class ScriptedCustomer:
  """Plays one dialogue as the customer of `profile`; `respond` sees the whole history.

  It speaks in the profile's style and family unless given others; `rng` draws its words."""

  def __init__(self, profile_: Profile, rng: np.random.Generator | None = None, *,
               style: str | None = None, family: str | None = None):
    self.profile = profile_
    self.voice = voice.Voice(family or profile_.family, style or profile_.style, rng)
    self._identity = 0  # The next identity to give.
    self._wish = -1  # The wish last stated.
    self._asked: dict[tuple[str, str], int] = {}  # New-options questions per item, this wish.

  @property
  def wish(self) -> Wish | None:
    wishes = self.profile.wishes
    return wishes[self._wish] if 0 <= self._wish < len(wishes) else None

  def _next_wish(self) -> str:
    self._wish += 1
    self._asked = {}
    if self.wish is None:
      return self.voice.ending("done")
    return self.voice.wish(self.wish.kind, self.wish.names, self.wish.items,
                           later=self._wish > 0)

  def _opening(self) -> str:
    """The first turn: the first wish, with the first identity when the style volunteers."""
    wishes, identities = self.profile.wishes, self.profile.identities
    if not (self.voice.style.volunteers and wishes):
      return self._next_wish()
    self._wish = 0
    identity = identities[0].fields() if identities else None
    self._identity = 1 if identities else 0
    return self.voice.opening(identity, wishes[0].kind, wishes[0].names, wishes[0].items)

  def _new_options(self, agent_text: str) -> str:
    items = phrases.parse_items(agent_text)
    if not items or self.wish is None:
      return self.voice.say("which_item")
    name, options = items[0]
    key = (name, phrases.pairs_text(options))
    k = self._asked.get(key, 0)
    self._asked[key] = k + 1
    matching = [c for c in self.wish.changes if c.name == name and dict(c.options) == options]
    if not matching:
      return self.voice.say("not_that_item")
    change = matching[min(k, len(matching) - 1)]
    return self.voice.new_options(change.new_options or {}, change.options)

  def _confirm(self, agent_text: str) -> str:
    wish = self.wish
    if wish is None:
      return self.voice.say("no")
    if wish.declines:
      return self.voice.say("decline")
    named = [wish.order_id] if wish.order_id else []
    named += [c.name for c in wish.changes]
    return self.voice.say("yes" if all(n in agent_text for n in named) else "no")

  def respond(self, history: Sequence[Turn]) -> str:
    said = next((turns.parse_agent_turn(t.text).speech for t in reversed(history)
                 if t.speaker == turns.AGENT), "")
    kind = phrases.question_kind(said)
    wish = self.wish
    if kind == "greeting":  # The first time: the first wish; later: the current one again.
      if self._wish < 0:
        return self._opening()
      if wish is None:
        return self.voice.ending("nothing_else")
      return self.voice.wish(wish.kind, wish.names, wish.items)
    if kind in ("identity", "identity_retry"):
      if self._identity >= len(self.profile.identities):
        return self.voice.ending("no_more_details")
      self._identity += 1
      return self.voice.identity(**self.profile.identities[self._identity - 1].fields())
    if kind == "anything_else":
      return self._next_wish()
    if kind == "transfer":
      return self.voice.ending("thanks_transfer")
    if kind == "confirm":
      return self._confirm(said)
    if kind == "new_options":
      return self._new_options(said)
    if wish is not None:
      if kind == "payment" and wish.payment:
        return self.voice.payment(wish.payment)
      if kind == "reason" and wish.reason:
        return self.voice.reason(wish.reason)
      if kind == "address" and wish.address:
        return self.voice.address(wish.address)
      if kind == "order_id" and wish.order_id:
        return self.voice.order_id(wish.order_id)
    return self.voice.dont_know(self.profile.unknown_info)
