"""calm_airdialogue.py sized for 2 CPU cores: bc_airdialogue_quick's tiny Llama, the same budget.

    make run
    python -m calm.data --config=experiments/configs/calm_airdialogue_quick.py
    python -m experiments.train --config=experiments/configs/calm_airdialogue_quick.py \
        --workdir=runs/calm_airdialogue_quick \
        --config.model.init_from=runs/quickstart/dialogue_lm  # the dialogue LM (scenes)

Same model, initialization and budget as bc_airdialogue_quick, so CALM and BC
compare at equal cost; the loss covers both roles' tokens, so each step trains
about twice the targets of a BC step.
"""

import ml_collections

from experiments.configs import bc_airdialogue_quick, calm_airdialogue


def get_config() -> ml_collections.ConfigDict:
  c = bc_airdialogue_quick.get_config()
  calm_airdialogue.calm_sections(c)
  c.planning.update(n=2, m=1, horizon=4)
  return c
