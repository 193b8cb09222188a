"""How a scripted customer words things: phrasing families, independent of the five styles.

A style (customers.STYLES) decides *what* a customer discloses and how much
it says; a family decides the surface form: how a date, an airport, a price
or a name is written, and the sentence patterns around them. Every family
has a pattern for every part a customer ever says (PARTS), written in the
phrase grammar of `phrase_grammar` so that parts combine into many distinct
utterances, and its own typing noise.

`template` is the project's original wording. `casual`, `dayfirst`,
`numeric` and `cities` follow the habits of the real dataset's crowd workers
(docs/METHODS.md, Real customers' habits): numeric and day-first dates,
hyphen-joined codes, "source and destination", cities and trip reasons,
prices with no currency sign, names lower-cased, given only when asked or
only at the very end, loose constraint wording, filler turns. The training
corpus must hold these, since they are how real customers write.

`spoken`, `frequent_flyer` and `reasons` are new in kind, so that evaluation
can ask whether an agent generalizes beyond the habits it was trained on:
numbers dictated as words, formal airport names with airline shorthand, and
constraints given as the reasons behind them. They share no value form and
no sentence form with the training families (`family_forms` lists what only
they say). Which families a corpus may use is `family_split`'s business.
"""

from __future__ import annotations

import dataclasses
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
  name_last: bool = False  # Volunteers the name only at the very end of its opening.
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
        phrase_grammar.check_fields(pattern, PARTS[part],
                                    f"customer family {self.name!r}, part {part!r}")
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


class Choices:
  """A value renderer that picks one of the forms `options(*value)` lists.

  The list is public so that every form a family can write is enumerable
  (family_forms derives the held-out forms from it).
  """

  def __init__(self, options: Callable[..., tuple[str, ...]]):
    self.options = options

  def __call__(self, *value_and_rng) -> str:
    *value, rng = value_and_rng
    return _pick(self.options(*value), rng)


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
  """The full month name: 'January 5' or 'January 5th'."""
  full = gazetteer.MONTH_NAMES[month]
  return _pick((f"{full} {day}", f"{full} {gazetteer.ordinal(day)}"), rng)


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


def _casual_class(c, rng):
  return _pick(("economy class", "coach", "economy seat") if c == "economy"
               else ("business class", "business seat"), rng)


def _time_phrase(t, rng):
  return _pick({"morning": ("in the morning", "early in the day"),
                "afternoon": ("in the afternoon", "after lunch"),
                "evening": ("in the evening", "at night")}[t], rng)


# Held-out value formats: none of them is a form a training family writes.

_GDS_MONTHS = {"June": "JUN", "July": "JUL", "Sept": "SEP"}


@Choices
def _spoken_date(month, day):
  """Ordinal words: 'March the fifth', 'the twenty-third of May', 'May twenty-third'."""
  full, nth = gazetteer.MONTH_NAMES[month], gazetteer.ordinal_word(day)
  return (f"{full} the {nth}", f"the {nth} of {full}", f"{full} {nth}")


@Choices
def _gds_date(month, day):
  """Airline reservation shorthand: '05JUN'."""
  return (f"{int(day):02d}{_GDS_MONTHS.get(month, month.upper())}",)


@Choices
def _ordinal_of_month(month, day):
  """'the 12th of May'."""
  return (f"the {gazetteer.ordinal(day)} of {gazetteer.MONTH_NAMES[month]}",)


@Choices
def _spelled_code(code):
  """The code read out letter by letter: 'S-E-A'."""
  return ("-".join(code),)


@Choices
def _airport_name(code):
  """The airport's formal name: 'Hartsfield-Jackson', 'Denver International'."""
  return gazetteer.AIRPORT_NAMES[code]


