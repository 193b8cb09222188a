"""Names people use for AirDialogue values: cities and airports, months, number words.

Both sides share these lists: the phrasing families render a value with them
(a customer says "Chicago" or "O'Hare" instead of ORD) and the slot parser
reads them back. A city that has two airports in `context.AIRPORTS`
(Chicago, Houston, New York, Washington) maps to both; whoever reads it
resolves it against the airports it can see. `AIRPORT_NAMES` are formal
airport names that no training family says, kept apart from `ALIASES` so that
a held-out family can own them.
"""

from __future__ import annotations

import types

from data_pipelines.airdialogue import schema

# Code -> the city it serves.
CITY = types.MappingProxyType({
    "ATL": "Atlanta", "AUS": "Austin", "BNA": "Nashville", "BOS": "Boston", "BWI": "Baltimore",
    "CLE": "Cleveland", "CLT": "Charlotte", "DCA": "Washington", "DEN": "Denver",
    "DFW": "Dallas", "DTW": "Detroit", "EWR": "Newark", "HNL": "Honolulu", "HOU": "Houston",
    "IAD": "Washington", "IAH": "Houston", "JFK": "New York", "LAS": "Las Vegas",
    "LAX": "Los Angeles", "LGA": "New York", "MCO": "Orlando", "MDW": "Chicago", "MIA": "Miami",
    "MSP": "Minneapolis", "MSY": "New Orleans", "OAK": "Oakland", "ORD": "Chicago",
    "PDX": "Portland", "PHL": "Philadelphia", "PHX": "Phoenix", "PIT": "Pittsburgh",
    "SAN": "San Diego", "SEA": "Seattle", "SFO": "San Francisco", "SJC": "San Jose",
    "SLC": "Salt Lake City", "STL": "St. Louis", "TPA": "Tampa",
})
# Code -> other names of that airport or city, each naming only that code.
ALIASES = types.MappingProxyType({
    "DCA": ("Reagan National", "Washington Reagan"), "IAD": ("Dulles", "Washington Dulles"),
    "HOU": ("Hobby", "Houston Hobby"), "IAH": ("Bush Intercontinental", "Houston Intercontinental"),
    "JFK": ("Kennedy", "New York JFK"), "LGA": ("LaGuardia", "La Guardia"),
    "MDW": ("Midway", "Chicago Midway"), "ORD": ("O'Hare", "Chicago O'Hare"), "LAS": ("Vegas",),
    "PHL": ("Philly",),
    "MSY": ("Nola",), "SFO": ("San Fran",), "SLC": ("Salt Lake",),
    "STL": ("Saint Louis", "St Louis"), "DFW": ("Dallas Fort Worth",), "MSP": ("Twin Cities",),
})

# Code -> formal airport names; none of them is a city, an alias or a person's name.
AIRPORT_NAMES = types.MappingProxyType({
    "ATL": ("Hartsfield-Jackson", "Atlanta Hartsfield"), "AUS": ("Austin-Bergstrom",),
    "BNA": ("Nashville International",), "BOS": ("Logan", "Boston Logan"),
    "BWI": ("Thurgood Marshall",), "CLE": ("Cleveland Hopkins", "Hopkins International"),
    "CLT": ("Charlotte Douglas",), "DCA": ("Washington National", "National Airport"),
    "DEN": ("Denver International",), "DFW": ("Dallas/Fort Worth International",),
    "DTW": ("Detroit Metro", "Detroit Metropolitan"), "EWR": ("Newark Liberty",),
    "HNL": ("Honolulu International",), "HOU": ("Hobby Airport",),
    "IAD": ("Dulles International",), "IAH": ("Intercontinental Airport",),
    "JFK": ("Kennedy International", "Kennedy Airport"), "LAS": ("Harry Reid", "McCarran"),
    "LAX": ("Los Angeles International",), "LGA": ("LaGuardia Airport",),
    "MCO": ("Orlando International",), "MDW": ("Midway Airport",),
    "MIA": ("Miami International",), "MSP": ("Minneapolis International",),
    "MSY": ("Louis Armstrong", "Armstrong International"), "OAK": ("Oakland International",),
    "ORD": ("O'Hare International",), "PDX": ("Portland International",),
    "PHL": ("Philadelphia International",), "PHX": ("Sky Harbor", "Phoenix Sky Harbor"),
    "PIT": ("Pittsburgh International",), "SAN": ("Lindbergh Field",),
    "SEA": ("Sea-Tac", "Seattle-Tacoma"), "SFO": ("San Francisco International",),
    "SJC": ("Mineta", "San Jose Mineta"), "SLC": ("Salt Lake City International",),
    "STL": ("Lambert", "Lambert Field"), "TPA": ("Tampa International",),
})


