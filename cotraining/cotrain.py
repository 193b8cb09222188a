"""Co-Training (docs/METHODS.md, Online RL and Co-Training): the user simulator is trained too, on its own turns of the same dialogues.

Against one frozen simulator the policy learns that simulator's habits; a
simulator trained alongside keeps moving, and its own reward keeps it from
becoming a pushover. The trained module is a `CoTrainedPair`: the policy and
the simulator, each with its own frozen reference, in one train state (exact
resume restores all four). Rollout rows record both parties (the simulator's
under `sim_*` keys); the loss is each one's GRPO / RLOO loss on its own
tokens, each ratio to its own behaviour log-probs, each KL to its own reference.

The simulator's reward is a function of how the policy did in the group
(`SIMULATOR_REWARDS`, cotraining/sim_rewards.py):
  curriculum  AirDialogue: exp(-(Var - 0.25)^2 / 0.02) of the policy's 0/1 successes,
              one value per group, so its advantages are normalized over the batch
              (within a group they would all be 0)
  zero_sum    Persuasion for Good: 1 - donation / 2 when the persuadee stated a donation
              (0 otherwise: silence must not pay), the policy's reward being donation / 2;
              group-normalized like the policy's

The simulator reads its private context as text, so its LM is config.model
without the structured prefix. `model.init_from` writes its source into every
LM of the pair; `simulator_init_from` (a BC customer workdir) then replaces the
simulator's two at the fresh run's first rollout
(experience.RolloutSource.start_simulator).

A pair's workdir loads as the policy (PolicyWithReference's contract);
`export_simulator` writes its simulator as a workdir of its own, which
`simulators.make_party` loads as the simulator's role (Population
Co-Training saves its members the same way).

config.rl.cotrain fields: enabled; simulator_reward ("curriculum" | "zero_sum");
kl_coef (the simulator's KL weight, default 0.005); temperature (the
simulator's sampling, default rl.opponent_temperature); simulator_init_from
(the simulator's starting workdir; "" = model.init_from's).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
from typing import Any, Callable, Mapping, Sequence

import jax
import ml_collections
import numpy as np
from flax import nnx

from cotraining import sim_rewards
from cotraining.policy import PolicyWithReference, frozen_copy
from ilql_dialogue import bc, checkpointing, init_from, registry, restore
from ilql_dialogue.algorithm import Batch, Metrics

SIM_PREFIX = "sim_"  # Batch keys of the simulator's arrays.
METRIC_PREFIX = "simulator/"
DEFAULT_KL_COEF = 0.005

# (the policy's rewards [N, G], whether each dialogue ended with its outcome stated [N, G])
# -> the simulator's rewards [N, G].
SIMULATOR_REWARDS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "curriculum": lambda rewards_NxG, _: sim_rewards.curriculum_reward(rewards_NxG),
    "zero_sum": lambda rewards_NxG, stated_NxG: sim_rewards.zero_sum_reward(
        sim_rewards.MAX_DONATION * np.asarray(rewards_NxG), stated_NxG),
}
# Rewards that are one value per group: their advantages are taken over the whole batch, since
# a group baseline would cancel them exactly and leave the simulator no signal.
PER_GROUP_REWARDS = frozenset({"curriculum"})


def enabled(rl: Mapping[str, Any] | None) -> bool:
  """Whether config.rl co-trains the simulator (off when the section is absent)."""
  section = (rl or {}).get("cotrain")
  return section is not None and bool(section.get("enabled", False))


class CoTrainedPair(PolicyWithReference):
  """The policy and its reference (speaking the LM contract as the policy), plus `simulator`
  (trained) and `simulator_reference` (its frozen start)."""

  def __init__(self, policy: nnx.Module, simulator: nnx.Module):
    super().__init__(policy)
    self.simulator = simulator
    self.simulator_reference = frozen_copy(simulator)


class SimulatorHalf(nnx.Module):
  """The pair's simulator and its reference as one module, for `init_from.load_into`."""

  def __init__(self, simulator: nnx.Module, simulator_reference: nnx.Module):
    self.simulator, self.simulator_reference = simulator, simulator_reference


