"""The AirDialogue agent baselines ILQL is compared with, on ILQL's task, model and data.

    python -m experiments.train --config=experiments/configs/baselines_airdialogue.py:filtered_bc \
        --workdir=runs/filtered_bc_airdialogue
    python -m experiments.train --config=experiments/configs/baselines_airdialogue.py:mc_value \
        --workdir=runs/mc_airdialogue
    # Sized for 2 CPU cores (bc_airdialogue_quick.py's model): add `_quick`,
    # e.g. --config=experiments/configs/baselines_airdialogue.py:filtered_bc_quick

filtered_bc: BC on the top half of the dialogues by return (the corpus
succeeds ~64% of the time, so every kept dialogue is a success).
mc_value: Q and V regressed to the Monte-Carlo return, decoded with value
guidance like ILQL (ilql_dialogue/baselines.py).
"""

import ml_collections

from experiments.configs import bc_airdialogue, bc_airdialogue_quick, ilql_airdialogue_quick

BASELINES = ("filtered_bc", "mc_value", "filtered_bc_quick", "mc_value_quick")


def _with_algorithm(c: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
  if name == "filtered_bc":
    c.algorithm = ml_collections.ConfigDict(dict(name="filtered_bc", top_fraction=0.5))
  else:
    c.algorithm = ml_collections.ConfigDict(dict(
        name="mc_value", gamma=0.99, discount="utterance", value_weight=1.0,
        awr_temperature=0.0, action_fraction=0.75))
    c.online_eval.betas = ilql_airdialogue_quick.GUIDANCE_BETAS
  return c


def get_config(baseline: str = "filtered_bc") -> ml_collections.ConfigDict:
  if baseline not in BASELINES:
    raise ValueError(f"baselines_airdialogue.py:{baseline}: known {BASELINES}")
  name, quick = baseline.removesuffix("_quick"), baseline.endswith("_quick")
  base = bc_airdialogue_quick if quick else bc_airdialogue
  return _with_algorithm(base.get_config(), name)
