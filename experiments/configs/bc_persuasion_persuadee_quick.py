"""bc_persuasion_persuadee.py sized for 2 CPU cores (see bc_persuasion_quick.py).

    python -m experiments.train --config=experiments/configs/bc_persuasion_persuadee_quick.py \
        --workdir=runs/bc_persuasion_persuadee_quick
    python -m experiments.offline_eval --workdir=runs/bc_persuasion_persuadee_quick
"""

import ml_collections

from experiments.configs import bc_persuasion_quick


def get_config() -> ml_collections.ConfigDict:
  c = bc_persuasion_quick.get_config()
  c.task.role = "persuadee"
  return c
