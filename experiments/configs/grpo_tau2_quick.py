"""GRPO of the τ²-bench retail agent from its BC agent, against the scripted customer, sized for
2 CPU cores.

    python -m experiments.train --config=experiments/configs/bc_tau2_quick.py \
        --workdir=runs/tau2_quick/bc_agent
    python -m experiments.train --config=experiments/configs/grpo_tau2_quick.py \
        --workdir=runs/tau2_quick/grpo_agent [--config.train.steps=N]
    python -m experiments.evaluate_env --env=tau2_retail --role=agent \
        --party=runs/tau2_quick/grpo_agent --opponent=tau2_customer:scripted --split=test \
        --num_dialogues=40 --max_turns=200 --max_new_tokens=128 --batch_size=40 \
        --workdir=runs/tau2_quick/eval_test --tag=grpo_agent

bc_tau2_quick.py's task, model and window, started from its BC agent (`model.init_from`), which
is also the frozen KL reference. Rollouts play generated tasks only (split "generated", task i
of seed `rl.scenario_seed` + rollout index, from 100000: apart from the corpus seeds 0 and 1
and the selection seed 2000), never a real τ² task; tool calls and results are turns of the
rollout (the tool's turns carry no action). The reward is the environment's τ² reward
(db x communicate on a proper ending, else 0). Each rollout batch is 4 tasks x 4 rollouts, one
pass of 2 minibatches of 8, so checkpoints every 2 steps fall on a rollout boundary (exact
resume). GRPO settings as docs/METHODS.md's (clip 0.2 / 0.28, k3 KL 0.005, temperature 0.7).
Every 20 steps the agent plays 16 generated validation tasks (seed 2000) greedily, as BC's
selection did; "return" (their mean τ² reward) selects the checkpoint. A rollout batch of 16
dialogues of up to 200 turns dominates the cost (about 10 s per update on 2 CPU cores beside
another job), so the default is a short run.
"""

import ml_collections

from experiments.configs import bc_tau2_quick


def get_config() -> ml_collections.ConfigDict:
  c = bc_tau2_quick.get_config()
  c.algorithm = ml_collections.ConfigDict(dict(name="grpo", eps_low=0.2, eps_high=0.28,
                                               kl_coef=0.005))
  c.model.init_from = f"{bc_tau2_quick.ROOT}/bc_agent"
  c.rl = ml_collections.ConfigDict(dict(
      env="tau2_retail",
      split="generated",  # Never a real task: those 40 "test" ones are the reported evaluation.
      data_dir="",  # '' = $TAU2_RETAIL_DATA_DIR.
      opponent="tau2_customer:scripted",
      opponent_temperature=1.0,  # Unused by the scripted customer; a learned one samples.
      temperature=0.7,
      max_new_tokens=bc_tau2_quick.MAX_NEW_TOKENS,
      max_turns=200,  # Tool turns count (domains/tau2_retail/environment.py).
      scenarios=4,
      group_size=4,
      epochs=1,
      scenario_seed=100_000,
      seq_len=bc_tau2_quick.MAX_LENGTH,  # = model.max_seq_len.
  ))
  c.train.update(steps=60, batch_size=8, log_every=1, eval_every=20, checkpoint_every=2,
                 eval_at_start=False)
  c.optim.update(learning_rate=1e-4, warmup_steps=0, weight_decay=0.0, grad_clip_norm=1.0)
  c.online_eval.update(split="generated", seed=2000, temperature=0.0)
  c.selection.metric = "return"
  return c
