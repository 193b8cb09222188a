"""The Persuasion for Good persuadee panel: simulators to train persuaders against, and those
held out.

    c.rl.panel = panel_persuasion.get_config()  # in a cotraining config (cotraining/launch.py)

Learned persuadees (bc_persuasion_persuadee[_quick].py workdirs under ROOT)
differ in seed (--config.seed), data subset (--config.data.train_part=0/2 for
half_data, 1/2 for other_half_data: disjoint halves of the training
dialogues), size and decoding; no checkpoint is on both
sides. An instruction-tuned LLM behind a loopback OpenAI-compatible endpoint
(experiments/serve.py, cotraining/vs_llm.py) is held out. Training against a
held-out member is refused (cotraining/panels.py).
"""

import ml_collections

from experiments.configs import panel_airdialogue

ROOT = "runs/panel_persuasion"


def get_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      training=[
          dict(spec=f"{ROOT}/persuadee_seed0", temperature=1.0),
          dict(spec=f"{ROOT}/persuadee_seed1", temperature=1.0),
          dict(spec=f"{ROOT}/persuadee_half_data", temperature=1.0),
      ],
      held_out=[
          dict(spec=f"{ROOT}/persuadee_seed2", temperature=1.0),
          dict(spec=f"{ROOT}/persuadee_other_half_data", temperature=1.0),
          dict(spec=f"{ROOT}/persuadee_small", temperature=0.7),
          dict(spec=panel_airdialogue.SERVED_LLM, temperature=0.7),
      ],
  ))
