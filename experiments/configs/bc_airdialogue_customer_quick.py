"""bc_airdialogue_customer.py sized for 2 CPU cores (tiny Llama, intent as text).

    python -m experiments.train --config=experiments/configs/bc_airdialogue_customer_quick.py \
        --workdir=runs/bc_airdialogue_customer_quick
"""

import ml_collections

from experiments.configs import bc_airdialogue_customer, bc_airdialogue_quick


def get_config() -> ml_collections.ConfigDict:
  c = bc_airdialogue_customer.get_config()
  c.task.max_length = 512
  bc_airdialogue_quick.tiny_model(c, max_seq_len=512)
  # A copy head: the customer states its name, airports and dates by pointing at its intent
  # (docs/METHODS.md, The copy head; docs/RESULTS.md 28).
  c.model.copy_dim = 32
  c.train.update(steps=300, batch_size=16, log_every=25, eval_every=100, checkpoint_every=100)
  c.optim.update(learning_rate=3e-3, warmup_steps=30, weight_decay=0.01)
  c.data.eval_batches = 4
  c.offline_eval.update(batch_size=32, max_dialogues=128)
  return c
