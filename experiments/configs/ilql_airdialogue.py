"""ILQL of the AirDialogue agent (the policy), sized for one accelerator: GPT-2 small.

    make run  # AirDialogue corpora and tokenizer in runs/quickstart
    python -m experiments.train --config=experiments/configs/ilql_airdialogue.py \
        --workdir=runs/ilql_airdialogue [--config.model.init_from=BC_WORKDIR ...]
    python -m experiments.offline_eval --workdir=runs/ilql_airdialogue

Task, model and data are bc_airdialogue.py's (structured flight-table prefix),
so ILQL and BC differ only in the algorithm. The reward is the task outcome
on the agent's last turn. Decode with value guidance (beta 1-16) and keep the
checkpoint with the best online return (workflows/evaluate.py:online_eval_fn).
"""

import ml_collections

from experiments.configs import bc_airdialogue
from experiments.configs.ilql_airdialogue_quick import GUIDANCE_BETAS, ilql_section


def get_config() -> ml_collections.ConfigDict:
  c = bc_airdialogue.get_config()
  # Agent turns are ~51% of the tokens, at most ~70% of a row (quickstart corpus).
  c.algorithm = ilql_section(cql_weight=0.1, polyak_rate=0.005, action_fraction=0.75)
  c.optim.learning_rate = 5e-5
  c.online_eval.betas = GUIDANCE_BETAS
  return c
