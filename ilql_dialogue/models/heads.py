"""Value heads on the trunk's hidden states (ILQL's Q and V, CALM's scorers).

Callers gather the hidden states of the positions they need first
(`hidden_BxTxD[b, idx]`), so a vocabulary-sized head never runs on every
position of every sequence. Outputs are float32 whatever the compute dtype,
because TD targets and logsumexp are sensitive to bf16 rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.layers import dense, normal, param, zeros


class Head(nnx.Module):
  """hidden_BxNxD -> [hidden_dim, ReLU ->] out_BxNxO; hidden_dim = 0 is a linear head.

  Also the scorer of a fixed set of outcomes (e.g. CALM's 63 final actions).
  """

  def __init__(self, cfg: ModelConfig, out_dim: int, *, rngs: nnx.Rngs, hidden_dim: int = 0,
               out_name: str | None = None):
    self.dtype = cfg.compute_dtype
    pd = cfg.weight_dtype
    in_dim, in_name = cfg.d_model, "embed"
    if hidden_dim:
      self.hidden_kernel = param(rngs, normal(cfg.init_std), (cfg.d_model, hidden_dim),
                                 ("embed", "head_hidden"), pd)
      self.hidden_bias = param(rngs, zeros, (hidden_dim,), ("head_hidden",), pd)
      # Not "head_hidden" again: the output kernel's rows go on fsdp, its columns on tensor.
      in_dim, in_name = hidden_dim, "head_in"
    else:
      self.hidden_kernel = self.hidden_bias = None
    self.out_kernel = param(rngs, normal(cfg.init_std), (in_dim, out_dim), (in_name, out_name), pd)
    self.out_bias = param(rngs, zeros, (out_dim,), (out_name,), pd)

  def __call__(self, hidden_BxNxD: jax.Array) -> jax.Array:
    h = hidden_BxNxD.astype(self.dtype)
    if self.hidden_kernel is not None:
      h = jax.nn.relu(dense(h, self.hidden_kernel[...].astype(self.dtype))
                      + self.hidden_bias[...].astype(self.dtype))
    out = dense(h, self.out_kernel[...].astype(self.dtype), preferred_element_type=jnp.float32)
    return out + self.out_bias[...].astype(jnp.float32)


class ScalarHead(Head):
  """hidden_BxNxD -> values_BxN (e.g. ILQL's V)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, hidden_dim: int = 0):
    super().__init__(cfg, 1, rngs=rngs, hidden_dim=hidden_dim)

  def __call__(self, hidden_BxNxD: jax.Array) -> jax.Array:
    return super().__call__(hidden_BxNxD)[..., 0]


class VocabHead(Head):
  """hidden_BxNxD -> values_BxNxV (e.g. ILQL's Q over next tokens)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, hidden_dim: int = 0):
    super().__init__(cfg, cfg.vocab_size, rngs=rngs, hidden_dim=hidden_dim, out_name="vocab")
