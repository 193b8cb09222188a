"""What the training loop needs from an algorithm, and nothing else.

The loop (train_loop.py) knows no task and no method. An algorithm supplies
the trainable state and a loss; a task supplies batches. BC, ILQL, CALM and
the simulators all plug into the same loop through this protocol, so
sharding, accumulation, checkpointing and logging are written once.
"""

from __future__ import annotations

from typing import Mapping, Protocol

import jax
import ml_collections
from flax import nnx

Batch = Mapping[str, jax.Array]
Metrics = dict[str, jax.Array]


class Algorithm(Protocol):
  """A trainable method.

  The loop optimizes every `nnx.Param` of the module `init` returns; state
  that must not receive gradients (target networks, running statistics) uses
  another Variable type and is changed only by `post_update`.
  """

  def init(self, config: ml_collections.ConfigDict, rngs: nnx.Rngs) -> nnx.Module:
    """Builds the whole trainable state. Runs under `jax.jit` with sharded
    outputs, so it must be traceable (no host I/O); pretrained weights are
    loaded by the algorithm's constructor, outside of it."""
    ...

  def loss(self, model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, Metrics]:
    """Scalar loss, a mean over the microbatch, and scalar metrics to log.

    `batch` is one microbatch of the task's arrays, [micro_batch, ...].
    """
    ...

  def post_update(self, model: nnx.Module) -> None:
    """Called in the jitted step after each optimizer update, e.g. Polyak
    averaging into target networks. Implementations mutate `model` in place.
    Optional: algorithms that define no `post_update` get none."""
    ...


def post_update(algorithm: Algorithm, model: nnx.Module) -> None:
  """Runs `algorithm.post_update` if the algorithm has one."""
  hook = getattr(algorithm, "post_update", None)
  if hook is not None:
    hook(model)
