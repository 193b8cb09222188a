"""Defaults shared by every experiment config: mesh, loop cadence, optimizer.

A config file (e.g. experiments/configs/bc_tiny.py) starts from `base_config()`
and adds its `algorithm`, `model` and `data` sections; the fields here are the
ones ilql_dialogue/train_loop.py reads, and the ones the start-up checks
(workflows/config_checks.py) accept.
"""

import ml_collections


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  # Mesh sizes; data=-1 takes every device not used by fsdp * tensor.
  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1))
  c.train = ml_collections.ConfigDict(dict(
      steps=1000,
      batch_size=16,  # Global rows per optimizer update, over all hosts.
      grad_accum_steps=1,  # Microbatches per update, scanned inside the jitted step.
      log_every=50,
      eval_every=0,  # 0 = only at the end (when the experiment has an eval).
      eval_at_start=True,  # Also evaluate the initial model (a fresh run's step 0).
      checkpoint_every=500,
      keep_checkpoints=3,
      async_checkpoints=True,
      progress_bar=True,
  ))
  # Which evaluation metric picks the kept checkpoint (workdir/best); "" = none.
  # Task configs select by online return, never by a training loss.
  c.selection = ml_collections.ConfigDict(dict(metric="", mode="max"))
  c.optim = ml_collections.ConfigDict(dict(
      learning_rate=3e-4,
      warmup_steps=100,
      final_lr_fraction=0.1,  # Cosine decays to learning_rate * this at train.steps.
      b1=0.9,
      b2=0.95,
      eps=1e-8,
      weight_decay=0.1,
      grad_clip_norm=1.0,
  ))
  return c
