"""Optimizer, accumulation, BC, the loop and the launcher."""

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from experiments.configs import bc_tiny
from ilql_dialogue import bc, metrics, optim, sharding, train_loop
from workflows import train as launcher
from workflows.base_config import base_config

VOCAB = 16


class TinyLM(nnx.Module):
  """The LM contract in miniature: the hidden state at i sees token i only,
  which is enough to learn "next = token + 1"."""

  def __init__(self, rngs: nnx.Rngs):
    init = nnx.initializers.normal(0.3)
    self.embed = nnx.Param(init(rngs.params(), (VOCAB, 32)), out_sharding=("vocab", "embed"),
                           eager_sharding=False)
    self.up = nnx.Param(init(rngs.params(), (32, 64)), out_sharding=("embed", "mlp"),
                        eager_sharding=False)
    self.down = nnx.Param(init(rngs.params(), (64, 32)), out_sharding=("mlp", "embed"),
                          eager_sharding=False)

  def __call__(self, tokens_BxT, positions_BxT, mask_BxT):
    x_BxTxD = self.embed[...][tokens_BxT]
    return x_BxTxD + jax.nn.gelu(x_BxTxD @ self.up[...]) @ self.down[...], None

  def logits(self, hidden_BxNxD):
    return hidden_BxNxD @ self.embed[...].T


def tiny_bc():
  return bc.BC(lambda config, rngs: TinyLM(rngs))


def counting_batches(seed, rows=16, length=12, padded=True):
  """Rows count up mod VOCAB after random left padding; the second half is
  the actions. A pure function of (seed, step)."""

  def from_step(start):
    step = start
    while True:
      rng = np.random.default_rng((seed, step))
      first = rng.integers(0, VOCAB, (rows, 1))
      pad = rng.integers(0, 4, (rows, 1)) if padded else np.zeros((rows, 1), int)
      t_T = np.arange(length)
      mask = t_T >= pad
      yield {"input_ids": np.where(mask, (first + t_T - pad) % VOCAB, 0).astype(np.int32),
             "attention_mask": mask, "action_mask": mask & (t_T >= length // 2)}
      step += 1

  return from_step


def test_warmup_cosine_schedule():
  opt = ml_collections.ConfigDict(dict(learning_rate=1e-3, warmup_steps=10,
                                       final_lr_fraction=0.1))
  schedule = optim.learning_rate_schedule(opt, total_steps=110)
  np.testing.assert_allclose([schedule(0), schedule(5), schedule(10)], [0.0, 5e-4, 1e-3],
                             rtol=1e-6)
  np.testing.assert_allclose(schedule(60), (1e-3 + 1e-4) / 2, rtol=1e-6)  # Cosine midpoint.
  np.testing.assert_allclose([schedule(110), schedule(500)], [1e-4, 1e-4], rtol=1e-6)
  assert schedule(30) > schedule(40) > schedule(90)


def test_weight_decay_skips_norms_and_biases():
  from ilql_dialogue.models.config import ModelConfig
  from ilql_dialogue.models.transformer import Transformer
  cfg = ModelConfig.gpt2(vocab_size=64, num_layers=2, d_model=32, num_heads=2, max_seq_len=16)
  params = nnx.state(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))), nnx.Param)
  mask = optim.weight_decay_mask(params)(nnx.to_pure_dict(params))
  blocks = mask["blocks"]
  assert mask["embed"] and mask["pos_embed"] and blocks["attn"]["qkv_kernel"]
  assert blocks["mlp"]["up_kernel"] and blocks["mlp"]["down_kernel"]
  assert not blocks["attn"]["qkv_bias"] and not blocks["mlp"]["up_bias"]
  assert not blocks["attn_norm"]["scale"] and not mask["final_norm"]["bias"]


def test_accumulated_gradients_equal_one_big_batch():
  rng = np.random.default_rng(0)
  params = {"w": jnp.asarray(rng.normal(size=(5, 3)), jnp.float32),
            "b": jnp.asarray(rng.normal(size=(3,)), jnp.float32)}
  batch = {"x": rng.normal(size=(24, 5)).astype(np.float32),
           "y": rng.normal(size=(24, 3)).astype(np.float32)}

  def loss_fn(p, b, unused_rng):
    loss = jnp.mean((jnp.tanh(b["x"] @ p["w"] + p["b"]) - b["y"]) ** 2)
    return loss, {"mse": loss}

  (full_loss, _), full_grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, None)
  micro = {k: v.reshape(4, 6, *v.shape[1:]) for k, v in batch.items()}
  grads, loss, aux = jax.jit(optim.accumulate_gradients, static_argnums=0)(
      loss_fn, params, micro, jax.random.key(0))
  np.testing.assert_allclose(loss, full_loss, atol=1e-6)
  np.testing.assert_allclose(aux["mse"], full_loss, atol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), grads, full_grads)


def test_train_step_with_accumulation_equals_full_batch_step():
  batch = next(counting_batches(1, rows=8, padded=False)(0))  # Same token count per row.
  config = base_config()
  config.train.batch_size = 8
  mesh = sharding.make_mesh()
  finals = []
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, tiny_bc(), mesh)
    for accum in (1, 4):  # The step takes the microbatch count from the batch's shape.
      config.train.grad_accum_steps = accum
      placed = train_loop.place_batch(batch, config, mesh)
      assert placed["input_ids"].shape == (accum, 8 // accum, 12)
      state, step_metrics = training.step(training.init(), placed)
      finals.append((jax.device_get(nnx.to_pure_dict(state)["model"]),
                     float(step_metrics["loss"])))
  (params1, loss1), (params4, loss4) = finals
  np.testing.assert_allclose(loss1, loss4, atol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), params1, params4)


