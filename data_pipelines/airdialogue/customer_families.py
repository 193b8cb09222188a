"""How a scripted customer words things: phrasing families, independent of the five styles.

A style (customers.STYLES) decides *what* a customer discloses and how much
it says; a family decides the surface form: how a date, an airport, a price
or a name is written, and the sentence patterns around them. Every family
has a pattern for every part a customer ever says (PARTS), written in the
phrase grammar of `phrase_grammar` so that parts combine into many distinct
utterances, and its own typing noise.

`template` is the project's original wording. The others follow the habits
of the real dataset's crowd workers (docs/METHODS.md, Real customers' habits): numeric and day-first
dates, hyphen-joined codes, cities and trip reasons, prices with no currency
sign, names lower-cased or given only when asked, loose constraint wording,
filler turns. Which families a corpus may use is `family_split`'s business;
a held-out family shares no sentence form with the training ones.
"""

from __future__ import annotations

import dataclasses
import string
import types
from typing import Callable, Mapping

import numpy as np

from data_pipelines.airdialogue import gazetteer
from data_pipelines.airdialogue import phrase_grammar
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import typing_noise

VERBOSITIES = ("terse", "plain", "chatty")
# Every part a customer can say, and the fields its patterns may use:
# n name, a/b airports, d/r dates (or times of day), ad/ar times with an article,
# c class, p price.
PARTS = types.MappingProxyType({
    "goal_book": (), "goal_change": (), "goal_cancel": (), "name": ("n",),
    "airports": ("a", "b"), "dates": ("d", "r"), "time_both": ("d", "r", "ad", "ar"),
    "time_departure": ("d", "ad"), "time_return": ("r", "ar"), "class": ("c",),
    "price": ("p",), "connections_0": (), "connections_1": (), "airline": (),
    "no_time": (), "no_class": (), "no_connections": (), "no_airline": (),
    "nothing_else": (), "greeting": (), "interjection": (), "small_talk": (), "accept": (),
    "late_prefix": (), "thanks": (), "thanks_anyway": (), "bad_news_reply": (), "confused": (),
    "filler": (),
})

Render = Callable[..., str]


@dataclasses.dataclass(frozen=True)
class CustomerFamily:
  """One way of speaking. `parts[part]` is a tuple of patterns, or a dict of them per verbosity."""

  name: str
  about: str
  parts: Mapping[str, tuple[str, ...] | Mapping[str, tuple[str, ...]]]
  date: Render  # (month, day, rng) -> text.
  airport: Render  # (code, rng) -> text.
  price: Render  # (amount, rng) -> text.
  time_of_day: Render = lambda t, rng: t  # (morning|afternoon|evening, rng) -> text.
  flight_class: Render = lambda c, rng: c  # (economy|business, rng) -> text.
  lowercase_name_p: float = 0.0  # Chance a name is written all lower-case.
  name_when_asked: bool = False  # Never volunteers the name; gives it when asked.
  noise: typing_noise.TypingNoise = typing_noise.NONE

  def __post_init__(self):
    missing = sorted(set(PARTS) - set(self.parts))
    unknown = sorted(set(self.parts) - set(PARTS))
    if missing or unknown:
      raise ValueError(f"customer family {self.name!r}: parts missing {missing}, unknown {unknown}")
    for part, table in self.parts.items():
      per_verbosity = table if isinstance(table, Mapping) else dict.fromkeys(VERBOSITIES, table)
      if set(per_verbosity) != set(VERBOSITIES):
        raise ValueError(f"customer family {self.name!r}, part {part!r}: verbosities "
                         f"{sorted(per_verbosity)}, expected {list(VERBOSITIES)}")
      for pattern in (p for patterns in per_verbosity.values() for p in patterns):
        phrase_grammar.check(pattern)
        fields = {f for _, f, _, _ in string.Formatter().parse(pattern) if f}
        if not fields <= set(PARTS[part]):
          raise ValueError(f"customer family {self.name!r}, part {part!r}: pattern {pattern!r} "
                           f"uses fields {sorted(fields - set(PARTS[part]))}")
    if not 0.0 <= self.lowercase_name_p <= 1.0:
      raise ValueError(f"customer family {self.name!r}: lowercase_name_p not in [0, 1]")

  def patterns(self, part: str, verbosity: str) -> tuple[str, ...]:
    table = self.parts[part]
    return table[verbosity] if isinstance(table, Mapping) else table

  def say(self, part: str, verbosity: str, rng: np.random.Generator, **fields: str) -> str:
    """One sentence for `part`, first letter capitalized."""
    options = self.patterns(part, verbosity)
    text = phrase_grammar.expand(options[rng.integers(len(options))], rng, fields)
    return text[:1].upper() + text[1:]


