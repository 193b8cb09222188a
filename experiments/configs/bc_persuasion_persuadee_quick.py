"""The Persuasion for Good persuadee simulator, sized for 2 CPU cores, reading its own persona.

    python -m experiments.train --config=experiments/configs/bc_persuasion_persuadee_quick.py \
        --workdir=runs/bc_persuasion_persuadee_quick [--config.seed=1]
    python -m experiments.offline_eval --workdir=runs/bc_persuasion_persuadee_quick

bc_persuasion_quick.py's model and budget, but the persuadee sees its persona
(`task.context="text"`: Big-Five, morality, demographics as `key=value` text,
~150 tokens), so simulators built from it differ by persona, as the people of
the corpus did, and what it donates can depend on who it is. Windows of 1,024
tokens cut ~7% of the dialogues (domains/persuasion/task.py's stats.json counts
them). Simulators trained with other seeds make the held-out panel of online
RL (grpo_persuasion_quick.py, docs/RESULTS.md).
"""

import ml_collections

from experiments.configs import bc_persuasion_quick


def get_config() -> ml_collections.ConfigDict:
  c = bc_persuasion_quick.get_config()
  c.task.role = "persuadee"
  c.task.context = "text"
  c.task.max_length = 1024
  return c
