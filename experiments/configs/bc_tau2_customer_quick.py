"""BC of the τ²-bench retail customer (the learned user simulator) sized for 2 CPU cores.

    python -m experiments.train --config=experiments/configs/bc_tau2_customer_quick.py \
        --workdir=runs/tau2_quick/bc_customer
    python -m experiments.evaluate_env --env=tau2_retail --role=customer \
        --party=runs/tau2_quick/bc_customer --opponent=tau2_agent:oracle --split=test \
        --num_dialogues=40 --max_turns=200 --max_new_tokens=64 --workdir=runs/tau2_quick/eval

The corpus and tokenizer of bc_tau2_quick.py, its model with a 1,024-token window. The customer
reads its profile (identity, wishes, what it does not know; contexts.py) as text, and the
agent's words only: no tool turn (lm_view.py), as τ²'s user sees none, so its rows are short
(893 tokens at most, profile included; docs/RESULTS.md 27); its turns are 58 tokens at most.
Played once at the end against the oracle agent on 16 generated validation tasks; its "return"
is the oracle's reward.
"""

import ml_collections

from experiments.configs import bc_airdialogue_quick, bc_tau2_quick

MAX_LENGTH = 1024
MAX_NEW_TOKENS = 64


def get_config() -> ml_collections.ConfigDict:
  c = bc_tau2_quick.quick_config("customer", "text", "tau2_agent:oracle")
  c.task.max_length = MAX_LENGTH
  bc_airdialogue_quick.tiny_model(c, max_seq_len=MAX_LENGTH)
  # A copy head: the customer states the email, name and zip of its profile by pointing at
  # them (the oracle finds its account in 0.73 of the test tasks, 0.18 without; RESULTS 28).
  c.model.copy_dim = 32
  c.data.bucket_boundaries = (512, 1024)
  c.offline_eval.max_new_tokens = MAX_NEW_TOKENS
  c.online_eval.max_new_tokens = MAX_NEW_TOKENS
  return c
