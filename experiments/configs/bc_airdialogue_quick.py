"""bc_airdialogue.py sized for 2 CPU cores: a tiny Llama on the structured table prefix.

    make run
    python -m experiments.train --config=experiments/configs/bc_airdialogue_quick.py \
        --workdir=runs/bc_airdialogue_quick
    python -m experiments.offline_eval --workdir=runs/bc_airdialogue_quick

The prefix keeps every sequence under ~350 tokens (the text table alone is ~575).
"""

import ml_collections

from experiments.configs import bc_airdialogue


def tiny_model(config: ml_collections.ConfigDict, max_seq_len: int) -> None:
  """The quick configs' model: 2 Llama layers of width 128, float32 (fastest on CPU)."""
  config.model.update(dict(
      family="llama", num_layers=2, d_model=128, num_heads=4, num_kv_heads=2, head_dim=32,
      mlp_dim=512, max_seq_len=max_seq_len, qkv_bias=False, attn_out_bias=False,
      mlp_bias=False, tie_embeddings=True, dtype="float32"))


def get_config() -> ml_collections.ConfigDict:
  c = bc_airdialogue.get_config()
  c.task.max_length = 384
  tiny_model(c, max_seq_len=512)
  c.train.update(steps=300, batch_size=16, log_every=25, eval_every=100, checkpoint_every=100)
  c.optim.update(learning_rate=3e-3, warmup_steps=30, weight_decay=0.01)
  c.data.eval_batches = 4
  c.online_eval.num_dialogues = 64
  c.train.eval_at_start = False  # An untrained agent plays every dialogue to the turn limit.
  c.offline_eval.update(batch_size=32, max_dialogues=128)
  return c
