"""Typed access to parsed JSON whose every error names the file and the field's path.

db.json and tasks.json are read through it, so a bad record says where it is, e.g.
`.../db.json: orders['#W2611340'].items[0].price: expected a number, got str`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, TypeVar

T = TypeVar("T")


class FormatError(ValueError):
  """A JSON file that does not have the expected form; the message names file and field."""


class Reader:
  """Reads fields of one file; `error` is the FormatError subclass it raises."""

  def __init__(self, path: str, error: type[FormatError] = FormatError):
    self.path = path
    self.error = error

  def fail(self, where: str, why: str) -> FormatError:
    return self.error(f"{self.path}: {where}: {why}")

  def record(self, value: Any, where: str, required: tuple[str, ...],
             optional: tuple[str, ...] = ()) -> Mapping[str, Any]:
    """An object with every `required` key and no key outside `required` and `optional`."""
    if not isinstance(value, dict):
      raise self.fail(where, f"expected an object, got {type(value).__name__}")
    for key in required:
      if key not in value:
        raise self.fail(f"{where}.{key}", "missing")
    for key in value:
      if key not in required and key not in optional:
        raise self.fail(f"{where}.{key}", "unknown field")
    return value

  def string(self, value: Any, where: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str):
      raise self.fail(where, f"expected a string, got {type(value).__name__}")
    if choices is not None and value not in choices:
      raise self.fail(where, f"{value!r} is not one of {list(choices)}")
    return value

  def number(self, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise self.fail(where, f"expected a number, got {type(value).__name__}")
    return float(value)

  def boolean(self, value: Any, where: str) -> bool:
    if not isinstance(value, bool):
      raise self.fail(where, f"expected true or false, got {type(value).__name__}")
    return value

  def strings(self, value: Any, where: str) -> list[str]:
    return self.list_of(value, where, self.string)

  def string_map(self, value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
      raise self.fail(where, f"expected an object, got {type(value).__name__}")
    return {k: self.string(v, f"{where}.{k}") for k, v in value.items()}

  def list_of(self, value: Any, where: str, read: Callable[[Any, str], T]) -> list[T]:
    if not isinstance(value, list):
      raise self.fail(where, f"expected a list, got {type(value).__name__}")
    return [read(v, f"{where}[{i}]") for i, v in enumerate(value)]

  def keyed(self, value: Any, where: str, id_field: str,
            read: Callable[[Any, str], T]) -> dict[str, T]:
    """An object of records by id; each record's `id_field` must equal its key."""
    if not isinstance(value, dict):
      raise self.fail(where, f"expected an object, got {type(value).__name__}")
    out = {}
    for key, record in value.items():
      at = f"{where}[{key!r}]"
      out[key] = read(record, at)
      if getattr(out[key], id_field) != key:
        raise self.fail(f"{at}.{id_field}",
                        f"{getattr(out[key], id_field)!r} differs from its key {key!r}")
    return out

  def optional(self, obj: Mapping[str, Any], key: str, where: str,
               read: Callable[[Any, str], T]) -> T | None:
    """`read` of obj[key], or None when the key is absent or null."""
    value = obj.get(key)
    return None if value is None else read(value, f"{where}.{key}")
