"""Population Co-Training's pool: the last few saved checkpoints of the co-trained simulator.

Against one simulator, even a co-trained one, the policy learns that
simulator's habits (docs/METHODS.md, Online RL and Co-Training). The pool keeps the simulator as it was at
several points of training, FIFO: up to `capacity` (10) members, one saved
every `add_every` (16) steps, the oldest leaving when a new one joins. Before
each rollout batch a drawn member plays the user (`draw`: every member once per round).

Before each rollout batch at step s and index r, the caller does

    population.update(s, save)      # save(path) writes the simulator there, when one is due
    opponent_dir = population.sample(r)

The draw for batch r comes from (seed, r) alone, so a resumed run draws the
same members. The pool lives under the workdir (`<workdir>/population`): one
directory per member (written to `.partial`, then renamed) and
`population.json`, the history of adds in order. After a restore to step s,
`resume(s)` forgets the adds after s (the replay adds them again), so the
pool is again what it was at s; members evicted after s are needed again,
so an evicted member's directory is deleted only `retain` adds later (set
retain >= checkpoint_every / add_every).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Callable, Sequence

import numpy as np

from data_pipelines import files

DIRECTORY = "population"  # Under the workdir.
MANIFEST = "population.json"
DEFAULT_CAPACITY = 10
DEFAULT_ADD_EVERY = 16
_SAMPLE_STREAM = 0x504F50  # SeedSequence spawn key of the member draws, apart from others.


class Population:
  """A FIFO pool of simulator checkpoint directories (module docstring)."""

  def __init__(self, directory: str, capacity: int = DEFAULT_CAPACITY,
               add_every: int = DEFAULT_ADD_EVERY, seed: int = 0, retain: int = 1):
    if capacity < 1 or add_every < 1 or retain < 0:
      raise ValueError(f"Population: capacity={capacity} and add_every={add_every} must be "
                       f">= 1, retain={retain} >= 0")
    self.directory, self.capacity, self.add_every = directory, capacity, add_every
    self.seed, self.retain = seed, retain
    os.makedirs(directory, exist_ok=True)
    manifest = os.path.join(directory, MANIFEST)
    self.steps: list[int] = []  # The step of every add, oldest first.
    if os.path.exists(manifest):
      with open(manifest) as f:
        self.steps = json.load(f)["steps"]

  def path(self, step: int) -> str:
    return os.path.join(self.directory, f"step_{step:08d}")

  @property
  def members(self) -> list[str]:
    """The members' directories, oldest first."""
    return [self.path(s) for s in self.steps[-self.capacity:]]

  def due(self, step: int) -> bool:
    return not self.steps or step >= self.steps[-1] + self.add_every

  def update(self, step: int, save: Callable[[str], None]) -> str | None:
    """Adds the simulator as of `step` when one is due; its directory, or None."""
    return self.add(step, save) if self.due(step) else None

  def add(self, step: int, save: Callable[[str], None]) -> str:
    """`save(path)` writes the simulator's checkpoint there; it joins, and the oldest member
    beyond capacity leaves."""
    if self.steps and step <= self.steps[-1]:
      raise ValueError(f"Population.add: step {step} is not after the last add "
                       f"({self.steps[-1]}); after a restore, call resume(step) first")
    path = self.path(step)
    partial = path + ".partial"
    shutil.rmtree(partial, ignore_errors=True)  # A save cut short before a restart.
    save(partial)
    os.replace(partial, path)
    self.steps.append(step)
    self._write()
    for old in self.steps[:-(self.capacity + self.retain)]:
      shutil.rmtree(self.path(old), ignore_errors=True)
    return path

  def resume(self, step: int) -> None:
    """The pool as it was at `step` (a restored checkpoint): later adds are forgotten."""
    for later in [s for s in self.steps if s > step]:
      shutil.rmtree(self.path(later), ignore_errors=True)
    self.steps = [s for s in self.steps if s <= step]
    self._write()
    missing = [m for m in self.members if not os.path.isdir(m)]
    if missing:
      raise ValueError(f"Population.resume({step}): members {missing} were deleted after they "
                       f"left the pool; retain={self.retain} is too small for this resume")

  def sample(self, batch_index: int) -> str:
    """The member that plays the user in rollout batch `batch_index`."""
    members = self.members
    if not members:
      raise ValueError("Population.sample: the pool is empty (update it before the first batch)")
    return members[draw(self.seed, batch_index, len(members))]

  def _write(self) -> None:
    files.write_json(os.path.join(self.directory, MANIFEST), {"steps": self.steps})


def draw(seed: int, batch_index: int, num_members: int) -> int:
  """The index of the member that plays in rollout batch `batch_index`, from (seed, index) alone.

  Batches come in rounds of `num_members`, each round a fresh permutation of the members: every
  member plays once per round (a uniform draw per batch leaves some unplayed for long), and a
  resumed run replays the same order.
  """
  round_index, slot = divmod(batch_index, num_members)
  rng = np.random.default_rng(np.random.SeedSequence(seed,
                                                     spawn_key=(_SAMPLE_STREAM, round_index)))
  return int(rng.permutation(num_members)[slot])


class FixedPool:
  """A pool of given simulators (party specs, e.g. saved checkpoints), for training against a
  population without co-training: the member of each rollout batch is drawn as above."""

  def __init__(self, members: Sequence[str], seed: int = 0):
    if not members:
      raise ValueError("FixedPool: no members")
    self.members, self.seed = list(members), seed

  def sample(self, batch_index: int) -> str:
    return self.members[draw(self.seed, batch_index, len(self.members))]
