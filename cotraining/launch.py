"""config.rl -> the experience source of a task run (experiments/train_lib.py calls this).

A config with `task` and `rl` sections trains the task's role online: the
task gives the tokenizer and the layout the role was trained with (its
context as text or as a structured prefix), `rl.env` names the environment,
and `rl.opponent` is a party spec (simulators.make_party) for every other
role: a scripted style, a training workdir, or a user's class.

config.rl fields, beyond those experience.RolloutSource reads:
  env: "airdialogue"; reward: "success" | "soft" (AirDialogueEnv);
  opponent: party spec; opponent_temperature: a learned opponent's sampling;
  panel: optional simulator panel (cotraining/panels.py, experiments/configs/panel_*.py);
    training against one of its held-out simulators is refused at start-up;
  temperature: the trained role's sampling temperature (> 0);
  max_new_tokens: tokens per turn of every learned party.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import ml_collections

from cotraining import experience, panels
from ilql_dialogue import environment, rollout, simulators

ROLLOUTS_DIR = "rollouts"  # Under the workdir: the latest rollout batches (rollout_store.py).
ENVIRONMENTS: dict[str, Callable[[ml_collections.ConfigDict], environment.Environment]] = {
    "airdialogue": lambda rl: rollout.AirDialogueEnv(reward=rl.get("reward", "success")),
}


def make_env(rl: ml_collections.ConfigDict) -> environment.Environment:
  if rl.env not in ENVIRONMENTS:
    raise ValueError(f"config.rl.env={rl.env!r}; known: {sorted(ENVIRONMENTS)}")
  return ENVIRONMENTS[rl.env](rl)


def rollout_source(config: ml_collections.ConfigDict, algorithm: Any, task: Any,
                   workdir: str) -> experience.RolloutSource:
  """The RolloutSource that trains `task.role` against `config.rl.opponent`; it keeps its
  latest rollout batches in `<workdir>/rollouts` for exact resume."""
  rl = config.rl
  env = make_env(rl)
  if task.role not in env.turn_order:
    raise ValueError(f"config.task.role={task.role!r} is not a role of {rl.env} "
                     f"{list(env.turn_order)}")
  panels.refuse_held_out(rl)
  others = {role: simulators.make_party(rl.opponent, role, max_new_tokens=rl.max_new_tokens,
                                        temperature=rl.opponent_temperature)
            for role in env.turn_order if role != task.role}
  prefix_fields = None if task.prefix is None else task.prefix.fields

  def make_learner(decoder: Any) -> simulators.LMParty:
    return simulators.LMParty(decoder, task.tokenizer, task.role,
                              max_new_tokens=rl.max_new_tokens, temperature=rl.temperature,
                              include_context=task.include_context,
                              serialize_context=task.serialize_context,
                              prefix_fields=prefix_fields)

  return experience.RolloutSource(config, env, algorithm, task.role, make_learner, others,
                                  store_dir=os.path.join(workdir, ROLLOUTS_DIR))
