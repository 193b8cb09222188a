"""A human study of AirDialogue: a person plays the customer against `make run`'s agents.

    python -m experiments.human_study --config=experiments/configs/study_airdialogue.py \
        --workdir=runs/study_airdialogue

The arms are the agents `make run` trains in runs/quickstart, played as its evaluation plays
them (experiments/configs/quickstart.py, workflows/quickstart.evaluate_pair): greedy, 64
tokens per utterance, 40 utterances at most; CALM as "CALM + intent tracker (rule solver)"
(`calm:n=1:`, its config's planning.action=head); ILQL at the beta its checkpoint was
selected at; and the scripted oracle agent as a ceiling. Scenarios and row seeds are those of
the reported evaluation (seed 1000): a dialogue replays what `experiments.evaluate_env
--env=airdialogue --seed=1000` plays on the same scenario.

`:pilot` is the study the bot pilot plays (experiments/human_study_bots.py): the three
learned agents only, 30 scenarios, each scenario once per arm.
"""

import ml_collections

from workflows import compare
from workflows.study import config as study_config

RUNS = "runs/quickstart"
ILQL = f"{RUNS}/ilql_agent"
ARMS = {
    "calm": f"calm:n=1:{RUNS}/calm_agent",
    "bc": f"{RUNS}/bc_agent",
    "ilql": ILQL,
    "oracle": "scripted_agent:oracle",
}


PILOT_ARMS = ("calm", "bc", "ilql")


def get_config(variant: str = "") -> ml_collections.ConfigDict:
  if variant not in ("", "pilot"):
    raise ValueError(f"study_airdialogue.py:{variant}: known variants are '' and 'pilot'")
  arms, size = ARMS, 10
  if variant == "pilot":
    arms, size = {name: ARMS[name] for name in PILOT_ARMS}, 30
  return study_config.make(
      "airdialogue", arms, max_turns=40,
      agent_options={"temperature": 0.0, "max_new_tokens": 64, "beta": 0.0},
      arm_options={"ilql": {"beta": compare.selected_beta(ILQL)}},
      scenario_seed=1000, num_scenarios=size, participants_per_arm=size, seed=1000)
