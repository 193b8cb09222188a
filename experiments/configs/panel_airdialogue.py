"""The AirDialogue customer panel: simulators to train agents against, and those held out.

    c.rl.panel = panel_airdialogue.get_config()  # in a cotraining config (cotraining/launch.py)

Learned customers differ in seed, data subset, size and decoding (temperature,
VS); each is a workdir of bc_airdialogue_customer[_quick].py trained under
ROOT (the names say how). No checkpoint is on both sides. Every scripted
customer style (`scripted:*`, any phrasing family) is held out, and so is an
instruction-tuned LLM behind a loopback OpenAI-compatible endpoint
(experiments/serve.py), asked for k candidates (cotraining/vs_llm.py).
Training against a held-out member is refused (cotraining/panels.py).
"""

import ml_collections

ROOT = "runs/panel_airdialogue"
SERVED_LLM = "vs_llm:k=5,base_url=http://127.0.0.1:8000/v1,model=smollm2-135m-instruct"


def get_config() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      training=[
          dict(spec=f"{ROOT}/customer_seed0", temperature=1.0),
          dict(spec=f"{ROOT}/customer_seed1", temperature=1.0),
          dict(spec=f"{ROOT}/customer_half_data", temperature=1.0),
          dict(spec=f"{ROOT}/customer_seed0", temperature=0.3),  # Decoding: seed0, sharper.
      ],
      held_out=[
          dict(spec=f"{ROOT}/customer_seed2", temperature=1.0),
          dict(spec=f"{ROOT}/customer_other_half_data", temperature=1.0),
          dict(spec=f"{ROOT}/customer_small", temperature=1.0),
          dict(spec=f"pick:k=5,pick=uniform:{ROOT}/customer_seed3", temperature=1.0),
          dict(spec="scripted:*"),
          dict(spec=SERVED_LLM, temperature=0.7),
      ],
  ))
