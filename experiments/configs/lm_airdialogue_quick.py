"""The AirDialogue dialogue LM sized for 2 CPU cores: the trunk every quick AirDialogue run
starts from (config.model.init_from), trained on rows streamed from the generator.

    make run  # corpora and tokenizer in runs/quickstart; this is its first training stage
    python -m experiments.train --config=experiments/configs/lm_airdialogue_quick.py \
        --workdir=runs/lm_airdialogue_quick

The model is bc_airdialogue_quick.py's (so BC, ILQL and the customer load it
as is); the task streams agent views, customer views, CALM-style scenes,
repeated runs and name-retrieval drills (domains/airdialogue/lm_task.py).
Its evaluation probes the two skills the later runs need: the agent's
closing-turn name and the customer stating its own name, each decoded
greedily from true held-out histories.
"""

import ml_collections

from experiments.configs import bc_airdialogue_quick


def get_config() -> ml_collections.ConfigDict:
  c = bc_airdialogue_quick.get_config()
  c.task.update(role="lm", max_length=512)
  with c.task.unlocked():
    # One kind per step, cycled (domains/airdialogue/lm_task.py). Measured (docs/RESULTS.md): with
    # "names" the closing turn copies half the names after 1,000 updates; with scenes in
    # their place ("agent,scene,repeat,customer,scene,repeat") none before 3,750.
    c.task.mixture = "agent,names,repeat,customer,scene,names"
    c.task.kb_size = 30
  c.online_eval.num_dialogues = 0  # The probes below measure what the LM is for.
  c.selection.metric = ""  # A pretrained trunk is used at its last step.
  c.skill_probes.num_dialogues = 64
  c.train.update(steps=2000, eval_every=250, checkpoint_every=250)
  c.optim.update(learning_rate=3e-3, warmup_steps=50)
  return c
