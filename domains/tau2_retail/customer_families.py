"""How a scripted retail customer words its turns: phrasing families, apart from its style.

A family has a pattern for every part a customer says (PARTS), in the phrase grammar of
data_pipelines.airdialogue.phrase_grammar (`[a|b]` alternatives, `{field}` slots), plain and
optionally terse, and the value forms of value_forms.py it writes its items, orders, option
wishes, addresses, payment methods, emails, zip codes and names in. Parts combine, so a family
says one wish in many ways; values are kept as the database holds them (value_forms.py).

Training families (family_split.json), the habits a corpus should hold:
  template  the original fixed grammar (`the NAME (key: value)`, `key: value` lists)
  casual    lower case, contractions, options before the name, a one-line postal address
  formal    full sentences, every option with its key, postal address with a comma
  listing   form-like `Label: value` lines, last name first, options split by slashes

Held-out families, new in kind, for evaluation only (family_forms.py lists what only they say):
  spoken    dictated: zip codes and card digits word by word, the email with " at " / " dot ",
            fillers ("um", "uh")
  reasons   every wish and option with the reason behind it ("..., big enough for what I use
            it for"), cancellation reasons told as what happened
  on_behalf a relative speaking for the account holder ("I'm helping my mother, ...", "she")
"""

from __future__ import annotations

import dataclasses
import types
from typing import Callable, Mapping, Sequence

import numpy as np

from data_pipelines.airdialogue import phrase_grammar
from domains.tau2_retail import phrases
from domains.tau2_retail import value_forms as vf

# Every part a customer says, and the fields its patterns may use.
PARTS = types.MappingProxyType({
    "email": ("email",), "name_zip": ("first", "last", "zip"), "hello": (),
    phrases.CANCEL: ("order",), phrases.ORDER_ADDRESS: ("order",),
    phrases.ORDER_PAYMENT: ("order",), phrases.MODIFY_ITEMS: ("items",),
    phrases.USER_ADDRESS: (), phrases.RETURN: ("items",), phrases.EXCHANGE: ("items",),
    phrases.TRANSFER: (), "also": (), "new_options": ("options",), "same_options": (),
    "address": ("address",), "payment": ("method",), "no longer needed": (),
    "ordered by mistake": (), "order_id": ("order_id",), "yes": (), "no": (), "decline": (),
    "done": (), "nothing_else": (), "no_more_details": (), "thanks_transfer": (),
    "dont_know": (), "which_item": (), "not_that_item": (),
})
WISH_PARTS = tuple(phrases.WISH_TOOLS)  # The parts that state a wish (named by its kind).
DEFAULT_FAMILY = "template"

Patterns = Mapping[str, tuple[str, ...]]


@dataclasses.dataclass(frozen=True)
class CustomerFamily:
  """One way of wording a customer's turns (module docstring)."""

  name: str
  plain: Patterns  # Every part of PARTS.
  terse: Patterns  # Parts with shorter forms; the others are said plain.
  item: Callable  # (name, options, rng) -> text, one item of an order.
  items: Callable  # (list of (name, options), rng) -> text.
  order: Callable  # (product names, rng) -> text naming an order.
  options: Callable  # (changed options, the item's options, rng) -> text.
  address: Callable  # (address fields, rng) -> text.
  method: Callable  # (source, key, rng) -> text of a payment method.
  email: Callable = vf.as_is  # (email, rng) -> text.
  zip: Callable = vf.as_is  # (zip code, rng) -> text.
  person: Callable = vf.as_is  # (first or last name, rng) -> text.

  def __post_init__(self):
    missing, unknown = sorted(set(PARTS) - set(self.plain)), sorted(set(self.plain) - set(PARTS))
    if missing or unknown or not set(self.terse) <= set(PARTS):
      raise ValueError(f"customer family {self.name!r}: parts missing {missing}, unknown "
                       f"{unknown + sorted(set(self.terse) - set(PARTS))}")
    for part, patterns in [*self.plain.items(), *self.terse.items()]:
      for pattern in patterns:
        phrase_grammar.check_fields(pattern, PARTS[part],
                                    f"customer family {self.name!r}, part {part!r}")

  def patterns(self, part: str, verbosity: str) -> tuple[str, ...]:
    return self.terse.get(part, self.plain[part]) if verbosity == "terse" else self.plain[part]

  def say(self, part: str, verbosity: str, rng: np.random.Generator, **fields: str) -> str:
    return phrase_grammar.expand(vf.pick(rng, self.patterns(part, verbosity)), rng, fields)


