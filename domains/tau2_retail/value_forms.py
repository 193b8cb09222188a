"""How a customer writes the values of a wish: items with their options, option wishes,
addresses, payment methods, digits and emails, each in a few forms a phrasing family picks from.

Every form keeps the value itself as the database holds it (an option value, a street, a gift
card id), so the agent (reading.py) can find it again; only the words around it change. Two
things a person leaves out, a form never does: the key of an option whose value says nothing on
its own (`needs_key`: yes / no / none, a bare number, a one- or two-letter size) or that another
key of the same item could hold (a frame color beside a lens color), and the separator between
two items (`, ` or ` and ` or `; `, never inside the words before an item's name). The spelled
forms (digits word by word, an email with " at " and " dot ") change the value's writing and
are only for held-out families (family_split.json).
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

import numpy as np

from domains.tau2_retail import phrases

Rng = np.random.Generator
Options = Mapping[str, str]
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
WEAK_VALUES = ("yes", "no", "none")
_DIGIT = "|".join(DIGIT_WORDS)
# The spelled forms as they occur in text: four or more digit words in a row, an email spelled.
SPELLED_DIGITS = re.compile(rf"\b(?:{_DIGIT})(?:[\s,-]+(?:{_DIGIT})\b){{3,}}", re.I)
SPELLED_EMAIL = re.compile(r"\b([\w+-]+(?: dot [\w+-]+)*) at ([\w-]+(?: dot [\w-]+)+)\b")


def pick(rng: Rng, options: Sequence[str]) -> str:
  return options[rng.integers(len(options))]


# Digits, emails and names.

def as_is(value: str, rng: Rng) -> str:
  del rng
  return value


def spelled_digits(value: str, rng: Rng) -> str:
  """`28236` -> `two eight two three six` (held-out families only)."""
  del rng
  return " ".join(DIGIT_WORDS[int(d)] for d in value)


def spelled_email(email: str, rng: Rng) -> str:
  """`mei.kovacs@example.com` -> `mei dot kovacs at example dot com` (held out)."""
  del rng
  local, _, domain = email.partition("@")
  return f"{local.replace('.', ' dot ')} at {domain.replace('.', ' dot ')}"


def lower(value: str, rng: Rng) -> str:
  del rng
  return value.lower()


# Options.

def says_nothing_alone(value: str) -> bool:
  """yes / no / none, a bare number, a one- or two-letter value (a size, a resolution)."""
  return value.lower() in WEAK_VALUES or value.isdigit() or len(value) <= 2


def needs_key(key: str, value: str, options: Options) -> bool:
  """Whether `value` must be said with its key among an item's `options` (module docstring)."""
  if says_nothing_alone(value):
    return True
  last = key.split()[-1]
  if any(k != key and k.split()[-1] == last for k in options):
    return True
  return sum(v == value for v in options.values()) > 1


def keyed(key: str, value: str, rng: Rng, forms: Sequence[str] = ("{k} {v}", "{k}: {v}")) -> str:
  return pick(rng, forms).format(k=key, v=value)


def split_options(options: Options, item_options: Options) -> tuple[list[str], list[tuple]]:
  """(values said bare, (key, value) pairs said with their key)."""
  bare, with_key = [], []
  for key, value in options.items():
    if needs_key(key, value, item_options):
      with_key.append((key, value))
    else:
      bare.append(value)
  return bare, with_key


# Items and lists of them.

def template_item(name: str, options: Options, rng: Rng) -> str:
  del rng
  return phrases.item_text(name, options)


def casual_item(name: str, options: Options, rng: Rng) -> str:
  """`my blue cotton t-shirt in size M`: values before the name, keyed ones after it."""
  bare, with_key = split_options(options, options)
  text = " ".join([pick(rng, ("my", "the")), *bare, name.lower()])
  if with_key:
    text += pick(rng, (" in ", ", ")) + phrases.join([keyed(k, v, rng, ("{k} {v}",))
                                                      for k, v in with_key])
  return text


def formal_item(name: str, options: Options, rng: Rng) -> str:
  """`the Water Bottle with capacity 750ml and color red`: every option with its key."""
  said = [pick(rng, ("{k} {v}", "{k} of {v}")).format(k=k, v=v) for k, v in options.items()]
  return f"the {name} with {phrases.join(said)}"


def listing_item(name: str, options: Options, rng: Rng) -> str:
  """`Water Bottle (750ml / red / size: M)` or `Water Bottle: 750ml, red, size: M`."""
  bare, with_key = split_options(options, options)
  parts = bare + [keyed(k, v, rng, ("{k}: {v}",)) for k, v in with_key]
  return pick(rng, (f"{name} ({' / '.join(parts)})", f"{name}: {', '.join(parts)}"))


def spoken_item(name: str, options: Options, rng: Rng) -> str:
  """`the t-shirt that's blue, cotton and size M`."""
  bare, with_key = split_options(options, options)
  parts = bare + [keyed(k, v, rng, ("{k} {v}",)) for k, v in with_key]
  how = pick(rng, ("that is", "that comes in", "in"))
  return f"the {name.lower()} {how} {phrases.join(parts)}"


