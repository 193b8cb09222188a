"""bc_persuasion.py sized for 2 CPU cores: tiny Llama, no persona text, 768-token windows.

    python -m experiments.train --config=experiments/configs/bc_persuasion_quick.py \
        --workdir=runs/bc_persuasion_quick
"""

import ml_collections

from experiments.configs import bc_airdialogue_quick, bc_persuasion


def get_config() -> ml_collections.ConfigDict:
  c = bc_persuasion.get_config()
  c.task.context = "none"  # The ~200-token persona would crowd the window of a CPU run.
  c.task.max_length = 768
  bc_airdialogue_quick.tiny_model(c, max_seq_len=1024)
  c.train.update(steps=300, batch_size=8, log_every=25, eval_every=100, checkpoint_every=100)
  c.optim.update(learning_rate=3e-3, warmup_steps=30, weight_decay=0.01)
  c.data.eval_batches = 4
  c.offline_eval.batch_size = 16
  return c
