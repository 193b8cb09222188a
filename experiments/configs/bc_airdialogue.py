"""BC of the AirDialogue agent (the policy), sized for one accelerator: GPT-2 small.

    make run  # AirDialogue corpora and tokenizer in runs/quickstart
    python -m experiments.train --config=experiments/configs/bc_airdialogue.py \
        --workdir=runs/bc_airdialogue [--config.task.context=text]
    python -m experiments.offline_eval --workdir=runs/bc_airdialogue

The agent reads its flight table as CALM's structured prefix (32 rows of
learned field embeddings, domains/airdialogue/task.py); `context=text`
spells it out in ~575 tokens instead. To start from a checkpoint
(ilql_dialogue/init_from.py): --config.model.init_from=WORKDIR (a run on the same
tokenizer, e.g. the pipeline's dialogue LM), or a Hugging Face directory / .gguf
file, whose architecture replaces the one below and whose tokenizer the data is
re-tokenized with: --config.model.init_from=DIR --config.task.tokenizer=DIR.
"""

import ml_collections

from workflows.base_config import base_config


def online_eval_section(**overrides) -> ml_collections.ConfigDict:
  """Online success at each evaluation (workflows/train.py:online_eval), on
  VALIDATION scenarios: seed 2000, never the reported test seed (1000,
  airdialogue_env.DEFAULT_SEED) nor the corpus seeds (0, 1)."""
  return ml_collections.ConfigDict(dict(dict(
      num_dialogues=128,  # 0 = off.
      # The training population: each scenario's customer of a style drawn from its seed, in
      # the training families. The volunteer alone rewards agents that never ask.
      opponent="scripted:any/train",
      seed=2000,
      batch_size=64,
      max_turns=40,
      betas=(0.0,),  # ILQL sweeps value guidance; "return" is the best of them.
      temperature=0.0,  # Greedy: the agent is selected acting as it will be measured.
      max_new_tokens=64,
      held_out=(),  # Opponents also played and logged as held_out/NAME/..., never selected on.
  ), **overrides))


def get_config() -> ml_collections.ConfigDict:
  c = base_config()
  c.algorithm = ml_collections.ConfigDict(dict(name="bc"))
  c.task = ml_collections.ConfigDict(dict(
      name="airdialogue",
      role="agent",
      context="prefix",  # "prefix" | "text".
      root="runs/quickstart",  # The pipeline's workdir: corpora, tokenizer, datasets.
      max_length=1024,  # Tokens per example; prefix rows do not count.
      tokenizer="",  # "" = the pipeline's BPE; else an HF tokenizer directory.
  ))
  # ModelConfig fields (ilql_dialogue/models/config.py). vocab_size=0 and the
  # prefix fields are filled in from the task (tasks.configure_model).
  c.model = ml_collections.ConfigDict(dict(
      family="gpt2", vocab_size=0, num_layers=12, d_model=768, num_heads=12, num_kv_heads=12,
      head_dim=64, mlp_dim=3072, max_seq_len=1024, qkv_bias=True, attn_out_bias=True,
      mlp_bias=True, tie_embeddings=True, dtype="bfloat16", param_dtype="float32",
      prefix_field_vocab_sizes=(), prefix_num_rows=0, copy_dim=0, init_from=""))
  c.data = ml_collections.ConfigDict(dict(
      eval_batches=8,  # Held-out batches for the loss logged during training.
      bucket_boundaries=(),  # () = powers of two up to the longest example.
  ))
  c.offline_eval = ml_collections.ConfigDict(dict(
      batch_size=64, max_new_tokens=64, max_dialogues=0, max_batches=0))
  c.online_eval = online_eval_section()
  # workflows/skill_probes.py: greedy closing-turn / name-turn decodings of held-out
  # dialogues at every evaluation (0 = off).
  c.skill_probes = ml_collections.ConfigDict(dict(num_dialogues=0, batch_size=32,
                                                  max_new_tokens=48))
  c.selection.metric = "return"  # Keep the checkpoint with the best online success.
  c.train.steps = 20_000
  c.train.batch_size = 64
  c.train.log_every = 100
  c.train.eval_every = 1000
  c.train.checkpoint_every = 2000
  c.optim.learning_rate = 1e-4
  c.optim.warmup_steps = 500
  return c
