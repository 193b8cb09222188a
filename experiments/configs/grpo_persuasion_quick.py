"""GRPO of the Persuasion for Good persuader against a BC persuadee, sized for 2 CPU cores.

    python -m experiments.train --config=experiments/configs/bc_persuasion_quick.py \
        --workdir=runs/bc_persuasion_quick
    python -m experiments.train --config=experiments/configs/bc_persuasion_persuadee_quick.py \
        --workdir=runs/bc_persuasion_persuadee_quick
    python -m experiments.train --config=experiments/configs/grpo_persuasion_quick.py \
        --workdir=runs/grpo_persuasion_quick [--config.rl.opponent=DIR]

The model, task and layout of bc_persuasion_quick.py, started from its BC
persuader (`model.init_from`), which also becomes the frozen KL reference.
Scenarios are the personas of the held-in dialogues (domains/
persuasion/environment.py, seeds 100000 + rollout index); the persuader opens, the
persuadee workdir answers and ends by stating its donation
(`[donate] X [/donate]`, which its BC task trains), and the reward is that
donation / 2. Each rollout batch is 4 scenarios x 4 rollouts, one pass of 2
minibatches, so a checkpoint every 20 steps is at a rollout boundary (exact
resume). The GRPO settings are docs/METHODS.md's (Online RL and Co-Training) (clip 0.2 / 0.28, k3 KL
0.005, temperature 0.7, group rollouts). Every 20 steps the persuader plays 32
validation personas (split "validation", seed 2000: held-in dialogues none of
whose people or personas is in the test split "eval", which only the reported
evaluation plays, experiments/evaluate_env.py) greedily against the same
persuadee: "return" is the mean donation / 2 (no statement: 0), with the
stated / unparsable / missing counts, and selects the checkpoint.
"""

import ml_collections

from experiments.configs import bc_persuasion_quick


def get_config() -> ml_collections.ConfigDict:
  c = bc_persuasion_quick.get_config()
  c.algorithm = ml_collections.ConfigDict(dict(name="grpo", eps_low=0.2, eps_high=0.28,
                                               kl_coef=0.005))
  c.model.init_from = "runs/bc_persuasion_quick"
  c.rl = ml_collections.ConfigDict(dict(
      env="persuasion",
      split="train",  # The held-in dialogues' personas; "eval" = the held-out ones.
      data_dir="",  # The corpus folder; "" = $P4G_DATA_DIR (data_pipelines/persuasion/loader.py).
      no_donation_reward=0.0,  # No readable statement (counted): no commitment obtained.
      opponent="runs/bc_persuasion_persuadee_quick",
      opponent_temperature=1.0,  # The simulator samples as it was trained.
      temperature=0.7,
      max_new_tokens=48,
      max_turns=24,  # 95% of the real dialogues have <= 23 utterances.
      scenarios=4,
      group_size=4,
      epochs=1,
      scenario_seed=100_000,
      seq_len=1024,  # = model.max_seq_len: the longest dialogue a party can hold.
  ))
  c.train.update(steps=200, batch_size=8, log_every=2, eval_every=20, checkpoint_every=20,
                 eval_at_start=True)
  c.optim.update(learning_rate=1e-4, warmup_steps=0, weight_decay=0.0, grad_clip_norm=1.0)
  c.online_eval = ml_collections.ConfigDict(dict(
      # Selection never plays a test persona: "validation" is disjoint from "eval" in people
      # and personas (domains/persuasion/environment.py persona_disjoint).
      num_dialogues=32, opponent=c.rl.get_ref("opponent"), split="validation", seed=2000,
      opponent_temperature=1.0,  # Every evaluation opponent, whatever rl.opponent_temperature.
      batch_size=16, max_turns=24, temperature=0.0, max_new_tokens=48,
      held_out=()))  # Held-out persuadees, logged as held_out/NAME/return; never selected on.
  c.selection.metric = "return"
  return c
