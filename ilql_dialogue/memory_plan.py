"""Per-device memory of a training config on a mesh, computed without any device.

Everything comes from `jax.eval_shape` of the code that runs, on an
`AbstractMesh` of the requested size, so a laptop can plan a 256-chip slice:

  parameters, optimizer, frozen: the train state `train_loop.build_training`
    would create (model, AdamW moments, step, rng; `frozen` is model state
    the optimizer does not update, e.g. ILQL's target trunk), each array
    divided as `sharding.state_shardings` places it.
  gradients: the float32 sum `optim.accumulate_gradients` keeps, sharded like
    the parameters.
  activations: what the backward pass keeps of one microbatch: the residuals
    of `jax.vjp(algorithm.loss)` at this device's rows. Residuals that do not
    grow with the rows (weights the backward pass reads) are already counted,
    so activations = residuals(2b) - residuals(b). The estimate ignores
    tensor parallelism (an upper bound when tensor > 1).
  transients: what the backward pass holds besides the residuals, taken as
    TRANSIENT_COPIES arrays the size of the largest activation (the logits).
  batch: one global step's input arrays, split over data * fsdp.
  kv_cache: decoding (online evaluation, rollouts): the KV cache of
    `decode_batch` rows of `decode_len` slots for the model the sampler runs
    (for ILQL every trunk it stacks), rows split over data * fsdp and kv heads
    over tensor where they divide.

`state_bytes` also lists each model array's placement, so an array that stays
whole on every device while the mesh grows (a logical axis mapped to no mesh
axis) shows up by name (`parameter_report`), not only as a total that shrinks
slowly. It traces no loss, so it lists the arrays of any algorithm, including
those whose batches `abstract_batch` cannot describe (CALM's, online RL's).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import AbstractMesh, PartitionSpec as P

from data_pipelines import mdp
from ilql_dialogue import bc, registry, sharding, train_loop, value_guidance
from ilql_dialogue.lm_party import empty_state
from ilql_dialogue.ilql import ILQLModel

GIB = 1024 ** 3
# Buffers as large as the largest activation that the backward pass holds at once on top
# of the residuals: that activation's cotangent and one temporary built from it (the
# logits' softmax). Fitted to measured peaks on CPU (tests/test_memory_plan.py).
TRANSIENT_COPIES = 2


def parse_mesh(text: str) -> dict[str, int]:
  """'data:2,fsdp:4,tensor:1' -> sizes of the three mesh axes (an axis left out is 1)."""
  sizes = dict.fromkeys(sharding.MESH_AXES, 1)
  for part in filter(None, (p.strip() for p in text.split(","))):
    name, _, value = part.partition(":")
    if name not in sizes or not value.isdigit() or int(value) < 1:
      raise ValueError(f"--mesh={text!r}: expected AXIS:SIZE,... with AXIS in "
                       f"{sharding.MESH_AXES} and SIZE >= 1, got {part!r}")
    sizes[name] = int(value)
  return sizes


@dataclasses.dataclass(frozen=True)
class ArrayPlan:
  """One array of the model's state: its shape, where it lives, its bytes whole and per device.

  `kind` is "parameters" (trained) or "frozen" (model state the optimizer does not update).
  """

  path: str
  kind: str
  shape: tuple[int, ...]
  spec: P
  nbytes: int
  device_bytes: int


@dataclasses.dataclass(frozen=True)
class Plan:
  """Bytes per device, and the global parameter count."""

  mesh: Mapping[str, int]
  num_parameters: int
  parameters: int
  frozen: int
  optimizer: int
  gradients: int
  activations: int
  transients: int
  batch: int
  kv_cache: int

  @property
  def training(self) -> int:
    """The train step's peak: state, gradient sum, one microbatch's activations, the batch."""
    return (self.parameters + self.frozen + self.optimizer + self.gradients + self.activations
            + self.transients + self.batch)

  def fits(self, device_bytes: float) -> bool:
    return max(self.training, self.parameters + self.frozen + self.kv_cache) <= device_bytes


def _nbytes(x: Any) -> int:
  return math.prod(x.shape) * np.dtype(x.dtype).itemsize


def _shard_bytes(x: Any, spec: Any, mesh: AbstractMesh) -> int:
  """Bytes of the largest shard of `x` under `spec` (ceil where a size does not divide)."""
  shape = list(x.shape)
  for i, axes in enumerate(spec):
    if axes is not None:
      axes = (axes,) if isinstance(axes, str) else axes
      shape[i] = -(-shape[i] // math.prod(mesh.shape[a] for a in axes))
  return math.prod(shape) * np.dtype(x.dtype).itemsize


def _state_bytes(state: nnx.State, shardings: nnx.State, mesh: AbstractMesh
                 ) -> tuple[dict[str, int], list[ArrayPlan]]:
  """Per-device bytes of the train state (model parameters, other model state, the rest)
  and of the float32 gradient sum, which is sharded like the parameters; and the model's
  arrays one by one."""
  is_var = lambda x: isinstance(x, nnx.Variable)  # noqa: E731
  totals = dict.fromkeys(("parameters", "frozen", "optimizer", "gradients"), 0)
  arrays = []
  for (path, var), placed in zip(jax.tree.leaves_with_path(state, is_leaf=is_var),
                                 jax.tree.leaves(shardings, is_leaf=is_var), strict=True):
    value, spec = var.get_value(), placed.get_value().spec
    in_model = getattr(path[0], "key", None) == "model"
    kind = ("parameters" if isinstance(var, nnx.Param) else "frozen") if in_model else "optimizer"
    device_bytes = _shard_bytes(value, spec, mesh)
    totals[kind] += device_bytes
    if kind == "parameters":
      totals["gradients"] += _shard_bytes(jax.ShapeDtypeStruct(value.shape, np.float32), spec,
                                          mesh)
    if in_model:
      arrays.append(ArrayPlan(path=_dotted(path[1:]), kind=kind, shape=tuple(value.shape),
                              spec=spec, nbytes=_nbytes(value), device_bytes=device_bytes))
  return totals, arrays


def _dotted(path: tuple[Any, ...]) -> str:
  """'q_heads.0.out_kernel' for a state path."""
  return ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def abstract_mesh(mesh_sizes: Mapping[str, int]) -> AbstractMesh:
  """A mesh of these sizes that needs no device: planning a pod on a laptop."""
  return AbstractMesh(tuple(mesh_sizes[a] for a in sharding.MESH_AXES), sharding.MESH_AXES)


def state_bytes(config: ml_collections.ConfigDict, mesh_sizes: Mapping[str, int]
                ) -> tuple[dict[str, int], list[ArrayPlan]]:
  """The train state's part of `plan` alone (parameters, frozen, optimizer, gradients, and
  the model's arrays): shapes and shardings only, no loss traced, so it takes a second."""
  mesh = abstract_mesh(mesh_sizes)
  training = train_loop.build_training(config, registry.make_algorithm(config), mesh)
  return _state_bytes(training.abstract_state, training.shardings, mesh)


