"""BC of the τ²-bench retail agent sized for 2 CPU cores: a tiny Llama on the self-play corpus.

    python -m experiments.train --config=experiments/configs/bc_tau2_quick.py \
        --workdir=runs/tau2_quick/bc_agent
    python -m experiments.evaluate_env --env=tau2_retail --role=agent \
        --party=runs/tau2_quick/bc_agent --opponent=tau2_customer:scripted --split=test \
        --num_dialogues=40 --max_turns=200 --max_new_tokens=128 --workdir=runs/tau2_quick/eval

The first run writes under runs/tau2_quick the corpus (generated tasks x every scripted skill,
domains/tau2_retail/corpus.py; needs $TAU2_RETAIL_DATA_DIR), a BPE and the role's datasets.
The model reads tool results shortened to what the policy acts on (domains/tau2_retail/
lm_view.py), in its datasets and when it plays; the environment's reward reads the full
records. The agent's view of a dialogue is 812 tokens at the median, 1,883 at p99 (2,145 and
5,456 with the full records; docs/RESULTS.md 27), so the window is 2,048 tokens, in buckets
of 1,024, 1,536 and 2,048; the agent reads no context (the policy summary is the
same in every row). One evaluation, at the last step, on 16 generated validation tasks (seed
2000): the kept checkpoint is the last one.
"""

import ml_collections

from experiments.configs import bc_airdialogue, bc_airdialogue_quick
from workflows.base_config import base_config

ROOT = "runs/tau2_quick"  # Corpus, tokenizer and datasets of every tau2 quick run.
MAX_LENGTH = 2048
MAX_NEW_TOKENS = 128  # Agent turns: p99 92 tokens, longest 158 (a two-item confirmation).


def task_section(role: str, context: str) -> ml_collections.ConfigDict:
  """config.task for the retail corpus (domains/tau2_retail/task.py)."""
  return ml_collections.ConfigDict(dict(
      name="tau2_retail", role=role, context=context, root=ROOT, max_length=MAX_LENGTH,
      tokenizer="",
      train_tasks=250,  # Generated tasks (seed 0), each played by every skill: 1,000 dialogues.
      eval_tasks=25,  # Seed 1.
      skills=(),  # () = every scripted agent (oracle, no_auth, no_confirm, wrong_item).
      vocab_size=4096,
      data_dir="",  # '' = $TAU2_RETAIL_DATA_DIR.
  ))


def quick_config(role: str, context: str, opponent: str) -> ml_collections.ConfigDict:
  """A tiny Llama trained on one role of the retail corpus, played once at the end."""
  c = base_config()
  c.algorithm = ml_collections.ConfigDict(dict(name="bc"))
  c.task = task_section(role, context)
  c.model = ml_collections.ConfigDict(dict(
      vocab_size=0, param_dtype="float32", prefix_field_vocab_sizes=(), prefix_num_rows=0,
      copy_dim=0, init_from=""))
  bc_airdialogue_quick.tiny_model(c, max_seq_len=MAX_LENGTH)
  c.data = ml_collections.ConfigDict(dict(eval_batches=4, bucket_boundaries=(1024, 1536, 2048)))
  c.offline_eval = ml_collections.ConfigDict(dict(
      batch_size=16, max_new_tokens=MAX_NEW_TOKENS, max_dialogues=64, max_batches=0))
  c.online_eval = bc_airdialogue.online_eval_section(
      num_dialogues=16, opponent=opponent, split="generated", batch_size=16, max_turns=200,
      max_new_tokens=MAX_NEW_TOKENS)
  c.selection.metric = "return"
  c.train.update(steps=300, batch_size=8, log_every=25, eval_every=300, checkpoint_every=300,
                 eval_at_start=False)
  c.optim.update(learning_rate=3e-3, warmup_steps=30, weight_decay=0.01)
  return c


def get_config() -> ml_collections.ConfigDict:
  return quick_config("agent", "none", "tau2_customer:scripted")
