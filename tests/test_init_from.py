"""config.model.init_from: weights land where they should, mismatches fail at start-up, and a
pretrained trunk learns a copying skill in fewer updates than a random one."""

import os

import jax
import numpy as np
import pytest
from flax import nnx
from flax.nnx import traversals

from experiments.configs import bc_tiny, ilql_airdialogue_quick
from ilql_dialogue import bc, init_from, policy_io, registry, sharding, train_loop
from ilql_dialogue import restore
from ilql_dialogue.value_heads import Target

VOCAB = 64


def _config(steps=2, **model):
  c = bc_tiny.get_config()
  c.model.update({**dict(vocab_size=VOCAB, num_layers=1, d_model=32, num_heads=2,
                         num_kv_heads=2, head_dim=16, mlp_dim=64, max_seq_len=64), **model})
  c.data.update(synthetic=True, synthetic_length=16)
  c.train.update(steps=steps, batch_size=4, log_every=25, checkpoint_every=1, eval_every=0,
                 progress_bar=False)
  return c


def _flat(module, kind=nnx.Param):
  return traversals.flatten_mapping(jax.device_get(nnx.to_pure_dict(nnx.state(module, kind))),
                                    sep=".")


def _train(config, workdir, data=None):
  from workflows import train as train_lib
  if data is None:
    return train_lib.run(config, workdir)
  algorithm = registry.make_algorithm(config)
  return train_loop.train_and_evaluate(config, workdir, algorithm, data)


def _initial_model(config):
  mesh = sharding.make_mesh()
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, registry.make_algorithm(config), mesh)
    state = training.init()
    if config.model.get("init_from"):
      state = init_from.into_state(state, training.graphdef, config.model.init_from)
    return nnx.merge(training.graphdef, state).model


@pytest.fixture(scope="module")
def source(tmp_path_factory):
  """A BC workdir trained 3 steps (checkpoints at 1, 2, 3)."""
  workdir = str(tmp_path_factory.mktemp("bc"))
  _train(_config(steps=3), workdir)
  return workdir


def test_bc_round_trip_from_a_workdir_and_a_step(source):
  config = _config()
  trained, _ = restore.restore_model(source, restore.read_config(source))
  config.model.init_from = source
  loaded = _initial_model(config)
  for name, value in _flat(trained).items():
    np.testing.assert_array_equal(_flat(loaded)[name], value)
  config.model.init_from = f"{source}@1"
  at_step_1 = _flat(_initial_model(config))
  first, _ = restore.restore_model(source, restore.read_config(source), step=1)
  np.testing.assert_array_equal(at_step_1["embed"], _flat(first)["embed"])
  assert not np.array_equal(at_step_1["embed"], _flat(trained)["embed"])


def test_ilql_starts_every_trunk_from_bc_and_its_heads_fresh(source):
  config = _config()
  config.algorithm = ilql_airdialogue_quick.ilql_section(separate_policy=True, target_trunk=True)
  fresh = _initial_model(config)
  config.model.init_from = source
  model = _initial_model(config)
  bc_weights = _flat(restore.restore_model(source, restore.read_config(source))[0])
  for trunk, kind in ((model.trunk, nnx.Param), (model.policy_trunk, nnx.Param),
                      (model.target_trunk, Target)):
    for name, value in bc_weights.items():
      np.testing.assert_array_equal(_flat(trunk, kind)[name], value)
  for name, value in _flat(fresh.v_head).items():
    np.testing.assert_array_equal(_flat(model.v_head)[name], value)


