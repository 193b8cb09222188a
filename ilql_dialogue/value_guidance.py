"""Value-guided decoding: sample from logits_bc + beta * (Q - V) through the sampler's hook.

    state = sampler.prefill(decoding_model(m), tokens, mask, max_len=...)
    sampler.generate(decoding_model(m), state, params, key, max_new_tokens=N,
                     hook=value_guidance(m, beta, batch_size))

Shared trunk: `decoding_model` is the trunk itself, so each token costs ONE
trunk forward; the hook applies the heads to the hidden state the sampler
already computed (generation.logits_processors.ValueGuidance). A separate
policy trunk needs the value trunk's hidden state too: `DualTrunk` runs both
trunks on every block (two forwards per token, unavoidable there) and hands
the sampler their concatenated hidden states.

Q is the minimum over the TARGET Q heads by default: those are the Q-hat the
V expectile was fit against during training, so Q-hat - V is the advantage
the model learned (models without targets use their online heads). The V term cancels under softmax; it is kept so that
logged log-probs and later top-k/top-p see the paper's formula. beta is a
per-row traced array: sweeping it reuses the compiled decoder, and beta = 0
adds exactly zero, reproducing BC sampling bit for bit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from ilql_dialogue.generation import logits_processors as lp
from ilql_dialogue.models.kv_cache import KVCache
from ilql_dialogue.value_heads import ILQLModel

Q_SOURCES = ("target", "online")
# KVCache fields stacked over layers (keys and values), whatever their layout.
_LAYER_FIELDS = tuple(f.name for f in dataclasses.fields(KVCache)
                      if f.name not in ("valid_BxS", "index"))


class DualTrunk(nnx.Module):
  """A policy trunk and a value trunk decoded together, for `separate_policy` models.

  Speaks the trunk contract the sampler uses. Hidden states are
  [policy | value] concatenated along D, and `logits` reads the policy half.
  The cache is the sampler's ordinary KVCache whose k/v fields hold the pair
  (policy, value) after the first call: `cfg` declares both trunks' layers so
  the sampler allocates room for them, and the first call splits that buffer
  once; later calls update each trunk's cache in place.
  """

  def __init__(self, policy: nnx.Module, values: nnx.Module):
    p, v = policy.cfg, values.cfg
    if (p.num_kv_heads, p.head_dim, p.dtype) != (v.num_kv_heads, v.head_dim, v.dtype):
      raise ValueError(f"DualTrunk: cache layouts differ: policy (kv_heads, head_dim, dtype) = "
                       f"{(p.num_kv_heads, p.head_dim, p.dtype)}, values = "
                       f"{(v.num_kv_heads, v.head_dim, v.dtype)}")
    self.policy = policy
    self.values = values
    self.cfg = p.replace(num_layers=p.num_layers + v.num_layers, d_model=p.d_model + v.d_model)

  def embed_prefix(self, fields_BxPxF: jax.Array) -> jax.Array:
    """Both trunks' structured-prefix rows, [policy | value] along D like the hidden states."""
    return jnp.concatenate([self.policy.embed_prefix(fields_BxPxF),
                            self.values.embed_prefix(fields_BxPxF)], -1)

  def __call__(self, tokens_BxT, positions_BxT, token_mask_BxT, *, cache=None, prefix_BxPxD=None):
    split = self.policy.cfg.d_model
    extra = [{}, {}] if prefix_BxPxD is None else [
        {"prefix_BxPxD": prefix_BxPxD[..., :split]}, {"prefix_BxPxD": prefix_BxPxD[..., split:]}]
    caches = (None, None) if cache is None else self._split(cache)
    policy_BxTxD, policy_cache = self.policy(tokens_BxT, positions_BxT, token_mask_BxT,
                                             cache=caches[0], **extra[0])
    values_BxTxD, values_cache = self.values(tokens_BxT, positions_BxT, token_mask_BxT,
                                             cache=caches[1], **extra[1])
    hidden_BxTxD = jnp.concatenate([policy_BxTxD, values_BxTxD.astype(policy_BxTxD.dtype)], -1)
    if cache is None:
      return hidden_BxTxD, None
    return hidden_BxTxD, policy_cache.replace(**{
        name: (getattr(policy_cache, name), getattr(values_cache, name))
        for name in _LAYER_FIELDS})

  def _split(self, cache: KVCache) -> tuple[KVCache, KVCache]:
    """(policy, values) caches; a fresh, stacked cache is split along layers (once)."""
    layers = self.policy.cfg.num_layers
    pairs = {}
    for name in _LAYER_FIELDS:
      stacked = getattr(cache, name)
      pairs[name] = stacked if isinstance(stacked, tuple) else (stacked[:layers],
                                                                stacked[layers:])
    return tuple(cache.replace(**{name: pair[i] for name, pair in pairs.items()})
                 for i in range(2))

  def logits(self, hidden_BxNxD: jax.Array) -> jax.Array:
    return self.policy.logits(hidden_BxNxD[..., :self.policy.cfg.d_model])


@struct.dataclass
class OnSlice:
  """Applies `head` to hidden[..., start:] (the value half of DualTrunk's hidden state)."""

  head: Any
  start: int = struct.field(pytree_node=False)

  def __call__(self, hidden_xD: jax.Array) -> jax.Array:
    return self.head(hidden_xD[..., self.start:])


def decoding_model(model: ILQLModel) -> nnx.Module:
  """The module to hand to the sampler (prefill / append / generate).

  With a structured context, prefill with `prefix_BxPxD=decoding_model(m).embed_prefix(fields)`.
  """
  if model.policy_trunk is None:
    return model.trunk
  return DualTrunk(model.policy_trunk, model.trunk)


def value_guidance(model: ILQLModel, beta: Any, batch_size: int, *,
                   q_source: str | None = None) -> lp.ValueGuidance:
  """The hook for `sampler.generate`: logits + beta * (min_i Q_i(h) - V(h)).

  `beta` is a scalar or one value per row (traced; 0 = plain BC sampling).
  `q_source`: "target" or "online" heads; None takes the target heads when the
  model has them (ILQL) and the online ones otherwise (Monte-Carlo
  regression, baselines.MCValue). "online" also suits a model trained with a
  target trunk, whose target heads were fit to that trunk's features rather
  than the decoder's.
  """
  if q_source is None:
    q_source = "online" if model.target_q_heads is None else "target"
  if q_source not in Q_SOURCES:
    raise ValueError(f"q_source={q_source!r} not in {Q_SOURCES}")
  heads = model.target_q_heads if q_source == "target" else model.q_heads
  if heads is None:
    raise ValueError("value_guidance: the model has no target Q heads; use q_source='online'")
  q_heads, v_head = tuple(heads), model.v_head
  if model.policy_trunk is not None:
    start = model.policy_trunk.cfg.d_model
    q_heads, v_head = tuple(OnSlice(h, start) for h in q_heads), OnSlice(v_head, start)
  return lp.ValueGuidance(q_heads=q_heads, v_head=v_head,
                          beta_B=lp.row_values(beta, batch_size, jnp.float32))
