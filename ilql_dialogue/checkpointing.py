"""Orbax checkpoints of the whole train state, and preemption handling.

A checkpoint holds everything a run needs to continue bit-for-bit: model
parameters, optimizer state and step count, the base rng key (all in one nnx
state) and, as JSON, the data position. Restoring reads each array straight
into its target sharding, so no host ever holds a whole large model.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import jax
import orbax.checkpoint as ocp
from flax import nnx

CHECKPOINT_DIR = "checkpoints"
BEST_DIR = "best"  # The checkpoint with the best selection metric (BestCheckpoint).
SELECTION_MODES = ("max", "min")


def saved_steps(workdir: str, directory: str = CHECKPOINT_DIR) -> list[int]:
  """The steps of `workdir/checkpoints` (read only: none yet -> [])."""
  path = os.path.abspath(os.path.join(workdir, directory))
  if not os.path.isdir(path):
    return []
  options = ocp.CheckpointManagerOptions(create=False, read_only=True)
  with ocp.CheckpointManager(path, options=options) as manager:
    return sorted(manager.all_steps())


class Checkpointer:
  """Saves to and restores from `workdir/checkpoints`, keeping the last `keep`."""

  def __init__(self, workdir: str, keep: int, async_save: bool = True,
               directory: str = CHECKPOINT_DIR):
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, create=True, enable_async_checkpointing=async_save)
    self._manager = ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, directory)), options=options,
        item_names=("state", "meta"))

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def save(self, step: int, state: nnx.State, meta: dict[str, Any]) -> None:
    """Starts writing `state` (asynchronously if enabled); the arrays are
    copied off the device before this returns, so the caller may donate them."""
    self._manager.save(step, force=True, args=ocp.args.Composite(
        state=ocp.args.StandardSave(nnx.to_pure_dict(state)),
        meta=ocp.args.JsonSave(meta)))

  def restore(self, step: int, abstract_state: nnx.State) -> tuple[nnx.State, dict[str, Any]]:
    """Reads checkpoint `step` into the shapes, dtypes and shardings of
    `abstract_state` (Variables holding `jax.ShapeDtypeStruct`s with sharding)."""
    restored = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(nnx.to_pure_dict(abstract_state)),
        meta=ocp.args.JsonRestore()))
    state = jax.tree.map(lambda x: x, abstract_state)  # Fresh Variables to fill in.
    nnx.replace_by_pure_dict(state, restored.state)
    return state, restored.meta

  def read_meta(self, step: int) -> dict[str, Any]:
    return self._manager.restore(step, args=ocp.args.Composite(
        meta=ocp.args.JsonRestore())).meta

  def reached_preemption(self, step: int) -> bool:
    """Multi-host: True on every host once any host has been told to stop."""
    return self._manager.reached_preemption(step)

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.close()


class BestCheckpoint:
  """Keeps, in `workdir/best`, the state whose evaluation scored best on `metric`.

  Checkpoints are chosen by what the task measures (online success or
  return), never by a training loss: ILQL's TD loss and a policy's success
  can move in opposite directions. The best value travels in the saved meta,
  so a resumed run keeps comparing against it.
  """

  def __init__(self, workdir: str, metric: str, mode: str = "max"):
    if mode not in SELECTION_MODES:
      raise ValueError(f"config.selection.mode={mode!r} not in {SELECTION_MODES}")
    self.metric, self.mode = metric, mode
    self._checkpointer = Checkpointer(workdir, keep=1, async_save=False, directory=BEST_DIR)
    step = self._checkpointer.latest_step()
    self.best = None
    if step is not None:
      self.best = self._checkpointer.read_meta(step)["value"]

  def offer(self, step: int, state: nnx.State, metrics: dict[str, float]) -> bool:
    """Saves `state` if `metrics[metric]` is at least as good as the best so far."""
    if self.metric not in metrics:
      raise ValueError(f"config.selection.metric={self.metric!r} is not among the evaluation "
                       f"metrics {sorted(metrics)}")
    value = float(metrics[self.metric])
    # Ties go to the later state: with equal scores, the one trained longer.
    better = self.best is None or (value >= self.best if self.mode == "max" else value <= self.best)
    if better:
      self.best = value
      self._checkpointer.save(step, state, {"step": step, "metric": self.metric, "value": value,
                                            "eval": {k: float(v) for k, v in metrics.items()}})
    return better

  def close(self) -> None:
    self._checkpointer.wait()
    self._checkpointer.close()


class PreemptionGuard:
  """Turns SIGTERM into a request to checkpoint and stop at the next step.

  Single process only: with several processes, JAX's coordination service
  owns SIGTERM and `Checkpointer.reached_preemption` agrees on a common step;
  replacing its handler would break that agreement.
  """

  def __init__(self):
    self._requested = threading.Event()
    self._previous = None

  def __enter__(self) -> "PreemptionGuard":
    if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, lambda *_: self._requested.set())
    return self

  def __exit__(self, *exc) -> None:
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)

  def requested(self, step: int, checkpointer: Checkpointer) -> bool:
    if jax.process_count() > 1:
      return checkpointer.reached_preemption(step)
    return self._requested.is_set()
