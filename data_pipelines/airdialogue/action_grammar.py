"""The text form of a final action inside an agent utterance, and its parser.

An agent (scripted, human or a tiny LM decoding token by token) ends the
dialogue by writing one block such as

    [action] status=book flight=1012 name= John Smith [/action]

Fields come in a fixed order, and `name` comes last so that it may hold spaces
without quoting. The space after `name=` is for the model: byte-level BPE
reads "=John" as "=", "John" but the customer's "This is John Smith" as
" John", so without it copying the name means mapping between two token ids
per name instead of repeating one (the parser accepts both forms). `flight` is `none` for an empty flight list and a
comma-separated list otherwise (expected actions may list several tied
flights). The fixed order and few literal tokens keep the block easy for a
small model to produce and leave little room for ambiguity when parsing.
"""

from __future__ import annotations

import re

from data_pipelines.airdialogue import schema

OPEN_TAG = "[action]"
CLOSE_TAG = "[/action]"
NO_FLIGHT = "none"

_BLOCK_RE = re.compile(r"\[action\](.*?)\[/action\]", re.IGNORECASE | re.DOTALL)
_BODY_RE = re.compile(
    r"^\s*status\s*=\s*(?P<status>\S+)\s+flight\s*=\s*(?P<flight>\S+)\s+name\s*=(?P<name>.*)$",
    re.IGNORECASE | re.DOTALL)
_FORBIDDEN_NAME_CHARS = ("[", "]", "\n", "\r")


class ActionParseError(ValueError):
  """The text holds no well-formed action block; the message says why."""


def format_action(action: schema.Action) -> str:
  """The block an agent writes for `action`; raises ValueError if it cannot round-trip."""
  if action.status not in schema.STATUSES:
    raise ValueError(f"status {action.status!r} is not one of {schema.STATUSES}")
  if action.name != action.name.strip() or any(c in action.name for c in _FORBIDDEN_NAME_CHARS):
    raise ValueError(f"name {action.name!r} has surrounding whitespace, brackets or line breaks")
  flight = ",".join(str(n) for n in action.flights) if action.flights else NO_FLIGHT
  return f"{OPEN_TAG} status={action.status} flight={flight} name= {action.name} {CLOSE_TAG}"


def contains_action(text: str) -> bool:
  """Whether `text` holds an action block (well-formed or not)."""
  return OPEN_TAG in text.lower()


def strip_action(text: str) -> str:
  """`text` without its action blocks: what the utterance says to the other side."""
  return " ".join(_BLOCK_RE.sub(" ", text).split())


def replace_action(text: str, action: schema.Action) -> str:
  """`text` with its first action block replaced by `action`'s (ValueError if it has none)."""
  if _BLOCK_RE.search(text) is None:
    raise ValueError(f"no '{OPEN_TAG} ... {CLOSE_TAG}' block in {text!r}")
  return _BLOCK_RE.sub(lambda _: format_action(action), text, count=1)


def parse_action(text: str) -> schema.Action:
  """The Action in the single action block of `text`; ActionParseError otherwise."""
  blocks = _BLOCK_RE.findall(text)
  if not blocks:
    if OPEN_TAG in text.lower():
      raise ActionParseError(f"'{OPEN_TAG}' is never closed by '{CLOSE_TAG}'")
    raise ActionParseError(f"no '{OPEN_TAG} ... {CLOSE_TAG}' block")
  if len(blocks) > 1:
    raise ActionParseError(f"{len(blocks)} action blocks; exactly one is allowed")
  body = blocks[0]
  m = _BODY_RE.match(body)
  if m is None:
    raise ActionParseError(f"block body {body.strip()!r} is not 'status=S flight=F name=N'")
  status = m["status"].lower()
  if status not in schema.STATUSES:
    raise ActionParseError(f"status {m['status']!r} is not one of {schema.STATUSES}")
  flight = m["flight"]
  if flight.lower() == NO_FLIGHT:
    flights: tuple[int, ...] = ()
  else:
    parts = flight.split(",")
    if not all(p.isascii() and p.isdigit() for p in parts):
      raise ActionParseError(f"flight {flight!r} is not '{NO_FLIGHT}' or comma-separated numbers")
    flights = tuple(int(p) for p in parts)
  name = m["name"].strip()
  if any(c in name for c in _FORBIDDEN_NAME_CHARS):
    raise ActionParseError(f"name {name!r} contains brackets or line breaks")
  return schema.Action(status=status, name=name, flights=flights)
