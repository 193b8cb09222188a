"""Value-guided decoding: sample from logits_bc + beta * (Q - V) through the sampler's hook.

    state = sampler.prefill(decoding_model(m), tokens, mask, max_len=...)
    sampler.generate(decoding_model(m), state, params, key, max_new_tokens=N,
                     hook=value_guidance(m, beta, batch_size))

Every head reads the features it was trained on. Shared trunk, no target
trunk: `decoding_model` is the trunk itself, so each token costs ONE trunk
forward and the hook applies the heads to the hidden state the sampler
already computed (generation.logits_processors.ValueGuidance). A separate
policy trunk, or a target trunk (whose features the target Q heads were fit
to), adds trunks: `StackedTrunks` runs each of them on every block (one
forward per trunk per token, unavoidable there) and hands the sampler their
concatenated hidden states [policy | value | target], of which each head
reads its own slice.

Q is the minimum over the TARGET Q heads by default: those are the Q-hat the
V expectile was fit against during training, so Q-hat - V is the advantage
the model learned (models without targets use their online heads). The V
term cancels under softmax; it is kept so that logged log-probs and later
top-k/top-p see the paper's formula. beta is a per-row traced array: sweeping
it reuses the compiled decoder, and beta = 0 adds exactly zero, reproducing BC
sampling bit for bit.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from ilql_dialogue.generation import logits_processors as lp
from ilql_dialogue.models.kv_cache import KVCache
from ilql_dialogue.value_heads import ILQLModel

Q_SOURCES = ("target", "online")


class StackedTrunks(nnx.Module):
  """Several trunks decoded together; the first one is the policy.

  Speaks the trunk contract the sampler uses. Hidden states are the trunks'
  concatenated along D, and `logits` reads the policy's part. The cache is
  the sampler's ordinary KVCache (one buffer per layer): `cfg` declares all
  trunks' layers so the sampler allocates room for them, and each trunk reads
  and updates its own consecutive layers in place.
  """

  def __init__(self, *trunks: nnx.Module):
    first = trunks[0].cfg
    for trunk in trunks[1:]:
      t = trunk.cfg
      if (t.num_kv_heads, t.head_dim, t.dtype) != (first.num_kv_heads, first.head_dim,
                                                   first.dtype):
        raise ValueError(f"StackedTrunks: cache layouts differ: (kv_heads, head_dim, dtype) = "
                         f"{(first.num_kv_heads, first.head_dim, first.dtype)} and "
                         f"{(t.num_kv_heads, t.head_dim, t.dtype)}")
    self.trunks = nnx.List(trunks)
    self.cfg = first.replace(num_layers=sum(t.cfg.num_layers for t in trunks),
                             d_model=sum(t.cfg.d_model for t in trunks))

  @property
  def _widths(self) -> list[int]:
    return [t.cfg.d_model for t in self.trunks]

  def _pieces(self, x_xD: jax.Array) -> list[jax.Array]:
    bounds = np.cumsum(self._widths)[:-1]
    return jnp.split(x_xD, bounds, axis=-1)

  def embed_prefix(self, fields_BxPxF: jax.Array) -> jax.Array:
    """Every trunk's structured-prefix rows, concatenated along D like the hidden states."""
    return jnp.concatenate([t.embed_prefix(fields_BxPxF) for t in self.trunks], -1)

  def __call__(self, tokens_BxT, positions_BxT, token_mask_BxT, *, cache=None, prefix_BxPxD=None):
    prefixes = ([None] * len(self.trunks) if prefix_BxPxD is None
                else self._pieces(prefix_BxPxD))
    caches = ([None] * len(self.trunks) if cache is None else
              cache.split_layers([t.cfg.num_layers for t in self.trunks]))
    hidden, new_caches = [], []
    for trunk, trunk_cache, prefix in zip(self.trunks, caches, prefixes):
      extra = {} if prefix is None else {"prefix_BxPxD": prefix}
      h_BxTxD, new_cache = trunk(tokens_BxT, positions_BxT, token_mask_BxT, cache=trunk_cache,
                                 **extra)
      hidden.append(h_BxTxD.astype(hidden[0].dtype) if hidden else h_BxTxD)
      new_caches.append(new_cache)
    hidden_BxTxD = jnp.concatenate(hidden, -1)
    if cache is None:
      return hidden_BxTxD, None
    return hidden_BxTxD, KVCache.join_layers(new_caches)

  def logits(self, hidden_BxNxD: jax.Array) -> jax.Array:
    return self.trunks[0].logits(hidden_BxNxD[..., :self._widths[0]])


@struct.dataclass
class OnSlice:
  """Applies `head` to hidden[..., start:start + width] (one trunk's part of StackedTrunks')."""

  head: Any
  start: int = struct.field(pytree_node=False)
  width: int = struct.field(pytree_node=False)

  def __call__(self, hidden_xD: jax.Array) -> jax.Array:
    return self.head(hidden_xD[..., self.start:self.start + self.width])


def _trunks(model: ILQLModel) -> dict[str, nnx.Module]:
  """The trunks decoding runs, policy first: {"policy"[, "value"][, "target"]}."""
  trunks = {"policy": model.policy}
  if model.policy_trunk is not None:
    trunks["value"] = model.trunk
  if model.target_trunk is not None:
    trunks["target"] = model.target_trunk
  return trunks


def _feature_starts(model: ILQLModel) -> dict[str, int]:
  """Where each head family's features start in the decoder's hidden state."""
  starts, offset = {}, 0
  for name, trunk in _trunks(model).items():
    starts[name] = offset
    offset += trunk.cfg.d_model
  starts.setdefault("value", starts["policy"])
  starts.setdefault("target", starts["value"])
  return starts


def decoding_model(model: ILQLModel) -> nnx.Module:
  """The module to hand to the sampler (prefill / append / generate).

  With a structured context, prefill with `prefix_BxPxD=decoding_model(m).embed_prefix(fields)`.
  """
  trunks = list(_trunks(model).values())
  return trunks[0] if len(trunks) == 1 else StackedTrunks(*trunks)


def value_guidance(model: ILQLModel, beta: Any, batch_size: int, *,
                   q_source: str | None = None) -> lp.ValueGuidance:
  """The hook for `sampler.generate`: logits + beta * (min_i Q_i(h) - V(h)).

  `beta` is a scalar or one value per row (traced; 0 = plain BC sampling).
  `q_source`: "target" or "online" heads; None takes the target heads when the
  model has them (ILQL) and the online ones otherwise (Monte-Carlo
  regression, baselines.MCValue). Each head reads the trunk it was trained
  on: V and online Q the value trunk, target Q the target trunk when the
  model has one.
  """
  if q_source is None:
    q_source = "online" if model.target_q_heads is None else "target"
  if q_source not in Q_SOURCES:
    raise ValueError(f"q_source={q_source!r} not in {Q_SOURCES}")
  heads = model.target_q_heads if q_source == "target" else model.q_heads
  if heads is None:
    raise ValueError("value_guidance: the model has no target Q heads; use q_source='online'")
  starts = _feature_starts(model)
  q_start = starts["target" if q_source == "target" else "value"]
  stacked = len(_trunks(model)) > 1
  width = model.trunk.cfg.d_model  # The value and target trunks are the same size.

  def reading(head, start):
    return OnSlice(head, start, width) if stacked else head

  return lp.ValueGuidance(q_heads=tuple(reading(h, q_start) for h in heads),
                          v_head=reading(model.v_head, starts["value"]),
                          beta_B=lp.row_values(beta, batch_size, jnp.float32))
