"""ILQL of the τ²-bench retail agent from the BC agent, sized for 2 CPU cores.

    python -m experiments.train --config=experiments/configs/bc_tau2_quick.py \
        --workdir=runs/tau2_quick/bc_agent
    python -m experiments.train --config=experiments/configs/ilql_tau2_quick.py \
        --workdir=runs/tau2_quick/ilql_agent

bc_tau2_quick.py's task, model and data; every LM of the ILQL model starts from the BC agent
(model.init_from), the heads fresh. Targets move fast (polyak_rate 0.02) as in the other quick
ILQL configs. The environment's online evaluation plays the policy (beta = 0): the engine
path does not sweep value guidance.
"""

import ml_collections

from experiments.configs import bc_tau2_quick, ilql_airdialogue_quick


def get_config() -> ml_collections.ConfigDict:
  c = bc_tau2_quick.get_config()
  # Agent rows are 39% actions at the median, 65% at most (docs/RESULTS.md 27).
  c.algorithm = ilql_airdialogue_quick.ilql_section(polyak_rate=0.02, action_fraction=0.75)
  c.model.init_from = f"{bc_tau2_quick.ROOT}/bc_agent"
  c.train.steps = 200
  c.train.update(eval_every=200, checkpoint_every=200)
  return c
