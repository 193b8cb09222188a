"""Training metrics: buffered on device, written as JSON lines, TensorBoard and a PNG.

Step metrics stay on device until a log or checkpoint boundary and are then
fetched in one `device_get`, so the loop never waits on the accelerator
between boundaries. `workdir/metrics.jsonl` is the record the tests and the
report scripts read; TensorBoard is for people watching a run.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Iterable, Mapping

import jax
import numpy as np
from absl import logging

from data_pipelines import files

METRICS_FILE = "metrics.jsonl"
CURVES_FILE = "learning_curves.png"
# Characters TensorBoard tags may not hold ("return/beta=4"): replaced here, once, instead of
# by tensorboardX with a log line per scalar; metrics.jsonl keeps the keys as they are.
_TAG_ILLEGAL = re.compile(r"[^-/\w.]")


class PendingMetrics:
  """Per-step device metrics not yet fetched to the host."""

  def __init__(self):
    self._steps: list[int] = []
    self._metrics: list[Mapping[str, jax.Array]] = []

  def add(self, step: int, metrics: Mapping[str, jax.Array]) -> None:
    self._steps.append(step)
    self._metrics.append(metrics)

  def drain(self) -> list[tuple[int, dict[str, float]]]:
    """(step, host floats) for every buffered step, oldest first."""
    fetched = jax.device_get(self._metrics)
    out = [(step, {k: float(v) for k, v in m.items()}) for step, m in zip(self._steps, fetched)]
    self._steps, self._metrics = [], []
    return out


def mean_metrics(records: Iterable[tuple[int, Mapping[str, float]]]) -> dict[str, float]:
  """Per-key mean over a window of steps."""
  records = list(records)
  keys = records[0][1].keys()
  return {k: float(np.mean([m[k] for _, m in records])) for k in keys}


class MetricsWriter:
  """Appends metrics to workdir/metrics.jsonl and TensorBoard event files.

  On resume from `start_step`, JSON lines logged after it by the interrupted
  run are dropped: those steps are recomputed and logged again, and the file
  keeps one record per step and split. Only process 0 writes.
  """

  def __init__(self, workdir: str, start_step: int = 0):
    self.workdir = workdir
    self.active = jax.process_index() == 0
    self.path = os.path.join(workdir, METRICS_FILE)
    if not self.active:
      return
    os.makedirs(workdir, exist_ok=True)
    kept = [r for r in read_metrics(self.path) if r["step"] <= start_step]
    files.write_text(self.path, [json.dumps(r) + "\n" for r in kept])
    from tensorboardX import SummaryWriter  # Heavy import kept off non-writing hosts.
    self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"), purge_step=start_step + 1)

  def write(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
    if not self.active:
      return
    record = {"step": int(step), "split": split, **{k: float(v) for k, v in metrics.items()}}
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")
    for key, value in metrics.items():
      self._tb.add_scalar(_TAG_ILLEGAL.sub("_", f"{split}/{key}"), float(value), step)
    self._tb.flush()

  def close(self) -> None:
    if self.active:
      self._tb.close()
      plot_learning_curves(self.path, os.path.join(self.workdir, CURVES_FILE))


def read_metrics(path: str) -> list[dict[str, Any]]:
  """All records of a metrics.jsonl file (empty if there is none).

  A last line without its newline that does not parse is a record cut short by a killed run
  (its step is logged again on resume): it is left out with a warning. Any other unreadable
  line is an error naming the file and line.
  """
  if not os.path.exists(path):
    return []
  with open(path) as f:
    lines = f.readlines()
  records = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      records.append(json.loads(line))
    except json.JSONDecodeError as e:
      if number == len(lines) and not line.endswith("\n"):
        logging.warning("%s:%d: a record cut short (the run was killed while writing it); "
                        "left out", path, number)
        continue
      raise ValueError(f"{path}:{number}: not a JSON record ({e})") from None
  return records


def plot_learning_curves(metrics_path: str, png_path: str) -> None:
  """One panel per (split, metric) against step."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  series: dict[str, tuple[list[int], list[float]]] = {}
  for record in read_metrics(metrics_path):
    for key, value in record.items():
      if key in ("step", "split") or not math.isfinite(value):
        continue
      steps, values = series.setdefault(f"{record['split']}/{key}", ([], []))
      steps.append(record["step"])
      values.append(value)
  if not series:
    return
  cols = min(3, len(series))
  rows = math.ceil(len(series) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
  for ax, (name, (steps, values)) in zip(axes.flat, sorted(series.items())):
    ax.plot(steps, values)
    ax.set_title(name)
    ax.set_xlabel("step")
  for ax in list(axes.flat)[len(series):]:
    ax.axis("off")
  fig.tight_layout()
  fig.savefig(png_path)
  plt.close(fig)
