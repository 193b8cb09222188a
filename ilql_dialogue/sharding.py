"""The device mesh and the one table that maps logical axis names onto it.

Models name the axes of every parameter from a fixed vocabulary ("embed",
"mlp", ...; see models/layers.py) and never mention devices. This file is the
only place that decides where those axes live, so moving from a laptop CPU to
a pod slice means changing three mesh sizes in a config, not touching a model.

Mesh axes:
  data:   pure data parallelism (parameters replicated).
  fsdp:   data parallelism whose parameters and optimizer state are also
          sharded along "embed" and "head_in" (ZeRO-3 / FSDP), gathered by XLA
          on use.
  tensor: Megatron-style model parallelism over heads, MLP width (and a value
          head's hidden width) and vocab.

Every large parameter has one axis on `fsdp`, so its bytes per device fall as
1/fsdp (`python -m experiments.plan --parameters=0` lists each array's share).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")

# Logical axis -> mesh axes. None = replicated. Every name a model may use must
# appear here: an unknown name is an error rather than a silent replication.
LOGICAL_AXIS_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", BATCH_AXES),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("layers", None),
    ("norm", None),
    ("prefix_rows", None),
    ("copy", None),  # A copy head's query/key width (small; its rows are on fsdp).
    # A value head's hidden width, as "mlp": [embed, head_hidden] is then on (fsdp, tensor).
    ("head_hidden", "tensor"),
    # The input side of a head's output kernel [head_in, vocab or outcomes]: on fsdp, because
    # its output side already holds tensor, and without it every Q and target head (4 x 128k
    # x 2d for a Llama-3 start) would be whole on every device.
    ("head_in", "fsdp"),
)


def make_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A (data, fsdp, tensor) mesh; `data=-1` takes every device left over.

  Axes are `Auto` so XLA propagates shardings through model code that carries
  no annotations of its own.
  """
  devices = list(jax.devices() if devices is None else devices)
  if data == -1:
    if len(devices) % (fsdp * tensor):
      raise ValueError(f"mesh: {len(devices)} devices are not divisible by "
                       f"fsdp={fsdp} * tensor={tensor}")
    data = len(devices) // (fsdp * tensor)
  if data * fsdp * tensor != len(devices):
    raise ValueError(f"mesh: data={data} * fsdp={fsdp} * tensor={tensor} != "
                     f"{len(devices)} devices")
  return jax.make_mesh((data, fsdp, tensor), MESH_AXES,
                       axis_types=(jax.sharding.AxisType.Auto,) * 3, devices=devices)


@contextlib.contextmanager
def mesh_context(mesh: Mesh, rules=LOGICAL_AXIS_RULES) -> Iterator[None]:
  """Makes `mesh` and the rules current, so logical sharding constraints that
  model code places on activations resolve while a step is traced."""
  with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
    yield


def logical_to_spec(names: Sequence[str | None], shape: Sequence[int], mesh: Mesh,
                    rules=LOGICAL_AXIS_RULES) -> P:
  """The PartitionSpec for one array, keeping only mesh axes that divide it.

  A dimension that a mesh axis does not divide (GQA with 2 kv heads on
  tensor=4, a 50257 vocabulary) is replicated along that axis instead of
  failing: correctness first, the cost is only memory. A mesh axis is used at
  most once per array, as XLA requires.
  """
  table = dict(rules)
  used: set[str] = set()
  spec = []
  for name, dim in zip(names, shape, strict=True):
    if name is None:
      spec.append(None)
      continue
    if name not in table:
      raise ValueError(f"logical axis {name!r} has no sharding rule; known: {sorted(table)}")
    wanted = table[name]
    wanted = () if wanted is None else (wanted,) if isinstance(wanted, str) else tuple(wanted)
    kept, size = [], 1
    for axis in wanted:
      if axis not in used and dim % (size * mesh.shape[axis]) == 0:
        kept.append(axis)
        size *= mesh.shape[axis]
    used.update(kept)
    spec.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
  return P(*spec)


def state_shardings(abstract_state: Any, mesh: Mesh, rules=LOGICAL_AXIS_RULES) -> Any:
  """NamedShardings for an nnx state, read from each Variable's `out_sharding`.

  Optimizer moments inherit their parameter's metadata (nnx.Optimizer copies
  it), so they are sharded exactly like the parameter; Variables without names
  (step counters, rng keys) are replicated.
  """

  def one(path, variable):
    names = variable.get_metadata().get("out_sharding") or ()
    shape = variable.get_value().shape
    if names and len(names) != len(shape):
      raise ValueError(f"{jax.tree_util.keystr(path)}: axis names {tuple(names)} do not "
                       f"match shape {shape}")
    spec = logical_to_spec(names, shape, mesh, rules) if names else P()
    return variable.replace(NamedSharding(mesh, spec))

  return jax.tree_util.tree_map_with_path(
      one, abstract_state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batches are [accum, micro_batch, ...]: microbatch rows split over the
  data-parallel axes, the accumulation axis kept whole on every device (it is
  scanned over)."""
  return NamedSharding(mesh, P(None, BATCH_AXES))


def put_batch(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Assembles global [accum, micro_batch, ...] arrays from this host's rows.

  Each host passes only the rows it loaded (micro_batch / process_count per
  microbatch), so no host ever reads or holds the whole global batch.
  """
  sharding = batch_sharding(mesh)
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  out = {}
  for key, local in local_batch.items():
    if local.ndim < 2:
      raise ValueError(f"batch[{key!r}]: expected [accum, micro_batch, ...], got shape "
                       f"{local.shape}")
    global_shape = (local.shape[0], local.shape[1] * jax.process_count(), *local.shape[2:])
    if global_shape[1] % shards:
      raise ValueError(f"batch[{key!r}]: micro batch of {global_shape[1]} rows is not "
                       f"divisible by data*fsdp={shards} devices")
    out[key] = jax.make_array_from_process_local_data(sharding, local, global_shape)
  return out
