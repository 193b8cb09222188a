"""Decoding a batch with its rows split over devices, each device decoding its own rows.

Why: on CPU one device runs most of a decode step's small matmuls on one thread (`cpu_devices`),
so the way to use every core is one device per core and a share of the rows on each. Rows never
interact while decoding, so the split is exact: the same tokens as on one device.

How: the weights are copied whole onto every device of a `(data, fsdp, tensor)` mesh whose
devices all sit on `data` (`decode_mesh`), and the prompt's rows are split over it
(`split_rows`). `sampler.prefill` then allocates the cache split the same way, and jit carries
the split through `append` and `generate`: each device keeps its rows' cache, and the decode
loop exchanges only three booleans a step (all rows done? all greedy? any filtering?).

  mesh = decode_devices.decode_mesh()
  model = decode_devices.replicate(model, mesh)
  tokens, mask, params = decode_devices.split_rows((tokens, mask, params), mesh)
  state = sampler.prefill(model, tokens, mask, max_len=...)
  state, new_tokens, _, _ = sampler.generate(model, state, params, key, max_new_tokens=...)

The batch must divide evenly over the devices (pad it with dummy rows otherwise).
"""

from __future__ import annotations

from typing import Any, Sequence, TypeVar

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ilql_dialogue import sharding
from ilql_dialogue.models.kv_cache import KVCache, init_cache

Tree = TypeVar("Tree")


def decode_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Every device (default: `jax.devices()`) on the data axis: rows split, weights whole."""
  return sharding.make_mesh(data=-1, fsdp=1, tensor=1, devices=devices)


def rows_sharding(mesh: Mesh) -> NamedSharding:
  """Leading (row) axis over the mesh's batch axes, every other axis whole."""
  return NamedSharding(mesh, P(sharding.BATCH_AXES))


def replicate(model: Any, mesh: Mesh) -> Any:
  """A copy of `model` (an nnx module) with every array whole on each of `mesh`'s devices."""
  graphdef, state = nnx.split(model)
  return nnx.merge(graphdef, jax.device_put(state, NamedSharding(mesh, P())))


def split_rows(tree: Tree, mesh: Mesh) -> Tree:
  """Every array of `tree` (leading axis = rows) with its rows split over `mesh`'s devices."""
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  for leaf in jax.tree.leaves(tree):
    if leaf.shape[0] % shards:
      raise ValueError(f"split_rows: {leaf.shape[0]} rows do not split evenly over {shards} "
                       "devices; pad the batch to a multiple")
  return jax.device_put(tree, rows_sharding(mesh))


def split_state(tree: Tree, mesh: Mesh) -> Tree:
  """`tree` (a decoding state) with every array's leading row axis split over `mesh`'s
  devices and every scalar (the cache's slot index) whole on each."""
  rows, whole = rows_sharding(mesh), NamedSharding(mesh, P())
  return jax.device_put(tree, jax.tree.map(lambda a: rows if a.ndim else whole, tree))


def replicate_arrays(tree: Tree, mesh: Mesh) -> Tree:
  """`tree` with each of its jax arrays whole on every device of `mesh` (e.g. a decode
  hook's tables), other leaves unchanged."""
  whole = NamedSharding(mesh, P())
  return jax.tree.map(lambda a: jax.device_put(a, whole) if isinstance(a, jax.Array) else a,
                      tree)


def empty_cache(cfg: Any, tokens_BxT: jax.Array, max_len: int) -> KVCache:
  """`init_cache` for `tokens_BxT`'s rows, split over devices as those rows are.

  `sampler.prefill` calls it, so a split prompt gets a split cache without the caller naming
  a mesh, and each device allocates only its own rows' slots (never the whole cache on one).
  """
  batch = tokens_BxT.shape[0]
  placement = getattr(tokens_BxT, "sharding", None)
  if not isinstance(placement, NamedSharding) or len(placement.device_set) == 1:
    return init_cache(cfg, batch, max_len)
  rows = NamedSharding(placement.mesh, P(placement.spec[0] if len(placement.spec) else None))
  whole = NamedSharding(placement.mesh, P())
  abstract = jax.eval_shape(lambda: init_cache(cfg, batch, max_len))
  cache = jax.tree.map(
      lambda a: jnp.zeros(a.shape, a.dtype, device=rows if a.ndim else whole), abstract)
  if cache.ids_BxS is None:
    return cache
  # A copy head's empty slots hold no token (-1), as init_cache makes them.
  return cache.replace(ids_BxS=jnp.full(cache.ids_BxS.shape, -1, jnp.int32, device=rows))