def _by_verbosity(terse, plain, chatty=None):
  return {"terse": terse, "plain": plain, "chatty": chatty if chatty is not None else plain}


def _pick(options, rng):
  return options[rng.integers(len(options))]


# --- Value formats -------------------------------------------------------------


def _month_day(month, day, rng):
  """'Jan 5', or 'Jan 5th' three times in ten (the original template wording)."""
  return f"{month} {gazetteer.ordinal(day) if rng.random() < 0.3 else day}"


def _month_ordinal(month, day, rng):
  return f"{month} {gazetteer.ordinal(day)}"


def _day_month(month, day, rng):
  """Day first with the month abbreviation: '5 Jan', '05 Jan', '5th Jan'."""
  day_text = _pick((day, f"{int(day):02d}", gazetteer.ordinal(day)), rng)
  return f"{day_text} {month}"


def _numeric(month, day, rng):
  """Month/day numbers, zero-padded four times in five: '01/05' or '1/5'."""
  m, d = schema.MONTHS.index(month) + 1, int(day)
  return f"{m:02d}/{d:02d}" if rng.random() < 0.8 else f"{m}/{d}"


def _spelled_month(month, day, rng):
  """The full month name: 'January 5', 'January 5th' or 'the 5th of January'."""
  full = gazetteer.MONTH_NAMES[month]
  return _pick((f"{full} {day}", f"{full} {gazetteer.ordinal(day)}",
                f"the {gazetteer.ordinal(day)} of {full}"), rng)


def _code(code, rng):
  return code


_SHARED_CITIES = frozenset(
    city for city in gazetteer.CITY.values() if list(gazetteer.CITY.values()).count(city) > 1)


def _city(code, rng):
  """The city, or another name of the airport; a long name is misspelled one time in eight.

  A city with two airports (Chicago, Houston, ...) is never said alone: the
  customer does not know which of them the agent's table holds.
  """
  city = gazetteer.CITY[code]
  names = ((city,) if city not in _SHARED_CITIES else ()) + gazetteer.ALIASES.get(code, ())
  name = _pick(names, rng)
  if len(name) >= 7 and " " not in name and rng.random() < 0.125:
    i = int(rng.integers(2, len(name) - 1))
    name = name[:i] + name[i + 1:]
  return name


def _bare(amount, rng):
  return str(amount)


def _dollars(amount, rng):
  return _pick((f"{amount} dollars", f"{amount} bucks", f"{amount}"), rng)


def _spelled_price(amount, rng):
  return _pick((gazetteer.spell_price(amount), str(amount)), rng)


def _casual_class(c, rng):
  return _pick(("economy class", "coach", "economy seat") if c == "economy"
               else ("business class", "business seat"), rng)


def _time_phrase(t, rng):
  return _pick({"morning": ("in the morning", "early in the day"),
                "afternoon": ("in the afternoon", "after lunch"),
                "evening": ("in the evening", "at night")}[t], rng)


# --- The families ----------------------------------------------------------------

