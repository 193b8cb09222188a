"""What `experiments.train` runs: the algorithm, data and evaluation a config names.

`run(config, workdir)` is the whole launcher as a function, so the pipeline
(workflows/quickstart.py) and the tests train in-process. A config with
a `task` section (e.g. bc_airdialogue_quick.py) gets its data from
ilql_dialogue/tasks (datasets built on first use, structured prefix), and
with `online_eval` it plays held-out scenarios at every evaluation, which
`selection` keeps the best checkpoint by. With an `rl` section as well
(grpo_airdialogue_quick.py) its batches are rollouts of the task's role
(cotraining/launch.py) instead of the task's dataset.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
from typing import Iterator

import jax
import ml_collections
import numpy as np
import tokenizers

from ilql_dialogue import init_from, multihost, registry, train_loop
from workflows import skill_probes

SYNTHETIC_VOCAB = 128  # model.vocab_size for synthetic data when the config leaves it at 0.

def synthetic_batches(config: ml_collections.ConfigDict) -> train_loop.TrainData:
  """Rows of arithmetic progressions mod vocab with random left padding; the
  second half of each row is the 'actions'. Learnable only by reading the
  context (start and stride differ per row), so falling loss means attention
  works. Each batch is a pure function of (seed, step)."""
  vocab, length = config.model.vocab_size, config.data.synthetic_length
  rows = config.train.batch_size // jax.process_count()

  def from_step(start: int) -> Iterator[dict[str, np.ndarray]]:
    step = start
    while True:
      rng = np.random.default_rng((config.seed, step, jax.process_index()))
      first, stride = rng.integers(0, vocab, (rows, 1)), rng.integers(1, 4, (rows, 1))
      pad = rng.integers(0, length // 4, (rows, 1))
      t_T = np.arange(length)
      mask_BxT = t_T >= pad
      yield {
          "input_ids": np.where(mask_BxT, (first + stride * (t_T - pad)) % vocab, 0
                                ).astype(np.int32),
          "attention_mask": mask_BxT,
          "action_mask": mask_BxT & (t_T - pad >= (length - pad) // 2),
      }
      step += 1

  return from_step


def mdp_batches(dataset, config: ml_collections.ConfigDict) -> train_loop.TrainData:
  """Length-bucketed batches of an MDP dataset, resumable by step; each host
  reads only its own rows of every global batch (batching.batches)."""
  from data_pipelines import batching

  host = (jax.process_index(), jax.process_count())

  def from_step(start: int) -> Iterator[dict[str, np.ndarray]]:
    yield from batching.stream(dataset, config.train.batch_size, config.seed, start,
                               boundaries=tuple(config.data.bucket_boundaries) or None, host=host)

  return from_step


def loss_eval(algorithm, dataset, config: ml_collections.ConfigDict) -> train_loop.EvalFn:
  """Mean of the algorithm's loss metrics over the first eval batches."""
  from data_pipelines import batching

  batches = []
  for batch in batching.batches(dataset, config.train.batch_size, config.seed, epoch=0,
                                boundaries=tuple(config.data.bucket_boundaries) or None):
    batches.append(batch)
    if len(batches) == config.data.eval_batches:
      break
  return train_loop.loss_evaluator(algorithm, batches)