def _one(**parts: str | Sequence[str]) -> dict[str, tuple[str, ...]]:
  """part=pattern or part=(patterns...) -> part: (patterns...); `_` in a name stands for ' '
  where PARTS has a space (no_longer_needed)."""
  out = {}
  for name, value in parts.items():
    part = name if name in PARTS else name.replace("_", " ")
    out[part] = (value,) if isinstance(value, str) else tuple(value)
  return out


TEMPLATE = CustomerFamily(
    "template",
    plain=_one(
        email="My email is {email}.",
        name_zip="My name is {first} {last} and my zip code is {zip}.",
        hello="Hi.",
        cancel="I want to cancel {order}.",
        order_address="I want to change the shipping address of {order}.",
        order_payment="I want to change the payment method of {order}.",
        modify_items="I want to change the options of {items} in my pending order.",
        user_address="I want to update my default address.",
        transfer="I want to talk to a human agent.",
        also="",
        new_options="I would like {options}.",
        same_options="I would like the same options.",
        address="The new address is {address}.",
        payment="Please use {method}.",
        no_longer_needed="It is no longer needed.",
        ordered_by_mistake="I ordered it by mistake.",
        order_id="It is {order_id}.",
        yes=phrases.YES, no=phrases.NO, decline=phrases.DECLINE,
        done="No, that's all. Thank you!",
        nothing_else="Nothing else, thank you.",
        no_more_details="Sorry, I have no other details.",
        thanks_transfer="Thank you.",
        dont_know="Sorry, I don't know.",
        which_item="Sorry, which item do you mean?",
        not_that_item="I did not ask to change that item.",
        **{phrases.RETURN: "I want to return {items} from my delivered order.",
           phrases.EXCHANGE: "I want to exchange {items} from my delivered order."}),
    terse=_one(
        email="{email}", name_zip="{first} {last}, {zip}.", cancel="Cancel {order}.",
        order_address="New shipping address for {order}.",
        order_payment="New payment method for {order}.",
        modify_items="Change the options of {items} in my pending order.",
        user_address="Update my default address.", transfer="A human agent, please.",
        new_options="{options}.", address="{address}.", payment="{method}.",
        no_longer_needed="No longer needed.", ordered_by_mistake="Ordered by mistake.",
        order_id="{order_id}.", yes=("Yes.", "Yes, go ahead."), no="No.", decline="No, leave it.",
        done="That's all.", nothing_else="Nothing else.",
        **{phrases.RETURN: "Return {items}.", phrases.EXCHANGE: "Exchange {items}."}),
    item=vf.template_item, items=vf.items_text(vf.template_item), order=vf.template_order,
    options=vf.template_options, address=vf.template_address, method=vf.template_method)