TEMPLATE = CustomerFamily(
    name="template",
    about="The original templates: 'Jan 5', airport codes, '$500', 'My name is ...'.",
    date=_month_day, airport=_code, price=_bare,
    parts={
        "goal_book": _by_verbosity(
            ("Book a flight.", "New booking.", "A ticket, please."),
            ("I'd like to book a flight.", "I need to book a ticket.",
             "I want to reserve a flight."),
            ("I'm planning to get away for a few days and need to book a flight.",
             "I'd love to book a ticket, if you can help me with that.",
             "I was hoping you could help me reserve a flight.")),
        "goal_change": _by_verbosity(
            ("Change my reservation.", "Change a flight."),
            ("I need to change my reservation.", "I'd like to change my flight.",
             "I want to change my existing booking."),
            ("Something came up, so I need to change my reservation.",
             "My plans moved around and I'd like to change my flight.")),
        "goal_cancel": _by_verbosity(
            ("Cancel my reservation.", "Cancellation."),
            ("I want to cancel my reservation.", "I need to cancel my flight.",
             "Please cancel my booking."),
            ("Sadly my plans fell through, so I need to cancel my reservation.",
             "I'm afraid I have to cancel my flight.")),
        "name": _by_verbosity(
            ("{n}.", "{n}"), ("My name is {n}.", "It's {n}.", "I'm {n}.", "This is {n}."),
            ("My name is {n}, by the way.", "It's {n}.", "You can put it under {n}.")),
        "airports": _by_verbosity(
            ("{a} to {b}.", "From {a} to {b}."),
            ("I'm flying from {a} to {b}.", "The trip is from {a} to {b}.",
             "I want to go to {b} from {a}."),
            ("I'll be flying out of {a} and heading to {b}.",
             "I'm leaving from {a} and going to {b}.")),
        "dates": _by_verbosity(
            ("{d} to {r}.", "{d} - {r}."),
            ("I'm leaving on {d} and returning on {r}.", "My dates are {d} to {r}.",
             "I'd depart on {d} and come back on {r}."),
            ("I'd like to head out on {d} and come back on {r}.",
             "I'm hoping to leave on {d} and be back on {r}.")),
        "time_both": _by_verbosity(
            ("{d} departure, {r} return.",),
            ("I'd like to leave in the {d} and come back in the {r}.",
             "{ad} departure and {ar} return, please."),
            ("If possible I'd like to leave in the {d} and fly back in the {r}.",)),
        "time_departure": _by_verbosity(
            ("{d} departure.", "Leave in the {d}."),
            ("I'd prefer to depart in the {d}.", "{ad} departure would be best."),
            ("My schedule is tight, so {ad} departure would be ideal.",
             "I'd really like to leave in the {d}.")),
        "time_return": _by_verbosity(
            ("{r} return.", "Return in the {r}."),
            ("I'd like to return in the {r}.", "{ar} return would be best."),
            ("I'd really like to fly back in the {r}.",)),
        "class": _by_verbosity(
            ("{c}.", "{c} class."),
            ("I'd like {c} class.", "I need a {c} class seat.", "{c} class, please."),
            ("I'd really prefer {c} class this time.", "Let's go with {c} class.")),
        "price": _by_verbosity(
            ("${p} max.", "Under ${p}."),
            ("My budget is ${p}.", "I can spend at most ${p}.", "Nothing over ${p}, please."),
            ("I'd rather not spend more than ${p} on this.",
             "Money is a bit tight, so my budget is ${p}.")),
        "connections_0": _by_verbosity(
            ("Direct.", "Non-stop only."),
            ("I need a direct flight.", "Non-stop only, please.", "No connections, please."),
            ("Layovers wear me out, so I need a direct flight.",)),
        "connections_1": _by_verbosity(
            ("Max 1 connection.", "One stop at most."),
            ("At most one connection, please.", "One stop is fine, but no more than that."),
            ("I can live with one connection, but not more than that.",)),
        "airline": _by_verbosity(
            ("Normal-cost airline.",),
            ("I prefer a normal-cost airline.", "A normal-cost airline, please."),
            ("I've had bad luck before, so I'd like a normal-cost airline.",)),
        "no_time": ("Any time of day works.", "No time preference."),
        "no_class": ("Any class is fine.", "I don't mind the class."),
        "no_connections": ("Connections don't matter.", "I don't mind the number of stops."),
        "no_airline": ("Any airline is fine.", "No airline preference."),
        "nothing_else": _by_verbosity(
            ("That's all.", "Nothing else."),
            ("No other preferences.", "That's everything.", "Nothing else matters to me."),
            ("I think that's everything, really.", "Nope, that covers it!")),
        "greeting": _by_verbosity(
            ("Hi.", "Hello."), ("Hi.", "Hello.", "Hello there."),
            ("Hi there!", "Hello! Hope you're doing well.", "Hey, how are you doing?")),
        "interjection": ("Sure!", "Of course.", "Absolutely.", "Okay, let me see."),
        "small_talk": (
            "It's been such a long week.", "Sorry, my dog is barking in the background.",
            "I'm really looking forward to this.", "The weather has been lovely lately.",
            "Thanks for being so patient with me.", "I hope you're having a good day."),
        "accept": _by_verbosity(
            ("Yes.", "Okay, go ahead."),
            ("Yes, please.", "That works, go ahead.", "Sounds good, please do."),
            ("Perfect, that sounds great! Please go ahead.", "Yes, that would be wonderful.")),
        "late_prefix": ("Oh wait, I forgot to mention something.", "Actually, one more thing.",
                        "Hold on a second."),
        "thanks": ("Thank you!", "Thanks, bye.", "Great, thanks for your help."),
        "thanks_anyway": ("Oh well, thanks anyway.", "That's a pity. Thanks for checking.",
                          "Okay, thank you anyway."),
        "bad_news_reply": ("Oh, that's a shame.", "I see."),
        "confused": ("Sorry, could you say that again?", "I'm not sure what you mean."),
        "filler": ("Alright.", "No problem."),
    },
)

