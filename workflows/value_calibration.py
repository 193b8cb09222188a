"""Held-out value calibration of a value-learning run (ILQL, MC): V at the start vs the return.

    python -m experiments.value_calibration --workdir=runs/ilql_persuasion_quick [--split=eval]

For every held-out dialogue: V at the state before the trained role's first
token ("start") and before its last utterance ("last"), the dialogue's return
(its outcome; Persuasion for Good: donation / 2) and the discounted
return-to-go from each state under the run's gamma and discounting, which is
what V estimates. Without a private context every dialogue starts in the
same state, so V at the start is one number: only its mean can be
calibrated, and "last" is where V must tell dialogues apart. Also the held-out losses of the
algorithm (TD, expectile, CQL, BC). Writes value_calibration_<split>.json
(Pearson and Spearman correlations, mean absolute error, calibration by
quantile bins of predicted V) and a calibration plot,
value_calibration_<split>.png. Selection of checkpoints is the run's own
(restore.restore_model: best/, else the latest).
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from flax import nnx

from ilql_dialogue import baselines, ilql, registry, restore, sharding, tasks, train_loop
from ilql_dialogue.value_heads import ILQLModel

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


@nnx.jit(static_argnums=(2, 3))
def start_values(model: ILQLModel, batch: dict[str, jax.Array], gamma: float, discount: str):
  """V and the discounted return-to-go at two states of each row: before the role's
  first token ("start") and before its last utterance ("last", when most of the
  other side's behaviour is known); and whether the row has an action at all."""
  length = batch["input_ids"].shape[1]
  action_BxT = (batch["action_mask"].astype(bool) & batch["attention_mask"].astype(bool)
                & (jnp.arange(length) >= 1)[None, :])
  utterance_start_BxT = action_BxT & ~jnp.pad(action_BxT, ((0, 0), (1, 0)))[:, :-1]
  first_B = jnp.argmax(action_BxT, axis=1)
  last_B = length - 1 - jnp.argmax(utterance_start_BxT[:, ::-1], axis=1)
  hidden_BxTxD = ilql.trunk_hidden(model.trunk, batch)
  g_BxT = baselines.returns_to_go(batch, gamma, discount)

  def at(position_B):
    v_B = model.v_head(ilql.gather_rows(hidden_BxTxD, (position_B - 1)[:, None]))[:, 0]
    return v_B, jnp.take_along_axis(g_BxT, position_B[:, None], axis=1)[:, 0]

  return (*at(first_B), *at(last_B), action_BxT.any(axis=1))


def pearson(x: np.ndarray, y: np.ndarray) -> float | None:
  """None when undefined: either side constant (up to float32 rounding)."""
  constant = lambda a: np.std(a) <= 1e-6 * (1.0 + np.abs(a).mean())
  if len(x) < 2 or constant(x) or constant(y):
    return None
  return float(np.corrcoef(x, y)[0, 1])


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
  rank = lambda a: np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
  return pearson(rank(x), rank(y)) if pearson(x, y) is not None else None


def calibration_bins(predicted: np.ndarray, actual: np.ndarray, bins: int) -> list[dict]:
  """Quantile bins of the prediction: mean predicted vs mean actual (+- s.e.) in each."""
  out = []
  for members in np.array_split(np.argsort(predicted, kind="stable"), bins):
    if len(members):
      a = actual[members]
      out.append({"n": int(len(members)), "predicted": float(predicted[members].mean()),
                  "actual": float(a.mean()),
                  "actual_stderr": float(a.std(ddof=1) / np.sqrt(len(a))) if len(a) > 1 else 0.0})
  return out


def calibrate(workdir: str, split: str = "eval", bins: int = 10) -> dict[str, Any]:
  config = restore.read_config(workdir)
  model, step = restore.restore_model(workdir, config)
  if not isinstance(model, ILQLModel):
    raise ValueError(f"{workdir}: algorithm {config.algorithm.name!r} has no value head")
  task = tasks.make_task(config)
  value_cfg = ilql.ILQLConfig.from_config(config.algorithm) if config.algorithm.name == "ilql" \
      else baselines.MCConfig.from_config(config.algorithm)
  batches = tasks.eval_batches(task, config, split, limit=0)
  with sharding.mesh_context(sharding.make_mesh(**config.mesh)):
    losses = train_loop.loss_evaluator(registry.make_algorithm(config), batches)(model, step)
  columns = {name: [] for name in ("v_start", "g_start", "v_last", "g_last", "return")}
  for batch in batches:
    *values, has_action = jax.device_get(start_values(
        model, {k: jnp.asarray(v) for k, v in batch.items()}, value_cfg.gamma,
        value_cfg.discount))
    keep = batch["row_mask"] & has_action
    for name, value in zip(columns, (*values, batch["outcome"])):
      columns[name].append(np.asarray(value)[keep])
  c = {name: np.concatenate(parts) for name, parts in columns.items()}
  result = {"workdir": workdir, "step": step, "split": split, "n": int(len(c["return"])),
            "heldout_losses": {k: float(v) for k, v in losses.items()},
            "mean_return": float(c["return"].mean())}
  for state in ("start", "last"):
    v, g = c[f"v_{state}"], c[f"g_{state}"]
    result[state] = {
        "pearson_v_return": pearson(v, c["return"]),
        "spearman_v_return": spearman(v, c["return"]),
        "pearson_v_discounted_return": pearson(v, g),
        "mae_v_discounted_return": float(np.abs(v - g).mean()),
        "mean_v": float(v.mean()), "std_v": float(v.std()),
        "mean_discounted_return": float(g.mean()),
        "bins": calibration_bins(v, c["return"], bins),
    }
  stem = os.path.join(workdir, f"value_calibration_{split}")
  with open(stem + ".json", "w") as f:
    json.dump(result, f, indent=2)
  _plot(c, result, stem + ".png")
  return result


def _plot(c: dict[str, np.ndarray], result: dict[str, Any], path: str) -> None:
  fig, axes = plt.subplots(1, 2, figsize=(10, 5))
  for ax, state in zip(axes, ("start", "last")):
    v, r, s = c[f"v_{state}"], c["return"], result[state]
    ax.scatter(v, r, s=8, alpha=0.35, label="dialogues")
    b = s["bins"]
    ax.errorbar([x["predicted"] for x in b], [x["actual"] for x in b],
                yerr=[x["actual_stderr"] for x in b], fmt="o-", color="C3",
                label="quantile bins: mean return ± s.e.")
    lo, hi = min(v.min(), 0.0), max(v.max(), r.max())
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="perfect calibration")
    rho = s["pearson_v_return"]
    ax.set_title(f"V before the {'first' if state == 'start' else 'last'} turn: Pearson "
                 f"{'n/a' if rho is None else f'{rho:.2f}'}")
    ax.set_xlabel("predicted V")
    ax.set_ylabel("actual return (outcome; P4G: donation / 2)")
    ax.legend(fontsize=7)
  fig.suptitle(f"{result['workdir']} step {result['step']}, {result['split']} n={result['n']}")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
