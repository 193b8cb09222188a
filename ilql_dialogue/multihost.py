"""What changes when one run spans several processes (one per host).

Every process runs the same program and meets the others in each collective:
the jitted step, orbax saves (every process writes its own shards), and the
preemption sync point the loop asks at every step. Two things need care
beyond that, and live here:

  * A peer that dies must not leave the others waiting forever in a
    collective. `initialize` joins the job with a bounded heartbeat timeout:
    the coordination service then aborts every survivor with "Terminating
    process because the JAX distributed service detected fatal errors ...
    another task died" within about that many seconds.
  * Evaluations that drive a model from the host (online rollouts: numpy
    prompts in, a few tokens out, many small jits) cannot feed arrays that
    live on other processes' devices. `per_process` runs them on a whole
    copy of the model on each process's first device and hands every
    process the metrics of process 0, so decisions taken on them (which
    checkpoint is best: a collective save) are the same everywhere. Online
    RL's rollouts (cotraining/experience.py) play on such a copy too, each
    process its share of the scenarios, and `allgather_rows` hands every
    process the whole batch.
"""

from __future__ import annotations

from typing import Callable, Mapping

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils

from ilql_dialogue import sharding

# Seconds without a heartbeat after which a process counts as dead and every
# other process is stopped. JAX's default is 100; a minute bounds the wait for
# a crashed host while tolerating long pauses of a healthy one (compiles, saves).
HEARTBEAT_TIMEOUT_S = 60

EvalFn = Callable[[nnx.Module, int], Mapping[str, float]]


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *,
               heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S) -> None:
  """`jax.distributed.initialize` with a bounded failure when a peer dies.

  With no arguments, JAX detects the job (Cloud TPU, SLURM, Open MPI). On CPU
  the processes talk through gloo, JAX's default CPU collectives.
  """
  jax.distributed.initialize(coordinator_address, num_processes, process_id,
                             heartbeat_timeout_seconds=heartbeat_timeout_s)


def local_replica(model: nnx.Module) -> nnx.Module:
  """A copy of `model` whose arrays are whole on this process's first device.

  Collective: every process must call it. The model must fit on one device.
  """
  graphdef, state = nnx.split(model)
  device = jax.local_devices()[0]
  state = jax.tree.map(
      lambda x: jax.device_put(multihost_utils.process_allgather(x, tiled=True), device), state)
  return nnx.merge(graphdef, state)


def allgather_rows(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Each array's rows of every process, in process order, on every process, bit for bit
  (they travel as bytes: JAX would narrow float64). Collective; each process gives the
  same keys and row counts."""
  if jax.process_count() == 1:
    return dict(arrays)
  gathered = {}
  for key in sorted(arrays):
    array = np.ascontiguousarray(arrays[key])
    bytes_RxW = array.reshape(array.shape[0], -1).view(np.uint8)
    everyone = np.asarray(multihost_utils.process_allgather(bytes_RxW, tiled=True))
    gathered[key] = everyone.view(array.dtype).reshape(-1, *array.shape[1:])
  return gathered


def local_mesh() -> jax.sharding.Mesh:
  """A one-device mesh on this process's first device, for work each process does alone."""
  return sharding.make_mesh(1, 1, 1, devices=jax.local_devices()[:1])


def _broadcast_floats(values: list[float]) -> list[float]:
  """Process 0's float64 values on every process, bit for bit (JAX runs in 32 bits:
  the values travel as uint32 pairs)."""
  bits = np.asarray(values, np.float64).view(np.uint32)
  return multihost_utils.broadcast_one_to_all(bits).view(np.float64).tolist()


def per_process(eval_fn: EvalFn) -> EvalFn:
  """`eval_fn` made safe for several processes (unchanged in a single one).

  Each process evaluates its `local_replica` under a one-device mesh; every
  process then returns process 0's metrics.
  """
  if jax.process_count() == 1:
    return eval_fn
  mesh = local_mesh()

  def wrapped(model: nnx.Module, step: int) -> dict[str, float]:
    replica = local_replica(model)
    with sharding.mesh_context(mesh):
      metrics = eval_fn(replica, step)
    names = sorted(metrics)
    return dict(zip(names, _broadcast_floats([float(metrics[k]) for k in names])))

  return wrapped