CASUAL = CustomerFamily(
    name="casual",
    about="Quick informal typing: 'Apr 3rd', codes, '500 bucks', 'single connection ok', 'im ...'.",
    date=_month_ordinal, airport=_code, price=_dollars, flight_class=_casual_class,
    lowercase_name_p=0.3,
    noise=typing_noise.TypingNoise(lowercase=0.2, no_punctuation=0.2, typo=0.15),
    parts={
        "goal_book": ("[need|want] to book a [flight|ticket][ pls| asap|]",
                      "[wanna|gotta] book a [flight|trip][ pls| real quick|]"),
        "goal_change": ("[need|gotta|have] to [change|move] my [flight|booking|reservation]",),
        "goal_cancel": ("[need|want] to cancel my [trip|flight|booking]",
                        "[pls|] cancel my [reservation|trip]"),
        "name": _by_verbosity(("{n}",), ("[im|i'm] {n}", "{n} here", "[name is|its] {n}")),
        "airports": _by_verbosity(
            ("{a} to {b}",), ("[from|flying] {a} to {b}[ pls|]", "leaving {a}[,|] going to {b}",
                              "{a} to {b}[ pls| thx|]")),
        "dates": _by_verbosity(
            ("{d} to {r}",), ("{d} to {r}", "[leaving|out] {d}[,|] [back|returning] {r}",
                              "going {d} [returning|coming back] {r}")),
        "time_both": ("{d} [flight |]out, {r} [flight |]back", "leave in the {d}, back in the {r}"),
        "time_departure": ("{d} [flight|departure][ pls|]", "[wanna|want to] leave in the {d}"),
        "time_return": ("[fly|come] back in the {r}", "{r} [flight |]back[ pls|]"),
        "class": ("{c}[ pls| if possible|]", "[i'd like|need|prefer] {c}"),
        "price": _by_verbosity(("{p} max",), ("[up to|max] {p}", "{p} [max|tops]",
                                              "[budget|max] is {p}[ tho|]")),
        "connections_0": ("[nonstop|direct] [only|pls]", "no stops[ pls|]"),
        "connections_1": ("[single|one] [connection|stop|layover] [is ok|max|is fine]",
                          "a lay-by is fine"),
        "airline": ("regular airline[ pls|]", "no budget airlines[ pls|]"),
        "no_time": ("any time is ok", "time doesnt matter"),
        "no_class": ("any class", "class doesnt matter"),
        "no_connections": ("stops dont matter", "any number of stops"),
        "no_airline": ("any airline", "airline doesnt matter"),
        "nothing_else": ("thats it", "nope thats all"),
        "greeting": ("hey", "hi", "heya"),
        "interjection": ("sure", "yep"),
        "small_talk": ("long week lol", "sorry typing on my phone"),
        "accept": ("[yes|yep|yeah|sure] [go ahead|do it|sounds good|pls]",),
        "late_prefix": ("oh wait", "oh and one more thing"),
        "thanks": ("thanks", "thanks a lot", "cool thanks"),
        "thanks_anyway": ("oh ok thanks anyway", "too bad, thanks"),
        "bad_news_reply": ("oh no", "hmm"),
        "confused": ("what?", "sorry what do u mean"),
        "filler": ("k", "np", "sure np"),
    },
)

