"""The one training loop: any Algorithm, any task, any mesh.

`train_and_evaluate` builds the mesh, creates (or restores) the sharded train
state, and runs a single jitted step per optimizer update. Everything between
two boundaries (log, eval, checkpoint, preemption) is asynchronous device
work; the host only feeds batches. A run that is interrupted and restarted in
the same workdir continues from its latest checkpoint and ends with exactly
the parameters of an uninterrupted run.

Config fields read here (see experiments/configs/__init__.py for defaults):
  seed; mesh.{data, fsdp, tensor};
  train.{steps, batch_size, grad_accum_steps, log_every, eval_every, eval_at_start,
         checkpoint_every, keep_checkpoints, async_checkpoints, progress_bar};
  optim.{learning_rate, warmup_steps, final_lr_fraction, b1, b2, eps,
         weight_decay, grad_clip_norm};
  selection.{metric, mode}: with a metric, every evaluation offers the state
    to checkpointing.BestCheckpoint (workdir/best), which keeps the best one;
  model.init_from: a fresh run's language models start from that checkpoint, and
    model.borrow from a pretrained GGUF model's knowledge (ilql_dialogue/init_from.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from typing import Callable, Iterator, Mapping, Sequence

import jax
import ml_collections
import numpy as np
import optax
import tqdm
from absl import logging
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ilql_dialogue import algorithm as algorithm_lib
from ilql_dialogue import checkpointing, init_from, metrics as metrics_lib, optim, sharding

# The task's batches: given the number of updates already done, this host's
# rows for that step and every later one, [host_batch, ...] numpy arrays of
# static shape. The batch for step s must depend only on (seed, s), which is
# what makes a resumed run see the data an uninterrupted run would. Data with
# a `bind_model(current)` method (an online-RL experience source) is given
# `current()`, the model as of the last update, and may also depend on it.
TrainData = Callable[[int], Iterator[Mapping[str, np.ndarray]]]
# Evaluation at a step: the current model -> host scalars, logged as "eval".
EvalFn = Callable[[nnx.Module, int], Mapping[str, float]]

# A step stops the run if any of these is NaN or inf.
WATCHED_METRICS = ("loss", "grad_norm")


class NonFiniteLossError(FloatingPointError):
  """Training produced a NaN/inf loss; the last good checkpoint is kept."""


class TrainState(nnx.Module):
  """Model, optimizer and base rng: one nnx state, sharded, donated, checkpointed."""

  def __init__(self, model: nnx.Module, tx: optax.GradientTransformation, rng_key: jax.Array):
    self.model = model
    self.optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    self.rng_key = nnx.Variable(rng_key)  # Raw uint32 key data: checkpoints as a plain array.


@dataclasses.dataclass(frozen=True)
class Training:
  """The compiled pieces of a run on one mesh (build under `sharding.mesh_context`)."""

  graphdef: nnx.GraphDef
  abstract_state: nnx.State  # Variables holding ShapeDtypeStructs.
  shardings: nnx.State  # Variables holding NamedShardings, same tree.
  init: Callable[[], nnx.State]  # Jitted: the initial state, created sharded.
  step: Callable[[nnx.State, Mapping[str, jax.Array]], tuple[nnx.State, dict[str, jax.Array]]]

  def restore_target(self) -> nnx.State:
    """Abstract state carrying the shardings, for `Checkpointer.restore`."""
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        self.abstract_state, self.shardings)


def build_training(config: ml_collections.ConfigDict, algorithm: algorithm_lib.Algorithm,
                   mesh: Mesh) -> Training:
  """Traces the state once to learn its shapes and shardings, then jits the
  sharded init (so a large model never materialises on one device) and the
  update step (state donated: updated in place)."""
  model_key, loop_key = jax.random.split(jax.random.key(config.seed))

  def init_model():
    with nnx.use_eager_sharding(False):  # Placement comes from out_shardings, once.
      return algorithm.init(config, nnx.Rngs(model_key))

  abstract_params = nnx.state(nnx.eval_shape(init_model), nnx.Param)
  tx, schedule = optim.make_optimizer(config.optim, config.train.steps,
                                      optim.weight_decay_mask(abstract_params))

  def init_train_state():
    with nnx.use_eager_sharding(False):
      return TrainState(init_model(), tx, jax.random.key_data(loop_key))

  graphdef, abstract_state = nnx.split(nnx.eval_shape(init_train_state))
  shardings = sharding.state_shardings(abstract_state, mesh)

  def train_step(state: nnx.State, batch_AxB: Mapping[str, jax.Array]):
    train_state = nnx.merge(graphdef, state)
    update_count = train_state.optimizer.step[...]
    model_graphdef, params, rest = nnx.split(train_state.model, nnx.Param, ...)

    def loss_fn(params, microbatch, rng):
      return algorithm.loss(nnx.merge(model_graphdef, params, rest), microbatch, rng)

    rng = jax.random.fold_in(jax.random.wrap_key_data(train_state.rng_key[...]), update_count)
    grads, loss, step_metrics = optim.accumulate_gradients(loss_fn, params, batch_AxB, rng)
    train_state.optimizer.update(train_state.model, grads)
    algorithm_lib.post_update(algorithm, train_state.model)
    step_metrics = {**step_metrics, "loss": loss, "grad_norm": optax.tree.norm(grads),
                    "learning_rate": schedule(update_count)}
    return nnx.state(train_state), step_metrics

  return Training(
      graphdef=graphdef,
      abstract_state=abstract_state,
      shardings=shardings,
      init=jax.jit(lambda: nnx.state(init_train_state()), out_shardings=shardings),
      step=jax.jit(train_step,
                   in_shardings=(shardings, sharding.batch_sharding(mesh)),
                   out_shardings=(shardings, NamedSharding(mesh, P())),
                   donate_argnums=0))


def place_batch(batch: Mapping[str, np.ndarray], config: ml_collections.ConfigDict,
                mesh: Mesh) -> dict[str, jax.Array]:
  """This host's [host_batch, ...] rows -> global [accum, micro_batch, ...] arrays.

  Row r of a host's rows goes to microbatch r % accum. Hosts hold contiguous
  blocks of the global batch whose size accum divides, so global row g lands in
  microbatch g % accum whatever the number of hosts: a run's updates do not
  depend on how many processes load its data.
  """
  accum = config.train.grad_accum_steps
  host_rows = config.train.batch_size // jax.process_count()
  local = {}
  for key, array in batch.items():
    array = np.asarray(array)
    if array.ndim == 0 or array.shape[0] != host_rows:
      raise ValueError(f"train batch[{key!r}] has shape {array.shape}; expected leading "
                       f"dimension {host_rows} (train.batch_size / process_count)")
    local[key] = array.reshape(host_rows // accum, accum, *array.shape[1:]).swapaxes(0, 1)
  return sharding.put_batch(local, mesh)


def loss_evaluator(algorithm: algorithm_lib.Algorithm,
                   batches: Sequence[Mapping[str, np.ndarray]]) -> EvalFn:
  """An EvalFn: the mean of `algorithm.loss` metrics over fixed batches (e.g.
  held-out data). Batches are [batch, ...] host arrays; they are placed on the
  mesh current at evaluation time (the loop's)."""
  if not batches:
    raise ValueError("loss_evaluator needs at least one batch")

  @functools.partial(jax.jit, static_argnums=0)
  def batch_metrics(graphdef, state, batch_1xB, rng):
    microbatch = {k: v[0] for k, v in batch_1xB.items()}
    loss, metrics = algorithm.loss(nnx.merge(graphdef, state), microbatch, rng)
    return {**metrics, "loss": loss}

  def eval_fn(model: nnx.Module, step: int) -> dict[str, float]:
    graphdef, state = nnx.split(model)
    mesh = jax.sharding.get_mesh()
    rng = jax.random.key(step)
    per_batch = [batch_metrics(graphdef, state, sharding.put_batch(
        {k: np.asarray(v)[None] for k, v in batch.items()}, mesh), jax.random.fold_in(rng, i))
                 for i, batch in enumerate(batches)]
    return metrics_lib.mean_metrics(enumerate(jax.device_get(per_batch)))

  return eval_fn


def merged_evaluators(*eval_fns: EvalFn) -> EvalFn:
  """One EvalFn reporting the metrics of all of them (later ones win on a shared name)."""

  def eval_fn(model: nnx.Module, step: int) -> dict[str, float]:
    merged = {}
    for fn in eval_fns:
      merged.update(fn(model, step))
    return merged

  return eval_fn


def prefixed_evaluator(eval_fn: EvalFn, prefix: str) -> EvalFn:
  """`eval_fn` with every metric name prefixed, so several opponents' metrics can be merged
  without one's "return" replacing another's (the selected one)."""

  def prefixed(model: nnx.Module, step: int) -> dict[str, float]:
    return {prefix + k: v for k, v in eval_fn(model, step).items()}

  return prefixed


def _check_finite(records: list[tuple[int, dict[str, float]]], last_good: int | None) -> None:
  for step, values in records:
    bad = [k for k in WATCHED_METRICS if k in values and not math.isfinite(values[k])]
    if bad:
      raise NonFiniteLossError(
          f"non-finite {', '.join(bad)} at step {step}: metrics {values}. Training stopped "
          f"without saving; the latest good checkpoint is step {last_good}.")


def _validate(config: ml_collections.ConfigDict, mesh: Mesh) -> None:
  """Checks the batch arithmetic up front, before anything is compiled."""
  train = config.train
  hosts = jax.process_count()
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  if (train.grad_accum_steps < 1 or train.batch_size % (train.grad_accum_steps * hosts)
      or (train.batch_size // train.grad_accum_steps) % shards):
    raise ValueError(
        f"train.batch_size={train.batch_size} must split into grad_accum_steps="
        f"{train.grad_accum_steps} microbatches whose rows divide over {hosts} hosts and "
        f"data*fsdp={shards} devices")
  if train.steps < 1 or train.log_every < 1 or train.checkpoint_every < 1:
    raise ValueError("train.steps, train.log_every and train.checkpoint_every must be >= 1")
  selection = config.get("selection")
  if selection is not None and selection.metric and selection.mode not in \
      checkpointing.SELECTION_MODES:
    raise ValueError(f"config.selection.mode={selection.mode!r} not in "
                     f"{checkpointing.SELECTION_MODES}")


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str,
                       algorithm: algorithm_lib.Algorithm, train_data: TrainData,
                       eval_fn: EvalFn | None = None) -> TrainState:
  """Trains `algorithm` on `train_data` for config.train.steps updates.

  Resumes automatically from the latest checkpoint in `workdir`. On SIGTERM
  it checkpoints and returns early; a NaN/inf loss raises NonFiniteLossError
  without touching the checkpoints. Returns the final TrainState (`.model`
  is the trained model).
  """
  train = config.train
  mesh = sharding.make_mesh(**config.mesh)
  _validate(config, mesh)
  is_chief = jax.process_index() == 0
  selection = config.get("selection")
  select = selection is not None and bool(selection.metric)
  if select and eval_fn is None:
    raise ValueError(f"config.selection.metric={selection.metric!r} needs an evaluation; this "
                     f"run has none (config.online_eval / a held-out split)")
  if is_chief:
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json_best_effort(indent=2))

  with sharding.mesh_context(mesh):
    training = build_training(config, algorithm, mesh)
    checkpointer = checkpointing.Checkpointer(workdir, train.keep_checkpoints,
                                              train.async_checkpoints)
    best = (checkpointing.BestCheckpoint(workdir, selection.metric, selection.mode)
            if select else None)
    start = checkpointer.latest_step()
    if start is None:
      start, state = 0, training.init()
      state = init_from.starting_state(state, training.graphdef, config, workdir)
    else:
      state, meta = checkpointer.restore(start, training.restore_target())
      if meta["data_position"] != start:
        raise ValueError(f"{workdir}: checkpoint {start} has data_position "
                         f"{meta['data_position']}")
      logging.info("Resumed from %s at step %d.", workdir, start)

    writer = metrics_lib.MetricsWriter(workdir, start)
    pending = metrics_lib.PendingMetrics()
    window: list[tuple[int, dict[str, float]]] = []
    last_saved = start if start > 0 else None
    window_start = time.perf_counter()

    def evaluate(step):
      metrics = eval_fn(nnx.merge(training.graphdef, state).model, step)
      writer.write(step, "eval", metrics)
      if best is not None and best.offer(step, state, metrics):
        logging.info("Step %d is the best so far: %s = %s.", step, best.metric, best.best)

    try:
      if eval_fn is not None and start == 0 and train.get("eval_at_start", True):
        evaluate(0)
      with checkpointing.PreemptionGuard() as guard, tqdm.tqdm(
          total=train.steps, initial=start, disable=not (is_chief and train.progress_bar),
          desc="train") as bar:
        bind_model = getattr(train_data, "bind_model", None)
        if bind_model is not None:  # Online RL (cotraining/): the data samples from the model.
          bind_model(lambda: nnx.merge(training.graphdef, state).model)
        data = iter(train_data(start))
        for step in range(start + 1, train.steps + 1):
          batch = next(data, None)
          if batch is None:
            raise ValueError(f"train_data({start}) ended after {step - 1 - start} batches; it "
                             f"must last to train.steps={train.steps}")
          state, step_metrics = training.step(state, place_batch(batch, config, mesh))
          pending.add(step, step_metrics)
          bar.update()

          last = step == train.steps
          preempted = guard.requested(step, checkpointer)
          do_log = last or step % train.log_every == 0
          do_eval = eval_fn is not None and (
              last or (train.eval_every > 0 and step % train.eval_every == 0))
          do_save = last or preempted or step % train.checkpoint_every == 0
          if not (do_log or do_eval or do_save):
            continue
          drained = pending.drain()
          _check_finite(drained, last_saved)
          window.extend(drained)
          if do_log:
            elapsed = time.perf_counter() - window_start
            summary = metrics_lib.mean_metrics(window)
            summary["steps_per_sec"] = len(window) / elapsed
            summary["examples_per_sec"] = len(window) * train.batch_size / elapsed
            writer.write(step, "train", summary)
            bar.set_postfix(loss=f"{summary['loss']:.4f}")
            window, window_start = [], time.perf_counter()
          paused = time.perf_counter()  # Eval and saving do not count as training time.
          if do_eval:
            evaluate(step)
          if do_save:
            checkpointer.save(step, state, {"step": step, "data_position": step})
            last_saved = step
          window_start += time.perf_counter() - paused
          if preempted:
            logging.warning("Preemption requested: saved step %d and stopped.", step)
            break
    finally:
      checkpointer.wait()
      checkpointer.close()
      if best is not None:
        best.close()
      writer.close()
  return nnx.merge(training.graphdef, state)
