"""Chunked cross-entropy equals the one-shot one, values and gradients (BC's loss)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ilql_dialogue import bc
from ilql_dialogue.models import ModelConfig, Transformer
from ilql_dialogue.models.lm_loss import token_cross_entropy


def _model():
  cfg = ModelConfig.llama(vocab_size=61, num_layers=1, d_model=16, num_heads=2, mlp_dim=32)
  return Transformer(cfg, rngs=nnx.Rngs(0))


def test_chunks_equal_full_logits_and_optax():
  model = _model()
  hidden = jax.random.normal(jax.random.key(1), (3, 11, 16))
  targets = jax.random.randint(jax.random.key(2), (3, 11), 0, 61)
  full_ce, full_correct = token_cross_entropy(model.logits, hidden, targets)
  # 3 rows x 61 vocab x 4 bytes x 4 positions: chunks of 4, the last one padded.
  chunked_ce, chunked_correct = token_cross_entropy(model.logits, hidden, targets,
                                                    max_logits_bytes=3 * 61 * 4 * 4)
  want = optax.softmax_cross_entropy_with_integer_labels(model.logits(hidden), targets)
  np.testing.assert_allclose(full_ce, want, rtol=1e-6)
  np.testing.assert_allclose(chunked_ce, full_ce, rtol=1e-6)
  np.testing.assert_array_equal(chunked_correct, full_correct)


def test_bc_gradient_is_the_same_with_chunks(monkeypatch):
  model = _model()
  tokens = jax.random.randint(jax.random.key(3), (2, 9), 0, 61)
  batch = {"input_ids": tokens, "attention_mask": jnp.arange(9)[None] >= jnp.array([[0], [3]]),
           "action_mask": jnp.arange(9)[None] % 2 == 1}

  def loss_and_grad():
    graphdef, params = nnx.split(model)
    fn = lambda p: bc.BC().loss(nnx.merge(graphdef, p), batch, None)
    return jax.value_and_grad(fn, has_aux=True)(params)

  (full_loss, full_metrics), full_grad = loss_and_grad()
  # 2 rows x 61 vocab x 4 bytes x 3 positions: BC's 8 targets in chunks of 3.
  monkeypatch.setattr("ilql_dialogue.models.lm_loss.MAX_LOGITS_BYTES", 2 * 61 * 4 * 3)
  (loss, metrics), grad = loss_and_grad()
  np.testing.assert_allclose(loss, full_loss, rtol=1e-6)
  np.testing.assert_allclose(metrics["token_accuracy"], full_metrics["token_accuracy"])
  for a, b in zip(jax.tree.leaves(grad), jax.tree.leaves(full_grad)):
    np.testing.assert_allclose(a, b, atol=1e-6)
