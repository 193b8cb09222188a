"""AirDialogue samples as generic `Dialogue`s, and each side's private context as text.

The agent's final action must be visible in its turns, because that is what a
trained agent has to write. Our self-play corpus already ends the agent's last
action-bearing utterance with the action block. Official human dialogues do
not: for them the block is APPENDED TO THE AGENT'S LAST UTTERANCE (or, if the
agent never spoke, added as a final agent turn), so any customer lines after it
("thanks, bye") stay where they were, the same shape as self-play dialogues.
Consecutive lines of one speaker are kept as separate turns, as written.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Mapping

from data_pipelines import dialogue as dialogue_lib
from data_pipelines.airdialogue import action_grammar
from data_pipelines.airdialogue import official_io
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import scorer

ROLES = ("customer", "agent")


class ConversionError(ValueError):
  """A sample that cannot become a Dialogue; the message names where and which field."""


def _turns(lines: tuple[str, ...], where: str) -> list[dialogue_lib.Turn]:
  turns = []
  for i, line in enumerate(lines):
    speaker, sep, text = line.partition(":")
    if not sep or speaker not in ROLES:
      raise ConversionError(f"{where}: field 'dialogue[{i}]': expected 'customer: ...' or "
                            f"'agent: ...', got {line[:60]!r}")
    turns.append(dialogue_lib.Turn(speaker, text.strip()))
  return turns


def _attach_action(turns: list[dialogue_lib.Turn], action: schema.Action | None, where: str) -> str:
  """Makes the agent's last turn carry the action; returns how ("present", "appended", "absent")."""
  agent_idx = [i for i, t in enumerate(turns) if t.speaker == "agent"]
  with_block = [i for i in agent_idx if action_grammar.contains_action(turns[i].text)]
  if with_block:
    i = with_block[-1]
    if i != agent_idx[-1]:
      raise ConversionError(
          f"{where}: field 'dialogue': the action block is not in the agent's last turn")
    if action is not None:
      try:
        written = action_grammar.parse_action(turns[i].text)
      except action_grammar.ActionParseError as e:
        raise ConversionError(f"{where}: field 'dialogue[{i}]': {e}") from None
      if written.to_json() != schema.Action(action.status, action.name, action.flights).to_json():
        raise ConversionError(f"{where}: field 'action': {action.to_json()} differs from the block "
                              f"in the agent's last turn {written.to_json()}")
    return "present"
  if action is None:
    return "absent"
  # The scorer compares names stripped and whitespace-collapsed, so doing the
  # same here changes nothing about success and lets any name be written.
  try:
    block = action_grammar.format_action(
        schema.Action(action.status, " ".join(action.name.split()), action.flights))
  except ValueError as e:
    raise ConversionError(f"{where}: field 'action': {e}") from None
  if agent_idx:
    i = agent_idx[-1]
    turns[i] = dialogue_lib.Turn("agent", f"{turns[i].text} {block}".strip())
  else:
    turns.append(dialogue_lib.Turn("agent", block))
  return "appended"


def _outcome(sample: schema.Sample, where: str) -> float:
  if sample.correct_sample is not None:
    return float(sample.correct_sample)
  if sample.action is None or sample.expected_action is None:
    raise ConversionError(f"{where}: field 'correct_sample': absent, and without both 'action' and "
                          "'expected_action' it cannot be recomputed")
  return float(scorer.is_success(sample.action, sample.expected_action))


def sample_to_dialogue(sample: schema.Sample, dialogue_id: str,
                       where: str | None = None) -> dialogue_lib.Dialogue:
  """One official Sample as a Dialogue; `where` (default: the id) prefixes error messages."""
  where = where or dialogue_id
  if sample.table is None:
    raise ConversionError(
        f"{where}: field 'kb': no flight table (read data.json together with kb.json)")
  turns = _turns(sample.dialogue, where)
  action_in_text = _attach_action(turns, sample.action, where)
  meta: dict[str, Any] = dict(sample.extra)
  meta["action_in_text"] = action_in_text
  if sample.action is not None:
    meta["action"] = sample.action.to_json()
  if sample.expected_action is not None:
    meta["expected_action"] = sample.expected_action.to_json()
  if sample.correct_sample is not None:
    meta["correct_sample"] = sample.correct_sample
  return dialogue_lib.Dialogue(
      dialogue_id=dialogue_id,
      roles=ROLES,
      turns=tuple(turns),
      context={"agent": sample.table.to_json(), "customer": sample.intent.to_json()},
      outcome=_outcome(sample, where),
      meta=meta,
  )


def read_dialogues(data_path: official_io.PathLike,
                   kb_path: official_io.PathLike) -> Iterator[dialogue_lib.Dialogue]:
  """Streams official files as Dialogues with ids `<data file name>:<line>`."""
  name = os.path.basename(os.fspath(data_path))
  for line, sample in official_io.enumerate_samples(data_path, kb_path):
    yield sample_to_dialogue(sample, f"{name}:{line}", where=f"{os.fspath(data_path)}:{line}")


# --- Context as text ---------------------------------------------------------


def _field(ctx: Mapping[str, Any], key: str, role: str) -> Any:
  if key not in ctx:
    raise ConversionError(f"context '{role}': field '{key}': missing")
  return ctx[key]


def _flight_line(f: Mapping[str, Any]) -> str:
  """E.g. `1012 UA DFW>STL Apr 29 3h May 1 15h economy 1c $200` (hours 0-23, c = connections)."""

  def g(key: str) -> Any:
    return _field(f, key, "agent")

  return (f"{g('flight_number')} {g('airline')} {g('departure_airport')}>{g('return_airport')} "
          f"{g('departure_month')} {g('departure_day')} {g('departure_time_num')}h "
          f"{g('return_month')} {g('return_day')} {g('return_time_num')}h "
          f"{g('class')} {g('num_connections')}c ${g('price')}")


_INTENT_KEYS = ("name", "goal", "departure_airport", "return_airport", "departure_month",
                "departure_day", "return_month", "return_day", "departure_time", "return_time",
                "class", "max_price", "max_connections", "airline_preference")
_REQUIRED_INTENT_KEYS = _INTENT_KEYS[:8] + ("max_price",)


def serialize_context(role: str, ctx: Mapping[str, Any]) -> str:
  """A side's private context as compact text, for models that read context as tokens.

  agent: a `reservation: N|none` line, then one line per flight (see
  `_flight_line`). customer: one `key: value` line per intent field present, in
  a fixed order; absent constraints are left out, as in the official intent.
  """
  if role == "agent":
    reservation = _field(ctx, "reservation", role)
    flights = _field(ctx, "kb", role)
    head = f"reservation: {reservation if reservation != schema.NO_RESERVATION else 'none'}"
    return "\n".join([head] + [_flight_line(f) for f in flights])
  if role == "customer":
    for key in _REQUIRED_INTENT_KEYS:
      _field(ctx, key, role)
    return "\n".join(f"{key}: {ctx[key]}" for key in _INTENT_KEYS if ctx.get(key) is not None)
  raise ConversionError(f"unknown role {role!r}; expected one of {ROLES}")
