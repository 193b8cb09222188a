"""Sentence embeddings from a pretrained LM of ours, for the behaviour-cluster coverage diagnostic.

Coverage (diagnostics.behaviour_clusters / cluster_coverage) asks whether one
simulator's utterances reach the kinds of reply a panel (or people) give, so
utterances must be grouped by what they say, not by their exact words. With
no network there is no sentence-encoder checkpoint to download; the strongest
pretrained text model on the machine is SmolLM2-135M-Instruct (the GGUF file
of `requirements-gguf.txt`), and the mean of a decoder's last hidden states
over a sentence's tokens is the usual training-free sentence embedding (the
unweighted form of SGPT's pooling). Vectors are L2-normalized, so k-means on
them clusters by cosine.

Few compiled shapes: texts are batched shortest first, each batch padded to a
multiple of WIDTH_STEP tokens (longer texts than `max_tokens` are cut).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ilql_dialogue.models import gguf_io

WIDTH_STEP = 16


@nnx.jit
def _mean_hidden(model: nnx.Module, tokens_BxT: jax.Array, mask_BxT: jax.Array) -> jax.Array:
  positions_BxT = jnp.maximum(jnp.cumsum(mask_BxT, axis=1) - 1, 0)
  hidden_BxTxD, _ = model(tokens_BxT, positions_BxT, mask_BxT)
  weights_BxT = mask_BxT.astype(jnp.float32)
  summed_BxD = jnp.einsum("btd,bt->bd", hidden_BxTxD.astype(jnp.float32), weights_BxT)
  mean_BxD = summed_BxD / jnp.maximum(weights_BxT.sum(axis=1, keepdims=True), 1.0)
  return mean_BxD / jnp.maximum(jnp.linalg.norm(mean_BxD, axis=1, keepdims=True), 1e-6)


def embed(model: nnx.Module, encode: Callable[[str], Sequence[int]], texts: Sequence[str], *,
          batch_size: int = 32, max_tokens: int = 64, pad_id: int = 0) -> np.ndarray:
  """[N, D] unit vectors: the mean of `model`'s final hidden states over each text's tokens
  (`encode(text)`, cut to `max_tokens`). A text with no tokens is an error, not a zero row."""
  rows = [list(encode(t))[:max_tokens] for t in texts]
  empty = [i for i, r in enumerate(rows) if not r]
  if empty:
    raise ValueError(f"sentence_embeddings.embed: text {empty[0]} ({texts[empty[0]]!r}) has "
                     f"no tokens")
  # Shortest first, each batch only as wide as its longest text (rounded up to WIDTH_STEP):
  # most utterances are short, and a 135M model costs ~0.3 GFLOP a token.
  order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
  out = np.zeros((len(rows), model.cfg.d_model), np.float32)
  for start in range(0, len(order), batch_size):
    chunk = order[start:start + batch_size]
    width = -(-max(len(rows[i]) for i in chunk) // WIDTH_STEP) * WIDTH_STEP
    tokens_BxT = np.full((batch_size, width), pad_id, np.int32)
    mask_BxT = np.zeros((batch_size, width), bool)
    for b, i in enumerate(chunk):
      tokens_BxT[b, :len(rows[i])], mask_BxT[b, :len(rows[i])] = rows[i], True
    vectors_BxD = _mean_hidden(model, jnp.asarray(tokens_BxT), jnp.asarray(mask_BxT))
    out[chunk] = np.asarray(vectors_BxD)[:len(chunk)]
  return out


def smollm2_embedder(batch_size: int = 32, max_tokens: int = 64
                     ) -> Callable[[Sequence[str]], np.ndarray]:
  """texts -> [N, 576] SmolLM2-135M-Instruct sentence embeddings (the GGUF file, float32)."""
  path = gguf_io.smollm2_path()
  _, model = gguf_io.load_gguf(path)
  tokenizer = gguf_io.load_gguf_tokenizer(path)
  encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
  return lambda texts: embed(model, encode, texts, batch_size=batch_size,
                             max_tokens=max_tokens, pad_id=tokenizer.pad_token_id or 0)