@dataclasses.dataclass(frozen=True)
class Side:
  """One learned party as the policy-gradient algorithm sees it: a policy and its reference."""

  policy: nnx.Module
  reference: nnx.Module


def simulator_side(model: CoTrainedPair) -> Side:
  return Side(model.simulator, model.simulator_reference)


def simulator_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The run config with the simulator's model: config.model without the structured prefix,
  with the copy head of the workdir it starts from (`simulator_init_from`), if any."""
  start = config.get("rl", {}).get("cotrain", {}).get("simulator_init_from", "")
  start = init_from.split_step(start)[0] if start else ""
  config = copy.deepcopy(config)
  with config.unlocked():
    config.model.prefix_field_vocab_sizes, config.model.prefix_num_rows = (), 0
    if start and os.path.isfile(os.path.join(start, "config.json")):
      config.model.copy_dim = restore.read_config(start).model.get("copy_dim", 0)
  return config


def split_batch(batch: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
  """(the policy's arrays, the simulator's arrays without their prefix)."""
  policy = {k: v for k, v in batch.items() if not k.startswith(SIM_PREFIX)}
  simulator = {k[len(SIM_PREFIX):]: v for k, v in batch.items() if k.startswith(SIM_PREFIX)}
  return policy, simulator


@dataclasses.dataclass(frozen=True)
class CoTraining:
  """The policy's and the simulator's policy-gradient losses on their own tokens, summed."""

  policy: Any  # algorithms.PolicyGradient of the trained role.
  simulator: Any  # algorithms.PolicyGradient of the simulator (its own kl_coef).
  simulator_reward: str = "curriculum"

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict, policy: Any) -> "CoTraining":
    section = config.rl.cotrain
    unknown = sorted(set(section) - {"enabled", "simulator_reward", "kl_coef", "temperature",
                                     "simulator_init_from"})
    if unknown:
      raise ValueError(f"config.rl.cotrain: unknown fields {unknown}")
    reward = section.get("simulator_reward", "curriculum")
    if reward not in SIMULATOR_REWARDS:
      raise ValueError(f"config.rl.cotrain.simulator_reward={reward!r}; known: "
                       f"{sorted(SIMULATOR_REWARDS)}")
    simulator = dataclasses.replace(policy, kl_coef=section.get("kl_coef", DEFAULT_KL_COEF))
    return cls(policy, simulator, reward)

  def init(self, config: ml_collections.ConfigDict, rngs: nnx.Rngs) -> nnx.Module:
    return CoTrainedPair(bc.lm_from_config(config, rngs),
                         bc.lm_from_config(simulator_config(config), rngs))

  def simulator_rewards(self, rewards_NxG: np.ndarray,
                        stated_NxG: np.ndarray | None = None) -> np.ndarray:
    stated_NxG = np.ones(np.shape(rewards_NxG), bool) if stated_NxG is None else stated_NxG
    return np.asarray(SIMULATOR_REWARDS[self.simulator_reward](rewards_NxG, stated_NxG),
                      np.float32)

  def prepare(self, model: CoTrainedPair, arrays: Mapping[str, np.ndarray],
              rewards_NxG: np.ndarray) -> dict[str, np.ndarray]:
    """Each side prepared by its algorithm: the simulator's advantages come from its reward."""
    policy_arrays, simulator_arrays = split_batch(arrays)
    if not simulator_arrays:
      raise ValueError("co-training: the rollout batch holds no simulator arrays (sim_*)")
    prepared = self.policy.prepare(model, policy_arrays, rewards_NxG)
    stated = policy_arrays.get("outcome_stated")
    simulator_rewards_NxG = self.simulator_rewards(
        rewards_NxG, None if stated is None else np.asarray(stated).reshape(rewards_NxG.shape))
    simulator_arrays = dict(simulator_arrays, reward=simulator_rewards_NxG.reshape(-1),
                            num_turns=policy_arrays["num_turns"])
    baseline_rewards = (simulator_rewards_NxG.reshape(1, -1)
                        if self.simulator_reward in PER_GROUP_REWARDS else simulator_rewards_NxG)
    simulator_arrays = self.simulator.prepare(simulator_side(model), simulator_arrays,
                                              baseline_rewards)
    return {**prepared, **{SIM_PREFIX + k: v for k, v in simulator_arrays.items()}}

  def loss(self, model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, Metrics]:
    policy_batch, simulator_batch = split_batch(batch)
    policy_loss, metrics = self.policy.loss(model, policy_batch, rng)
    simulator_loss, simulator_metrics = self.simulator.loss(simulator_side(model),
                                                            simulator_batch, rng)
    return policy_loss + simulator_loss, {
        **metrics, **{METRIC_PREFIX + k: v for k, v in simulator_metrics.items()}}