CASUAL = CustomerFamily(
    "casual",
    plain=_one(
        email=("[my email's|email is|it's|the email's] {email}",
               "{email} is [my email|the email on it|what i use]"),
        name_zip=("[hey, |hi, |]{first} {last} here, [zip |]{zip}",
                  "[i'm|this is|it's] {first} {last}, zip[ code|] {zip}",
                  "{first} {last}, {zip}", "name's {first} {last}, zip {zip}"),
        hello="[hey|hi there|hiya]",
        cancel="[i wanna|i'd like to|i need to|can you|pls] cancel {order}[ please|, thx|]",
        order_address="[i need to|can you|i wanna] change the [shipping |delivery |]address "
                      "[on|for] {order}",
        order_payment="[i need to|can you|i wanna] [change|switch] [how i pay|the payment] for "
                      "{order}",
        modify_items="[i need to|can you|i wanna] [change|switch] {items} [in my pending order|"
                     "before it ships|in the order that hasn't shipped yet]",
        user_address=("[i moved, |]can you update the address on my account",
                      "[i need to|gotta] change my [default|home] address"),
        transfer="[can i|i wanna] talk to a [real person|human][ please|]",
        also="[oh and|also,|one more thing:]",
        new_options=("[i'd like|i want|gimme] {options}[ instead|]", "make it {options}"),
        same_options="keep [everything|it] the same",
        address="[it's|ship it to|new address is] {address}",
        payment=("[use|put it on|just use] {method}", "{method}[ please|, thx]"),
        no_longer_needed="[don't need it anymore|i don't need it any more|not needed anymore]",
        ordered_by_mistake="[ordered it by mistake|my bad, ordered it by mistake|"
                           "bought it by accident]",
        order_id=("[it's|order] {order_id}", "{order_id}"),
        yes="[yep|yeah|yes|sure][, |! | ][do it|go ahead|that's right|sounds good]",
        no="[nope|no][, |. ][that's not it|not what i asked for]",
        decline="[actually no|nah], [i changed my mind|leave it as is]",
        done="[nope, |nah, |]that's [all|everything][, thanks|, thx|]!",
        nothing_else="[that's it|all good], thanks",
        no_more_details="[hmm, |]that's all the info i have",
        thanks_transfer="[ok |]thanks",
        dont_know="[no idea|not sure], sorry",
        which_item="which one do you mean?",
        not_that_item="i didn't ask to change that one",
        **{phrases.RETURN: ("[i wanna|i'd like to|i need to] return {items}",
                            "can i send back {items}"),
           phrases.EXCHANGE: "[i wanna|i'd like to|can i] [exchange|swap] {items} for a "
                             "different [one|version]"}),
    terse=_one(
        email="{email}", name_zip="{first} {last}, {zip}", cancel="cancel {order}",
        order_address="new address for {order}", order_payment="change payment for {order}",
        modify_items="change {items}, pending order", user_address="update my default address",
        transfer="human pls", new_options="{options}", address="{address}", payment="{method}",
        no_longer_needed="don't need it", ordered_by_mistake="mistake", order_id="{order_id}",
        yes=("yep", "yes", "sure"), no=("nope", "no"), decline="nah, leave it",
        done="that's all", nothing_else="nothing else",
        **{phrases.RETURN: "return {items}", phrases.EXCHANGE: "exchange {items}"}),
    item=vf.casual_item, items=vf.items_text(vf.casual_item),
    order=vf.order_text(("the order with", "my order with"), lowercase=True,
                        article=("my", "the", "")),
    options=vf.options_text(("{v}", "the {v} one")), address=vf.postal_address(),
    method=vf.method_text(
        card=("my card ending in {key}", "the card ending {key}", "card ending {key}"),
        paypal=("paypal", "my paypal"), gift=("my gift card {key}", "gift card {key}"),
        original=("the original payment", "whatever i paid with",
                  "the way i paid originally")),
    person=vf.lower)

