"""Behaviour cloning: next-token cross-entropy on the trained role's tokens.

Batch keys come from the token-level MDP dataset (data_pipelines/mdp.py):
`input_ids`, `attention_mask`, `action_mask`. Convention: the action token at
index i is predicted from the hidden state at i-1, so the loss pairs
hidden[:, :-1] with input_ids[:, 1:] weighted by action_mask[:, 1:].

Logits are computed at every position rather than gathered at action
positions: for BC the actions are a large share of the tokens (one of two
speakers), so a gather to a fixed budget would save little and needs a
per-batch maximum. ILQL's vocabulary-sized heads are where gathering pays.

A task with structured context (the AirDialogue flight table, CALM style)
adds `prefix_fields` [B, P, F] to its batches; the model is then a `PrefixLM`
whose StructuredPrefix turns them into P embedding rows before the tokens.
`config.model.hf_checkpoint` starts the trunk from a Hugging Face checkpoint.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from flax.nnx import traversals

from ilql_dialogue.algorithm import Batch, Metrics
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.prefix import StructuredPrefix
from ilql_dialogue.models.transformer import Transformer

ModelFactory = Callable[[ml_collections.ConfigDict, nnx.Rngs], nnx.Module]
PREFIX_FIELDS = "prefix_fields"  # Batch key of the structured context, int32 [B, P, F].
_NOT_ARCHITECTURE = ("hf_checkpoint",)  # config.model keys that ModelConfig does not take.


def model_config(config: ml_collections.ConfigDict) -> ModelConfig:
  """`config.model` as a ModelConfig (lists from a JSON-restored config become tuples)."""
  fields = {k: tuple(v) if isinstance(v, list) else v
            for k, v in config.model.to_dict().items() if k not in _NOT_ARCHITECTURE}
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


def _grow_rows(pretrained: np.ndarray, fresh: jax.Array, axis: int) -> jax.Array:
  """`pretrained` in the first rows along `axis`, the fresh (random) init after them."""
  if pretrained.shape[axis] > fresh.shape[axis] or any(
      p != f for i, (p, f) in enumerate(zip(pretrained.shape, fresh.shape)) if i != axis):
    raise ValueError(f"pretrained shape {pretrained.shape} does not fit into {fresh.shape}")
  tail = jax.lax.slice_in_dim(fresh, pretrained.shape[axis], fresh.shape[axis], axis=axis)
  return jnp.concatenate([jnp.asarray(pretrained, fresh.dtype), tail], axis=axis)


def pretrained_factory(make_model: ModelFactory, hf_dir: str) -> ModelFactory:
  """`make_model` with its trunk's weights taken from a Hugging Face checkpoint.

  The checkpoint is read here, on the host, because `Algorithm.init` runs
  under jit. The weights then enter the init as constants (compile time grows
  with model size; fine up to GPT-2-small scale). The vocabulary may grow
  (the dialogue tokens are appended to the tokenizer): new embedding rows keep
  their random init. Every other shape must match exactly.
  """
  from ilql_dialogue.models import hf_io  # Reads safetensors; only needed here.

  _, hf_model = hf_io.load_hf(hf_dir)
  weights = traversals.flatten_mapping(
      jax.device_get(nnx.to_pure_dict(nnx.state(hf_model, nnx.Param))), sep=".")
  del hf_model

  def make(config: ml_collections.ConfigDict, rngs: nnx.Rngs) -> nnx.Module:
    model = make_model(config, rngs)
    trunk = model.trunk if isinstance(model, PrefixLM) else model
    state = nnx.state(trunk, nnx.Param)
    fresh = traversals.flatten_mapping(nnx.to_pure_dict(state), sep=".")
    if set(fresh) != set(weights):
      raise ValueError(f"{hf_dir}: parameters differ from config.model's trunk: missing "
                       f"{sorted(set(fresh) - set(weights))}, "
                       f"extra {sorted(set(weights) - set(fresh))}")
    vocab_axis = {"embed": 0, "lm_head": 1}
    merged = {name: _grow_rows(weights[name], value, vocab_axis.get(name, 0))
              for name, value in fresh.items()}
    nnx.replace_by_pure_dict(state, traversals.unflatten_mapping(merged, sep="."))
    nnx.update(trunk, state)
    return model

  return make


# ModelConfig fields a Hugging Face config.json decides; the rest (dtype, remat,
# prefix, init) stay as the experiment config sets them.
HF_ARCHITECTURE_FIELDS = ("family", "vocab_size", "num_layers", "d_model", "num_heads",
                          "num_kv_heads", "head_dim", "mlp_dim", "max_seq_len", "norm_eps",
                          "rope_theta", "qkv_bias", "attn_out_bias", "mlp_bias",
                          "tie_embeddings")


def adopt_hf_architecture(config: ml_collections.ConfigDict) -> None:
  """Overwrites config.model's architecture with that of `config.model.hf_checkpoint`.

  vocab_size becomes the larger of the checkpoint's and the configured one
  (a tokenizer with the dialogue tokens appended is larger). Needs an
  unlocked config; records the architecture in the run's config.json, so the
  checkpoint can be restored without the HF directory.
  """
  import transformers  # Reads config.json only.

  hf_config = transformers.AutoConfig.from_pretrained(config.model.hf_checkpoint,
                                                      local_files_only=True)
  arch = dataclasses.asdict(ModelConfig.from_hf_config(hf_config))
  configured_vocab = config.model.get("vocab_size", 0)
  for name in HF_ARCHITECTURE_FIELDS:
    config.model[name] = arch[name]
  config.model.vocab_size = max(arch["vocab_size"], configured_vocab)


def lm_factory(config: ml_collections.ConfigDict) -> ModelFactory:
  """The model BC trains for `config`: `lm_from_config`, from an HF checkpoint if one is named."""
  hf_dir = config.model.get("hf_checkpoint", "")
  return pretrained_factory(lm_from_config, hf_dir) if hf_dir else lm_from_config


def positions_from_mask(mask_BxT: jax.Array) -> jax.Array:
  """Position of each token among the real tokens, so left padding is harmless."""
  return jnp.maximum(jnp.cumsum(mask_BxT.astype(jnp.int32), axis=-1) - 1, 0)


def action_cross_entropy(logits_BxTxV: jax.Array, targets_BxT: jax.Array,
                         weights_BxT: jax.Array) -> tuple[jax.Array, Metrics]:
  """Mean cross-entropy over weighted tokens, with perplexity and accuracy."""
  logits_BxTxV = logits_BxTxV.astype(jnp.float32)
  weights_BxT = weights_BxT.astype(jnp.float32)
  ce_BxT = optax.softmax_cross_entropy_with_integer_labels(logits_BxTxV, targets_BxT)
  count = jnp.maximum(weights_BxT.sum(), 1.0)
  loss = (ce_BxT * weights_BxT).sum() / count
  correct_BxT = (jnp.argmax(logits_BxTxV, axis=-1) == targets_BxT).astype(jnp.float32)
  accuracy = (correct_BxT * weights_BxT).sum() / count
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
    logits_BxTxV = model.logits(hidden_BxTxD[:, :-1])
    weights_BxT = batch["action_mask"][:, 1:].astype(bool) & mask_BxT[:, 1:]
    return action_cross_entropy(logits_BxTxV, tokens_BxT[:, 1:], weights_BxT)


def prefix_kwargs(model: nnx.Module, batch: Batch) -> dict[str, jax.Array]:
  """`prefix_BxPxD` for the model call when the batch carries structured context."""
  if PREFIX_FIELDS not in batch:
    return {}
  if not isinstance(model, PrefixLM):
    raise ValueError(f"the batch has {PREFIX_FIELDS!r} but the model is a "
                     f"{type(model).__name__}; set config.model.prefix_field_vocab_sizes")
  return {"prefix_BxPxD": model.embed_prefix(batch[PREFIX_FIELDS])}