def names_by_text() -> dict[str, tuple[str, ...]]:
  """Lower-cased city or airport name -> the codes it may mean (two for a shared city)."""
  out: dict[str, tuple[str, ...]] = {}
  for code, city in CITY.items():
    out[city.lower()] = out.get(city.lower(), ()) + (code,)
  for names in (ALIASES, AIRPORT_NAMES):
    for code, aliases in names.items():
      for alias in aliases:
        out[alias.lower()] = (code,)
  return out


MONTH_NAMES = types.MappingProxyType(dict(zip(schema.MONTHS, (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December"))))
_MONTH_SPELLINGS = {
    "Jan": ("jan", "january"), "Feb": ("feb", "february"), "Mar": ("mar", "march"),
    "Apr": ("apr", "april"), "May": ("may",), "June": ("jun", "june"), "July": ("jul", "july"),
    "Aug": ("aug", "august"), "Sept": ("sep", "sept", "september"), "Oct": ("oct", "october"),
    "Nov": ("nov", "november"), "Dec": ("dec", "december"),
}
MONTH_BY_SPELLING = types.MappingProxyType(
    {spelling: month for month, spellings in _MONTH_SPELLINGS.items() for spelling in spellings})

NUMBER_WORDS = types.MappingProxyType({
    "zero": 0, "no": 0, "one": 1, "a": 1, "single": 1, "two": 2, "three": 3, "four": 4,
    "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
})
MULTIPLIERS = types.MappingProxyType({"hundred": 100, "thousand": 1000, "k": 1000, "grand": 1000})


def spell_price(amount: int) -> str:
  """200 -> 'two hundred', 1000 -> 'one thousand' (the budget values of the priors)."""
  words = {n: w for w, n in NUMBER_WORDS.items() if w not in ("no", "a", "single")}
  if amount % 1000 == 0 and amount // 1000 in words:
    return f"{words[amount // 1000]} thousand"
  if amount % 100 == 0 and amount // 100 in words:
    return f"{words[amount // 100]} hundred"
  raise ValueError(f"price {amount}: no spelled form (only whole hundreds or thousands up to 10)")


_UNITS = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen")
_UNIT_ORDINALS = ("", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
                  "ninth", "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth",
                  "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth")
_TENS = {20: ("twenty", "twentieth"), 30: ("thirty", "thirtieth")}


def number_word(n: int) -> str:
  """1..39 in words: 'seven', 'twenty-three'."""
  if not 1 <= n <= 39:
    raise ValueError(f"number {n}: only 1..39 have a word here")
  if n < 20:
    return _UNITS[n]
  tens, unit = _TENS[n - n % 10][0], n % 10
  return f"{tens}-{_UNITS[unit]}" if unit else tens


def ordinal_word(day: str | int) -> str:
  """A day of the month as an ordinal word: 5 -> 'fifth', 23 -> 'twenty-third'."""
  n = int(day)
  if not 1 <= n <= 31:
    raise ValueError(f"day {n}: not a day of the month")
  if n < 20:
    return _UNIT_ORDINALS[n]
  tens, unit = _TENS[n - n % 10], n % 10
  return f"{tens[0]}-{_UNIT_ORDINALS[unit]}" if unit else tens[1]


DAY_BY_ORDINAL_WORD = types.MappingProxyType({ordinal_word(d): d for d in range(1, 32)})


def ordinal(day: str | int) -> str:
  n = int(day)
  suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
  return f"{n}{suffix}"
