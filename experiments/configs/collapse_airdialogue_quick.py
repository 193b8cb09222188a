"""The simulator-collapse comparison on AirDialogue, one arm per variant, sized for 2 CPU cores.

    make run  # the BC agent in runs/quickstart; learned customers: bc_airdialogue_customer_quick.py
    python -m experiments.train \
        --config=experiments/configs/collapse_airdialogue_quick.py:ARM \
        --workdir=runs/collapse/ARM_s0 --config.seed=0 \
        --config.simulator=runs/panel_airdialogue/customer_seed0

Every arm starts from the same BC agent (also its KL reference) and gets the
same budget: `train.steps` updates, each from 8 scenarios x 4 rollouts, the
GRPO settings of grpo_airdialogue_quick.py. Only who plays the customer differs:

    single      the training simulator, frozen, sampled at temperature 0.3 (the
                usual practice the paper argues against);
    temperature the same simulator, frozen, sampled at temperature 1.0: it
                differs from `single` in temperature only. It plays through
                the k-sample picker (k = 5 replies per turn, one picked
                uniformly), whose pick is one ordinary sample in distribution;
                kept so that the arm's rollouts stay those docs/RESULTS.md reports;
    cotrain     Co-Training: the simulator starts from the same checkpoint and is
                trained alongside by GRPO on its own turns with the curriculum
                reward and a KL to itself (cotraining/cotrain.py);
    population  Population Co-Training: cotrain plus a FIFO pool of its saved
                checkpoints, one drawn per rollout batch (cotraining/population.py).
    mixed       a fixed population that speaks in many ways: every scripted style,
                each row in a training phrasing family, and the training simulator;
                one member per rollout batch, every member once per round. Its
                panel holds out the learned customers named by `held_out` and the
                people-like customers (`people:*`), whose wording no member speaks.

`simulator` is one reference: it sets the opponent, the picker's, the
co-trained simulator's start and the panel's one training member. Checkpoints
are selected greedily on validation scenarios against that frozen simulator,
never against a held-out one: `rl.panel` holds out every scripted style and
the learned customers named by `held_out` (refused for training and
selection at start-up, cotraining/panels.py); a tuple on the command line
replaces them: --config.rl.panel.held_out="('runs/c2', 'runs/c3', 'scripted:*')".
The held-out table comes from experiments.compare_agents against those members.
"""

import ml_collections

from experiments.configs import cotrain_airdialogue_quick, grpo_airdialogue_quick

ARMS = ("single", "temperature", "cotrain", "population", "mixed")
# What tables call an arm whose name says less than what it is.
LABELS = {"temperature": "temperature 1.0"}
SIMULATOR = "runs/panel_airdialogue/customer_seed0"
HELD_OUT = ("runs/panel_airdialogue/customer_seed2", "runs/panel_airdialogue/customer_small")
SINGLE_TEMPERATURE = 0.3  # "Frozen, low-temperature": the paper's single-simulator baseline.
PICK_SPEC = "pick:k=5,pick=uniform:"
# The mixed arm's scripted members: each style, every row in a training phrasing family.
MIXED_SCRIPTED = tuple(f"scripted:{style}/train" for style in
                       ("volunteer", "answer_only", "late_reveal", "terse", "chatty"))


def get_config(arm: str = "single") -> ml_collections.ConfigDict:
  if arm not in ARMS:
    raise ValueError(f"collapse_airdialogue_quick: arm {arm!r}; known: {ARMS}")
  simulator = ml_collections.FieldReference(SIMULATOR)
  if arm in ("cotrain", "population"):
    c = cotrain_airdialogue_quick.get_config("population" if arm == "population" else "")
    c.rl.cotrain.simulator_init_from = simulator
  else:
    c = grpo_airdialogue_quick.get_config()
  c.simulator = simulator
  del c.rl["opponent"], c.online_eval["opponent"]  # Unlink grpo's one shared opponent reference.
  c.rl.opponent = PICK_SPEC + simulator if arm == "temperature" else simulator
  c.rl.opponent_temperature = SINGLE_TEMPERATURE if arm == "single" else 1.0
  # Selection plays the frozen training simulator at its own sampling; never a held-out one.
  c.online_eval.opponent = simulator
  c.selection.metric = "return"
  c.rl.panel = ml_collections.ConfigDict(dict(training=simulator,
                                              held_out=HELD_OUT + ("scripted:*",)))
  if arm == "mixed":  # A tuple holds no reference: a new simulator is set in members too.
    members = MIXED_SCRIPTED + (SIMULATOR,)
    c.rl.population = ml_collections.ConfigDict(dict(enabled=True, members=members))
    c.rl.panel = ml_collections.ConfigDict(dict(training=members,
                                                held_out=HELD_OUT + ("people:*",)))
  return c