FORMAL = CustomerFamily(
    "formal",
    plain=_one(
        email=("[Certainly. |Of course. |]My email address is {email}.",
               "You will find my account under {email}."),
        name_zip=("My name is {first} {last}, and my [zip|postal] code is {zip}.",
                  "I am {first} {last}; my [zip|postal] code is {zip}.",
                  "[Certainly. |Of course. |]The account is under {first} {last}, [zip|postal] "
                  "code {zip}."),
        hello="[Good morning.|Good afternoon.|Hello.]",
        cancel="I would like to [cancel|request the cancellation of] {order}[, please|].",
        order_address="I would like to [update|change] the [shipping|delivery] address [for|of] "
                      "{order}.",
        order_payment="I would like to change the payment method [for|used for] {order}.",
        modify_items="I would like to [modify|change] {items} in my pending order[ before it "
                     "ships|].",
        user_address="I would like to update the default address [on|of] my account.",
        transfer="I would like to speak with a [human agent|representative], please.",
        also="[Additionally,|I also have another request.|There is one more thing.]",
        new_options=("I would prefer {options}[, please|].", "Please make it {options}."),
        same_options="I would like to keep the same options.",
        address="[Please use|The new address is] {address}.",
        payment=("Please [use|charge] {method}.", "I would like to pay with {method}."),
        no_longer_needed="[It is|The item is] no longer needed.",
        ordered_by_mistake="I placed the order by mistake.",
        order_id="The order number is {order_id}.",
        yes=("[Yes|Certainly], please proceed.", "That is correct; please go ahead."),
        no="No, that is not correct.",
        decline="No, I have reconsidered; please leave it unchanged.",
        done="That is all, thank you[ very much|].",
        nothing_else="Nothing further, thank you.",
        no_more_details="I am afraid I have no other details.",
        thanks_transfer="Thank you very much.",
        dont_know="I am afraid I do not know.",
        which_item="Which item do you mean, please?",
        not_that_item="I did not ask to change that item.",
        **{phrases.RETURN: "I would like to return {items}[, please|].",
           phrases.EXCHANGE: "I would like to exchange {items} for [a different|another] "
                             "variant."}),
    terse=_one(
        email="{email}.", name_zip="{first} {last}, {zip}.", cancel="Please cancel {order}.",
        order_address="Please update the shipping address for {order}.",
        order_payment="Please change the payment method for {order}.",
        modify_items="Please modify {items} in my pending order.",
        user_address="Please update my default address.", transfer="A representative, please.",
        new_options="{options}, please.", yes="Yes, proceed.", no="No.",
        decline="No, leave it unchanged.", done="That is all.",
        **{phrases.RETURN: "Please return {items}.", phrases.EXCHANGE: "Please exchange {items}."}),
    item=vf.formal_item, items=vf.items_text(vf.formal_item),
    order=vf.order_text(("my order containing", "the order that includes")),
    options=vf.options_text(key_forms=("{k} {v}", "the {k} {v}"), always_key=True),
    address=vf.postal_address(separator=", "),
    method=vf.method_text(
        card=("my credit card ending with {key}", "the credit card ending in {key}"),
        paypal=("my PayPal account",), gift=("my gift card {key}", "the gift card {key}"),
        original=("the original method of payment", "the original payment method")))

LISTING = CustomerFamily(
    "listing",
    plain=_one(
        email=("Email: {email}.", "Account email - {email}."),
        name_zip=("Name: {last}, {first}. [Zip|Postcode]: {zip}.",
                  "name's {last}, {first}. Postcode {zip}.",
                  "Last name {last}, first name {first}, zip {zip}.",
                  "Customer: {first} {last}, {zip}."),
        hello="Hello.",
        cancel="[Request|To do|Task]: cancel {order}.",
        order_address="[Request|To do|Task]: new shipping address for {order}.",
        order_payment="[Request|To do|Task]: new payment method for {order}.",
        modify_items="[Request|To do|Task]: change options of {items} (pending order).",
        user_address="[Request|To do|Task]: update the default address on my account.",
        transfer="[Request|To do|Task]: human agent.",
        also="Next.",
        new_options="New options: {options}.",
        same_options="New options: same as now.",
        address="New address: {address}.",
        payment="Payment: {method}.",
        no_longer_needed="Reason: no longer needed.",
        ordered_by_mistake="Reason: ordered by mistake.",
        order_id="Order: {order_id}.",
        yes=("Confirmed[, go ahead|].", "Correct, proceed.", "Yes - confirmed."),
        no=("Not correct.", "No - wrong details."),
        decline="Declined - leave it as is.",
        done="Nothing more. Thanks.",
        nothing_else="Nothing further.",
        no_more_details="No other details.",
        thanks_transfer="Thanks.",
        dont_know="Unknown.",
        which_item="Which item?",
        not_that_item="Not an item I asked to change.",
        **{phrases.RETURN: "[Request|To do|Task]: return {items}.",
           phrases.EXCHANGE: "[Request|To do|Task]: exchange {items}."}),
    terse=_one(yes="Confirmed.", no="Not correct.", decline="Declined."),
    item=vf.listing_item, items=vf.items_text(vf.listing_item, ";"),
    order=vf.order_text(("order with:",), article=("",), joiner=","),
    options=vf.options_text(key_forms=("{k}: {v}",), joiner=";"),
    address=vf.labelled_address,
    method=vf.method_text(
        card=("credit card ****{key}", "card ending {key}"), paypal=("PayPal",),
        gift=("gift card {key}",), original=("original payment method",)))

