"""One process of a multi-process training run on localhost, for tests/test_multiprocess.py.

    python tests/multiprocess_worker.py --data=DIR --workdir=DIR \
        --coordinator=localhost:PORT --num_processes=2 --process_id=I

Every process of the job runs this same command (only --process_id differs),
as on a pod. It trains tiny BC and ILQL models through the real loop
(train_loop.train_and_evaluate: sharded jitted step, orbax checkpoints,
preemption agreement, online evaluation of BC with `workdir/best`) on an MDP
dataset read through `batching`, and records which dataset rows this process
loaded at every step (`WORKDIR/ALGO/rows-I.json`); GRPO trains the
cotraining tests' toy bot online, each process playing its share of the
rollouts. A fault can be injected
into the last process at a given step (`--fault=sigterm:S` or `die:S`),
which is deterministic where an external signal would race the run.

With --num_processes=1 and --compare=DIR it is the reference: after its own
run it restores DIR's latest checkpoints (written by more processes) onto its
mesh and prints the largest parameter difference as `MATCH ALGO STEP DIFF`.
"""

import json
import os
import signal
import sys
import time

import jax
import ml_collections
import numpy as np
from absl import app, flags
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cotraining_toy  # noqa: E402  (tests/, this script's folder)
from cotraining import experience  # noqa: E402
from data_pipelines import tokenization  # noqa: E402
from data_pipelines.mdp_dataset import load_mdp_dataset  # noqa: E402
from experiments.configs import bc_tiny, ilql_airdialogue_quick  # noqa: E402
from ilql_dialogue import checkpointing, multihost, registry, sharding, train_loop  # noqa: E402
from ilql_dialogue import metrics as metrics_lib  # noqa: E402
from workflows import evaluate as evaluate_lib, train as train_lib  # noqa: E402

SIGNAL_NOTICE_S = 2.0

_DATA = flags.DEFINE_string("data", None, "Holds mdp/ (agent MDP dataset) and tokenizer/.",
                            required=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "One subfolder per algorithm.", required=True)
