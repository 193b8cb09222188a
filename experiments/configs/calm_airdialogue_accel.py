"""calm_airdialogue.py sized for one accelerator: an 8-layer Llama of width
512 in bfloat16, batch 64.

    python -m calm.data --config=experiments/configs/calm_airdialogue_accel.py
    python -m experiments.train --config=experiments/configs/calm_airdialogue_accel.py \
        --workdir=runs/calm_airdialogue_accel [--config.model.init_from=LM_WORKDIR]

Between the quick CPU model (2 x 128) and the paper's GPT-2 small
(calm_airdialogue.py): large enough that planning's imagined customer is
a usable dynamics model, small enough to train and evaluate quickly on one GPU.
"""

import ml_collections

from experiments.configs import calm_airdialogue


def get_config() -> ml_collections.ConfigDict:
  c = calm_airdialogue.get_config()
  c.task.max_length = 512
  c.model.update(dict(
      family="llama", num_layers=8, d_model=512, num_heads=8, num_kv_heads=4, head_dim=64,
      mlp_dim=2048, max_seq_len=640, qkv_bias=False, attn_out_bias=False, mlp_bias=False,
      tie_embeddings=True, dtype="bfloat16", param_dtype="float32"))
  c.train.update(steps=4000, batch_size=64, log_every=100, eval_every=500,
                 checkpoint_every=1000)
  c.optim.update(learning_rate=5e-4, warmup_steps=200, weight_decay=0.01)
  c.online_eval.update(num_dialogues=128, batch_size=128)
  return c
