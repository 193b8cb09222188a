"""The experience source: the loop's `TrainData`, sampled from the model being trained.

ilql_dialogue/train_loop.py hands a data source with a `bind_model` method a callable returning
the current model (the loop's only concession to online RL). Every `steps_per_rollout` steps this
source plays a rollout batch with the current policy (cotraining/rollouts.py): N scenarios x G
rollouts. The algorithm's `prepare` adds what the loss needs once per batch (advantages, the
reference's log-probs, PPO's values); the source then yields minibatches of train.batch_size
rows for `epochs` passes, each in a fresh order drawn from (seed, rollout, epoch).

Scenarios of rollout r are the first N of seed `rl.scenario_seed + r` (default 100000: apart
from the corpora's 0 and 1, selection's 2000 and evaluation's 1000). Resume is exact: at a
rollout boundary the batch is sampled again from the restored parameters; inside a batch it is
read back from `store_dir` (cotraining/rollout_store.py; the launcher uses `<workdir>/rollouts`).
`stat_*` columns carry rollout throughput into the step's metrics (cotraining/algorithms.py).

Co-Training (cotraining/cotrain.py): with `make_simulator`, the other role is the simulator
being trained, an LMParty on `model.simulator`; its records join the rows under `sim_*` keys.
Population Co-Training (cotraining/population.py): with a `population`, each rollout batch
first adds the current simulator to the pool when one is due (`save_simulator`), then the
member drawn for the batch plays the user (`load_member`) and co-training trains on that
member's turns, the ratio taken to its behaviour log-probs. A `FixedPool` of given simulators is
the opponent pool of a run without co-training. On resume the pool is reset to the restored
step (`Population.resume`).

config.rl fields: scenarios (N), group_size (G), epochs, max_turns, scenario_seed, seq_len
(default model.max_seq_len).

On several processes each plays scenarios / process_count of every rollout batch on its own
whole copy of the model (so the model must fit on one device); every process then holds the same
batch and feeds the loop its block of every minibatch (train_loop.place_batch), so the updates
are those of one process.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator, Mapping

import jax
import ml_collections
import numpy as np
from absl import logging
from flax import nnx

from cotraining import algorithms, cotrain, rollout_store, rollouts
from cotraining.population import FixedPool, Population
from ilql_dialogue import environment, init_from, multihost, sharding
from ilql_dialogue.lm_party import LMParty
from ilql_dialogue.party import Party

DEFAULT_SCENARIO_SEED = 100_000


class RolloutSource:
  """TrainData for online RL (module docstring)."""

  def __init__(self, config: ml_collections.ConfigDict, env: environment.Environment,
               algorithm: algorithms.PolicyGradient, role: str,
               make_learner: Callable[[nnx.Module], LMParty], others: Mapping[str, Party],
               store_dir: str | None = None, *,
               make_simulator: Callable[[nnx.Module], LMParty] | None = None,
               population: Population | FixedPool | None = None,
               load_member: Callable[[str], Party] | None = None,
               save_simulator: Callable[[nnx.Module, str], None] | None = None,
               simulator_init_from: str = ""):
    rl = config.rl
    self.env, self.algorithm, self.role = env, algorithm, role
    self.make_learner, self.others = make_learner, dict(others)
    self.make_simulator, self.population = make_simulator, population
    self.load_member, self.save_simulator = load_member, save_simulator
    self.simulator_init_from = simulator_init_from
    if simulator_init_from and make_simulator is None:
      raise ValueError("RolloutSource: simulator_init_from is for a co-trained simulator")
    if population is not None and load_member is None:
      raise ValueError("RolloutSource: a population needs load_member (a member's party)")
    if isinstance(population, Population) and (make_simulator is None or save_simulator is None):
      raise ValueError("RolloutSource: a Population grows from the co-trained simulator "
                       "(make_simulator and save_simulator); a pool of given simulators is a "
                       "FixedPool")
    self._members: dict[str, Party] = {}
    self.num_scenarios, self.group_size = rl.scenarios, rl.group_size
    self.epochs, self.max_turns = rl.epochs, rl.max_turns
    self.scenario_seed = rl.get("scenario_seed", DEFAULT_SCENARIO_SEED)
    self.seq_len = rl.get("seq_len") or config.model.max_seq_len
    self.seed = config.seed
    self.batch_size = config.train.batch_size
    rows = self.num_scenarios * self.group_size
    if self.epochs < 1 or rows % self.batch_size:
      raise ValueError(f"config.rl: scenarios * group_size = {rows} rows must split into "
                       f"train.batch_size={self.batch_size} minibatches, and epochs >= 1")
    self.hosts = jax.process_count()
    if self.num_scenarios % self.hosts or self.batch_size % self.hosts:
      raise ValueError(f"config.rl.scenarios={self.num_scenarios} and train.batch_size="
                       f"{self.batch_size} must split over the job's {self.hosts} processes")
    if self.hosts > 1 and isinstance(population, Population):
      raise ValueError("Population Co-Training saves its members from one process; run it on "
                       "one process (a FixedPool of saved simulators runs on several)")
    self.minibatches = rows // self.batch_size
    self.steps_per_rollout = self.epochs * self.minibatches
    keep = config.train.checkpoint_every // self.steps_per_rollout + 2
    self.store = None if store_dir is None else rollout_store.RolloutStore(store_dir, keep)
    self._current: Callable[[], nnx.Module] | None = None

  def bind_model(self, current: Callable[[], nnx.Module]) -> None:
    """Called by the loop: `current()` is the model as of the last update."""
    self._current = current

  def rollout(self, index: int) -> dict[str, np.ndarray]:
    """Rollout batch `index` with the current policy, prepared by the algorithm (and stored).

    On several processes each plays its share of the scenarios on a whole copy of the model
    (multihost.local_replica), every process then holds the whole batch, and each prepares
    it alike: the batch and its advantages are those of one process playing every row.
    """
    if self._current is None:
      raise ValueError("RolloutSource: no model bound (train_loop binds it; or call bind_model)")
    model = self._current()
    if self.hosts == 1:
      arrays = self._play(model, index)
    else:
      model = multihost.local_replica(model)  # Collective: every process is at this step.
      with sharding.mesh_context(multihost.local_mesh()):
        arrays = self._play(model, index)
    if self.store is not None and jax.process_index() == 0:
      self.store.save(index, arrays)
    return arrays

  def _play(self, model: nnx.Module, index: int) -> dict[str, np.ndarray]:
    learner = self.make_learner(model.policy)
    others = dict(self.others)
    user = self._user(model, index)
    if user is not None:
      others[self._user_role(user)] = user
    scenarios = self.env.sample(self.scenario_seed + index, self.num_scenarios)
    share = self.num_scenarios // self.hosts
    scenarios = scenarios[jax.process_index() * share:][:share]
    start = time.perf_counter()
    played = rollouts.collect(self.env, self.role, learner, others, scenarios,
                              group_size=self.group_size, max_turns=self.max_turns,
                              seed=self.seed, seq_len=self.seq_len)
    arrays = dict(played.arrays)
    if self.make_simulator is not None:
      arrays.update({cotrain.SIM_PREFIX + k: v
                     for k, v in rollouts.learner_arrays(user, self.seq_len).items()})
    seconds = time.perf_counter() - start
    rows = len(played.episodes)
    stats = {"stat_rollout_seconds": seconds, "stat_dialogues_per_sec": rows / seconds,
             "stat_sampled_tokens_per_sec": arrays["action_mask"].sum() / seconds}
    for name, value in stats.items():
      arrays[name] = np.full((rows,), value, np.float32)
    arrays = multihost.allgather_rows(arrays)
    rewards_NxG = arrays["reward"].reshape(self.num_scenarios, self.group_size)
    return self.algorithm.prepare(model, arrays, rewards_NxG)

  def _user(self, model: nnx.Module, index: int) -> Party | None:
    """Who plays the user in batch `index`: a pool member, the co-trained simulator, or None
    (the fixed `others`)."""
    if self.population is None:
      if self.make_simulator is None:
        return None
      user = self.make_simulator(model.simulator)
    else:
      if isinstance(self.population, Population):
        self.population.update(index * self.steps_per_rollout,
                               lambda path: self.save_simulator(model, path))
      member = self.population.sample(index)
      self._members = {path: party for path, party in self._members.items()
                       if path in self.population.members}
      if member not in self._members:
        self._members[member] = self.load_member(member)
      user = self._members[member]
    if self.make_simulator is not None:
      rollouts.check_learner(user)
    return user

  def _user_role(self, user: Party) -> str:
    roles = [r for r in self.env.turn_order if r != self.role]
    role = getattr(user, "role", None) or (roles[0] if len(roles) == 1 else None)
    if role not in roles:
      raise ValueError(f"the simulator plays {role!r}; the other roles are {roles}")
    return role

  def _resumed(self, index: int) -> dict[str, np.ndarray]:
    """Batch `index` for a run resumed inside it: as stored, else sampled again (warned)."""
    arrays = None if self.store is None else self.store.load(index)
    if arrays is None:
      logging.warning("rollout batch %d is not stored: sampling it again with the resumed "
                      "parameters (the run is not an exact replay)", index)
      return self.rollout(index)
    return arrays

  def start_simulator(self) -> None:
    """Writes `simulator_init_from` into the fresh run's simulator and its reference.

    The loop's `model.init_from` writes one source into every LM of the pair;
    the simulator's own start (a BC customer) is written here, on the host,
    into the variables of the model `bind_model` exposes, which are the train
    state's, before the first update. A resumed run restores it instead.
    """
    if self._current is None:
      raise ValueError("RolloutSource: no model bound (train_loop binds it; or call bind_model)")
    model = self._current()
    init_from.load_into(cotrain.SimulatorHalf(model.simulator, model.simulator_reference),
                        self.simulator_init_from)

  def __call__(self, start: int) -> Iterator[Mapping[str, np.ndarray]]:
    if start == 0 and self.simulator_init_from:
      self.start_simulator()
    if isinstance(self.population, Population):
      self.population.resume(start)  # The pool as of the restored step; the replay re-adds.
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
      take = take.reshape(self.hosts, -1)[jax.process_index()]  # This host's block of rows.
      yield {k: v[take] for k, v in arrays.items()}
      index += 1