def test_bc_loss_scores_token_i_from_hidden_i_minus_1():
  model = TinyLM(nnx.Rngs(0))
  tokens = jnp.asarray([[3, 7, 1, 9, 4], [5, 2, 8, 6, 0]], jnp.int32)
  attention = jnp.asarray([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]], bool)
  action = jnp.zeros((2, 5), bool).at[:, 3].set(True).at[1, 0].set(True)  # [1, 0] is padding.

  @nnx.jit
  def bc_loss_and_log_probs(model):
    loss, aux = bc.BC(lambda c, r: model).loss(
        model, {"input_ids": tokens, "attention_mask": attention, "action_mask": action}, None)
    hidden, _ = model(tokens, bc.positions_from_mask(attention), attention)
    return loss, aux, jax.nn.log_softmax(model.logits(hidden), axis=-1)

  loss, aux, log_probs = bc_loss_and_log_probs(model)
  expected = -(log_probs[0, 2, 9] + log_probs[1, 2, 6]) / 2
  np.testing.assert_allclose(loss, expected, rtol=1e-6)
  np.testing.assert_allclose(aux["perplexity"], np.exp(expected), rtol=1e-6)
  predicted = jnp.argmax(log_probs[:, 2], axis=-1)
  np.testing.assert_allclose(aux["token_accuracy"], np.mean(predicted == tokens[:, 3]))


def test_bc_learns_a_tiny_sequence_task(tmp_path, learning_curve_plots):
  config = base_config()
  config.train.update(steps=80, batch_size=16, grad_accum_steps=2, log_every=20, eval_every=40,
                      checkpoint_every=40, progress_bar=False)
  config.optim.update(learning_rate=1e-2, warmup_steps=5, weight_decay=0.0)
  held_out = counting_batches(seed=99)(0)
  eval_fn = train_loop.loss_evaluator(tiny_bc(), [next(held_out) for _ in range(2)])
  workdir = str(tmp_path)
  train_loop.train_and_evaluate(config, workdir, tiny_bc(), counting_batches(0), eval_fn)

  records = metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))
  evals = [r for r in records if r["split"] == "eval"]
  train = [r for r in records if r["split"] == "train"]
  assert [r["step"] for r in evals] == [0, 40, 80]
  assert [r["step"] for r in train] == [20, 40, 60, 80]
  assert evals[0]["loss"] > 2.0  # ~log(16) before training.
  assert evals[-1]["loss"] < 0.05 and evals[-1]["token_accuracy"] == 1.0
  assert train[-1]["learning_rate"] < train[0]["learning_rate"]
  assert os.path.getsize(os.path.join(workdir, metrics.CURVES_FILE)) > 0
  assert any(f.startswith("events.out.tfevents")
             for f in os.listdir(os.path.join(workdir, "tensorboard")))
  assert json.load(open(os.path.join(workdir, "config.json")))["train"]["steps"] == 80


def test_bad_batch_shape_names_the_key():
  config = base_config()
  config.train.batch_size = 8
  with pytest.raises(ValueError, match=r"batch\['x'\] has shape \(6, 2\)"):
    train_loop.place_batch({"x": np.zeros((6, 2))}, config, sharding.make_mesh())


def _tiny_mdp_dataset(directory):
  """A small MDP dataset built with the project's own data pipeline."""
  from data_pipelines.dialogue import Dialogue, Turn
  from data_pipelines.mdp_dataset import build_dataset
  from data_pipelines.tokenization import train_tokenizer

  rng = np.random.default_rng(0)
  cities = ["Boston", "Denver", "Austin", "Seattle"]
  dialogues = []
  for i in range(24):
    city, day = cities[rng.integers(4)], int(rng.integers(1, 28))
    dialogues.append(Dialogue(f"d{i}", ("agent", "customer"), (
        Turn("customer", f"I need a flight to {city} on the {day}th."),
        Turn("agent", f"Searching flights to {city} on the {day}th."),
        Turn("customer", "Thanks."),
        Turn("agent", f"Booked: {city}, {day}th."),
    ), outcome=1.0))
  texts = [t.text for d in dialogues for t in d.turns]
  tokenizer = train_tokenizer(texts * 4, ("agent", "customer"), vocab_size=320)
  build_dataset(dialogues, tokenizer, "agent", 64, include_context=False,
                cache_dir=os.path.join(directory, "cache")).save_to_disk(
                    os.path.join(directory, "mdp"))
  tokenizer.save(os.path.join(directory, "mdp", "tokenizer"))
  return os.path.join(directory, "mdp")


def test_launcher_trains_bc_on_an_mdp_dataset(tmp_path):
  dataset_dir = _tiny_mdp_dataset(str(tmp_path))
  config = bc_tiny.get_config()
  config.model.num_layers = 1
  config.data.dataset_dir = dataset_dir
  config.data.eval_dataset_dir = dataset_dir
  config.data.eval_batches = 2
  config.data.bucket_boundaries = (64,)  # One bucket: one compile.
  config.train.update(steps=40, batch_size=8, log_every=10, eval_every=0, checkpoint_every=40,
                      progress_bar=False)
  config.optim.update(learning_rate=1e-2, warmup_steps=5)
  workdir = str(tmp_path / "run")
  final = launcher.run(config, workdir)

  assert config.model.vocab_size == 0  # Resolved on a copy, not on the caller's config.
  assert final.model.embed.shape[0] == 384  # 320-id tokenizer rounded up to 128s.
  records = metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))
  evals = [r for r in records if r["split"] == "eval"]
  assert [r["step"] for r in evals] == [0, 40]
  assert evals[-1]["loss"] < 0.5 * evals[0]["loss"]
