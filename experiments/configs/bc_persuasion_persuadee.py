"""BC of the Persuasion for Good persuadee: a user simulator that ends by stating its donation.

    python -m experiments.train --config=experiments/configs/bc_persuasion_persuadee.py \
        --workdir=runs/bc_persuasion_persuadee
    python -m experiments.offline_eval --workdir=runs/bc_persuasion_persuadee

The persuadee's last turn carries `[donate] X.XX [/donate]`; the offline
evaluation decodes it from held-out histories and reports the donation error.
"""

import ml_collections

from experiments.configs import bc_persuasion


def get_config() -> ml_collections.ConfigDict:
  c = bc_persuasion.get_config()
  c.task.role = "persuadee"
  return c