def exported_config(config: ml_collections.ConfigDict, role: str) -> ml_collections.ConfigDict:
  """The config a simulator workdir records: BC of `role` (its intent as text), no rl."""
  config = simulator_config(config)
  with config.unlocked():
    config.algorithm = ml_collections.ConfigDict(dict(name="bc"))
    if "rl" in config:
      del config["rl"]
    if config.get("task") is not None:
      config.task.role, config.task.context = role, "text"
    config.model.init_from = ""
  return config


class _Saved(nnx.Module):
  """The layout of a train state's `model` subtree, which policy_io restores."""

  def __init__(self, model: nnx.Module):
    self.model = model


def save_simulator(simulator: nnx.Module, config: ml_collections.ConfigDict, role: str,
                   directory: str, step: int, tokenizer_dir: str | None = None) -> None:
  """Writes `simulator` as a training workdir of its own (config.json, checkpoints/<step>,
  tokenizer/), so policy_io / simulators.make_party load it as `role`."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "config.json"), "w") as f:
    f.write(exported_config(config, role).to_json_best_effort(indent=2))
  if tokenizer_dir is not None and os.path.isdir(tokenizer_dir):
    shutil.copytree(tokenizer_dir, os.path.join(directory, init_from.TOKENIZER_DIR),
                    dirs_exist_ok=True)
  checkpointer = checkpointing.Checkpointer(directory, keep=1, async_save=False)
  try:
    checkpointer.save(step, jax.device_get(nnx.state(_Saved(simulator))),
                      {"step": step, "data_position": step})
    checkpointer.wait()
  finally:
    checkpointer.close()


def export_simulator(workdir: str, out_dir: str, step: int | None = None) -> str:
  """The simulator of a co-training workdir (its selected checkpoint, or `step`) as a workdir
  of its own at `out_dir`; returns out_dir."""
  config = restore.read_config(workdir)
  if not enabled(config.get("rl")):
    raise ValueError(f"{workdir}: not a co-training run (config.rl.cotrain.enabled)")
  model, step = restore.restore_model(workdir, config, step)
  role = simulator_role(registry.task(config.rl.env).roles, config.task.role)
  save_simulator(model.simulator, config, role, out_dir, step,
                 os.path.join(workdir, init_from.TOKENIZER_DIR))
  return out_dir


def simulator_role(turn_order: Sequence[str], trained_role: str) -> str:
  """The role a co-trained simulator plays: the environment's one other role."""
  others = [r for r in turn_order if r != trained_role]
  if len(others) != 1:
    raise ValueError(f"co-training needs a two-party environment; its roles are "
                     f"{list(turn_order)}")
  return others[0]


def load_simulator(directory: str) -> nnx.Module:
  """The LM of a simulator workdir (`save_simulator`), on one device."""
  return restore.restore_model(directory, restore.read_config(directory))[0]