def online_eval(task, config: ml_collections.ConfigDict) -> train_loop.EvalFn | None:
  """Plays the model on held-out scenarios at each evaluation (config.online_eval, off
  when num_dialogues is 0): the "return" that config.selection keeps the best checkpoint
  by. AirDialogue's success by default; with `rl.env` another environment (P4G), its
  mean reward on the `online_eval.split` ("eval") scenarios.

  `online_eval.held_out` names held-out opponents (party specs) played on the same
  scenarios at every evaluation, logged as `held_out/<name>/<metric>`: the curve of
  how training against one simulator transfers to others, which selection never
  reads (it reads "return", the training opponent's), so no checkpoint is chosen
  on a held-out simulator."""
  online = config.get("online_eval")
  if online is None or online.num_dialogues <= 0:
    return None
  rl = config.get("rl")
  held_out = tuple(online.get("held_out", ()))
  if held_out:
    from cotraining import panels  # Two specs are one simulator when their sources agree.
    trained = {panels.source(s): s for s in (online.opponent, (rl or {}).get("opponent")) if s}
    for spec in held_out:
      if panels.source(spec) in trained:
        raise ValueError(f"config.online_eval.held_out names {spec!r}, the simulator "
                         f"{trained[panels.source(spec)]!r} trains or selects against; a "
                         f"held-out simulator must be another one")
  from workflows import evaluate as evaluate_lib
  names = [evaluate_lib.slug(spec) for spec in held_out]
  if len(set(names)) != len(names):
    raise ValueError(f"config.online_eval.held_out {list(held_out)}: two specs share the "
                     f"name {names}; give their workdirs distinct names")
  # The environment: online_eval.env, else the RL environment, else the task's own.
  env_name = online.get("env") or (rl.get("env") if rl is not None else None) or config.task.name
  env = None  # AirDialogue's evaluation builds its own scenarios (and plays CALM's head).
  if env_name != "airdialogue":
    env_config = ml_collections.ConfigDict((rl or online).to_dict())
    env_config.split = online.get("split", "validation")  # Never the test split's people.
    spec = registry.task(env_name)
    if spec.make_env is None:
      raise ValueError(f"config.online_eval: task {env_name!r} has no environment")
    env = spec.make_env(env_config)  # Once: every opponent plays the same scenarios.
  make = functools.partial(_opponent_eval_fn, task, config, env)
  fns = [make(online.opponent)]
  for name, spec in zip(names, held_out):
    fns.append(train_loop.prefixed_evaluator(make(spec), f"held_out/{name}/"))
  return fns[0] if len(fns) == 1 else train_loop.merged_evaluators(*fns)


def _opponent_eval_fn(task, config: ml_collections.ConfigDict, env,
                      opponent: str) -> train_loop.EvalFn:
  from workflows import evaluate as evaluate_lib
  online = config.online_eval
  # Every evaluation opponent samples at one temperature, whatever the training opponent does
  # (a frozen T = 0.3 simulator): arms stay comparable on the same simulators.
  temperature = online.get("opponent_temperature", 1.0)
  if env is not None:
    return evaluate_lib.environment_eval_fn(
        env, task.tokenizer, task.role, opponent,
        num_dialogues=online.num_dialogues, seed=online.seed, batch_size=online.batch_size,
        max_turns=online.max_turns, include_context=task.include_context,
        serialize_context=task.serialize_context, temperature=online.temperature,
        max_new_tokens=online.max_new_tokens,
        prefix_fields=None if task.prefix is None else task.prefix.fields,
        block_markers=registry.block_markers(config.task.name),
        read_turn=getattr(task, "read_turn", None),  # A task-like stand-in may have none.
        opponent_options={"temperature": temperature, "max_new_tokens": online.max_new_tokens})
  return evaluate_lib.online_eval_fn(
      task.tokenizer, task.role, opponent, num_dialogues=online.num_dialogues,
      seed=online.seed, batch_size=online.batch_size, max_turns=online.max_turns,
      include_context=task.include_context, serialize_context=task.serialize_context,
      prefix_fields=None if task.prefix is None else task.prefix.fields,
      betas=tuple(online.betas), temperature=online.temperature,
      max_new_tokens=online.max_new_tokens, opponent_options={"temperature": temperature},
      wrap_party=_calm_head_party(config))


def _calm_head_party(config: ml_collections.ConfigDict):
  """A CALM run whose agent acts by its head (planning.action=head) is selected as that agent,
  without planning (N = 1): the closing block's status and flight are the head's."""
  if config.get("calm_data") is None or config.planning.get("action", "lm") != "head":
    return None
  from calm import planning
  return lambda party: planning.CALMPlanner(party, n=1, act="head")


