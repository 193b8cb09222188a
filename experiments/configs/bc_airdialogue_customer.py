"""BC of the AirDialogue customer: the first learned user simulator, GPT-2 small.

    python -m experiments.train --config=experiments/configs/bc_airdialogue_customer.py \
        --workdir=runs/bc_airdialogue_customer

The customer reads its private intent as text (about 60 tokens); everything
else is as in bc_airdialogue.py.
"""

import ml_collections

from experiments.configs import bc_airdialogue


def get_config() -> ml_collections.ConfigDict:
  c = bc_airdialogue.get_config()
  c.task.role = "customer"
  c.task.context = "text"
  c.task.max_length = 512
  c.model.max_seq_len = 512
  c.online_eval.num_dialogues = 0  # The agent's online eval; the simulator keeps its latest.
  c.selection.metric = ""
  return c
