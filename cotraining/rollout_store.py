"""The latest rollout batches on disk, so a run resumed inside a batch trains on the same rows.

A rollout batch is sampled with the parameters of the step that starts it;
a checkpoint taken inside the batch (checkpoint_every not a multiple of the
steps per batch, or a SIGTERM save) holds later parameters, from which the
batch cannot be sampled again. The source keeps each prepared batch as
`<dir>/rollout_<index>.npz` (written atomically) and the resumed run reads
it back. Only the last `keep` batches are kept: enough to reach back past
the latest checkpoint.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

import numpy as np

_NAME = re.compile(r"^rollout_(\d+)\.npz$")


class RolloutStore:

  def __init__(self, directory: str, keep: int):
    if keep < 1:
      raise ValueError(f"RolloutStore: keep={keep} must be >= 1")
    self.directory, self.keep = directory, keep
    os.makedirs(directory, exist_ok=True)

  def _path(self, index: int) -> str:
    return os.path.join(self.directory, f"rollout_{index}.npz")

  def indices(self) -> list[int]:
    return sorted(int(m.group(1)) for m in map(_NAME.match, os.listdir(self.directory)) if m)

  def save(self, index: int, arrays: Mapping[str, np.ndarray]) -> None:
    partial = self._path(index) + ".partial"
    with open(partial, "wb") as f:
      np.savez(f, **arrays)
    os.replace(partial, self._path(index))
    for old in self.indices()[:-self.keep]:
      os.remove(self._path(old))

  def load(self, index: int) -> dict[str, np.ndarray] | None:
    """Batch `index` as saved, or None if it is not kept."""
    if not os.path.exists(self._path(index)):
      return None
    with np.load(self._path(index)) as saved:
      return {k: saved[k] for k in saved.files}
