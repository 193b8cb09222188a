"""ILQL of the AirDialogue agent sized for 2 CPU cores (quickstart; its ILQL section also
seeds tests/test_ilql_learning.py).

    make run
    python -m experiments.train --config=experiments/configs/ilql_airdialogue_quick.py \
        --workdir=runs/ilql_airdialogue_quick
    python -m experiments.offline_eval --workdir=runs/ilql_airdialogue_quick

The model, task and data of bc_airdialogue_quick.py, so the two compare step
for step. Targets move fast (polyak_rate 0.02: half-way in ~35 steps)
because a quick run has only a few hundred steps.
"""

import ml_collections

from experiments.configs import bc_airdialogue_quick


# Value-guidance strengths tried at each online evaluation (docs/METHODS.md, ILQL: 1-16), and
# beta = 0, the plain policy: selection must be able to say guidance does not help. Ties go
# to the first, so an unhelpful guidance loses to beta = 0.
GUIDANCE_BETAS = (0.0, 1.0, 4.0, 16.0)


def ilql_section(**overrides) -> ml_collections.ConfigDict:
  """config.algorithm for ILQL: ILQLConfig fields (ilql_dialogue/ilql.py), docs/METHODS.md, ILQL
  values unless overridden."""
  return ml_collections.ConfigDict(dict(dict(
      name="ilql",
      gamma=0.99,
      tau=0.7,
      cql_weight=0.1,
      bc_weight=1.0,
      awac_temperature=0.0,  # > 0: AWAC-weighted BC term.
      awac_max_weight=100.0,
      polyak_rate=0.005,
      discount="utterance",  # gamma once per turn: long turns are not discounted to nothing.
      # Action slots per row, as a share of the window. A row with more actions
      # stops training with `actions_over_budget` > 0 (raise it, up to 1.0).
      action_fraction=1.0,
      num_q_heads=2,
      head_hidden_dim=-1,  # 2 x d_model, the reference's MLP heads; 0 = linear.
      separate_policy=False,
      target_trunk=False,
      detach_q=False,
      detach_v=False,
      cql_normalization="token",  # "utterance": CQL per utterance, not per token.
  ), **overrides))


def get_config() -> ml_collections.ConfigDict:
  c = bc_airdialogue_quick.get_config()
  # Agent rows of the quickstart data are at most 70% actions (runs/quickstart, L384).
  c.algorithm = ilql_section(polyak_rate=0.02, action_fraction=0.75)
  c.online_eval.betas = GUIDANCE_BETAS
  return c