def _resolve_vocab(config: ml_collections.ConfigDict) -> None:
  """The model must embed every id of the dataset's tokenizer (saved next to
  it); model.vocab_size=0 takes that size, rounded up to a multiple of 128 so
  the "vocab" axis divides over tensor-parallel devices."""
  path = os.path.join(config.data.dataset_dir, "tokenizer", "tokenizer.json")
  vocab = tokenizers.Tokenizer.from_file(path).get_vocab_size(with_added_tokens=True)
  if config.model.vocab_size <= 0:
    config.model.vocab_size = -(-vocab // 128) * 128
  elif config.model.vocab_size < vocab:
    raise ValueError(f"config.model.vocab_size={config.model.vocab_size} is smaller than the "
                     f"tokenizer of {config.data.dataset_dir} ({vocab} ids)")


def run(config: ml_collections.ConfigDict, workdir: str):
  """Builds the algorithm and data named by `config` and trains."""
  config = copy.deepcopy(config)  # Resolved fields (vocab size) must not leak to the caller.
  algorithm = registry.make_algorithm(config)
  eval_fn = None
  if config.get("task") is not None:  # A dataset role with its own data plumbing (tasks/).
    from data_pipelines import mdp_dataset
    from ilql_dialogue import tasks
    part = mdp_dataset.parse_part((config.get("data") or {}).get("train_part", ""))
    task = tasks.make_task(config)
    tasks.configure_model(config, task)
    if jax.process_index() == 0:  # A later run's init_from checks it reads the same ids.
      task.tokenizer.save(os.path.join(workdir, init_from.TOKENIZER_DIR))
    if part is not None:  # A simulator of a panel that differs in its data.
      task = dataclasses.replace(task, datasets={
          **task.datasets, "train": mdp_dataset.dialogue_part(task.datasets["train"], *part)})
    if hasattr(algorithm, "filter_dataset"):  # Filtered BC trains on its top dialogues only.
      task = dataclasses.replace(task, datasets={
          **task.datasets, "train": algorithm.filter_dataset(task.datasets["train"])})
    if config.get("rl") is not None:  # Online RL (cotraining/): rollouts, not the dataset.
      from cotraining import launch
      train_data, eval_fn = launch.rollout_source(config, algorithm, task, workdir), None
    else:
      train_data = tasks.train_data(task, config)
      if config.get("calm_data") is not None:  # CALM's task-pretraining scenes, when asked.
        from calm import scenes
        train_data = scenes.with_scenes(train_data, config, task.tokenizer)
      eval_fn = train_loop.loss_evaluator(algorithm, tasks.eval_batches(task, config))
    for extra in (online_eval(task, config), skill_probes.probe_fn(config)):
      if extra is not None:  # Both decode from the host: per process on a whole replica.
        extra = multihost.per_process(extra)
        eval_fn = extra if eval_fn is None else train_loop.merged_evaluators(eval_fn, extra)
  elif config.data.synthetic:
    if config.model.vocab_size <= 0:
      config.model.vocab_size = SYNTHETIC_VOCAB
    train_data = synthetic_batches(config)
  elif config.data.dataset_dir:
    from data_pipelines.mdp_dataset import load_mdp_dataset
    _resolve_vocab(config)
    train_set = load_mdp_dataset(config.data.dataset_dir)
    if hasattr(algorithm, "filter_dataset"):
      train_set = algorithm.filter_dataset(train_set)
    train_data = mdp_batches(train_set, config)
    if config.data.eval_dataset_dir:
      eval_fn = loss_eval(algorithm, load_mdp_dataset(config.data.eval_dataset_dir), config)
  else:
    raise ValueError("config.data: set dataset_dir=DIR (python -m data_pipelines.build_dataset) "
                     "or synthetic=True")
  return train_loop.train_and_evaluate(config, workdir, algorithm, train_data, eval_fn)