@Choices
def _spoken_price(amount):
  """'two hundred', 'five hundred', 'a grand', 'five thousand'."""
  if amount % 1000 == 0:
    k = gazetteer.number_word(amount // 1000)
    return (f"{k} thousand", f"{'a' if k == 'one' else k} grand")
  return (gazetteer.spell_price(amount),)


@Choices
def _currency_code(amount):
  return (f"USD {amount}", f"{amount} USD")


@Choices
def _cents(amount):
  return (f"${amount}.00",)


_HOURS = {"morning": (7, 8, 9, 10), "afternoon": (13, 14, 15), "evening": (20, 21, 22)}


@Choices
def _spoken_time(t):
  """'around nine in the morning': an hour in words in its part of the day."""
  return tuple(f"{approx} {gazetteer.number_word(h % 12)} in the {t}"
               for h in _HOURS[t] for approx in ("around", "about"))


@Choices
def _clock_time(t):
  """'9am', '2pm': an hour of that part of the day (schema.time_of_day)."""
  return tuple(f"{h % 12}{'am' if h < 12 else 'pm'}" for h in _HOURS[t])


@Choices
def _hours_time(t):
  """'0900 hrs': the 24-hour clock of airline schedules."""
  return tuple(f"{h:02d}00 hrs" for h in _HOURS[t])


@Choices
def _spoken_class(c):
  return ("in the cheap seats",) if c == "economy" else ("up front",)


@Choices
def _cabin_class(c):
  return ("main cabin",) if c == "economy" else ("front cabin",)


@Choices
def _class_reason(c):
  """The class as the reason for it: a company that pays for one cabin, a night to sleep."""
  if c == "economy":
    return ("my company only reimburses the main cabin",
            "I'm paying out of my own pocket, so the main cabin it is")
  return ("I have to sleep on the way, so I need a lie-flat seat",
          "it's an overnight trip and I need a lie-flat seat to work the next day")


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
        "bad_news_reply": ("Ok.", "Oh ok."),
        "confused": ("Sorry?", "Can you repeat?"),
        "filler": ("Sure.", "Ok.", "Alright, I will wait."),
    },
)

NUMERIC = CustomerFamily(
    name="numeric",
    about="Numeric dates ('01/05'), hyphen-joined codes ('ATL-SFO'), 'under 500', the name last.",
    date=_numeric, airport=_code, price=_bare, lowercase_name_p=0.3, name_last=True,
    noise=typing_noise.TypingNoise(lowercase=0.2, no_punctuation=0.2, typo=0.1),
    parts={
        "goal_book": ("[looking to buy|want to purchase] [a|one] ticket",),
        "goal_change": ("[need to|want to] reschedule my [trip|flight]",
                        "modify [existing|current] booking[ please|]"),
        "goal_cancel": ("[call off|drop] my [trip|flight] please", "want my trip cancelled"),
        "name": ("passenger name is {n}", "traveller: {n}", "{n} is the [traveller|passenger]",
                 "[and|oh and] [name|my name] is {n}"),
        "airports": ("{a}-{b}", "route {a}-{b}", "[flying|going] {a}-{b}",
                     "source {a}[,|] destination {b}", "source and destination {a}-{b}"),
        "dates": ("{d}-{r}", "dates {d} and {r}", "out on {d}, returning {r}",
                  "[travel|journey] dates {d} [and|to] {r}"),
        "time_both": ("dep {d}[,|] ret {r}",),
        "time_departure": ("dep {d}",),
        "time_return": ("ret {r}",),
        "class": ("cabin {c}", "cabin: {c}"),
        "price": ("not more than {p}", "{p} is my limit", "limit {p}",
                  "[under|below|less than] {p}[ only| pls|]"),
        "connections_0": ("0 stops", "0 stopovers", "no layovers",
                          "[need a|only] direct [flight|]"),
        "connections_1": ("1 layover at most", "1 stop max", "up to 1 connection",
                          "[single|1] [connection|lay-by] [ok|is ok|only]"),
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
        "filler": ("Sure, take your time.", "Ok, waiting.", "Ok.", "[Sure|Ok], no problem."),
    },
)

CITIES = CustomerFamily(
    name="cities",
    about="Cities, airport names and trip reasons, full month names, 'below 500'.",
    date=_spelled_month, airport=_city, price=_bare, time_of_day=_time_phrase,
    lowercase_name_p=0.2,
    noise=typing_noise.TypingNoise(lowercase=0.1, no_punctuation=0.1, typo=0.1),
    parts={
        "goal_book": ("I'm hoping to [purchase|buy] [a|one] ticket.",),
        "goal_change": ("I have to reschedule my [journey|travel plans].",),
        "goal_cancel": ("I'd like to call off my [journey|travel plans].",),
        "name": ("You can put it in the name of {n}.", "My name's {n}.",
                 "[Oh, and|And] [my name is|the name is] {n}."),
        "airports": ("[Travelling|Heading] from {a} to {b}.",
                     "[Visiting|Seeing] my [sister|brother|parents|grandparents|daughter|son|"
                     "friend|college roommate] in {b}, [leaving from|starting in|flying out of] "
                     "{a}.",
                     "I live in {a} and [need|want] to get to {b}[ for work| to see family|].",
                     "[Going|Heading] to {b} for a [wedding|conference|business meeting|"
                     "job interview|funeral|graduation], from {a}.",
                     "My source is {a} and destination is {b}."),
        "dates": ("[Heading out|Going] on {d} and [coming home|getting back] on {r}.",),
        "time_both": ("I'd like to set off {d} and fly home {r}.",),
        "time_departure": ("I'd like to set off {d}.",),
        "time_return": ("I'd like to fly home {r}.",),
        "class": ("I [would like|want] to fly {c}.",),
        "price": ("I can go up to {p} dollars.", "{p} dollars is the most I can pay.",
                  "[Under|Below] {p}[ if possible|, please|]."),
        "connections_0": ("I'd rather fly straight through.", "Without any stops, please.",
                          "[A direct|Only a direct] flight[, please|]."),
        "connections_1": ("A single layover is okay.", "One stopover at most.",
                          "A lay-by is [okay|alright]."),
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
        "filler": ("I'll hang on.", "Happy to wait.", "Sure, take your time.", "Ok."),
    },
)

