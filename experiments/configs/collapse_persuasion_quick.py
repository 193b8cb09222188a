"""The simulator-collapse comparison on Persuasion for Good, sized for 2 CPU cores
(docs/METHODS.md, Online RL and Co-Training).

    python -m experiments.train --config=experiments/configs/bc_persuasion_quick.py \
        --workdir=runs/p4g/persuader_bc --config.task.root=runs/p4g
    python -m experiments.train --config=experiments/configs/bc_persuasion_persuadee_quick.py \
        --workdir=runs/p4g/persuadee_sS --config.task.root=runs/p4g --config.seed=S  # S = 0, 1
    python -m experiments.train --config=experiments/configs/bc_persuasion_persuadee_quick.py \
        --workdir=runs/p4g/persuadee_half1 --config.task.root=runs/p4g --config.seed=3 \
        --config.data.train_part=1/2
    python -m experiments.train --config=experiments/configs/collapse_persuasion_quick.py:ARM \
        --workdir=runs/p4g/ARM_s0 --config.seed=0

Every arm starts from the same BC persuader (also its KL reference) and gets
grpo_persuasion_quick.py's GRPO settings and the same budget, 100 updates (800
dialogues; half grpo_persuasion_quick's, so that 4 arms x 3 seeds stay affordable
on 2 CPU cores), evaluated at 0, 50 and 100; only who plays the persuadee differs, as in
collapse_airdialogue_quick.py:

    single      the training persuadee (seed 0), frozen, sampled at temperature 0.3;
    temperature the same persuadee at T = 1 (through the k-sample picker, k = 5,
                uniform pick: in distribution one ordinary sample, so this arm differs
                from `single` only in temperature; not Verbalized Sampling);
    cotrain     Co-Training: the persuadee starts from the same checkpoint and is
                trained alongside by GRPO on its own turns with the zero-sum reward
                1 - donation / 2 and a KL to itself;
    population  Population Co-Training: cotrain plus a FIFO pool of its saved checkpoints.

The persuadee trained with seed 1 and the one trained on half the dialogues
(a disjoint hash half, mdp_dataset.dialogue_part, seed 3) are held out: refused for training
and selection (rl.panel), and played at every evaluation on the same validation
personas as selection (online_eval.held_out: the held_out/NAME/return curves;
grpo_persuasion_quick.py: never a persona of the test split). Checkpoints
are selected against the frozen training persuadee only. Every evaluation
opponent samples at T = 1 (online_eval.opponent_temperature) in every arm, the
single arm's T = 0.3 training persuadee included: at T = 0.3 it states $0 in
almost every dialogue (the BC start's return 0.016 against 0.205 at T = 1).
"""

import ml_collections

from experiments.configs import grpo_persuasion_quick

ARMS = ("single", "temperature", "cotrain", "population")
ROOT = "runs/p4g"
SIMULATOR = ROOT + "/persuadee_s0"
HELD_OUT = (ROOT + "/persuadee_s1", ROOT + "/persuadee_half1")
SINGLE_TEMPERATURE = 0.3  # "Frozen, low-temperature": the paper's single-simulator baseline.
PICK_SPEC = "pick:k=5,pick=uniform:"


def get_config(arm: str = "single") -> ml_collections.ConfigDict:
  if arm not in ARMS:
    raise ValueError(f"collapse_persuasion_quick: arm {arm!r}; known: {ARMS}")
  c = grpo_persuasion_quick.get_config()
  c.task.root = ROOT
  c.model.init_from = ROOT + "/persuader_bc"
  c.train.update(steps=100, eval_every=50)
  simulator = ml_collections.FieldReference(SIMULATOR)
  c.simulator = simulator
  del c.rl["opponent"], c.online_eval["opponent"]  # Unlink grpo's one shared opponent reference.
  c.rl.opponent = PICK_SPEC + simulator if arm == "temperature" else simulator
  c.rl.opponent_temperature = SINGLE_TEMPERATURE if arm == "single" else 1.0
  c.online_eval.opponent = simulator
  c.online_eval.held_out = HELD_OUT
  c.rl.panel = ml_collections.ConfigDict(dict(training=simulator, held_out=HELD_OUT))
  if arm in ("cotrain", "population"):
    c.rl.cotrain = ml_collections.ConfigDict(dict(
        enabled=True, simulator_reward="zero_sum", kl_coef=0.005, temperature=0.7,
        simulator_init_from=simulator))
    c.rl.population = ml_collections.ConfigDict(dict(
        enabled=arm == "population", capacity=10, add_every=16))
  return c
