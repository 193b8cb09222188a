"""A Persuasion for Good strategy classifier: the persuader's sentence -> its strategy label.

Trained on the 300 annotated dialogues (AnnotatedData/300_dialog.xlsx,
data_pipelines/persuasion/loader.load_strategy_labels), it labels a policy's
sentences so that diagnostics.label_entropy can say whether a trained
persuader still uses many strategies or collapsed onto a few (docs/METHODS.md, Online RL and Co-Training).

The model is multinomial logistic regression over hashed word unigrams and
bigrams (an embedding bag of `num_features` rows, one logit per label),
trained full-batch with Adam and L2 under jit: cheap on a CPU, and the usual
strong baseline for dialogue-act tagging at this data size (L2 1e-3, chosen on
a validation split inside the training dialogues). The split is by dialogue,
so held-out accuracy is accuracy on unseen conversations: 0.563 over the
persuader's 27 labels (the majority label: 0.168), `python -m
experiments.strategy_classifier`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zlib
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ilql_dialogue import text_metrics

NUM_FEATURES = 1 << 14
MAX_FEATURES = 96  # Hashed n-grams kept per sentence (the longest sentences are cut).


def features(text: str, num_features: int = NUM_FEATURES) -> list[int]:
  """Hashed lower-cased word unigrams and bigrams of `text` (crc32: stable across runs)."""
  words = [w.lower() for w in text_metrics.word_tokens(text)]
  grams = words + [f"{a} {b}" for a, b in zip(words, words[1:])]
  return [zlib.crc32(g.encode()) % num_features for g in grams][:MAX_FEATURES]


def _pad(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
  ids = np.zeros((len(rows), MAX_FEATURES), np.int32)
  mask = np.zeros((len(rows), MAX_FEATURES), np.float32)
  for i, row in enumerate(rows):
    ids[i, :len(row)], mask[i, :len(row)] = row, 1.0
  return ids, mask


def _logits(weights_FxC, bias_C, ids_NxL, mask_NxL):
  return jnp.einsum("nlc,nl->nc", weights_FxC[ids_NxL], mask_NxL) + bias_C


@dataclasses.dataclass
class StrategyClassifier:
  labels: tuple[str, ...]
  weights_FxC: np.ndarray
  bias_C: np.ndarray

  @classmethod
  def fit(cls, texts: Sequence[str], labels: Sequence[str], *, steps: int = 300,
          learning_rate: float = 0.05, l2: float = 1e-3, seed: int = 0) -> "StrategyClassifier":
    names = tuple(sorted(set(labels)))
    y_N = jnp.asarray([names.index(label) for label in labels])
    ids_NxL, mask_NxL = map(jnp.asarray, _pad([features(t) for t in texts]))
    params = {"w": 0.01 * jax.random.normal(jax.random.key(seed), (NUM_FEATURES, len(names))),
              "b": jnp.zeros(len(names))}
    tx = optax.adam(learning_rate)

    def loss(p):
      ce = optax.softmax_cross_entropy_with_integer_labels(
          _logits(p["w"], p["b"], ids_NxL, mask_NxL), y_N).mean()
      return ce + l2 * jnp.sum(p["w"] ** 2)

    @jax.jit
    def train(params):
      def step(carry, _):
        p, opt_state = carry
        grads = jax.grad(loss)(p)
        updates, opt_state = tx.update(grads, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state), None
      return jax.lax.scan(step, (params, tx.init(params)), None, length=steps)[0][0]

    params = train(params)
    return cls(names, np.asarray(params["w"]), np.asarray(params["b"]))

  def predict(self, texts: Sequence[str]) -> list[str]:
    if not texts:
      return []
    ids_NxL, mask_NxL = _pad([features(t) for t in texts])
    logits = _logits(jnp.asarray(self.weights_FxC), jnp.asarray(self.bias_C),
                     jnp.asarray(ids_NxL), jnp.asarray(mask_NxL))
    return [self.labels[i] for i in np.asarray(jnp.argmax(logits, axis=-1))]

  def label_utterances(self, utterances: Sequence[str]) -> list[str]:
    """One label per sentence of each utterance (the annotation's unit)."""
    return self.predict([s for u in utterances for s in text_metrics.sentences(u)])

  def save(self, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    np.savez_compressed(os.path.join(directory, "weights.npz"), weights=self.weights_FxC,
                        bias=self.bias_C)
    with open(os.path.join(directory, "labels.json"), "w") as f:
      json.dump(list(self.labels), f)

  @classmethod
  def load(cls, directory: str) -> "StrategyClassifier":
    with open(os.path.join(directory, "labels.json")) as f:
      labels = tuple(json.load(f))
    arrays = np.load(os.path.join(directory, "weights.npz"))
    return cls(labels, arrays["weights"], arrays["bias"])


def split_by_dialogue(dialogue_ids: Sequence[str], held_out: float, seed: int = 0
                      ) -> tuple[np.ndarray, np.ndarray]:
  """Boolean (train, test) row masks: a seeded `held_out` share of the dialogues is test."""
  unique = sorted(set(dialogue_ids))
  rng = np.random.default_rng(seed)
  test = set(rng.choice(unique, int(round(held_out * len(unique))), replace=False))
  test_N = np.asarray([d in test for d in dialogue_ids])
  return ~test_N, test_N