SPOKEN = CustomerFamily(
    name="spoken",
    about="Dictated as on the phone: every number a word ('March the fifth', 'five hundred', "
          "'zero stops', 'around nine in the morning'), codes read out letter by letter ('S-E-A').",
    date=_spoken_date, airport=_spelled_code, price=_spoken_price, time_of_day=_spoken_time,
    flight_class=_spoken_class, noise=typing_noise.TypingNoise(lowercase=0.1),
    parts={
        "goal_book": ("[So, um,|Right, so] I'm calling to book a [flight|trip].",
                      "I'm ringing up about booking a [flight|trip]."),
        "goal_change": ("[So, um,|Right, so] I'm calling to change a flight I've already got.",
                        "I've got a booking I need to [change|amend]."),
        "goal_cancel": ("[So, um,|Right, so] I'm calling to cancel a trip.",
                        "I won't be travelling after all, so I need to cancel."),
        "name": ("It'd be under {n}.", "{n}, that's the name on my card."),
        "airports": ("Going out of {a} and into {b}.", "That'd be {a} to {b}.",
                     "[Setting off|Starting off] from {a} and ending up in {b}."),
        "dates": ("The way out is on {d} and the way back is on {r}.",
                  "I'd go on {d} and [come|fly] home on {r}."),
        "time_both": ("Going out {d}, and coming home {r}.",),
        "time_departure": ("Going out {d} would suit me.", "On the way out, {d} ideally."),
        "time_return": ("Coming home {r} would suit me.", "Flying back {r}, ideally."),
        "class": ("Put me {c}, [please|if you would].", "I'm happy to sit {c}."),
        "price": ("[Nothing over|No more than] {p}, if I can help it.",
                  "{p} at the very most.", "Keep it under {p} if you can."),
        "connections_0": ("Zero stops, if possible.",
                          "I'd want zero [stops|connections] the whole way."),
        "connections_1": ("Just the one [stop|connection], not two.",
                          "I can put up with one [stop|connection], not two."),
        "airline": ("One of the big airlines, if you can.", "I'd stick to the big airlines."),
        "no_time": ("Whatever time of day, I'm easy.",),
        "no_class": ("Any seat will do me.",),
        "no_connections": ("However many stops, I don't mind.",),
        "no_airline": ("Whoever flies it, I don't mind.",),
        "nothing_else": ("That's about it, I reckon.", "I reckon that's the lot."),
        "greeting": ("Hiya.", "Oh, hiya there."),
        "interjection": ("Mm-hm.", "Mm-hm, right."),
        "small_talk": ("Sorry, it's a bit noisy where I am.", "I'm just walking to my car."),
        "accept": ("Yeah, go on then.", "Brilliant, yes please."),
        "late_prefix": ("Oh, sorry, I should have said.",),
        "thanks": ("Thanks ever so much.", "Brilliant, thank you, bye now."),
        "thanks_anyway": ("Oh well, never mind, thanks.",),
        "bad_news_reply": ("Oh dear.",),
        "confused": ("Sorry, you're breaking up a bit.", "Sorry, the line's crackling."),
        "filler": ("Mm-hm, I'm still here.", "No rush."),
    },
)

