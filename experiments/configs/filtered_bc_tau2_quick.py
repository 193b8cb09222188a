"""Filtered BC of the τ²-bench retail agent sized for 2 CPU cores: BC on the dialogues with
reward 1 only.

    python -m experiments.train --config=experiments/configs/filtered_bc_tau2_quick.py \
        --workdir=runs/tau2_quick/filtered_bc_agent

bc_tau2_quick.py's task, model, data and budget. `top_fraction` keeps the highest returns
(ilql_dialogue/baselines.py); the corpus's rewards are 0 or 1 and SUCCESS_FRACTION of its
training dialogues have reward 1 (all the oracle's, most of the degraded skills'), so the
kept ones are exactly successes.
"""

import ml_collections

from experiments.configs import bc_tau2_quick

SUCCESS_FRACTION = 0.81  # 814 of the 1,000 training dialogues (docs/RESULTS.md 27).


def get_config() -> ml_collections.ConfigDict:
  c = bc_tau2_quick.get_config()
  c.algorithm = ml_collections.ConfigDict(dict(name="filtered_bc",
                                               top_fraction=SUCCESS_FRACTION))
  return c
