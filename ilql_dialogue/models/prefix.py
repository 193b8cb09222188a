"""Structured context as embedding rows placed before the dialogue tokens.

CALM conditions the LM on the flight table by turning each row (a no-flight
row, 30 flights, the reservation row) into the sum of learned per-field
embeddings, instead of spelling the table out in tokens. All fields share one
concatenated table with per-field offsets, so embedding a batch is a single
gather. An optional learned per-row embedding (`cfg.prefix_num_rows`) tells
rows apart, since the trunk gives prefix rows no position of their own.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.layers import normal, param


class StructuredPrefix(nnx.Module):
  """fields_BxPxF (int32, field f in [0, cfg.prefix_field_vocab_sizes[f])) -> prefix_BxPxD."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    if not cfg.prefix_field_vocab_sizes:
      raise ValueError("StructuredPrefix needs cfg.prefix_field_vocab_sizes")
    self.dtype = cfg.compute_dtype
    self.vocab_sizes = tuple(cfg.prefix_field_vocab_sizes)
    self.offsets = tuple(int(o) for o in np.cumsum((0,) + self.vocab_sizes[:-1]))
    self.field_embed = param(rngs, normal(cfg.init_std), (sum(self.vocab_sizes), cfg.d_model),
                             (None, "embed"), cfg.weight_dtype)
    self.row_embed = (param(rngs, normal(cfg.init_std), (cfg.prefix_num_rows, cfg.d_model),
                            ("prefix_rows", "embed"), cfg.weight_dtype)
                      if cfg.prefix_num_rows else None)

  def __call__(self, fields_BxPxF: jax.Array) -> jax.Array:
    """Out-of-range field values become NaN rows under jit (and raise outside it).

    Without this, a value too large for field f would silently read field
    f + 1's embeddings from the shared table.
    """
    num_rows, num_fields = fields_BxPxF.shape[1:]
    if num_fields != len(self.vocab_sizes):
      raise ValueError(f"fields_BxPxF has {num_fields} fields, config has "
                       f"{len(self.vocab_sizes)} (prefix_field_vocab_sizes)")
    if self.row_embed is not None and num_rows > self.row_embed.shape[0]:
      raise ValueError(f"{num_rows} prefix rows > cfg.prefix_num_rows={self.row_embed.shape[0]}")
    sizes_F = jnp.asarray(self.vocab_sizes, jnp.int32)
    in_range_BxPxF = (fields_BxPxF >= 0) & (fields_BxPxF < sizes_F)
    if not isinstance(fields_BxPxF, jax.core.Tracer):
      _raise_on_out_of_range(np.asarray(fields_BxPxF), np.asarray(in_range_BxPxF),
                             self.vocab_sizes)
    table = self.field_embed[...]
    ids_BxPxF = jnp.where(in_range_BxPxF, fields_BxPxF + jnp.asarray(self.offsets, jnp.int32),
                          table.shape[0])  # Out of bounds: jnp.take fills NaN.
    rows_BxPxD = jnp.take(table, ids_BxPxF, axis=0, mode="fill",
                          fill_value=jnp.nan).astype(jnp.float32).sum(axis=2)
    if self.row_embed is not None:
      rows_BxPxD = rows_BxPxD + self.row_embed[:num_rows].astype(jnp.float32)
    return rows_BxPxD.astype(self.dtype)


def _raise_on_out_of_range(fields_BxPxF: np.ndarray, in_range_BxPxF: np.ndarray,
                           vocab_sizes: tuple[int, ...]) -> None:
  if in_range_BxPxF.all():
    return
  b, p, f = map(int, np.argwhere(~in_range_BxPxF)[0])
  raise ValueError(f"prefix field {f} of row {p} in batch element {b} is "
                   f"{int(fields_BxPxF[b, p, f])}, outside [0, {vocab_sizes[f]})")
