"""Sentence embeddings: each text's vector is the mean of the LM's hidden states over its own
tokens, whatever else shares its batch and however it is padded."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from cotraining import sentence_embeddings
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.transformer import Transformer

CFG = ModelConfig(family="llama", vocab_size=64, num_layers=1, d_model=16, num_heads=2,
                  num_kv_heads=2, head_dim=8, mlp_dim=32, max_seq_len=32, init_std=0.5)


def encode(text):
  return [1 + ord(c) % 60 for c in text]


@pytest.fixture(scope="module")
def model():
  return Transformer(CFG, rngs=nnx.Rngs(0))


@nnx.jit
def _hidden(model, ids):
  # Under jit: called eagerly, the layer scan compiled with this text's masks as constants,
  # and XLA:CPU at times crashed compiling that program (tests/run_suite.py).
  return model(ids, jnp.arange(ids.shape[1])[None], jnp.ones_like(ids, bool))[0]


def reference(model, text):
  hidden = _hidden(model, jnp.asarray([encode(text)]))
  mean = np.asarray(hidden[0]).mean(axis=0)
  return mean / np.linalg.norm(mean)


def test_each_vector_is_its_own_texts_mean_hidden_state(model):
  texts = ["hi", "I would give a dollar", "no", "maybe later, thanks", "ok"]
  vectors = sentence_embeddings.embed(model, encode, texts, batch_size=4, max_tokens=24)
  assert vectors.shape == (5, CFG.d_model)
  for text, vector in zip(texts, vectors):
    np.testing.assert_allclose(vector, reference(model, text), atol=1e-5)
  alone = sentence_embeddings.embed(model, encode, ["no"], batch_size=4, max_tokens=24)
  np.testing.assert_allclose(alone[0], vectors[2], atol=1e-6)
  assert not np.allclose(vectors[0], vectors[2], atol=1e-3)  # Different texts, different vectors.


def test_a_text_without_tokens_is_refused(model):
  with pytest.raises(ValueError, match="text 1 .* no tokens"):
    sentence_embeddings.embed(model, encode, ["hi", ""])