DAYFIRST = CustomerFamily(
    name="dayfirst",
    about="Day-first dates ('5 Jan'), 'source and destination', 'below 500', names when asked.",
    date=_day_month, airport=_code, price=_bare, name_when_asked=True,
    noise=typing_noise.TypingNoise(lowercase=0.1, no_punctuation=0.1, typo=0.1),
    parts={
        "goal_book": ("I [want|would like] to book a [flight|ticket].",
                      "Please book a ticket for me."),
        "goal_change": ("I want to change my [reservation|booking].",
                        "Please change my existing [reservation|booking]."),
        "goal_cancel": ("I want to cancel my [reservation|booking].",
                        "Please cancel my existing [reservation|booking]."),
        "name": ("Myself {n}.", "Name: {n}.", "{n}."),
        "airports": ("[My source is|Source:] {a}[,| and] [my destination is|destination:] {b}.",
                     "Source and destination are {a} and {b}.", "From {a} to {b}."),
        "dates": ("[Travel dates|Dates|Journey dates]: {d} [to|till] {r}.",
                  "Depart {d}[,|] return {r}.", "{d} [to|till] {r}."),
        "time_both": ("{d} departure[ and|,] {r} return.",),
        "time_departure": ("{d} departure.", "Departure in the {d}."),
        "time_return": ("{r} return.", "Return in the {r}."),
        "class": ("{c} class.", "Class: {c}."),
        "price": ("[Price|Fare|Budget] below {p}.", "[Below|Within] {p}[ only|]."),
        "connections_0": ("Direct flight.", "No connection."),
        "connections_1": ("Single connection.", "1 connection.", "One lay-by."),
        "airline": ("Normal cost airline.", "Standard airline."),
        "no_time": ("No time preference.",),
        "no_class": ("Any class.",),
        "no_connections": ("Any number of connections.",),
        "no_airline": ("Any airline.",),
        "nothing_else": ("No other preference.", "That's all."),
        "greeting": ("Hello.", "Hi."),
        "interjection": ("Sure.",),
        "small_talk": ("I am in a bit of a hurry.",),
        "accept": ("Yes, proceed.", "Please proceed.", "Ok, fine."),
        "late_prefix": ("Sorry, one more detail.",),
        "thanks": ("Thank you.", "Thank you for your help."),
        "thanks_anyway": ("Ok, thank you anyway.",),
        "bad_news_reply": ("Ok.",),
        "confused": ("Sorry?", "Can you repeat?"),
        "filler": ("Sure.", "Alright, I will wait."),
    },
)