_COORDINATOR = flags.DEFINE_string("coordinator", "", "host:port of process 0.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", 1, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", 0, "This process's index.")
_ALGORITHMS = flags.DEFINE_list("algorithms", ["bc", "ilql", "grpo"],
                                "Trained one after the other.")
_STEPS = flags.DEFINE_integer("steps", 4, "Updates per algorithm.")
_MESH = flags.DEFINE_list("mesh", ["2", "2", "1"], "data, fsdp, tensor sizes.")
_FAULT = flags.DEFINE_string("fault", "", "sigterm:STEP or die:STEP, in the last process.")
_COMPARE = flags.DEFINE_string("compare", "", "Reference: workdir of a multi-process run.")
_HEARTBEAT_S = flags.DEFINE_integer("heartbeat_s", 10, "Seconds before a silent peer is dead.")


def make_config(algorithm: str, vocab_size: int, steps: int, mesh: list[str]
                ) -> ml_collections.ConfigDict:
  """bc_tiny shrunk to one layer, with ILQL's section for `ilql`; BC also plays two
  AirDialogue scenarios at the end and keeps its best checkpoint by them."""
  c = bc_tiny.get_config()
  if algorithm == "ilql":
    c.algorithm = ilql_airdialogue_quick.ilql_section(polyak_rate=0.5)
  c.model.update(vocab_size=vocab_size, num_layers=1, d_model=32, num_heads=2, num_kv_heads=2,
                 head_dim=16, mlp_dim=64)
  c.mesh.update(data=int(mesh[0]), fsdp=int(mesh[1]), tensor=int(mesh[2]))
  c.train.update(steps=steps, batch_size=8, grad_accum_steps=2, log_every=1, eval_every=0,
                 eval_at_start=False, checkpoint_every=steps, keep_checkpoints=2,
                 progress_bar=False)
  c.optim.update(warmup_steps=1)
  if algorithm == "bc":
    c.selection.metric = "return"
  return c


def recorded(data: train_loop.TrainData, rows: dict[int, list[int]], fault: str
             ) -> train_loop.TrainData:
  """`data`, noting the dataset rows of each step in `rows`; the fault happens when the
  batch of its step is asked for, in the last process only."""
  kind, _, at = fault.partition(":")
  faulty = bool(fault) and jax.process_index() == jax.process_count() - 1

  def from_step(start: int):
    for step, batch in enumerate(data(start), start + 1):
      if faulty and step == int(at):
        if kind == "sigterm":
          # JAX's notifier looks for the signal about once a second; a signal caught while
          # the process is busy is what this pause models. Peers wait in the next step.
          os.kill(os.getpid(), signal.SIGTERM)
          time.sleep(SIGNAL_NOTICE_S)
        else:
          os._exit(3)
      rows[step] = batch["example_index"].tolist()
      yield batch

  return from_step


def grpo_config(steps: int, mesh: list[str]) -> ml_collections.ConfigDict:
  """GRPO on the cotraining tests' toy task: 4 scenarios x 4 rollouts, 2 minibatches each."""
  c = cotraining_toy.config(scenarios=4, group_size=4, epochs=1)
  c.mesh.update(data=int(mesh[0]), fsdp=int(mesh[1]), tensor=int(mesh[2]))
  c.train.update(steps=steps, batch_size=8, grad_accum_steps=2, log_every=1,
                 checkpoint_every=steps, keep_checkpoints=2)
  return c


class RecordingEnv(cotraining_toy.ToyEnv):
  """The toy task, noting every scenario this process plays (`WORKDIR/grpo/played-I.json`)."""

  played: set[str] = set()

  def context(self, scenario, role):
    self.played.add(scenario)
    return super().context(scenario, role)


def grpo_data(config: ml_collections.ConfigDict, algorithm, workdir: str):
  """Rollouts of the toy bot: each process plays its share of every batch's scenarios."""
  return experience.RolloutSource(
      config, RecordingEnv(target="yes"), algorithm, "bot",
      make_learner=lambda decoder: cotraining_toy.bot(decoder, max_new_tokens=1,
                                                      only_words=True),
      others={"user": cotraining_toy.Talker()}, store_dir=os.path.join(workdir, "rollouts"))


def train(config: ml_collections.ConfigDict, workdir: str, dataset, eval_fn, fault: str):
  algorithm = registry.make_algorithm(config)
  rows: dict[int, list[int]] = {}
  if config.algorithm.name == "grpo":
    result = train_loop.train_and_evaluate(config, workdir, algorithm,
                                           grpo_data(config, algorithm, workdir))
    with open(os.path.join(workdir, f"played-{jax.process_index()}.json"), "w") as f:
      json.dump(sorted(RecordingEnv.played), f)
    return algorithm, result
  data = recorded(train_lib.mdp_batches(dataset, config), rows, fault)
  result = train_loop.train_and_evaluate(config, workdir, algorithm, data, eval_fn)
  with open(os.path.join(workdir, f"rows-{jax.process_index()}.json"), "w") as f:
    json.dump(rows, f)
  return algorithm, result


def max_difference(config, algorithm, reference: train_loop.TrainState, workdir: str):
  """Restores `workdir`'s latest checkpoint on this process's mesh; returns its step and
  the largest absolute difference from `reference`."""
  mesh = sharding.make_mesh(**config.mesh)
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, algorithm, mesh)
    checkpointer = checkpointing.Checkpointer(workdir, keep=2, async_save=False)
    step = checkpointer.latest_step()
    state, _ = checkpointer.restore(step, training.restore_target())
    checkpointer.close()
  restored = jax.device_get(nnx.to_pure_dict(state))
  ours = jax.device_get(nnx.to_pure_dict(nnx.state(reference)))
  diffs = jax.tree.map(lambda a, b: float(np.max(np.abs(np.asarray(a, np.float64) - b),
                                                 initial=0.0)), restored, ours)
  return step, max(jax.tree.leaves(diffs))


def main(argv):
  del argv
  metrics_lib.plot_learning_curves = lambda *_: None  # Seconds of matplotlib, tested elsewhere.
  if _NUM_PROCESSES.value > 1:
    multihost.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                         heartbeat_timeout_s=_HEARTBEAT_S.value)
  tokenizer = tokenization.load_tokenizer(os.path.join(_DATA.value, "tokenizer"))
  dataset = load_mdp_dataset(os.path.join(_DATA.value, "mdp"))
  vocab = -(-tokenizer.vocab_size // 128) * 128
  for name in _ALGORITHMS.value:
    if name == "grpo":
      config = grpo_config(_STEPS.value, _MESH.value)
    else:
      config = make_config(name, vocab, _STEPS.value, _MESH.value)
    eval_fn = None
    if name == "bc":
      eval_fn = multihost.per_process(evaluate_lib.online_eval_fn(
          tokenizer, "agent", "scripted:terse", num_dialogues=2, kb_size=2, batch_size=2,
          max_turns=2, max_new_tokens=4))
    workdir = os.path.join(_WORKDIR.value, name)
    algorithm, state = train(config, workdir, dataset, eval_fn, _FAULT.value)
    if _COMPARE.value:
      step, diff = max_difference(config, algorithm, state, os.path.join(_COMPARE.value, name))
      print(f"MATCH {name} {step} {diff:.3g}", flush=True)


if __name__ == "__main__":
  app.run(main)
