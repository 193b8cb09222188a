"""How many XLA:CPU devices this process gets: one per usable core, when asked.

XLA:CPU runs most of a decode step of a small model (matmuls of a few dozen rows) on one
thread: on 2 cores a batch of 64 rows decoded on one device keeps about 1.45 of them busy
(docs/BENCHMARKS.md). Each CPU device runs its share of a program on its own thread, so a batch
whose rows are split over one device per core (`decode_devices`) keeps every core busy.

The count is fixed when jax's CPU backend starts (its first computation), so `use_cpu_devices`
must run before that; jax's own `JAX_NUM_CPU_DEVICES=N` environment variable does the same
from outside. Nothing calls it by default: a program opts in (`benchmarks.decode_cores`
does). Programs that build a mesh from `jax.devices()` (training's `sharding.make_mesh`) then
see N devices too.
"""

from __future__ import annotations

import os

import jax


def usable_cores() -> int:
  """CPUs this process may run on (its affinity, as `taskset` sets it), not all online CPUs."""
  return len(os.sched_getaffinity(0))


def use_cpu_devices(count: int | str = "all") -> int:
  """Asks jax for `count` CPU devices ("all": one per usable core); returns the count.

  Raises RuntimeError when jax's backend has already started with another count: the
  request would otherwise be ignored silently.
  """
  wanted = usable_cores() if count == "all" else int(count)
  if wanted < 1:
    raise ValueError(f"use_cpu_devices: {count!r} is not a positive device count")
  try:
    jax.config.update("jax_num_cpu_devices", wanted)
  except RuntimeError:  # The backend has started: fine if it has the devices asked for.
    have = jax.local_device_count("cpu")
    if have != wanted:
      raise RuntimeError(f"use_cpu_devices: jax already runs with {have} CPU devices; ask for "
                         f"{wanted} before the first jax computation") from None
  return wanted