SPOKEN = CustomerFamily(
    "spoken",
    plain=_one(
        email=("[okay, |right, so |]my email is {email}", "it's {email}, all lower case",
               "[okay|right], the email is {email}"),
        name_zip=("[okay so |right, |]it's {first} {last}, and the zip is {zip}",
                  "{first} {last}, zip code {zip}",
                  "the name's {first} {last}, [and |]my zip is {zip}"),
        hello="[hello there|hi|hello], [okay|right]",
        cancel="[um, |so um, |uh, ][i'd like to|i was hoping to] cancel {order}",
        order_address="[um, |so um, |uh, ]the address on {order} [needs changing|has to change]",
        order_payment="[um, |so um, |uh, ][i'd like to|i was hoping to] pay for {order} a "
                      "different way",
        modify_items="[um, |so um, |uh, ][i'd like to|i was hoping to] change {items}, it "
                     "hasn't shipped yet",
        user_address="[um, |so um, |uh, ]i need my default address changed",
        transfer="um, could i speak to a human, please",
        also="[uh, and|oh, and also|um, and]",
        new_options="[um, |uh, |]let's go with {options}",
        same_options="um, just the same as before",
        address="[okay, |right, |]it's {address}",
        payment="[um, |uh, ]{method}, please",
        no_longer_needed="[um, |uh, ]i just don't need it anymore",
        ordered_by_mistake="i, [uh|um], ordered it by mistake",
        order_id="[uh, |um, ]it's {order_id}",
        yes="[uh, |um, |]yes, [that's fine|go on ahead|please do that]",
        no="[um|uh], no, that's not it",
        decline="[uh|um], actually no, i've changed my mind, leave it",
        done="[um|uh], no, that's everything, thanks",
        nothing_else="[uh|um], nothing else, thanks",
        no_more_details="um, that's all i've got",
        thanks_transfer="okay, thanks",
        dont_know="um, i'm not sure",
        which_item="uh, which one?",
        not_that_item="um, i didn't ask about that one",
        **{phrases.RETURN: "[um, |so um, |uh, ][i'd like to|i was hoping to] send back {items}",
           phrases.EXCHANGE: "[um, |so um, |uh, ][i'd like to|i was hoping to] swap {items} for "
                             "another one"}),
    terse=_one(yes="uh, yes", no="um, no", new_options="um, {options}"),
    item=vf.spoken_item, items=vf.items_text(vf.spoken_item),
    order=vf.order_text(("the order with", "the order that has"), lowercase=True),
    options=vf.options_text(),
    address=vf.postal_address(vf.spelled_digits, ", ", ("zip ", "zip code ")),
    method=vf.method_text(
        card=("the card ending in {key}", "my card, the one ending in {key}"),
        paypal=("paypal", "my paypal one"), gift=("the gift card, {key}",),
        original=("the original way i paid", "however i paid originally"),
        digits=vf.spelled_digits),
    email=vf.spelled_email, zip=vf.spelled_digits)

REASONS = CustomerFamily(
    "reasons",
    plain=_one(
        email="My email is {email}, [it's the one I use for shopping|since that's what the "
              "account is under].",
        name_zip="My name is {first} {last}, zip code {zip}, [since you'll need that to find "
                 "me|so you can find my account].",
        hello="[Hello.|Hi there.]",
        cancel=("My plans changed, so I'd like to cancel {order}.",
                "Since I won't be using it, please cancel {order}.",
                "I found a better deal elsewhere, so I'd like to cancel {order}."),
        order_address="[I'm moving soon|I won't be home next week], so I need to change the "
                      "shipping address of {order}.",
        order_payment="[My card is nearly maxed out|I'd rather keep that card for bills], so "
                      "I'd like to pay for {order} differently.",
        modify_items="Before it ships, I'd like to change {items} because it won't suit me as "
                     "it is.",
        user_address="I've moved house, so my default address needs updating.",
        transfer="This is getting complicated, so I'd rather talk to a human.",
        also="While I'm at it, there's something else I need sorted.",
        new_options="I need {options}, [big enough for what I use it for|so it suits my routine "
                    "better|since that matches the rest of my things].",
        same_options="Honestly the same options would suit me fine.",
        address="Please send it to {address}, since that's where I'll be.",
        payment="Please use {method}, since that's the one I prefer.",
        no_longer_needed="[My plans changed and|I found another solution, so] I have no need for "
                         "it anymore.",
        ordered_by_mistake="[I clicked the wrong button|It was an accidental order]; I never "
                           "meant to buy it.",
        order_id="It's {order_id}, I have the confirmation email here.",
        yes="Yes, that's exactly what I need[, thank you|].",
        no="No, that won't work for what I need.",
        decline="No, on second thought I'd rather keep it as it is.",
        done="That's everything I needed, thank you.",
        nothing_else="Nothing else, that covers it, thanks.",
        no_more_details="Sorry, I don't have any other details with me.",
        thanks_transfer="Thanks, that will be easier.",
        dont_know="Sorry, I don't have that with me.",
        which_item="Sorry, which item do you mean?",
        not_that_item="I didn't ask to change that item, it's fine as it is.",
        **{phrases.RETURN: "[It didn't work out for me|It isn't what I hoped for], so I'd like "
                           "to return {items}.",
           phrases.EXCHANGE: "[It doesn't quite suit me|It isn't right for my needs], so I'd "
                             "like to exchange {items}."}),
    terse=_one(new_options="{options}, for what I use it for."),
    item=vf.reasons_item, items=vf.items_text(vf.reasons_item),
    order=vf.order_text(("my order with",)), options=vf.options_text(),
    address=vf.postal_address(),
    method=vf.method_text(
        card=("my credit card ending in {key}",), paypal=("my PayPal account",),
        gift=("my gift card {key}",), original=("the original payment method",)))

