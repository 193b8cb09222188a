"""`make run`'s pipeline plus BC given CALM's intent tracker, so one table isolates what CALM adds.

    python -m experiments.pipeline --config=experiments/configs/quickstart_bc_tracker.py \
        --workdir=runs/quickstart

The extra run, `bc_tracker_agent`, is `calm_agent`'s model, pooled intent head and rule
solver (calm/state.solve picks the closing status and flight) trained for the same 500
updates from the same dialogue LM, on the corpus as it is: no relabeling and no task
pretraining scenes in its batches. What `calm_agent` scores above it is what relabeling and
CALM's scenes add; what it scores above `bc_agent` is what the tracker and the rule solver add.
"""

import ml_collections

from experiments.configs import quickstart

NAME = "bc_tracker_agent"


def get_config() -> ml_collections.ConfigDict:
  c = quickstart.get_config()
  calm = c.runs.calm_agent
  c.runs[NAME] = ml_collections.ConfigDict(dict(
      config=calm.config, steps=calm.steps, eval_every=calm.eval_every,
      init_from=calm.init_from,
      set=(("calm_data.relabel", False), ("calm_data.scene_every", 0)),
      label="BC + intent tracker (rule solver)"))
  c.evaluation.pairs = tuple(c.evaluation.pairs) + (
      (NAME, "scripted:volunteer"), (NAME, "scripted:volunteer/held_out"))
  return c
