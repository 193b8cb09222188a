"""Where a CALM state head's tracked intent comes from: the customer's words or the table.

    python -m experiments.state_probe --workdir=runs/tablehead/scenes_state [--step=1500]

Plays one batch of fresh generator scenes (calm/scenes.py, its own seed) through
a `head=state` run's trunk and reads each tracked field's accuracy at the
`[action]` marker twice: with the scenes' tables, and with every flight row's
dates and airports set to one value. A field the trunk reads from the
customer keeps its accuracy when the table is blanked; one it reads off the
table (the generator puts many flights on the intent's dates) loses it.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from calm import model as calm_model, scenes, state
from data_pipelines.tokenization import load_tokenizer
from ilql_dialogue import bc
from ilql_dialogue import restore

PROBE_SEED = (0x5052, 0)  # "PR": apart from every training and evaluation stream.


def accuracies(model: calm_model.CALMModel, batch: dict[str, np.ndarray],
               fields_BxPxF: np.ndarray) -> dict[str, float]:
  mask_BxT = jnp.asarray(batch["attention_mask"], bool)
  hidden_BxTxD, _ = model(jnp.asarray(batch["input_ids"]), bc.positions_from_mask(mask_BxT),
                          mask_BxT, prefix_BxPxD=model.embed_prefix(jnp.asarray(fields_BxPxF)))
  tracked = model.action_head.tracked(
      hidden_BxTxD, mask_BxT, jnp.asarray(batch[calm_model.ACTION_POSITION]),
      mask_BxT & ~jnp.asarray(batch["action_mask"], bool))
  codes_BxK = np.asarray(state.batch_codes(batch))
  return {name: float(np.mean(np.asarray(jnp.argmax(log_p, -1)) == codes_BxK[:, k]))
          for k, (name, log_p) in enumerate(zip(state.TRACKED_NAMES, tracked))}


def probe(workdir: str, step: int | None = None, rows: int = 128) -> dict[str, dict[str, float]]:
  config = restore.read_config(workdir)
  model, step = restore.restore_model(workdir, config, step)
  if not isinstance(model.action_head, state.StateHead):
    raise ValueError(f"{workdir}: trained with algorithm.head={config.algorithm.get('head')!r}, "
                     "the probe reads a state head (algorithm.head=state or pooled)")
  tokenizer = load_tokenizer(f"{workdir}/tokenizer")
  batch = scenes.scene_batch(rows, PROBE_SEED, tokenizer, config.task.max_length, 30)
  return {"step": step,
          "table": accuracies(model, batch, batch[bc.PREFIX_FIELDS]),
          "table_blanked": accuracies(model, batch, state.blank_table(batch[bc.PREFIX_FIELDS]))}