ON_BEHALF = CustomerFamily(
    "on_behalf",
    plain=_one(
        email=("I'm calling for my [mother|father|aunt|uncle]; the account email is {email}.",
               "This is for my [sister|brother]'s account: {email}."),
        name_zip=("I'm helping my [mother|father|aunt|uncle], {first} {last}, zip {zip}.",
                  "It's my [sister|brother]'s account: {first} {last}, zip code {zip}."),
        hello="Hello, I'm calling on behalf of a relative.",
        cancel="[She|He] [wants|would like] to cancel {order}.",
        order_address="[She|He] needs the shipping address of {order} changed.",
        order_payment="[She|He] [wants|would like] to change the payment method for {order}.",
        modify_items="[She|He] [wants|would like] to change {items} in [her|his] pending order.",
        user_address="[She|He] needs the default address on [her|his] account updated.",
        transfer="[She|He] would like to talk to a human agent.",
        also="[She|He] also asked me about something else.",
        new_options="[She|He] would like {options}.",
        same_options="[She|He] would like the same options.",
        address="[Her|His] new address is {address}.",
        payment="Please use {method}.",
        no_longer_needed="[She|He] no longer needs it.",
        ordered_by_mistake="[She|He] ordered it by mistake.",
        order_id="[Her|His] order id is {order_id}.",
        yes="Yes, [she|he] agrees[, go ahead|].",
        no="No, that's not what [she|he] asked for.",
        decline="No, [she|he] changed [her|his] mind; leave it as it is.",
        done="That's all [she|he] needed, thank you.",
        nothing_else="Nothing else for [her|him], thank you.",
        no_more_details="Sorry, I have no other details for [her|him].",
        thanks_transfer="Thank you.",
        dont_know="Sorry, [she|he] didn't tell me that.",
        which_item="Sorry, which item do you mean?",
        not_that_item="[She|He] did not ask to change that item.",
        **{phrases.RETURN: "[She|He] [wants|would like] to return {items}.",
           phrases.EXCHANGE: "[She|He] [wants|would like] to exchange {items}."}),
    terse=_one(yes="Yes, [she|he] agrees.", no="No.", decline="No, leave it."),
    item=vf.behalf_item, items=vf.items_text(vf.behalf_item),
    order=vf.order_text(("her order with", "his order with")), options=vf.options_text(),
    address=vf.postal_address(),
    method=vf.method_text(
        card=("her credit card ending in {key}", "his credit card ending in {key}"),
        paypal=("her PayPal account", "his PayPal account"),
        gift=("her gift card {key}", "his gift card {key}"),
        original=("the original payment method",)))

FAMILIES: Mapping[str, CustomerFamily] = {
    f.name: f for f in (TEMPLATE, CASUAL, FORMAL, LISTING, SPOKEN, REASONS, ON_BEHALF)}
