"""Length-bucketed, fixed-shape, resumable batches of an MDP dataset.

A jitted step compiles once per input shape, so every batch has `batch_size`
rows and a length taken from a few bucket boundaries: at most one compile per
bucket, while short dialogues are not padded to `max_length`.

An epoch's order is a pure function of (seed, epoch, example lengths): the plan
is computed from the `length` column alone (no token data), and rows are read
from Arrow only for the steps actually yielded. Resuming at `start_step` thus
replays exactly the batches an uninterrupted run would have seen, without
reading the skipped ones.

Rows that fill up a bucket's last, partial batch are padding: `row_mask` is
False, `example_index` is -1, all masks are False and index columns are -1, so
they contribute nothing to any masked loss. With `drop_remainder` those partial
batches are dropped instead, and `EpochPlan.num_dropped` counts the examples
left out.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from data_pipelines import mdp


def bucket_boundaries(max_length: int, min_length: int = 16) -> tuple[int, ...]:
  """Powers of two from `min_length` below `max_length`, then `max_length` itself."""
  if min_length < 1 or max_length < 1:
    raise ValueError(f"min_length={min_length} and max_length={max_length} must be positive")
  bounds = []
  length = min_length
  while length < max_length:
    bounds.append(length)
    length *= 2
  return (*bounds, max_length)


@dataclasses.dataclass(frozen=True)
class EpochPlan:
  """Which rows go into which step of one epoch.

  rows_SxB[s] are dataset indices of step s (-1 = padding row); lengths_S[s]
  is the padded length of step s.
  """

  rows_SxB: np.ndarray
  lengths_S: np.ndarray
  num_dropped: int

  @property
  def num_steps(self) -> int:
    return len(self.lengths_S)


def plan_epoch(
    lengths: Sequence[int] | np.ndarray,
    batch_size: int,
    seed: int,
    epoch: int,
    boundaries: Sequence[int],
    drop_remainder: bool = False,
) -> EpochPlan:
  """Shuffles examples, groups them by bucket, and shuffles the batches."""
  lengths = np.asarray(lengths, np.int64)
  boundaries = np.asarray(boundaries, np.int64)
  if batch_size < 1:
    raise ValueError(f"batch_size={batch_size} must be positive")
  if np.any(np.diff(boundaries) <= 0):
    raise ValueError(f"bucket boundaries {boundaries.tolist()} must be strictly increasing")
  too_long = np.flatnonzero(lengths > boundaries[-1])
  if too_long.size:
    raise ValueError(
        f"example {too_long[0]} field 'length': {lengths[too_long[0]]} exceeds the largest bucket "
        f"{boundaries[-1]} ({too_long.size} examples too long)")
  rng = np.random.default_rng((seed, epoch))
  order = rng.permutation(len(lengths))
  bucket_of = np.searchsorted(boundaries, lengths[order], side="left")
  rows, step_lengths, num_dropped = [], [], 0
  for b, bound in enumerate(boundaries):
    members = order[bucket_of == b]
    full = len(members) // batch_size * batch_size
    rows.extend(members[:full].reshape(-1, batch_size))
    remainder = members[full:]
    if drop_remainder:
      num_dropped += len(remainder)
    elif len(remainder):
      rows.append(np.concatenate([remainder, np.full(batch_size - len(remainder), -1)]))
    step_lengths.extend([bound] * (len(rows) - len(step_lengths)))
  if not rows:
    raise ValueError(f"no batch in the epoch: {len(lengths)} examples, batch_size={batch_size}, "
                     f"drop_remainder={drop_remainder}")
  step_order = rng.permutation(len(rows))
  rows_SxB = np.asarray(rows, np.int64).reshape(-1, batch_size)[step_order]
  return EpochPlan(rows_SxB, np.asarray(step_lengths, np.int64)[step_order], num_dropped)


def _pad_value(name: str) -> int:
  return mdp.NO_STATE if name in mdp.INDEX_COLUMNS else 0


def _padded_column(
    column: pa.ChunkedArray, rows_B: np.ndarray, length: int, dtype, pad: int) -> np.ndarray:
  """Scatters a list<...> column of the real rows into a [B, length] array."""
  out_BxL = np.full((len(rows_B), length), pad, dtype)
  real = np.flatnonzero(rows_B >= 0)
  sizes = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
  values = pc.list_flatten(column).to_numpy(zero_copy_only=False)
  row_ids = np.repeat(real, sizes)
  col_ids = np.arange(len(values)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
  out_BxL[row_ids, col_ids] = values
  return out_BxL


def _scalar_columns(schema: pa.Schema) -> list[str]:
  numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean)
  return [f.name for f in schema if any(is_type(f.type) for is_type in numeric)]


def load_batch(dataset: datasets.Dataset, rows_B: np.ndarray, length: int) -> dict[str, np.ndarray]:
  """Reads the real rows of one step from Arrow and pads them to [B, length].

  Token columns become [B, length] arrays, padded with 0 / False (-1 for the
  next-state indices; padded input_ids are 0, not the tokenizer's pad id: only
  attention_mask says what is real). Numeric per-example columns (outcome,
  truncated, length, ...) become [B] arrays; strings stay in the dataset (look
  them up through `example_index`).
  """
  table = dataset.with_format("arrow")[rows_B[rows_B >= 0].tolist()]
  batch = {}
  for name, dtype in mdp.TOKEN_DTYPES.items():
    batch[name] = _padded_column(table.column(name), rows_B, length, dtype, _pad_value(name))
  for name in _scalar_columns(table.schema):
    values = table.column(name).to_numpy()
    out_B = np.zeros(len(rows_B), values.dtype)
    out_B[rows_B >= 0] = values
    batch[name] = out_B
  batch["row_mask"] = rows_B >= 0
  batch["example_index"] = rows_B
  return batch


def _lengths(dataset: datasets.Dataset) -> np.ndarray:
  return dataset.with_format("arrow")["length"].to_numpy()


def batches(
    dataset: datasets.Dataset,
    batch_size: int,
    seed: int,
    epoch: int,
    start_step: int = 0,
    *,
    boundaries: Sequence[int] | None = None,
    drop_remainder: bool = False,
    host: tuple[int, int] = (0, 1),
) -> Iterator[dict[str, np.ndarray]]:
  """The batches of one epoch from `start_step` on; dicts of numpy arrays.

  `boundaries` default to powers of two up to the longest example.
  `host=(index, count)`: every host plans the same global batches (the plan
  reads only lengths, so bucket lengths agree) and reads from Arrow only its
  own contiguous `batch_size // count` rows of each.
  """
  index, count = host
  if not 0 <= index < count or batch_size % count:
    raise ValueError(f"host={host}: batch_size={batch_size} must split evenly over {count} "
                     f"hosts and 0 <= index < count")
  rows = batch_size // count
  lengths = _lengths(dataset)
  boundaries = boundaries or bucket_boundaries(int(lengths.max()))
  plan = plan_epoch(lengths, batch_size, seed, epoch, boundaries, drop_remainder)
  for rows_B, length in zip(plan.rows_SxB[start_step:], plan.lengths_S[start_step:]):
    yield load_batch(dataset, rows_B[index * rows:(index + 1) * rows], int(length))


def stream(
    dataset: datasets.Dataset,
    batch_size: int,
    seed: int,
    start_step: int = 0,
    *,
    boundaries: Sequence[int] | None = None,
    drop_remainder: bool = False,
    host: tuple[int, int] = (0, 1),
) -> Iterator[dict[str, np.ndarray]]:
  """Endless batches across epochs, resumable at a global step (`host` as in `batches`).

  Bucket membership depends only on lengths, so every epoch has the same
  number of steps and global step s is step s % steps of epoch s // steps.
  """
  lengths = _lengths(dataset)
  boundaries = boundaries or bucket_boundaries(int(lengths.max()))
  steps = plan_epoch(lengths, batch_size, seed, 0, boundaries, drop_remainder).num_steps
  epoch, step = divmod(start_step, steps)
  while True:
    yield from batches(dataset, batch_size, seed, epoch, step, boundaries=boundaries,
                       drop_remainder=drop_remainder, host=host)
    epoch, step = epoch + 1, 0
