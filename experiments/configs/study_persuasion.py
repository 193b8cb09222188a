"""A human study of Persuasion for Good: a person plays the persuadee against persuaders.

    python -m experiments.human_study --config=experiments/configs/study_persuasion.py \
        --workdir=runs/study_persuasion

`make run` trains no persuader; the arms are the workdirs of
experiments/configs/collapse_persuasion_quick.py's commands (runs/p4g: the BC persuader every
arm starts from, and the `single` and `cotrain` GRPO arms at seed 0), played as their
evaluations play them (greedy, 48 tokens, 24 utterances), and the fixed `ask` persuader
(cotraining/persuader_probes.py) as a scripted baseline. The scenarios are personas of the
held-out split (StudySpec env_options: "eval"); the person ends the dialogue by stating a
donation of their $2 (0 to 2).
"""

import ml_collections

from experiments.configs import collapse_persuasion_quick
from workflows.study import config as study_config

ROOT = collapse_persuasion_quick.ROOT
ARMS = {
    "bc": f"{ROOT}/persuader_bc",
    "single": f"{ROOT}/single_s0",
    "cotrain": f"{ROOT}/cotrain_s0",
    "ask": "cotraining.persuader_probes:Ask",
}


def get_config() -> ml_collections.ConfigDict:
  return study_config.make(
      "persuasion", ARMS, max_turns=24,
      survey=study_config.SURVEY + (study_config.INTENDED_DONATION,),
      agent_options={"temperature": 0.0, "max_new_tokens": 48},
      scenario_seed=1000, num_scenarios=10, participants_per_arm=10, seed=1000)
