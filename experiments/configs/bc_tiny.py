"""Behaviour cloning of one role with a tiny Llama-style model (CPU-sized).

    python -m data_pipelines.build_dataset --dialogues=D.jsonl --tokenizer=TOK \
        --train_tokenizer --role=persuader --max_length=256 --out=runs/mdp
    python -m experiments.train --config=experiments/configs/bc_tiny.py \
        --workdir=runs/bc_tiny --config.data.dataset_dir=runs/mdp

or, without any data, `--config.data.synthetic=True`.
"""

import ml_collections

from workflows.base_config import base_config


def get_config() -> ml_collections.ConfigDict:
  c = base_config()
  c.algorithm = ml_collections.ConfigDict(dict(name="bc"))
  # ModelConfig fields (ilql_dialogue/models/config.py); vocab_size=0 = from the data.
  c.model = ml_collections.ConfigDict(dict(
      family="llama", vocab_size=0, num_layers=2, d_model=64, num_heads=4, num_kv_heads=2,
      head_dim=16, mlp_dim=256, max_seq_len=512,
      init_from=""))  # A checkpoint to start from (ilql_dialogue/init_from.py).
  c.data = ml_collections.ConfigDict(dict(
      dataset_dir="",  # Built by `python -m data_pipelines.build_dataset`.
      eval_dataset_dir="",  # Optional held-out MDP dataset: loss metrics logged as "eval".
      eval_batches=8,
      bucket_boundaries=(),  # Padded lengths; () = powers of two up to the longest example.
      synthetic=False,  # Arithmetic-progression sequences instead of a dataset.
      synthetic_length=32,
  ))
  c.train.steps = 300
  c.train.batch_size = 16
  c.train.log_every = 25
  c.train.eval_every = 100
  c.train.checkpoint_every = 100
  c.optim.learning_rate = 3e-3
  c.optim.warmup_steps = 20
  c.optim.weight_decay = 0.01
  return c
