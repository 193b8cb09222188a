"""`make run`'s simulator-collapse arms at two more seeds, on a copy of `make run`'s workdir.

    make run
    cp -r runs/quickstart runs/quickstart_seeds
    python -m experiments.pipeline --config=experiments/configs/quickstart_seeds.py \
        --workdir=runs/quickstart_seeds
    S=runs/quickstart_seeds; python -m experiments.compare_agents --workdir=$S/lever \
        --agents=start=$S/bc_agent,single=$S/single_arm+$S/single_arm_s1+$S/single_arm_s2,... \
        --customers=$S/bc_customer,$S/bc_customer_s1,scripted:volunteer/held_out,people:silent,...

The pipeline skips every stage `make run` finished and trains `ARM_arm_s1`, `ARM_arm_s2` (the
same arm at `seed` 1 and 2: rollout scenarios, sampling, dropout) from the same BC agent
against the same simulator; docs/RESULTS.md (section 23) pools each arm's three seeds.
"""

import ml_collections

from experiments.configs import quickstart

SEEDS = (1, 2)


def get_config(arms: str = "") -> ml_collections.ConfigDict:
  """`arms`: comma-separated arm names (default: all of make run's)."""
  c = quickstart.get_config()
  chosen = tuple(a for a in arms.split(",") if a) or quickstart.ARMS
  unknown = sorted(set(chosen) - set(quickstart.ARMS))
  if unknown:
    raise ValueError(f"quickstart_seeds: arms {unknown}; known: {quickstart.ARMS}")
  for arm in chosen:
    base = c.runs[f"{arm}_arm"]
    for seed in SEEDS:
      run = ml_collections.ConfigDict(base.to_dict())
      run.set = tuple(base.set) + (("seed", seed),)
      run.label = f"{base.label or arm + '_arm'} (seed {seed})"
      c.runs[f"{arm}_arm_s{seed}"] = run
  c.evaluation.pairs = ()
  c.collapse.arms = ()
  return c
