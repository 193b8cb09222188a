"""`make run`'s pipeline plus BC given CALM's intent tracker, so one table isolates what CALM adds.

    python -m experiments.pipeline --config=experiments/configs/quickstart_bc_tracker.py[:SEEDS] \
        --workdir=runs/quickstart

The extra run, `bc_tracker_agent`, is `calm_agent`'s model, pooled intent head and rule
solver (calm/state.solve picks the closing status and flight) trained for the same 500
updates from the same dialogue LM, on the corpus as it is: no relabeling and no task
pretraining scenes in its batches. What `calm_agent` scores above it is what relabeling and
CALM's scenes add; what it scores above `bc_agent` is what the tracker and the rule solver add.
With SEEDS > 1 both runs are trained again with seeds 1 .. SEEDS-1 (`*_sK`), each played
against the same customers, so their difference has a standard error over seeds.
"""

import ml_collections

from experiments.configs import quickstart

NAME = "bc_tracker_agent"


def get_config(seeds: str = "1") -> ml_collections.ConfigDict:
  c = quickstart.get_config()
  calm = c.runs.calm_agent
  tracker = (("calm_data.relabel", False), ("calm_data.scene_every", 0))
  pairs = []
  for seed in range(int(seeds)):
    suffix, seed_set = (f"_s{seed}", (("seed", seed),)) if seed else ("", ())
    for name, overrides, label in (
        (NAME, tracker, "BC + intent tracker (rule solver)"),
        ("calm_agent", (), "CALM + intent tracker (rule solver)")):
      run = name + suffix
      if run not in c.runs:
        c.runs[run] = ml_collections.ConfigDict(dict(
            config=calm.config, steps=calm.steps, eval_every=calm.eval_every,
            init_from=calm.init_from, set=overrides + seed_set,
            label=label + (f", seed {seed}" if seed else "")))
      pairs += [(run, "scripted:volunteer"), (run, "scripted:volunteer/held_out")]
  c.evaluation.pairs = tuple(c.evaluation.pairs) + tuple(
      p for p in pairs if p not in tuple(c.evaluation.pairs))
  return c