FREQUENT_FLYER = CustomerFamily(
    name="frequent_flyer",
    about="Airline shorthand: formal airport names ('Sea-Tac', 'Denver International'), "
          "'05JUN', 'USD 500', '0900 hrs', 'main cabin', 'single segment', 'legacy carrier'.",
    date=_gds_date, airport=_airport_name, price=_currency_code, time_of_day=_hours_time,
    flight_class=_cabin_class, noise=typing_noise.TypingNoise(no_punctuation=0.1),
    parts={
        "goal_book": ("I need a new itinerary [booked|ticketed].",),
        "goal_change": ("I need to [amend|rebook] an existing itinerary.",),
        "goal_cancel": ("I need an existing itinerary cancelled.",),
        "name": ("Passenger name as on my passport: {n}.", "Ticketed name: {n}."),
        "airports": ("Routing {a} to {b}.", "{a} to {b}, round trip."),
        "dates": ("Outbound {d}, inbound {r}.",),
        "time_both": ("Outbound around {d}, inbound around {r}.",),
        "time_departure": ("Outbound around {d}.",),
        "time_return": ("Inbound around {r}.",),
        "class": ("{c}, [please|if available].", "Seat me in the {c}."),
        "price": ("Fare cap {p}.", "[Total|All-in] fare no higher than {p}."),
        "connections_0": ("Single segment each way.", "Only single-segment routings."),
        "connections_1": ("Two segments each way at most.", "Up to two segments per direction."),
        "airline": ("Legacy carriers only.", "A legacy carrier, please."),
        "no_time": ("Open on timing.",),
        "no_class": ("Open on cabin.",),
        "no_connections": ("Open on routing.",),
        "no_airline": ("Open on carrier.",),
        "nothing_else": ("Nothing further.",),
        "greeting": ("Hello, quick itinerary request.",),
        "interjection": ("Noted.",),
        "small_talk": ("I'm typing this from the lounge.",),
        "accept": ("Fine, issue it.", "Yes, issue the ticket."),
        "late_prefix": ("One more requirement.",),
        "thanks": ("Much appreciated.",),
        "thanks_anyway": ("Understood, thanks for trying.",),
        "bad_news_reply": ("Understood.",),
        "confused": ("Please clarify.",),
        "filler": ("Standing by.",),
    },
)

REASONS = CustomerFamily(
    name="reasons",
    about="Constraints as the reasons behind them ('my company caps the fare at $500.00', 'I get "
          "anxious on layovers'), clock times ('9am'), 'the 12th of May', formal airport names.",
    date=_ordinal_of_month, airport=_airport_name, price=_cents, time_of_day=_clock_time,
    flight_class=_class_reason, noise=typing_noise.TypingNoise(lowercase=0.1),
    parts={
        "goal_book": ("I [have to|need to] get to a [conference|job interview|family reunion], "
                      "so I need to book a flight.",),
        "goal_change": ("My [meeting|event] got moved, so I need to change my flight.",),
        "goal_cancel": ("The [event|conference] I was going to is off, so please cancel my "
                        "flight.",),
        "name": ("The trip is for me, {n}.", "I'm flying solo, under the name {n}."),
        "airports": ("I'm based near {a}, and [my client|the conference|my family] is near {b}.",
                     "{a} is my home airport, and I'm headed to {b} [for work|to see family]."),
        "dates": ("[I need to be there|My event starts] on {d}, and I'm [due back|back at work] "
                  "on {r}.",),
        "time_both": ("I'm free to fly out at {d}, and back at {r} because of work.",),
        "time_departure": ("[My meetings end|I finish work|The school run is done] by {d}, so I "
                           "can fly out then.",),
        "time_return": ("On the last day I'm tied up until {r}, so I'd fly home after that.",),
        "class": ("{c}.",),
        "price": ("My company caps the fare at {p}.",
                  "[Our|My] expense policy [allows|covers] up to {p}.",
                  "I'm paying for this myself, so {p} is the limit."),
        "connections_0": ("I get [anxious|nervous] on layovers, so I want to stay on one plane "
                          "the whole way.",),
        "connections_1": ("My [back|knee] can [handle|manage] one transfer, but no more.",),
        "airline": ("A budget airline lost my [bag|luggage] once, so I stick to the big "
                    "carriers.",),
        "no_time": ("My schedule is wide open.",),
        "no_class": ("Where I sit makes no difference to me.",),
        "no_connections": ("Layovers don't bother me.",),
        "no_airline": ("I have no loyalty to any carrier.",),
        "nothing_else": ("That covers all my constraints.",),
        "greeting": ("Hello, I'm hoping you can help.",),
        "interjection": ("Let me check my calendar.",),
        "small_talk": ("Work has been hectic.",),
        "accept": ("That fits my plans, go ahead.",),
        "late_prefix": ("I should also explain something.",),
        "thanks": ("Thank you, that helps a lot.",),
        "thanks_anyway": ("I'll have to rethink my plans, thanks anyway.",),
        "bad_news_reply": ("That's inconvenient.",),
        "confused": ("I'm not following, sorry.",),
        "filler": ("Okay, I'll wait while you look.",),
    },
)

FAMILIES: Mapping[str, CustomerFamily] = types.MappingProxyType(
    {f.name: f for f in (TEMPLATE, CASUAL, DAYFIRST, NUMERIC, CITIES, SPOKEN, FREQUENT_FLYER,
                         REASONS)})