def test_a_shape_mismatch_fails_at_start_up_naming_the_parameter(source, tmp_path):
  config = _config(steps=1)
  config.model.update(mlp_dim=128, init_from=source)
  with pytest.raises(ValueError, match=r"parameter 'trunk\.blocks\.mlp\.\w+' has shape \(1, 64, 32\) "
                                       r"in the source, \(1, 128, 32\) in this model"):
    _train(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run" / "checkpoints" / "1")


def test_bad_sources_are_named():
  with pytest.raises(FileNotFoundError, match="does not exist"):
    init_from.parse("/no/such/dir")
  with pytest.raises(ValueError, match="DIR@STEP"):
    init_from.parse(f"{os.getcwd()}@last")


def test_a_workdir_trained_on_another_tokenizer_is_refused(tmp_path):
  from data_pipelines.tokenization import train_tokenizer
  texts = ["hello there", "book a flight", "my name is Ann"] * 20
  ours = train_tokenizer(texts, ("a", "b"), vocab_size=300)
  theirs = train_tokenizer(texts + ["zebra quartz"] * 30, ("a", "b"), vocab_size=300)
  workdir = tmp_path / "run"
  (workdir / "checkpoints").mkdir(parents=True)
  theirs.save(str(workdir / init_from.TOKENIZER_DIR))
  init_from.check_tokenizer(str(workdir), theirs)
  with pytest.raises(ValueError, match="tokenizer .* differs"):
    init_from.check_tokenizer(str(workdir), ours)


# --- Learning: a pretrained trunk copies sooner ------------------------------------------

LENGTH, NAME_LEN = 24, 2
MARKERS = {"pretrain": (1, 2), "task": (3, 4)}  # (name-introducing token, answer marker).
FIRST_NAME_ID = 8


def copy_batches(kind, seed, rows=16, corpus=0):
  """Rows "[intro] a b [filler...] [answer] a b": the answer copies the name `a b` from the
  context. Pretraining and the task use different marker tokens and layouts, so what
  transfers is the copying itself, not the format. `corpus` > 0 draws every batch from
  that many fixed rows (a tiny corpus: memorising its names is the easy way out)."""
  intro, answer = MARKERS[kind]

  def from_step(start):
    step = start
    while True:
      rng = np.random.default_rng((seed, step % corpus if corpus else step))
      names = rng.integers(FIRST_NAME_ID, VOCAB, (rows, NAME_LEN))
      filler = rng.integers(5, FIRST_NAME_ID, (rows, LENGTH - 2 * NAME_LEN - 2))
      cut = LENGTH - 2 * NAME_LEN - 2 if kind == "pretrain" else 3
      tokens = np.concatenate([filler[:, :cut], np.full((rows, 1), intro), names,
                               filler[:, cut:], np.full((rows, 1), answer), names], axis=1)
      action = np.zeros_like(tokens, bool)
      action[:, -NAME_LEN:] = True
      yield {"input_ids": tokens.astype(np.int32), "attention_mask": np.ones_like(action),
             "action_mask": action}
      step += 1

  return from_step


def copy_accuracy(model, batch):
  """Share of held-out rows whose whole name is predicted (teacher-forced argmax)."""
  tokens = jax.numpy.asarray(batch["input_ids"])
  mask = jax.numpy.ones_like(tokens, bool)
  hidden, _ = model(tokens, bc.positions_from_mask(mask), mask)
  predicted = np.asarray(model.logits(hidden[:, -NAME_LEN - 1:-1]).argmax(-1))
  return float((predicted == batch["input_ids"][:, -NAME_LEN:]).all(axis=1).mean())


class _Enough(Exception):
  """Raised by an evaluation once a fine-tuning run has answered the question asked of it."""


def updates_to_copy(config, workdir, threshold=0.5, within=None):
  """Fine-tunes on the task, evaluating every config.train.eval_every updates; the first
  update count whose held-out copy accuracy reaches `threshold` (None: never, or not within
  `within` updates). The run stops there: the updates after it could not change the answer
  (the schedule is still config.train.steps long, so the updates before it are the same)."""
  heldout = next(copy_batches("task", seed=99, rows=128)(0))
  reached = []

  def eval_fn(model, step):
    accuracy = copy_accuracy(model, heldout)
    if accuracy >= threshold and step > 0:
      reached.append(step)
    if reached or (within is not None and step >= within):
      raise _Enough
    return {"copy_accuracy": accuracy}

  algorithm = registry.make_algorithm(config)
  try:
    train_loop.train_and_evaluate(config, workdir, algorithm,
                                  copy_batches("task", seed=1, corpus=8), eval_fn)
  except _Enough:
    pass
  return min(reached, default=None)


def test_a_pretrained_trunk_learns_to_copy_names_in_fewer_updates(tmp_path):
  """Held-out copy accuracy 0.5 on a 128-row corpus: the pretrained trunk gets there, a
  random one (which memorises the corpus' names instead) does not within the budget."""
  pretrain = _config(steps=300, num_layers=2)
  pretrain.train.batch_size = 16
  pretrain.optim.update(learning_rate=3e-3, warmup_steps=10)
  _train(pretrain, str(tmp_path / "lm"), copy_batches("pretrain", seed=0))
  runs = {}
  for name, spec in (("pretrained", str(tmp_path / "lm")), ("random", "")):
    config = _config(num_layers=2, init_from=spec)
    config.optim.update(learning_rate=1e-3, warmup_steps=10)
    config.train.update(steps=200, batch_size=16, eval_every=25, checkpoint_every=200,
                        eval_at_start=False)
    # The random trunk only has to be watched as long as the pretrained one took: reaching
    # the threshold later passes the assertion below, as never reaching it does.
    runs[name] = updates_to_copy(config, str(tmp_path / name), within=runs.get("pretrained"))
  # Measured: pretrained 75-100 updates; random init memorises the 128 rows and stays < 0.05.
  assert runs["pretrained"] is not None, runs
  assert runs["random"] is None or runs["pretrained"] < runs["random"], runs
