"""Checkpoints: exact resume, keep-K, NaN stop, SIGTERM save (via the launcher)."""

import os
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from compile_flags import FAST_COMPILE
from ilql_dialogue import checkpointing, metrics, sharding, train_loop
from workflows.base_config import base_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Target(nnx.Variable):
  """Not a Param: moved only by post_update, like an ILQL target network."""


class Linear(nnx.Module):
  def __init__(self, rngs: nnx.Rngs):
    self.w = nnx.Param(jax.random.normal(rngs.params(), (4, 2)), out_sharding=("embed", "mlp"),
                       eager_sharding=False)
    self.b = nnx.Param(jnp.zeros((2,)))
    self.w_target = Target(jnp.zeros((4, 2)))


class NoisyRegression:
  """MSE with rng-dependent input dropout (so the rng stream must resume
  exactly) and a Polyak target (so post_update state must resume too)."""

  def init(self, config, rngs):
    return Linear(rngs)

  def loss(self, model, batch, rng):
    keep = jax.random.bernoulli(rng, 0.8, batch["x"].shape)
    pred = (batch["x"] * keep) @ model.w[...] + model.b[...]
    loss = jnp.mean((pred - batch["y"]) ** 2)
    return loss, {"loss": loss}

  def post_update(self, model):
    model.w_target[...] = 0.5 * model.w_target[...] + 0.5 * model.w[...]


def regression_data(seed, crash_at=None, nan_at=None, rows=8):
  """Batches as a pure function of (seed, step); optionally fails or is
  poisoned when the batch for update `crash_at` / `nan_at` (1-based) is read."""
  w_true = np.random.default_rng(seed).normal(size=(4, 2))

  def from_step(start):
    step = start
    while True:
      if step + 1 == crash_at:
        raise RuntimeError("simulated crash")
      rng = np.random.default_rng((seed, step))
      x = rng.normal(size=(rows, 4)).astype(np.float32)
      y = (x @ w_true).astype(np.float32)
      if step + 1 == nan_at:
        x[0, 0] = np.nan
      yield {"x": x, "y": y}
      step += 1

  return from_step


def small_config(steps=8, checkpoint_every=2):
  c = base_config()
  c.train.update(steps=steps, batch_size=8, grad_accum_steps=2, log_every=2,
                 checkpoint_every=checkpoint_every, keep_checkpoints=2, progress_bar=False)
  c.optim.update(learning_rate=0.05, warmup_steps=2)
  return c


def params_of(train_state):
  return jax.device_get(nnx.to_pure_dict(nnx.state(train_state)))


def test_resumed_run_matches_uninterrupted_run_bitwise(tmp_path):
  config = small_config()
  straight = params_of(train_loop.train_and_evaluate(
      config, str(tmp_path / "straight"), NoisyRegression(), regression_data(0)))

  workdir = str(tmp_path / "resumed")
  with pytest.raises(RuntimeError, match="simulated crash"):
    train_loop.train_and_evaluate(config, workdir, NoisyRegression(),
                                  regression_data(0, crash_at=6))
  checkpointer = checkpointing.Checkpointer(workdir, keep=2)
  assert checkpointer.latest_step() == 4
  checkpointer.close()
  resumed = params_of(train_loop.train_and_evaluate(
      config, workdir, NoisyRegression(), regression_data(0)))

  assert int(resumed["optimizer"]["step"]) == 8
  jax.tree.map(np.testing.assert_array_equal, straight, resumed)  # Model, Adam moments, target.
  assert np.abs(resumed["model"]["w_target"]).sum() > 0
  # keep_checkpoints=2, and one metrics record per logged step despite the replay.
  checkpointer = checkpointing.Checkpointer(workdir, keep=2)
  assert checkpointer.all_steps() == [6, 8]
  checkpointer.close()
  logged = [r["step"] for r in metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))]
  assert logged == [2, 4, 6, 8]


def test_nan_loss_stops_without_overwriting_the_last_good_checkpoint(tmp_path):
  workdir = str(tmp_path / "nan")
  # The NaN enters at update 5 and is caught at the step-6 boundary: the
  # step-6 state (already corrupted) must not be saved.
  with pytest.raises(train_loop.NonFiniteLossError,
                     match=r"non-finite loss.* at step 5.*latest good checkpoint is step 4"):
    train_loop.train_and_evaluate(small_config(), workdir, NoisyRegression(),
                                  regression_data(0, nan_at=5))
  checkpointer = checkpointing.Checkpointer(workdir, keep=2)
  assert checkpointer.latest_step() == 4
  mesh = sharding.make_mesh()
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(small_config(), NoisyRegression(), mesh)
    state, meta = checkpointer.restore(4, training.restore_target())
  checkpointer.close()
  assert meta == {"step": 4, "data_position": 4}
  leaves = jax.tree.leaves(jax.device_get(nnx.to_pure_dict(state)))
  assert all(np.isfinite(np.asarray(leaf, np.float64)).all() for leaf in leaves)


def test_sigterm_saves_a_checkpoint_and_exits_cleanly(tmp_path):
  workdir = str(tmp_path / "sigterm")
  command = [sys.executable, "-m", "experiments.train",
             "--config=experiments/configs/bc_tiny.py", f"--workdir={workdir}",
             "--config.data.synthetic=True", "--config.model.num_layers=1",
             "--config.train.steps=100000", "--config.train.log_every=5",
             "--config.train.checkpoint_every=100000", "--config.train.progress_bar=False"]
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO,
         "XLA_FLAGS": FAST_COMPILE}
  process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
  metrics_path = os.path.join(workdir, "metrics.jsonl")
  deadline = time.time() + 120
  while not metrics.read_metrics(metrics_path) and time.time() < deadline:
    assert process.poll() is None, process.stdout.read()[-5000:]
    time.sleep(0.2)
  process.send_signal(signal.SIGTERM)
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 0, output[-5000:]
  assert "Preemption requested" in output

  checkpointer = checkpointing.Checkpointer(workdir, keep=3)
  saved = checkpointer.latest_step()
  checkpointer.close()
  logged = metrics.read_metrics(metrics_path)[-1]["step"]
  assert saved is not None and 5 <= logged <= saved < 100000


