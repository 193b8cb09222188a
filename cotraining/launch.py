"""config.rl -> the experience source of a task run (workflows/train.py calls this).

A config with `task` and `rl` sections trains the task's role online: the
task gives the tokenizer and the layout the role was trained with (its
context as text or as a structured prefix), `rl.env` names the environment,
and `rl.opponent` is a party spec (make_party) for every other
role: a scripted style, a training workdir, or a user's class.

config.rl fields, beyond those experience.RolloutSource reads:
  env: a registered task (or module:attr) whose environment is played
    (registry.TaskSpec.make_env reads the rest of config.rl), e.g.
  env: "airdialogue"; reward: "success" | "soft" (AirDialogueEnv);
  env: "persuasion" (domains/persuasion/environment.py): split "train" | "eval" of the real
    dialogues the personas come from, data_dir ("" = $P4G_DATA_DIR), no_donation_reward;
  opponent: party spec; opponent_temperature: a learned opponent's sampling;
  panel: optional simulator panel (cotraining/panels.py, experiments/configs/panel_*.py);
    training against one of its held-out simulators is refused at start-up;
  temperature: the trained role's sampling temperature (> 0);
  max_new_tokens: tokens per turn of every learned party;
  cotrain: {enabled, simulator_reward, kl_coef, temperature, simulator_init_from}: the other
    role is a simulator trained alongside (cotraining/cotrain.py); rl.opponent is then not
    played;
  population: {enabled, capacity, add_every, members}: with co-training, the pool of the
    simulator's saved checkpoints under `<workdir>/population`; without, `members` (party
    specs) is the pool; a member drawn per rollout batch plays the other role
    (cotraining/population.py). The online evaluation's opponent must not be held out by
    rl.panel when checkpoints are selected by it.
"""

from __future__ import annotations

import os
from typing import Any

import ml_collections

from cotraining import cotrain, experience, panels, population
from ilql_dialogue import environment, init_from, registry
from ilql_dialogue.lm_party import LMParty
from ilql_dialogue.parties import make_party

ROLLOUTS_DIR = "rollouts"  # Under the workdir: the latest rollout batches (rollout_store.py).


def make_env(rl: ml_collections.ConfigDict) -> environment.Environment:
  """The environment of the task config.rl.env names (registry.TaskSpec.make_env)."""
  spec = registry.task(rl.env)
  if spec.make_env is None:
    raise ValueError(f"config.rl.env={rl.env!r}: the task has no environment")
  return spec.make_env(rl)


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
  panels.refuse_held_out_selection(config)
  pool = rl.get("population")
  pool = pool if pool is not None and pool.get("enabled", False) else None
  for member in [] if pool is None else pool.get("members", ()):
    panels.refuse_held_out({**rl, "opponent": member})
  cotraining = cotrain.enabled(rl)
  simulator_role = (cotrain.simulator_role(env.turn_order, task.role)
                    if cotraining or pool is not None else None)
  others = {role: make_party(rl.opponent, role, max_new_tokens=rl.max_new_tokens,
                                        temperature=rl.opponent_temperature)
            for role in env.turn_order if role not in (task.role, simulator_role)}
  prefix_fields = None if task.prefix is None else task.prefix.fields

  def make_learner(decoder: Any) -> LMParty:
    return LMParty(decoder, task.tokenizer, task.role,
                              max_new_tokens=rl.max_new_tokens, temperature=rl.temperature,
                              include_context=task.include_context,
                              serialize_context=task.serialize_context,
                              prefix_fields=prefix_fields,
                              read_turn=getattr(task, "read_turn", None))

  def make_simulator(decoder: Any) -> LMParty:
    """The co-trained simulator: its context as text (cotraining/cotrain.py)."""
    temperature = rl.cotrain.get("temperature") or rl.opponent_temperature
    return LMParty(decoder, task.tokenizer, simulator_role,
                              max_new_tokens=rl.max_new_tokens, temperature=temperature,
                              include_context=True, serialize_context=task.serialize_context)

  options = {}
  if cotraining:
    options.update(make_simulator=make_simulator,
                   simulator_init_from=rl.cotrain.get("simulator_init_from", ""))
    if options["simulator_init_from"]:
      init_from.check_tokenizer(options["simulator_init_from"], task.tokenizer)
  if pool is not None and cotraining:
    add_every = pool.get("add_every", population.DEFAULT_ADD_EVERY)
    options.update(
        population=population.Population(
            os.path.join(workdir, population.DIRECTORY),
            capacity=pool.get("capacity", population.DEFAULT_CAPACITY), add_every=add_every,
            seed=config.seed, retain=config.train.checkpoint_every // add_every + 1),
        load_member=lambda path: make_simulator(cotrain.load_simulator(path)),
        save_simulator=lambda model, path: cotrain.save_simulator(
            model.simulator, config, simulator_role, path, 0,
            os.path.join(workdir, init_from.TOKENIZER_DIR)))
  elif pool is not None:
    if not pool.get("members"):
      raise ValueError("config.rl.population: without co-training the pool is "
                       "config.rl.population.members (party specs of saved simulators)")
    options.update(
        population=population.FixedPool(pool.members, seed=config.seed),
        load_member=lambda spec: make_party(
            spec, simulator_role, max_new_tokens=rl.max_new_tokens,
            temperature=rl.opponent_temperature))
  return experience.RolloutSource(config, env, algorithm, task.role, make_learner, others,
                                  store_dir=os.path.join(workdir, ROLLOUTS_DIR), **options)
