"""ILQL of the Persuasion for Good persuader, sized for one accelerator: GPT-2 small.

    python -m experiments.train --config=experiments/configs/ilql_persuasion.py \
        --workdir=runs/ilql_persuasion
    python -m experiments.offline_eval --workdir=runs/ilql_persuasion

Task, model and data are bc_persuasion.py's (the real corpus, persona as
text, windows of 1024 tokens). The reward is the donation / 2 on the
persuader's last turn; the ~2% of dialogues cut by the window are truncated,
not terminal, and bootstrap. Dialogues are long (~20 turns), so gamma is
applied once per turn. 915 training dialogues are few for value learning:
targets move slowly (Polyak 0.005) and ILQL trains for more steps than BC.
"""

import ml_collections

from experiments.configs import bc_persuasion
from experiments.configs.ilql_airdialogue_quick import ilql_section


def get_config() -> ml_collections.ConfigDict:
  c = bc_persuasion.get_config()
  # The persuader writes ~53% of the tokens, up to ~80% of a dialogue.
  c.algorithm = ilql_section(cql_weight=0.1, polyak_rate=0.005, action_fraction=0.9)
  c.train.update(steps=1500, eval_every=250, checkpoint_every=250)
  c.optim.learning_rate = 5e-5
  return c