def abstract_batch(config: ml_collections.ConfigDict, rows: int, length: int) -> dict:
  """Shapes of `rows` training rows of `length` tokens: every MDP column a loss may read."""
  batch = {name: jax.ShapeDtypeStruct((rows, length), dtype)
           for name, dtype in mdp.TOKEN_DTYPES.items()}
  batch["truncated"] = jax.ShapeDtypeStruct((rows,), np.bool_)
  fields = tuple(config.model.get("prefix_field_vocab_sizes", ()))
  if fields:
    batch[bc.PREFIX_FIELDS] = jax.ShapeDtypeStruct(
        (rows, config.model.prefix_num_rows, len(fields)), np.int32)
  return batch


def _residual_bytes(algorithm: Any, graphdef: nnx.GraphDef, params: nnx.State,
                    rest: nnx.State, batch: dict) -> list[int]:
  """Bytes of each array the backward pass of `algorithm.loss` keeps."""
  def saved(params, rest, batch):
    def loss(params):
      return algorithm.loss(nnx.merge(graphdef, params, rest), batch, jax.random.key(0))[0]
    return jax.vjp(loss, params)[1]

  return [_nbytes(x) for x in jax.tree.leaves(jax.eval_shape(saved, params, rest, batch))]


def plan(config: ml_collections.ConfigDict, mesh_sizes: Mapping[str, int], *,
         seq_len: int | None = None, decode_batch: int = 16,
         decode_len: int | None = None) -> Plan:
  """The per-device Plan of training `config` (any registered algorithm) on this mesh.

  `seq_len` (default model.max_seq_len) is the padded length of a training row.
  """
  mesh = abstract_mesh(mesh_sizes)
  seq_len = seq_len or config.model.max_seq_len
  decode_len = decode_len or config.model.max_seq_len
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  train = config.train
  micro_rows = -(-(train.batch_size // train.grad_accum_steps) // shards)

  algorithm = registry.make_algorithm(config)
  training = train_loop.build_training(config, algorithm, mesh)
  totals, _ = _state_bytes(training.abstract_state, training.shardings, mesh)
  model = nnx.merge(training.graphdef, training.abstract_state).model
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  one, two = (_residual_bytes(algorithm, graphdef, params, rest,
                              abstract_batch(config, rows, seq_len))
              for rows in (micro_rows, 2 * micro_rows))
  growth = [b - a for a, b in zip(one, two, strict=True)]

  decoder = value_guidance.decoding_model(model) if isinstance(model, ILQLModel) else model
  cache = jax.eval_shape(lambda: empty_state(decoder, decode_batch, decode_len).cache)
  kv_split = shards * (mesh.shape["tensor"]
                       if decoder.cfg.num_kv_heads % mesh.shape["tensor"] == 0 else 1)
  kv_bytes = -(-sum(_nbytes(x) for x in jax.tree.leaves(cache)) // kv_split)

  batch_bytes = sum(_nbytes(x) for x in jax.tree.leaves(
      abstract_batch(config, train.batch_size, seq_len))) // shards
  return Plan(
      mesh=dict(mesh_sizes),
      num_parameters=sum(math.prod(x.shape) for x in jax.tree.leaves(params)),
      **totals,
      activations=sum(growth),
      transients=TRANSIENT_COPIES * max(growth, default=0),
      batch=batch_bytes,
      kv_cache=kv_bytes)


def report(plan: Plan, device_gib: float | None = None) -> str:
  """The plan as a table of GiB per device, and whether it fits `device_gib`."""
  mesh = ",".join(f"{a}:{plan.mesh[a]}" for a in sharding.MESH_AXES)
  rows = [("parameters", plan.parameters), ("frozen model state", plan.frozen),
          ("optimizer state", plan.optimizer), ("gradients (float32 sum)", plan.gradients),
          ("activations (one microbatch)", plan.activations),
          ("backward transients", plan.transients), ("batch", plan.batch),
          ("train step total", plan.training), ("KV cache (decoding)", plan.kv_cache)]
  unit, size = ("GiB", GIB) if plan.training >= GIB else ("MiB", 1024 ** 2)
  lines = [f"{plan.num_parameters / 1e6:,.1f}M parameters, mesh {mesh} "
           f"({math.prod(plan.mesh.values())} devices); {unit} per device:"]
  lines += [f"  {name:30s} {value / size:10.3f}" for name, value in rows]
  if device_gib is not None:
    verdict = "fits" if plan.fits(device_gib * GIB) else "does NOT fit"
    lines.append(f"{verdict} in {device_gib:g} GiB per device")
  return "\n".join(lines)


def parameter_report(arrays: Sequence[ArrayPlan], top: int = 0) -> str:
  """The model's arrays by bytes per device, largest first (the first `top`; 0: all), each
  with its placement and its share of the whole: a large array at 100% on a mesh of several
  fsdp or tensor devices is one no rule shards."""
  arrays = sorted(arrays, key=lambda a: (-a.device_bytes, a.path))
  shown = arrays[:top] if top else arrays
  lines = [f"  {'array':40s} {'kind':10s} {'shape':>20s} {'placement':>38s} "
           f"{'MiB/device':>11s} {'share':>6s}"]
  for a in shown:
    lines.append(f"  {a.path:40s} {a.kind:10s} {str(a.shape):>20s} {str(tuple(a.spec)):>38s} "
                 f"{a.device_bytes / 1024 ** 2:11.3f} {a.device_bytes / a.nbytes:6.0%}")
  if len(shown) < len(arrays):
    rest = sum(a.device_bytes for a in arrays[len(shown):])
    lines.append(f"  ... {len(arrays) - len(shown)} more arrays, {rest / 1024 ** 2:.3f} MiB")
  return "\n".join(lines)
