"""BC of the Persuasion for Good persuader (the policy), sized for one accelerator: GPT-2 small.

    python -m experiments.train --config=experiments/configs/bc_persuasion.py \
        --workdir=runs/bc_persuasion
    python -m experiments.offline_eval --workdir=runs/bc_persuasion

The first run writes the held-out split, a BPE and the MDP datasets under
task.root (domains/persuasion/task.py, from the real corpus in
task.data_dir). The persuader reads its own persona as text (~150 tokens);
with it, max_length=1024 cuts 7% of the dialogues (3% without it).
"""

import ml_collections

from workflows.base_config import base_config


def get_config() -> ml_collections.ConfigDict:
  c = base_config()
  c.algorithm = ml_collections.ConfigDict(dict(name="bc"))
  c.task = ml_collections.ConfigDict(dict(
      name="persuasion",
      role="persuader",
      context="text",  # "text" (own persona) | "none".
      root="runs/quickstart",
      max_length=1024,
      tokenizer="",  # "" = a BPE trained on the training split; else an HF tokenizer directory.
      data_dir="",  # The corpus folder; "" = $P4G_DATA_DIR (data_pipelines/persuasion/loader.py).
  ))
  c.model = ml_collections.ConfigDict(dict(
      family="gpt2", vocab_size=0, num_layers=12, d_model=768, num_heads=12, num_kv_heads=12,
      head_dim=64, mlp_dim=3072, max_seq_len=1024, qkv_bias=True, attn_out_bias=True,
      mlp_bias=True, tie_embeddings=True, dtype="bfloat16", param_dtype="float32",
      prefix_field_vocab_sizes=(), prefix_num_rows=0, copy_dim=0, init_from=""))
  c.data = ml_collections.ConfigDict(dict(
      eval_batches=8, bucket_boundaries=(),
      train_part="",  # "K/N": only the K-th of N disjoint parts of the training dialogues.
  ))
  c.offline_eval = ml_collections.ConfigDict(dict(
      batch_size=32, max_new_tokens=96, max_dialogues=0, max_batches=0))
  # 915 training dialogues: ~14 epochs at batch 32.
  c.train.steps = 400
  c.train.batch_size = 32
  c.train.log_every = 20
  c.train.eval_every = 100
  c.train.checkpoint_every = 200
  c.optim.learning_rate = 1e-4
  c.optim.warmup_steps = 40
  return c