def _train_command(workdir, steps):
  return [sys.executable, "-m", "experiments.train", "--config=experiments/configs/bc_tiny.py",
          f"--workdir={workdir}", "--config.data.synthetic=True", "--config.model.num_layers=1",
          f"--config.train.steps={steps}", "--config.train.log_every=1",
          "--config.train.checkpoint_every=3", "--config.train.progress_bar=False"]


def test_kill_9_mid_training_then_the_same_command_ends_where_an_uninterrupted_run_does(
    tmp_path):
  """SIGKILL gives the run no chance to save: the rerun resumes from the last checkpoint
  (an async save cut short included) and logs the very losses of a run never killed."""
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO,
         "XLA_FLAGS": FAST_COMPILE}
  steps = 24
  straight_dir, killed_dir = str(tmp_path / "straight"), str(tmp_path / "killed")
  straight = subprocess.Popen(_train_command(straight_dir, steps), cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
  killed = subprocess.Popen(_train_command(killed_dir, steps), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  metrics_path = os.path.join(killed_dir, "metrics.jsonl")
  deadline = time.time() + 120
  while time.time() < deadline:
    assert killed.poll() is None, killed.stdout.read()[-5000:]
    try:
      logged = [r["step"] for r in metrics.read_metrics(metrics_path) if r["split"] == "train"]
    except ValueError:  # Read while a line was being written.
      logged = []
    if logged and logged[-1] >= 10:
      break
    time.sleep(0.05)
  killed.kill()
  killed.communicate()
  checkpointer = checkpointing.Checkpointer(killed_dir, keep=3)
  saved = checkpointer.latest_step()
  checkpointer.close()
  assert saved is not None and 0 < saved <= logged[-1] < steps  # Steps after it are redone.
  rerun = subprocess.run(_train_command(killed_dir, steps), cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=180)
  assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
  assert straight.wait(timeout=180) == 0

  def losses(workdir):
    return {r["step"]: r["loss"] for r in metrics.read_metrics(
        os.path.join(workdir, "metrics.jsonl")) if r["split"] == "train"}

  assert losses(killed_dir) == losses(straight_dir)
  assert sorted(losses(killed_dir)) == list(range(1, steps + 1))


def test_a_record_cut_short_by_a_kill_is_left_out_and_any_other_bad_line_is_named(tmp_path):
  path = str(tmp_path / "metrics.jsonl")
  with open(path, "w") as f:
    f.write('{"step": 1, "split": "train", "loss": 1.0}\n{"step": 2, "split": "tr')
  assert metrics.read_metrics(path) == [{"step": 1, "split": "train", "loss": 1.0}]
  with open(path, "w") as f:
    f.write('{"step": 1, "split": "train", "loss": 1.0}\nnot json\n{"step": 3}\n')
  with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a JSON record"):
    metrics.read_metrics(path)


def test_best_checkpoint_keeps_the_best_evaluation_and_survives_resume(tmp_path):
  """Selection by an evaluation metric: the best state is kept in best/, ties go to the
  later step, and a resumed run compares against the best value saved before."""
  scores = {2: 0.5, 4: 0.9, 6: 0.9, 8: 0.1, 10: 0.95, 12: 0.2}
  eval_fn = lambda model, step: {"return": scores.get(step, 0.0), "w0": float(model.w[0, 0])}
  workdir = str(tmp_path / "run")
  config = small_config(steps=8)
  config.train.update(eval_every=2, eval_at_start=False)
  config.selection.metric = "return"
  train_loop.train_and_evaluate(config, workdir, NoisyRegression(), regression_data(0), eval_fn)
  best = checkpointing.BestCheckpoint(workdir, "return")
  assert best.best == 0.9
  best.close()
  from ilql_dialogue import policy_io
  from ilql_dialogue import restore
  assert restore.selected(workdir)["step"] == 6  # The tie at 0.9 goes to step 6.

  config.train.steps = 12  # Resume: step 10 beats 0.9, step 12 does not.
  train_loop.train_and_evaluate(config, workdir, NoisyRegression(), regression_data(0), eval_fn)
  meta = restore.selected(workdir)
  assert meta["step"] == 10 and meta["value"] == 0.95 and meta["eval"]["return"] == 0.95
  evals = [r for r in metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))
           if r["split"] == "eval"]
  assert meta["eval"]["w0"] == next(r["w0"] for r in evals if r["step"] == 10)


def test_selection_errors_are_raised_before_training(tmp_path):
  config = small_config(steps=2)
  config.selection.metric = "return"
  with pytest.raises(ValueError, match="needs an evaluation"):
    train_loop.train_and_evaluate(config, str(tmp_path / "a"), NoisyRegression(),
                                  regression_data(0))
  config.train.eval_at_start = True
  with pytest.raises(ValueError, match=r"metric='return' is not among the evaluation metrics"):
    train_loop.train_and_evaluate(config, str(tmp_path / "b"), NoisyRegression(),
                                  regression_data(0), lambda model, step: {"loss": 1.0})
  config.selection.mode = "best"
  with pytest.raises(ValueError, match="config.selection.mode='best'"):
    train_loop.train_and_evaluate(config, str(tmp_path / "c"), NoisyRegression(),
                                  regression_data(0), lambda model, step: {"return": 1.0})
