"""The experience source: the loop's `TrainData`, sampled from the model being trained.

ilql_dialogue/train_loop.py asks its data for one batch per step and, when
the data has a `bind_model` method, hands it a callable returning the
current model (the loop's only concession to online RL). Every
`steps_per_rollout` steps this source plays a rollout batch with the current
policy (cotraining/rollouts.py): N scenarios x G rollouts. The algorithm's
`prepare` adds what the loss needs once per batch (advantages, the
reference's log-probs, PPO's values); the source then yields minibatches
of train.batch_size rows for `epochs` passes, each pass in a fresh order
drawn from (seed, rollout, epoch). Each of those steps recomputes the ratio
to the behaviour policy under the current parameters.

Scenarios of rollout r are the first N of seed `rl.scenario_seed + r`
(default 100000: apart from the corpora's 0 and 1, selection's 2000 and
evaluation's 1000). Resume is exact: at a rollout boundary the batch is
sampled again from the restored parameters (the same batch); inside a batch
(a SIGTERM save, or checkpoint_every not a multiple of steps_per_rollout)
the batch is read back from `store_dir` (cotraining/rollout_store.py; the
launcher uses `<workdir>/rollouts`).

`stat_*` columns carry rollout measurements (seconds, dialogues/s, tokens/s)
into the step's metrics (cotraining/algorithms.py logs them).

config.rl fields: scenarios (N), group_size (G), epochs, max_turns,
scenario_seed, seq_len (default model.max_seq_len).
"""

from __future__ import annotations

import time
from typing import Callable, Iterator, Mapping

import jax
import ml_collections
import numpy as np
from absl import logging
from flax import nnx

from cotraining import algorithms, rollout_store, rollouts
from ilql_dialogue import environment
from ilql_dialogue.simulators import LMParty, Party

DEFAULT_SCENARIO_SEED = 100_000


class RolloutSource:
  """TrainData for online RL (module docstring)."""

  def __init__(self, config: ml_collections.ConfigDict, env: environment.Environment,
               algorithm: algorithms.PolicyGradient, role: str,
               make_learner: Callable[[nnx.Module], LMParty], others: Mapping[str, Party],
               store_dir: str | None = None):
    rl = config.rl
    self.env, self.algorithm, self.role = env, algorithm, role
    self.make_learner, self.others = make_learner, dict(others)
    self.num_scenarios, self.group_size = rl.scenarios, rl.group_size
    self.epochs, self.max_turns = rl.epochs, rl.max_turns
    self.scenario_seed = rl.get("scenario_seed", DEFAULT_SCENARIO_SEED)
    self.seq_len = rl.get("seq_len") or config.model.max_seq_len
    self.seed = config.seed
    self.batch_size = config.train.batch_size
    rows = self.num_scenarios * self.group_size
    if jax.process_count() != 1:
      raise ValueError("RolloutSource: one process only (each host would need its own rows)")
    if self.epochs < 1 or rows % self.batch_size:
      raise ValueError(f"config.rl: scenarios * group_size = {rows} rows must split into "
                       f"train.batch_size={self.batch_size} minibatches, and epochs >= 1")
    self.minibatches = rows // self.batch_size
    self.steps_per_rollout = self.epochs * self.minibatches
    keep = config.train.checkpoint_every // self.steps_per_rollout + 2
    self.store = None if store_dir is None else rollout_store.RolloutStore(store_dir, keep)
    self._current: Callable[[], nnx.Module] | None = None

  def bind_model(self, current: Callable[[], nnx.Module]) -> None:
    """Called by the loop: `current()` is the model as of the last update."""
    self._current = current

  def rollout(self, index: int) -> dict[str, np.ndarray]:
    """Rollout batch `index` with the current policy, prepared by the algorithm (and stored)."""
    if self._current is None:
      raise ValueError("RolloutSource: no model bound (train_loop binds it; or call bind_model)")
    model = self._current()
    learner = self.make_learner(model.policy)
    scenarios = self.env.sample(self.scenario_seed + index, self.num_scenarios)
    start = time.perf_counter()
    played = rollouts.collect(self.env, self.role, learner, self.others, scenarios,
                              group_size=self.group_size, max_turns=self.max_turns,
                              seed=self.seed, seq_len=self.seq_len)
    seconds = time.perf_counter() - start
    arrays = self.algorithm.prepare(model, played.arrays, played.rewards_NxG)
    rows = len(played.episodes)
    stats = {"stat_rollout_seconds": seconds, "stat_dialogues_per_sec": rows / seconds,
             "stat_sampled_tokens_per_sec": arrays["action_mask"].sum() / seconds}
    for name, value in stats.items():
      arrays[name] = np.full((rows,), value, np.float32)
    if self.store is not None:
      self.store.save(index, arrays)
    return arrays

  def _resumed(self, index: int) -> dict[str, np.ndarray]:
    """Batch `index` for a run resumed inside it: as stored, else sampled again (warned)."""
    arrays = None if self.store is None else self.store.load(index)
    if arrays is None:
      logging.warning("rollout batch %d is not stored: sampling it again with the resumed "
                      "parameters (the run is not an exact replay)", index)
      return self.rollout(index)
    return arrays

  def __call__(self, start: int) -> Iterator[Mapping[str, np.ndarray]]:
    index, arrays = start, None
    while True:
      batch_index, within = divmod(index, self.steps_per_rollout)
      if within == 0:
        arrays = self.rollout(batch_index)
      elif arrays is None:
        arrays = self._resumed(batch_index)
      epoch, minibatch = divmod(within, self.minibatches)
      order = np.random.default_rng([self.seed, batch_index, epoch]).permutation(
          len(arrays["reward"]))
      take = order[minibatch * self.batch_size:(minibatch + 1) * self.batch_size]
      yield {k: v[take] for k, v in arrays.items()}
      index += 1

