"""ilql_persuasion.py sized for 2 CPU cores: bc_persuasion_quick.py's model and data.

    python -m experiments.train --config=experiments/configs/ilql_persuasion_quick.py \
        --workdir=runs/ilql_persuasion_quick
    python -m experiments.value_calibration --workdir=runs/ilql_persuasion_quick

Offline only (there is no persuadee to play against yet): the held-out TD
loss is logged at every evaluation, and value_calibration compares V at the
start of each held-out dialogue with its donation / 2.
"""

import ml_collections

from experiments.configs import bc_persuasion_quick
from experiments.configs.ilql_airdialogue_quick import ilql_section


def get_config() -> ml_collections.ConfigDict:
  c = bc_persuasion_quick.get_config()
  # The persuader writes up to ~80% of a dialogue's tokens.
  c.algorithm = ilql_section(cql_weight=0.1, polyak_rate=0.02, action_fraction=0.9)
  return c
