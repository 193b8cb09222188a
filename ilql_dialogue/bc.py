"""Behaviour cloning: next-token cross-entropy on the trained role's tokens.

Batch keys come from the token-level MDP dataset (data_pipelines/mdp.py):
`input_ids`, `attention_mask`, `action_mask`. Convention: the action token at
index i is predicted from the hidden state at i-1, so the loss pairs
hidden[:, :-1] with input_ids[:, 1:] weighted by action_mask[:, 1:].

Logits are computed at every position rather than gathered at action
positions: for BC the actions are a large share of the tokens (one of two
speakers), so a gather to a fixed budget would save little and needs a
per-batch maximum. ILQL's vocabulary-sized heads are where gathering pays.
Large logits are never materialized whole: models/lm_loss.py computes the
cross-entropy in chunks of positions when [B, T, V] float32 would be big.

A task with structured context (the AirDialogue flight table, CALM style)
adds `prefix_fields` [B, P, F] to its batches; the model is then a `PrefixLM`
whose StructuredPrefix turns them into P embedding rows before the tokens.
`config.model.init_from` starts the model from a checkpoint (ilql_dialogue/init_from.py).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from ilql_dialogue.algorithm import Batch, Metrics
from ilql_dialogue.models import copy_head
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.lm_loss import token_cross_entropy
from ilql_dialogue.models.prefix import StructuredPrefix
from ilql_dialogue.models.transformer import Transformer

ModelFactory = Callable[[ml_collections.ConfigDict, nnx.Rngs], nnx.Module]
PREFIX_FIELDS = "prefix_fields"  # Batch key of the structured context, int32 [B, P, F].
BORROW_FIELDS = ("borrow", "borrow_layers", "borrow_from")  # ilql_dialogue/init_from.py.
NOT_ARCHITECTURE = ("init_from", *BORROW_FIELDS)  # config.model keys ModelConfig does not take.


def model_config(config: ml_collections.ConfigDict) -> ModelConfig:
  """`config.model` as a ModelConfig (lists from a JSON-restored config become tuples)."""
  fields = {k: tuple(v) if isinstance(v, list) else v
            for k, v in config.model.to_dict().items() if k not in NOT_ARCHITECTURE}
  return ModelConfig(**fields)


class PrefixLM(nnx.Module):
  """A Transformer that reads a structured table as embedding rows before its tokens.

  One module, so the prefix embeddings are trained, sharded and checkpointed
  with the trunk. It keeps the trunk's LM contract (and `cfg`, which the
  sampler sizes its cache from); `embed_prefix` makes the `prefix_BxPxD` the
  trunk and `generation.sampler.prefill` take.
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    self.trunk = Transformer(cfg, rngs=rngs)
    self.prefix = StructuredPrefix(cfg, rngs=rngs)

  def embed_prefix(self, fields_BxPxF: jax.Array) -> jax.Array:
    return self.prefix(fields_BxPxF)

  def __call__(self, tokens_BxT, positions_BxT, token_mask_BxT, *, cache=None,
               prefix_BxPxD=None):
    return self.trunk(tokens_BxT, positions_BxT, token_mask_BxT, cache=cache,
                      prefix_BxPxD=prefix_BxPxD)

  def logits(self, hidden_BxNxD: jax.Array) -> jax.Array:
    return self.trunk.logits(hidden_BxNxD)


def lm_from_config(config: ml_collections.ConfigDict, rngs: nnx.Rngs) -> nnx.Module:
  """A Transformer sized by `config.model`, or a PrefixLM when it has prefix fields."""
  cfg = model_config(config)
  if cfg.prefix_field_vocab_sizes:
    return PrefixLM(cfg, rngs=rngs)
  return Transformer(cfg, rngs=rngs)


def positions_from_mask(mask_BxT: jax.Array) -> jax.Array:
  """Position of each token among the real tokens, so left padding is harmless."""
  return jnp.maximum(jnp.cumsum(mask_BxT.astype(jnp.int32), axis=-1) - 1, 0)


def weighted_metrics(ce_BxT: jax.Array, correct_BxT: jax.Array,
                     weights_BxT: jax.Array) -> tuple[jax.Array, Metrics]:
  """Loss, perplexity and accuracy over weighted tokens from per-token cross-entropy."""
  weights_BxT = weights_BxT.astype(jnp.float32)
  count = jnp.maximum(weights_BxT.sum(), 1.0)
  loss = (ce_BxT * weights_BxT).sum() / count
  accuracy = (correct_BxT.astype(jnp.float32) * weights_BxT).sum() / count
  return loss, {"loss": loss, "perplexity": jnp.exp(loss), "token_accuracy": accuracy}


class BC:
  """Behaviour cloning as an `Algorithm`.

  `make_model` builds any module with the project's LM contract:
  `model(tokens_BxT, positions_BxT, mask_BxT) -> (hidden_BxTxD, cache)` and
  `model.logits(hidden_BxNxD) -> logits_BxNxV`.
  """

  def __init__(self, make_model: ModelFactory = lm_from_config):
    self.make_model = make_model

  def init(self, config: ml_collections.ConfigDict, rngs: nnx.Rngs) -> nnx.Module:
    return self.make_model(config, rngs)

  def loss(self, model: nnx.Module, batch: Batch, rng: jax.Array) -> tuple[jax.Array, Metrics]:
    del rng  # BC is deterministic.
    tokens_BxT = batch["input_ids"]
    mask_BxT = batch["attention_mask"].astype(bool)
    hidden_BxTxD, _ = model(tokens_BxT, positions_from_mask(mask_BxT), mask_BxT,
                            **prefix_kwargs(model, batch))
    ce_BxT, correct_BxT = token_cross_entropy(
        model.logits, hidden_BxTxD[:, :-1], tokens_BxT[:, 1:],
        score_fn=copy_head.sequence_score_fn(model, hidden_BxTxD, tokens_BxT,
                                             copy_head.source_mask(mask_BxT,
                                                                   batch["action_mask"])))
    weights_BxT = batch["action_mask"][:, 1:].astype(bool) & mask_BxT[:, 1:]
    return weighted_metrics(ce_BxT, correct_BxT, weights_BxT)


def prefix_kwargs(model: nnx.Module, batch: Batch) -> dict[str, jax.Array]:
  """`prefix_BxPxD` for the model call when the batch carries structured context."""
  if PREFIX_FIELDS not in batch:
    return {}
  if not isinstance(model, PrefixLM):
    raise ValueError(f"the batch has {PREFIX_FIELDS!r} but the model is a "
                     f"{type(model).__name__}; set config.model.prefix_field_vocab_sizes")
  return {"prefix_BxPxD": model.embed_prefix(batch[PREFIX_FIELDS])}