def reasons_item(name: str, options: Options, rng: Rng) -> str:
  """`the Water Bottle in 750ml and red that I bought for my commute`."""
  bare, with_key = split_options(options, options)
  parts = bare + [keyed(k, v, rng, ("{k} {v}",)) for k, v in with_key]
  why = pick(rng, ("that I bought for my commute", "that I picked for my weekends",
                   "that I chose as a gift", "that I got for travelling"))
  return f"the {name} in {phrases.join(parts)} {why}"


def behalf_item(name: str, options: Options, rng: Rng) -> str:
  """`her Water Bottle (capacity 750ml, color red)`."""
  parts = [keyed(k, v, rng, ("{k} {v}", "{v} {k}")) for k, v in options.items()]
  return f"{pick(rng, ('her', 'his'))} {name} ({', '.join(parts)})"


def items_text(item: Callable[[str, Options, Rng], str], joiner: str = "and"
               ) -> Callable[[Sequence[tuple[str, Options]], Rng], str]:
  """Items joined as `a, b and c` (joiner "and") or `a; b; c` (joiner ";")."""
  def render(items: Sequence[tuple[str, Options]], rng: Rng) -> str:
    said = [item(name, options, rng) for name, options in items]
    return "; ".join(said) if joiner == ";" else phrases.join(said)
  return render


# Orders named by their products.

def template_order(names: Sequence[str], rng: Rng) -> str:
  del rng
  return "my pending order with " + phrases.join([f"the {n}" for n in names])


def order_text(heads: Sequence[str], lowercase: bool = False, article: Sequence[str] = ("the",),
               joiner: str = "and") -> Callable[[Sequence[str], Rng], str]:
  """`HEAD the A and the B`, one of `heads` drawn; names lower-cased when `lowercase`."""
  def render(names: Sequence[str], rng: Rng) -> str:
    said = [" ".join(filter(None, [pick(rng, article), n.lower() if lowercase else n]))
            for n in names]
    listed = ", ".join(said) if joiner == "," else phrases.join(said)
    return f"{pick(rng, heads)} {listed}"
  return render


# Option wishes.

def template_options(changes: Options, item_options: Options, rng: Rng) -> str:
  del item_options, rng
  return phrases.pairs_text(changes)


def options_text(bare_forms: Sequence[str] = ("{v}",), key_forms: Sequence[str] = ("{k} {v}",),
                 joiner: str = "and", always_key: bool = False
                 ) -> Callable[[Options, Options, Rng], str]:
  """Each changed option bare (when it may be, unless `always_key`) or with its key, joined."""
  def render(changes: Options, item_options: Options, rng: Rng) -> str:
    said = [keyed(k, v, rng, key_forms) if always_key or needs_key(k, v, item_options)
            else pick(rng, bare_forms).format(v=v) for k, v in changes.items()]
    return "; ".join(said) if joiner == ";" else phrases.join(said)
  return render


# Addresses (fields named as the tools name them).

def template_address(address: Mapping[str, str], rng: Rng) -> str:
  del rng
  return phrases.address_pairs(address)


def postal_address(zip_form: Callable[[str, Rng], str] = as_is, separator: str = " ",
                   zip_label: Sequence[str] = ("",)) -> Callable[[Mapping[str, str], Rng], str]:
  """`986 Sunset Drive, Suite 259, Denver, CO 80279, USA` (no apartment: left out);
  `separator` between the state and the zip, `zip_label` before the zip."""
  def render(address: Mapping[str, str], rng: Rng) -> str:
    zip_code = zip_form(address["zip"], rng)
    lines = [address["address1"], address["address2"], address["city"]]
    state_zip = f"{address['state']}{separator}{pick(rng, zip_label)}{zip_code}"
    return ", ".join([line for line in lines if line] + [state_zip, address["country"]])
  return render


def labelled_address(address: Mapping[str, str], rng: Rng) -> str:
  """`Street: ...; Apt: ...; City: ...; State: ...; Zip: ...; Country: ...`."""
  labels = (("address1", ("Street",)), ("address2", ("Apt", "Unit")), ("city", ("City",)),
            ("state", ("State",)), ("zip", ("Zip", "Postcode")), ("country", ("Country",)))
  return "; ".join(f"{pick(rng, names)}: {address[field] or phrases.NO_APARTMENT}"
                   for field, names in labels)


# Payment methods: (source, key) as phrases.parse_payment reads a profile's description.

def template_method(source: str, key: str, rng: Rng) -> str:
  del rng
  if source == "original":
    return phrases.ORIGINAL_PAYMENT
  return phrases.describe_payment(source, key, key)


def method_text(card: Sequence[str], paypal: Sequence[str], gift: Sequence[str],
                original: Sequence[str], digits: Callable[[str, Rng], str] | None = None
                ) -> Callable[[str, str, Rng], str]:
  """A method in one of the forms given per source; `{key}`: the last four or the card id."""
  forms = {"credit_card": card, "paypal": paypal, "gift_card": gift, "original": original}

  def render(source: str, key: str, rng: Rng) -> str:
    shown = digits(key, rng) if digits and source == "credit_card" else key
    return pick(rng, forms[source]).format(key=shown)
  return render

