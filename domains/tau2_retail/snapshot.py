"""A frozen database that hands every episode its own deep copy, cheaply.

An episode's copy is made lazily, record by record: its collections (`Records`) start as views
of the snapshot's pickled records and unpickle a record the first time the episode reaches it
(by id, or by iterating the collection), and from then on the episode holds that private copy.
Nothing of the snapshot is reachable otherwise, so no episode can change it or another episode;
and a fresh copy costs microseconds instead of the ~25 ms of unpickling the 1,000 orders, 500
users and 50 products at once.

The state hash uses the same split: an untouched record's canonical JSON is the snapshot's,
made once; only the records an episode reached are serialized again (`db.canonical_text`).
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Iterator, Mapping, MutableMapping

from domains.tau2_retail import db as db_lib


@dataclasses.dataclass(frozen=True)
class _Frozen:
  """One collection of a snapshot: each record pickled and as canonical JSON, in file order."""

  keys: tuple[str, ...]
  pickled: Mapping[str, bytes]
  texts: Mapping[str, str]

  @classmethod
  def of(cls, records: Mapping[str, Any]) -> "_Frozen":
    return cls(tuple(records),
               {k: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL) for k, v in records.items()},
               {k: db_lib.canonical_json(v.to_json()) for k, v in records.items()})


class Records(MutableMapping[str, Any]):
  """An episode's collection: records by id, each unpickled from the snapshot when first read.

  `in` and `len` read no record; iteration yields ids in the file's order (so a search finds
  the same first match as on the plain database)."""

  def __init__(self, frozen: _Frozen, keys: dict[str, None] | None = None,
               live: dict[str, Any] | None = None):
    self._frozen = frozen
    self._keys = dict.fromkeys(frozen.keys) if keys is None else keys  # An ordered set.
    self._live = {} if live is None else live  # The records this episode holds.

  def __getitem__(self, key: str) -> Any:
    record = self._live.get(key)
    if record is None:
      if key not in self._keys:
        raise KeyError(key)
      record = self._live[key] = pickle.loads(self._frozen.pickled[key])
    return record

  def __setitem__(self, key: str, value: Any) -> None:
    self._keys[key] = None
    self._live[key] = value

  def __delitem__(self, key: str) -> None:
    del self._keys[key]
    self._live.pop(key, None)

  def __contains__(self, key: object) -> bool:
    return key in self._keys

  def __iter__(self) -> Iterator[str]:
    return iter(list(self._keys))

  def __len__(self) -> int:
    return len(self._keys)

  def copy(self) -> "Records":
    """An independent deep copy: the records read so far copied, the others still shared."""
    live = pickle.loads(pickle.dumps(self._live, protocol=pickle.HIGHEST_PROTOCOL))
    return Records(self._frozen, dict(self._keys), live)

  def canonical_items(self) -> Iterator[tuple[str, str]]:
    """(id, canonical JSON) by sorted id; untouched records give the snapshot's text."""
    for key in sorted(self._keys):
      record = self._live.get(key)
      yield key, (self._frozen.texts[key] if record is None
                  else db_lib.canonical_json(record.to_json()))

  @property
  def touched(self) -> int:
    """How many records this episode has read (and so holds)."""
    return len(self._live)


class Snapshot:
  """A database frozen at construction; `fresh()` is an episode's own deep copy of it."""

  def __init__(self, database: db_lib.Database):
    self._collections = [_Frozen.of(getattr(database, name)) for name in db_lib.COLLECTIONS]
    self._hash: str | None = None

  def fresh(self) -> db_lib.Database:
    return db_lib.Database(*(Records(frozen) for frozen in self._collections))

  def state_hash(self) -> str:
    if self._hash is None:
      self._hash = db_lib.state_hash(self.fresh())
    return self._hash
