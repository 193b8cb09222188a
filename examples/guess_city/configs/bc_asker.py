"""Behaviour cloning of the asker from self-play, played against the scripted answerer.

    python -m experiments.train --config=examples/guess_city/configs/bc_asker.py \
        --workdir=runs/guess_city_bc

A tiny Llama and a few hundred updates (minutes on a CPU). Every evaluation plays
40 held-out games (seed 2000, not a corpus seed) against the scripted answerer;
"return" is the success rate, and the best checkpoint is kept by it.
"""

import ml_collections

from workflows.base_config import base_config


def get_config() -> ml_collections.ConfigDict:
  c = base_config()
  c.algorithm = ml_collections.ConfigDict(dict(name="bc"))
  c.task = ml_collections.ConfigDict(dict(
      name="examples.guess_city.task:TASK",  # module:attr, imported on first use.
      role="asker", context="none", root="runs/guess_city", max_length=128, tokenizer="",
      train_dialogues=400, eval_dialogues=40, vocab_size=512))
  c.model = ml_collections.ConfigDict(dict(
      family="llama", vocab_size=0, num_layers=2, d_model=128, num_heads=4, num_kv_heads=2,
      head_dim=32, mlp_dim=512, max_seq_len=128, tie_embeddings=True, dtype="float32",
      init_from=""))
  c.data = ml_collections.ConfigDict(dict(eval_batches=2, bucket_boundaries=()))
  c.online_eval = ml_collections.ConfigDict(dict(
      num_dialogues=40, opponent="examples.guess_city.parties:Answerer", seed=2000,
      batch_size=40, max_turns=20, temperature=0.0, max_new_tokens=16))
  c.selection.metric = "return"
  c.train.update(steps=300, batch_size=16, log_every=25, eval_every=100, checkpoint_every=100)
  c.optim.update(learning_rate=3e-3, warmup_steps=20, weight_decay=0.01)
  return c
