"""One scripted customer's way of speaking: its phrasing family's words at its style's length,
with the style's small talk, drawn from the customer's own generator.

users.ScriptedCustomer decides what to say (which identity, which wish, yes or no); a Voice
decides the words. The default voice (family `template`, style `answer_only`) says exactly what
the original scripted customer said, whatever its generator.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from data_pipelines.airdialogue import phrase_grammar
from domains.tau2_retail import customer_families, customer_styles, phrases
from domains.tau2_retail import value_forms as vf

ENDINGS = ("done", "nothing_else", "no_more_details", "thanks_transfer")  # Followed by STOP.


def _sentence(text: str) -> str:
  return text if text[-1:] in ".!?" else text + "."


class Voice:
  """The words of one customer (module docstring)."""

  def __init__(self, family: str = customer_families.DEFAULT_FAMILY,
               style: str = customer_styles.DEFAULT_STYLE,
               rng: np.random.Generator | None = None):
    self.family = customer_families.FAMILIES[family]
    self.style = customer_styles.STYLES[style]
    self.rng = rng if rng is not None else np.random.default_rng(0)

  def _words(self, part: str, **fields: str) -> str:
    return self.family.say(part, self.style.verbosity, self.rng, **fields)

  def _chat(self, text: str) -> str:
    """Small talk after the answer, a lead-in before it (chatty styles)."""
    p, rng = self.style.small_talk_p, self.rng
    if p and rng.random() < p:
      talk = phrase_grammar.expand(vf.pick(rng, customer_styles.SMALL_TALK), rng)
      text = f"{_sentence(text)} {talk}"
    if p and rng.random() < p / 2:
      text = f"{vf.pick(rng, customer_styles.LEAD_INS)} {text}"
    return text

  def say(self, part: str, **fields: str) -> str:
    return self._chat(self._words(part, **fields))

  def ending(self, part: str) -> str:
    """One of ENDINGS, then phrases.STOP."""
    return f"{self.say(part)} {phrases.STOP}"

  # What the customer states.

  def identity(self, email: str | None = None, first_name: str | None = None,
               last_name: str | None = None, zip: str | None = None) -> str:
    return self._chat(self._identity(email, first_name, last_name, zip))

  def _identity(self, email: str | None = None, first_name: str | None = None,
                last_name: str | None = None, zip: str | None = None) -> str:
    family, rng = self.family, self.rng
    if email is not None:
      return self._words("email", email=family.email(email, rng))
    return self._words("name_zip", first=family.person(first_name, rng),
                       last=family.person(last_name, rng), zip=family.zip(zip, rng))

  def _wish(self, kind: str, names: Sequence[str],
            items: Sequence[tuple[str, Mapping[str, str]]]) -> str:
    fields = {}
    if "order" in customer_families.PARTS[kind]:
      fields["order"] = self.family.order(names, self.rng)
    if "items" in customer_families.PARTS[kind]:
      fields["items"] = self.family.items(items, self.rng)
    return self._words(kind, **fields)

  def wish(self, kind: str, names: Sequence[str] = (),
           items: Sequence[tuple[str, Mapping[str, str]]] = (), later: bool = False) -> str:
    """A wish; `later`: after the first one (a family may start it with "also")."""
    text = self._wish(kind, names, items)
    if later:
      text = f"{self._words('also')} {text}".strip()
    return self._chat(text)

  def opening(self, identity: Mapping[str, str] | None, kind: str, names: Sequence[str] = (),
              items: Sequence[tuple[str, Mapping[str, str]]] = ()) -> str:
    """A volunteering customer's first turn: a hello, its identity, its first wish."""
    said = [self._words("hello")]
    if identity is not None:
      said.append(self._identity(**identity))
    said.append(self._wish(kind, names, items))
    return self._chat(" ".join(_sentence(s) for s in said[:-1]) + " " + said[-1])

  # What the customer answers.

  def new_options(self, changes: Mapping[str, str], item_options: Mapping[str, str]) -> str:
    if not changes:
      return self.say("same_options")
    return self.say("new_options", options=self.family.options(changes, item_options, self.rng))

  def address(self, address: Mapping[str, str]) -> str:
    return self.say("address", address=self.family.address(address, self.rng))

  def payment(self, description: str) -> str:
    """`description`: as a profile holds it (phrases.describe_payment, or the original one)."""
    source, key = phrases.parse_payment(description)
    return self.say("payment", method=self.family.method(source, key, self.rng))

  def reason(self, reason: str) -> str:
    return self.say(reason)

  def order_id(self, order_id: str) -> str:
    return self.say("order_id", order_id=order_id)

  def dont_know(self, unknown_info: str | None) -> str:
    return f"{self.say('dont_know')} {unknown_info or ''}".strip()