NUMERIC = CustomerFamily(
    name="numeric",
    about="Numeric dates ('01/05'), hyphen-joined codes ('ATL-SFO'), no currency sign.",
    date=_numeric, airport=_code, price=_bare, lowercase_name_p=0.3,
    noise=typing_noise.TypingNoise(lowercase=0.2, no_punctuation=0.2, typo=0.1),
    parts={
        "goal_book": ("[looking to buy|want to purchase] [a|one] ticket",),
        "goal_change": ("[need to|want to] reschedule my [trip|flight]",
                        "modify [existing|current] booking[ please|]"),
        "goal_cancel": ("[call off|drop] my [trip|flight] please", "want my trip cancelled"),
        "name": ("passenger name is {n}", "traveller: {n}", "{n} is the [traveller|passenger]"),
        "airports": ("{a}-{b}", "route {a}-{b}", "[flying|going] {a}-{b}"),
        "dates": ("{d}-{r}", "dates {d} and {r}", "out on {d}, returning {r}"),
        "time_both": ("dep {d}[,|] ret {r}",),
        "time_departure": ("dep {d}",),
        "time_return": ("ret {r}",),
        "class": ("cabin {c}", "cabin: {c}"),
        "price": ("not more than {p}", "{p} is my limit", "limit {p}"),
        "connections_0": ("zero stops", "0 stopovers", "no layovers"),
        "connections_1": ("1 layover at most", "1 stop max", "up to 1 connection"),
        "airline": ("full-service carrier", "[a|some] major airline"),
        "no_time": ("timing flexible",),
        "no_class": ("cabin flexible",),
        "no_connections": ("stops flexible",),
        "no_airline": ("carrier flexible",),
        "nothing_else": ("nothing more", "that covers everything"),
        "greeting": ("good morning", "hey there"),
        "interjection": ("alrighty.",),
        "small_talk": ("busy day at work today.", "this is my first trip this year."),
        "accept": ("confirm it", "[yes|yup], confirm", "go for it"),
        "late_prefix": ("wait, also", "forgot to say"),
        "thanks": ("appreciate it", "many thanks"),
        "thanks_anyway": ("no worries, appreciate the effort",),
        "bad_news_reply": ("hmm, unlucky",),
        "confused": ("come again?", "didn't get that"),
        "filler": ("Sure, take your time.", "Ok, waiting."),
    },
)

CITIES = CustomerFamily(
    name="cities",
    about="Cities, airport names and trip reasons, full month names, spelled-out prices.",
    date=_spelled_month, airport=_city, price=_spelled_price, time_of_day=_time_phrase,
    lowercase_name_p=0.2,
    noise=typing_noise.TypingNoise(lowercase=0.1, no_punctuation=0.1, typo=0.1),
    parts={
        "goal_book": ("I'm hoping to [purchase|buy] [a|one] ticket.",),
        "goal_change": ("I have to reschedule my [journey|travel plans].",),
        "goal_cancel": ("I'd like to call off my [journey|travel plans].",),
        "name": ("You can put it in the name of {n}.", "My name's {n}."),
        "airports": ("[Travelling|Heading] from {a} to {b}.",
                     "[Visiting|Seeing] my [sister|parents|friend] in {b}, "
                     "[leaving from|starting in] {a}.",
                     "I live in {a} and [need|want] to get to {b}.",
                     "[Going|Heading] to {b} for a [wedding|conference|business meeting], "
                     "from {a}."),
        "dates": ("[Heading out|Going] on {d} and [coming home|getting back] on {r}.",),
        "time_both": ("I'd like to set off {d} and fly home {r}.",),
        "time_departure": ("I'd like to set off {d}.",),
        "time_return": ("I'd like to fly home {r}.",),
        "class": ("I [would like|want] to fly {c}.",),
        "price": ("I can go up to {p} dollars.", "{p} dollars is the most I can pay."),
        "connections_0": ("I'd rather fly straight through.", "Without any stops, please."),
        "connections_1": ("A single layover is okay.", "One stopover at most."),
        "airline": ("None of those cheap airlines, please.", "A mainline carrier, please."),
        "no_time": ("The timing is up to you.",),
        "no_class": ("Whatever cabin is cheapest.",),
        "no_connections": ("Stopovers are fine.",),
        "no_airline": ("Whichever carrier.",),
        "nothing_else": ("I believe that's it.",),
        "greeting": ("Howdy.", "Greetings."),
        "interjection": ("Right then.",),
        "small_talk": ("I haven't flown in ages.",),
        "accept": ("Lovely, let's do that.", "That'll do nicely."),
        "late_prefix": ("Oh, I almost forgot.", "Oh, and another thing."),
        "thanks": ("Cheers.", "Much obliged."),
        "thanks_anyway": ("Ah well, cheers anyway.",),
        "bad_news_reply": ("What a pity.",),
        "confused": ("Pardon?", "I didn't quite catch that."),
        "filler": ("I'll hang on.", "Happy to wait."),
    },
)

FAMILIES: Mapping[str, CustomerFamily] = types.MappingProxyType(
    {f.name: f for f in (TEMPLATE, CASUAL, DAYFIRST, NUMERIC, CITIES)})
