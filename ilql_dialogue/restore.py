"""Reading a training workdir back: its config and the model of one of its checkpoints.

The model is rebuilt from `config.algorithm` through the registry, so a
checkpoint is always restored into the module structure it was trained with.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import ml_collections
import orbax.checkpoint as ocp
from flax import nnx

from ilql_dialogue import registry
from ilql_dialogue.checkpointing import BEST_DIR, CHECKPOINT_DIR


def _tuples(obj: Any) -> Any:
  """JSON lists back to the tuples the configs hold (ModelConfig must stay hashable)."""
  if isinstance(obj, list):
    return tuple(_tuples(v) for v in obj)
  if isinstance(obj, dict):
    return {k: _tuples(v) for k, v in obj.items()}
  return obj


def read_config(workdir: str) -> ml_collections.ConfigDict:
  path = os.path.join(workdir, "config.json")
  if not os.path.exists(path):
    raise ValueError(f"{workdir}: no config.json; not a training workdir")
  with open(path, encoding="utf-8") as f:
    try:
      obj = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}:{e.lineno}: field '<record>': malformed JSON ({e.msg})") from None
  for field in ("algorithm", "model"):
    if not isinstance(obj.get(field), dict):
      raise ValueError(f"{path}: field '{field}': missing")
  return ml_collections.ConfigDict(_tuples(obj))


def selected(workdir: str) -> dict[str, Any] | None:
  """The meta of the run's kept best checkpoint (`best/`): step, metric, value and
  the evaluation that chose it (e.g. `best_beta`); None if the run keeps none."""
  directory = os.path.join(os.path.abspath(workdir), BEST_DIR)
  if not os.path.isdir(directory):
    return None
  options = ocp.CheckpointManagerOptions(create=False, read_only=True)
  with ocp.CheckpointManager(directory, options=options, item_names=("meta",)) as manager:
    step = manager.latest_step()
    if step is None:
      return None
    return manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta


def restore_model(workdir: str, config: ml_collections.ConfigDict,
                  step: int | None = None) -> tuple[nnx.Module, int]:
  """The `model` subtree of a checkpoint on one device: `step` of checkpoints/,
  or by default the selected best (best/, when the run selects) else the latest."""
  algorithm = registry.make_algorithm(config, f"{workdir}/config.json")
  abstract = nnx.eval_shape(lambda: algorithm.init(config, nnx.Rngs(0)))
  graphdef, abstract_state = nnx.split(abstract)
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=device),
                        nnx.to_pure_dict(abstract_state))
  best = selected(workdir) if step is None else None
  directory = os.path.abspath(os.path.join(workdir, BEST_DIR if best else CHECKPOINT_DIR))
  options = ocp.CheckpointManagerOptions(create=False, read_only=True)
  with ocp.CheckpointManager(directory, options=options, item_names=("state",)) as manager:
    steps = list(manager.all_steps())
    if not steps:
      raise ValueError(f"{workdir}: no checkpoint under {CHECKPOINT_DIR}/")
    step = max(steps) if step is None else step
    if step not in steps:
      raise ValueError(f"{workdir}: no checkpoint at step {step}; saved: {sorted(steps)}")
    restore_args = jax.tree.map(lambda s: ocp.ArrayRestoreArgs(sharding=s.sharding), target)
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
        item={"model": target}, restore_args={"model": restore_args}, partial_restore=True)))
  nnx.replace_by_pure_dict(abstract_state, restored.state["model"])
  return nnx.merge(graphdef, abstract_state), step
