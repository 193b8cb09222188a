"""Co-Training of the AirDialogue agent and customer (docs/METHODS.md, Online RL and Co-Training), sized for 2 CPU cores.

    make run  # corpora, tokenizer, datasets, the BC agent and the BC customer in runs/quickstart
    python -m experiments.train \
        --config=experiments/configs/cotrain_airdialogue_quick.py[:population] \
        --workdir=runs/cotrain_airdialogue_quick

grpo_airdialogue_quick.py with the customer trained too (cotraining/cotrain.py):
the agent starts from the pipeline's BC agent, the customer from its BC
customer (each also its own frozen KL reference), and every rollout batch of
8 scenarios x 4 rollouts trains both with GRPO on their own turns. The
customer's reward is the curriculum reward exp(-(Var - 0.25)^2 / 0.02) of the
agent's group successes, baselined over the batch; its KL weight is the
agent's (0.005). The scripted style of `rl.opponent` is no longer played; it
remains the online evaluation's (and selection's) opponent.

`:population` is Population Co-Training (cotraining/population.py): the
customer is saved into a FIFO pool of up to 10 checkpoints every 16 steps
(under the workdir, kept across resume), and before each rollout batch a
member drawn from the seeded stream plays the customer.
"""

import ml_collections

from experiments.configs import grpo_airdialogue_quick

VARIANTS = ("", "population")


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  if variant not in VARIANTS:
    raise ValueError(f"cotrain_airdialogue_quick: variant {variant!r}; known: {VARIANTS}")
  c = grpo_airdialogue_quick.get_config()
  c.rl.cotrain = ml_collections.ConfigDict(dict(
      enabled=True,
      simulator_reward="curriculum",
      kl_coef=0.005,
      temperature=0.7,  # The paper's sampling for both sides.
      simulator_init_from="runs/quickstart/bc_customer",
  ))
  c.rl.population = ml_collections.ConfigDict(dict(
      enabled=variant == "population",
      capacity=10,
      add_every=16,
  ))
  return c
