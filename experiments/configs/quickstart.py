"""`make run`: the end-to-end pipeline sized for 2 CPU cores (about 15 minutes)."""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0

  config.airdialogue = ml_collections.ConfigDict()
  config.airdialogue.train_dialogues = 3000
  config.airdialogue.eval_dialogues = 500
  config.airdialogue.kb_size = 30
  # Held-out scenarios come from a different seed than the training corpus.
  config.airdialogue.train_seed = 0
  config.airdialogue.eval_seed = 1

  config.tokenizer = ml_collections.ConfigDict()
  config.tokenizer.vocab_size = 2048

  config.mdp = ml_collections.ConfigDict()
  config.mdp.roles = ("agent", "customer")
  config.mdp.max_length = 1024
  return config
