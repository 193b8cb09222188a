"""One dialogue type for every dataset, and its JSON-lines reader and writer.

Every task (AirDialogue, Persuasion for Good, a user's own) is converted into
`Dialogue` once; tokenization, the token-level MDP and evaluation only ever see
this type, so adding a dataset means writing one converter.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterable, Iterator, Mapping


class DialogueFormatError(ValueError):
  """A record that cannot be read; the message names file, line and field."""


@dataclasses.dataclass(frozen=True)
class Turn:
  speaker: str  # A role name of the dialogue, e.g. "agent" / "customer".
  text: str
  reward: float | None = None  # Optional per-turn reward, placed on the turn's last token.


@dataclasses.dataclass(frozen=True)
class Dialogue:
  """Speaker-tagged turns plus what each side privately knows and how it ended.

  `context[role]` is that role's private scenario (for AirDialogue the agent's
  flight table and reservation, the customer's intent; for P4G the persona).
  `outcome` is the episode return credited at the end (e.g. 1.0 for an
  AirDialogue success, donation / 2 for P4G).
  """

  dialogue_id: str
  roles: tuple[str, ...]
  turns: tuple[Turn, ...]
  context: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  outcome: float = 0.0
  meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict[str, Any]:
    return {
        "dialogue_id": self.dialogue_id,
        "roles": list(self.roles),
        "turns": [
            {"speaker": t.speaker, "text": t.text, **({} if t.reward is None else {"reward": t.reward})}
            for t in self.turns
        ],
        "context": {k: dict(v) for k, v in self.context.items()},
        "outcome": self.outcome,
        "meta": dict(self.meta),
    }

  @classmethod
  def from_json(cls, obj: Any, where: str = "<json>") -> "Dialogue":
    """Builds a Dialogue, raising DialogueFormatError naming `where` and the field."""

    def fail(field: str, why: str) -> DialogueFormatError:
      return DialogueFormatError(f"{where}: field '{field}': {why}")

    if not isinstance(obj, dict):
      raise fail("<record>", f"expected a JSON object, got {type(obj).__name__}")
    for key, typ in (("dialogue_id", str), ("roles", list), ("turns", list)):
      if key not in obj:
        raise fail(key, "missing")
      if not isinstance(obj[key], typ):
        raise fail(key, f"expected {typ.__name__}, got {type(obj[key]).__name__}")
    roles = tuple(obj["roles"])
    if not roles or not all(isinstance(r, str) for r in roles):
      raise fail("roles", "expected a non-empty list of strings")
    turns = []
    for i, t in enumerate(obj["turns"]):
      if not isinstance(t, dict):
        raise fail(f"turns[{i}]", "expected an object")
      if t.get("speaker") not in roles:
        raise fail(f"turns[{i}].speaker", f"{t.get('speaker')!r} is not one of roles {list(roles)}")
      if not isinstance(t.get("text"), str):
        raise fail(f"turns[{i}].text", "expected a string")
      reward = t.get("reward")
      if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        raise fail(f"turns[{i}].reward", "expected a number")
      turns.append(Turn(t["speaker"], t["text"], None if reward is None else float(reward)))
    context = obj.get("context", {})
    if not isinstance(context, dict) or not all(isinstance(v, dict) for v in context.values()):
      raise fail("context", "expected an object of objects keyed by role")
    outcome = obj.get("outcome", 0.0)
    if isinstance(outcome, bool) or not isinstance(outcome, (int, float)):
      raise fail("outcome", "expected a number")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
      raise fail("meta", "expected an object")
    return cls(obj["dialogue_id"], roles, tuple(turns), context, float(outcome), meta)


def write_jsonl(path: str, dialogues: Iterable[Dialogue]) -> int:
  n = 0
  with open(path, "w", encoding="utf-8") as f:
    for d in dialogues:
      f.write(json.dumps(d.to_json(), ensure_ascii=False) + "\n")
      n += 1
  return n


def read_jsonl(path: str, lines: tuple[int, int] | None = None) -> Iterator[Dialogue]:
  """Streams dialogues; a bad line raises DialogueFormatError with `path:line`.

  `lines` = (first, end): only line numbers first <= n < end (1-based) are parsed,
  so parallel workers each parse their own block of the file."""
  first, end = lines or (1, None)
  with open(path, encoding="utf-8") as f:
    for lineno, line in enumerate(f, start=1):
      if lineno < first:
        continue
      if end is not None and lineno >= end:
        break
      if not line.strip():
        continue
      where = f"{path}:{lineno}"
      try:
        obj = json.loads(line)
      except json.JSONDecodeError as e:
        raise DialogueFormatError(f"{where}: field '<record>': malformed JSON ({e.msg})") from None
      yield Dialogue.from_json(obj, where)
