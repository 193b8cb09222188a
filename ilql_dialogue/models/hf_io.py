"""Hugging Face checkpoints (config.json + *.safetensors) into and out of our trunk.

transformers 5 ships no Flax models, so weights are mapped by hand. The
mapping is strict both ways: every parameter of our model must be filled and
every tensor of the checkpoint must be used, so a renamed or unsupported
weight is an error naming the tensor, not a silently random layer.

Layout differences handled here:
  * GPT-2's Conv1D stores [in, out]; its c_attn is [D, 3 * H * Dh] with all q
    heads, then all k, then all v.
  * Llama/Qwen2 nn.Linear stores [out, in]; q/k/v are separate and grouped
    query head k * G + g uses kv head k.
  * Ours: qkv [L, D, K, G + 2, Dh] (G q heads, k, v per kv head), out
    [L, H, Dh, D], SwiGLU gate/up [L, D, 2, F], everything stacked over layers.
"""

from __future__ import annotations

import pathlib
import shutil
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import safetensors
import safetensors.numpy
from flax import nnx
from flax.nnx import traversals

from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.transformer import Transformer

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
                   "vocab.txt", "chat_template.jinja", "generation_config.json")
_IGNORED_HF_TENSORS = ("attn.bias", "attn.masked_bias")  # GPT-2 causal-mask buffers.


def load_hf(path: str | pathlib.Path, **config_overrides: Any) -> tuple[ModelConfig, Transformer]:
  """Builds our Transformer from a local GPT2LMHeadModel / LlamaForCausalLM / Qwen2ForCausalLM.

  `config_overrides` (e.g. dtype="bfloat16", remat=True) are applied on top
  of the checkpoint's architecture; weights are cast to `param_dtype`.
  """
  import transformers  # Only needed for reading config.json.

  path = pathlib.Path(path)
  if not (path / "config.json").is_file():
    raise FileNotFoundError(f"{path}: no config.json (expected a Hugging Face model directory)")
  hf_config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
  cfg = ModelConfig.from_hf_config(hf_config, **config_overrides)
  tensors = _read_safetensors(path)
  to_ours = gpt2_to_ours if cfg.family == "gpt2" else llama_to_ours
  ours = to_ours(TensorSource(tensors, path), cfg)

  abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(abstract)
  expected = traversals.flatten_mapping(nnx.to_pure_dict(state), sep=".")
  if set(expected) != set(ours):
    raise ValueError(f"{path}: parameter mismatch; missing {sorted(set(expected) - set(ours))}, "
                     f"unexpected {sorted(set(ours) - set(expected))}")
  for name, value in ours.items():
    if tuple(value.shape) != tuple(expected[name].shape):
      raise ValueError(f"{path}: {name} has shape {value.shape} after conversion, "
                       f"model expects {expected[name].shape}")
  pure = traversals.unflatten_mapping(
      {name: jnp.asarray(value, cfg.weight_dtype) for name, value in ours.items()}, sep=".")
  nnx.replace_by_pure_dict(state, pure)
  return cfg, nnx.merge(graphdef, state)


def export_hf(model: Transformer, cfg: ModelConfig, path: str | pathlib.Path,
              tokenizer_dir: str | pathlib.Path | None = None) -> None:
  """Writes config.json + model.safetensors that transformers' AutoModelForCausalLM loads."""
  if cfg.copy_dim:
    raise ValueError(f"export_hf: a model with a copy head (copy_dim={cfg.copy_dim}) has no "
                     "Hugging Face equivalent; its next-token distribution reads the context")
  path = pathlib.Path(path)
  path.mkdir(parents=True, exist_ok=True)
  ours = {name: np.asarray(jax.device_get(value)) for name, value in traversals.flatten_mapping(
      nnx.to_pure_dict(nnx.state(model, nnx.Param)), sep=".").items()}
  to_hf = _gpt2_to_hf if cfg.family == "gpt2" else _llama_to_hf
  tensors = {key: np.ascontiguousarray(value) for key, value in to_hf(ours, cfg).items()}
  hf_config = cfg.to_hf_config()
  hf_config.dtype = cfg.param_dtype
  hf_config.save_pretrained(str(path))
  safetensors.numpy.save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
  if tokenizer_dir is not None:
    _copy_tokenizer(pathlib.Path(tokenizer_dir), path)


class TensorSource:
  """Checkpoint tensors by name; remembers which were used so leftovers are reported."""

  def __init__(self, tensors: dict[str, np.ndarray], path: pathlib.Path):
    self.tensors, self.path, self.used = tensors, path, set()

  def __call__(self, key: str) -> np.ndarray:
    if key not in self.tensors:
      raise KeyError(f"{self.path}: checkpoint has no tensor {key!r}")
    self.used.add(key)
    return self.tensors[key].astype(np.float32)

  def has(self, key: str) -> bool:
    return key in self.tensors

  def stacked(self, template: str, num_layers: int,
              convert: Callable[[np.ndarray], np.ndarray] = lambda x: x) -> np.ndarray:
    return np.stack([convert(self(template.format(i))) for i in range(num_layers)])

  def check_all_used(self) -> None:
    unused = sorted(k for k in self.tensors if k not in self.used
                    and not k.endswith(_IGNORED_HF_TENSORS))
    if unused:
      raise ValueError(f"{self.path}: checkpoint tensors not mapped to the model: {unused}")


def _read_safetensors(path: pathlib.Path) -> dict[str, np.ndarray]:
  files = sorted(path.glob("*.safetensors"))
  if not files:
    raise FileNotFoundError(f"{path}: no *.safetensors files (pytorch_model.bin is not supported)")
  tensors = {}
  for file in files:
    with safetensors.safe_open(str(file), framework="numpy") as f:
      for key in f.keys():
        tensors[key] = f.get_tensor(key)
  return tensors


def _copy_tokenizer(src: pathlib.Path, dst: pathlib.Path) -> None:
  found = [src / name for name in TOKENIZER_FILES if (src / name).is_file()]
  if not found:
    raise FileNotFoundError(f"{src}: none of the tokenizer files {TOKENIZER_FILES}")
  for file in found:
    shutil.copyfile(file, dst / file.name)


# GPT-2 -----------------------------------------------------------------------


def gpt2_to_ours(src: TensorSource, cfg: ModelConfig) -> dict[str, np.ndarray]:
  prefix = "transformer." if src.has("transformer.wte.weight") else ""
  h, dh, d, n = cfg.num_heads, cfg.head_dim, cfg.d_model, cfg.num_layers
  layer = prefix + "h.{}."

  def qkv_kernel(w_Dx3HDh):  # -> [D, H, 3, Dh]
    return w_Dx3HDh.reshape(d, 3, h, dh).transpose(0, 2, 1, 3)

  def qkv_bias(b_3HDh):  # -> [H, 3, Dh]
    return b_3HDh.reshape(3, h, dh).transpose(1, 0, 2)

  ours = {
      "embed": src(prefix + "wte.weight"),
      "pos_embed": src(prefix + "wpe.weight"),
      "final_norm.scale": src(prefix + "ln_f.weight"),
      "final_norm.bias": src(prefix + "ln_f.bias"),
      "blocks.attn_norm.scale": src.stacked(layer + "ln_1.weight", n),
      "blocks.attn_norm.bias": src.stacked(layer + "ln_1.bias", n),
      "blocks.attn.qkv_kernel": src.stacked(layer + "attn.c_attn.weight", n, qkv_kernel),
      "blocks.attn.qkv_bias": src.stacked(layer + "attn.c_attn.bias", n, qkv_bias),
      "blocks.attn.out_kernel": src.stacked(layer + "attn.c_proj.weight", n,
                                            lambda w: w.reshape(h, dh, d)),
      "blocks.attn.out_bias": src.stacked(layer + "attn.c_proj.bias", n),
      "blocks.mlp_norm.scale": src.stacked(layer + "ln_2.weight", n),
      "blocks.mlp_norm.bias": src.stacked(layer + "ln_2.bias", n),
      "blocks.mlp.up_kernel": src.stacked(layer + "mlp.c_fc.weight", n),
      "blocks.mlp.up_bias": src.stacked(layer + "mlp.c_fc.bias", n),
      "blocks.mlp.down_kernel": src.stacked(layer + "mlp.c_proj.weight", n),
      "blocks.mlp.down_bias": src.stacked(layer + "mlp.c_proj.bias", n),
  }
  if src.has("lm_head.weight"):  # Tied: must equal wte if present at all.
    if not np.array_equal(src("lm_head.weight"), ours["embed"]):
      raise ValueError(f"{src.path}: lm_head.weight differs from wte.weight; GPT-2 ties them")
  src.check_all_used()
  return ours


def _gpt2_to_hf(ours: dict[str, np.ndarray], cfg: ModelConfig) -> dict[str, np.ndarray]:
  d = cfg.d_model
  out = {
      "transformer.wte.weight": ours["embed"],
      "transformer.wpe.weight": ours["pos_embed"],
      "transformer.ln_f.weight": ours["final_norm.scale"],
      "transformer.ln_f.bias": ours["final_norm.bias"],
  }
  for i in range(cfg.num_layers):
    layer = f"transformer.h.{i}."
    get = lambda name: ours[name][i]  # pylint: disable=cell-var-from-loop
    out.update({
        layer + "ln_1.weight": get("blocks.attn_norm.scale"),
        layer + "ln_1.bias": get("blocks.attn_norm.bias"),
        layer + "attn.c_attn.weight": get("blocks.attn.qkv_kernel").transpose(0, 2, 1, 3)
                                      .reshape(d, 3 * d),
        layer + "attn.c_attn.bias": get("blocks.attn.qkv_bias").transpose(1, 0, 2).reshape(3 * d),
        layer + "attn.c_proj.weight": get("blocks.attn.out_kernel").reshape(d, d),
        layer + "attn.c_proj.bias": get("blocks.attn.out_bias"),
        layer + "ln_2.weight": get("blocks.mlp_norm.scale"),
        layer + "ln_2.bias": get("blocks.mlp_norm.bias"),
        layer + "mlp.c_fc.weight": get("blocks.mlp.up_kernel"),
        layer + "mlp.c_fc.bias": get("blocks.mlp.up_bias"),
        layer + "mlp.c_proj.weight": get("blocks.mlp.down_kernel"),
        layer + "mlp.c_proj.bias": get("blocks.mlp.down_bias"),
    })
  return out


# Llama / Qwen2 ---------------------------------------------------------------


def llama_to_ours(src: TensorSource, cfg: ModelConfig) -> dict[str, np.ndarray]:
  k, g, dh, d, n = cfg.num_kv_heads, cfg.num_groups, cfg.head_dim, cfg.d_model, cfg.num_layers
  attn, mlp = "model.layers.{}.self_attn.", "model.layers.{}.mlp."

  def qkv_kernel(i):  # -> [D, K, G + 2, Dh]
    q = src(attn.format(i) + "q_proj.weight").T.reshape(d, k, g, dh)
    kk = src(attn.format(i) + "k_proj.weight").T.reshape(d, k, 1, dh)
    v = src(attn.format(i) + "v_proj.weight").T.reshape(d, k, 1, dh)
    return np.concatenate([q, kk, v], axis=2)

  def qkv_bias(i):  # -> [K, G + 2, Dh]
    q = src(attn.format(i) + "q_proj.bias").reshape(k, g, dh)
    kk = src(attn.format(i) + "k_proj.bias").reshape(k, 1, dh)
    v = src(attn.format(i) + "v_proj.bias").reshape(k, 1, dh)
    return np.concatenate([q, kk, v], axis=1)

  layers = range(n)
  ours = {
      "embed": src("model.embed_tokens.weight"),
      "final_norm.scale": src("model.norm.weight"),
      "blocks.attn_norm.scale": src.stacked("model.layers.{}.input_layernorm.weight", n),
      "blocks.mlp_norm.scale": src.stacked("model.layers.{}.post_attention_layernorm.weight", n),
      "blocks.attn.qkv_kernel": np.stack([qkv_kernel(i) for i in layers]),
      "blocks.attn.out_kernel": src.stacked(attn + "o_proj.weight", n,
                                            lambda w: w.T.reshape(k * g, dh, d)),
      "blocks.mlp.gate_up_kernel": np.stack([np.stack(
          [src(mlp.format(i) + "gate_proj.weight").T, src(mlp.format(i) + "up_proj.weight").T],
          axis=1) for i in layers]),
      "blocks.mlp.down_kernel": src.stacked(mlp + "down_proj.weight", n, lambda w: w.T),
  }
  if cfg.qkv_bias:
    ours["blocks.attn.qkv_bias"] = np.stack([qkv_bias(i) for i in layers])
  if cfg.attn_out_bias:
    ours["blocks.attn.out_bias"] = src.stacked(attn + "o_proj.bias", n)
  if cfg.mlp_bias:
    ours["blocks.mlp.gate_up_bias"] = np.stack([np.stack(
        [src(mlp.format(i) + "gate_proj.bias"), src(mlp.format(i) + "up_proj.bias")])
        for i in layers])
    ours["blocks.mlp.down_bias"] = src.stacked(mlp + "down_proj.bias", n)
  if not cfg.tie_embeddings:
    ours["lm_head"] = src("lm_head.weight").T
  elif src.has("lm_head.weight") and not np.array_equal(src("lm_head.weight"), ours["embed"]):
    raise ValueError(f"{src.path}: tie_word_embeddings is set but lm_head.weight differs "
                     "from embed_tokens.weight")
  src.check_all_used()
  return ours


def _llama_to_hf(ours: dict[str, np.ndarray], cfg: ModelConfig) -> dict[str, np.ndarray]:
  k, g, dh, d = cfg.num_kv_heads, cfg.num_groups, cfg.head_dim, cfg.d_model
  out = {"model.embed_tokens.weight": ours["embed"], "model.norm.weight": ours["final_norm.scale"]}
  if not cfg.tie_embeddings:
    out["lm_head.weight"] = ours["lm_head"].T
  for i in range(cfg.num_layers):
    layer = f"model.layers.{i}."
    get = lambda name: ours[name][i]  # pylint: disable=cell-var-from-loop
    qkv = get("blocks.attn.qkv_kernel")
    gate_up = get("blocks.mlp.gate_up_kernel")
    out.update({
        layer + "input_layernorm.weight": get("blocks.attn_norm.scale"),
        layer + "post_attention_layernorm.weight": get("blocks.mlp_norm.scale"),
        layer + "self_attn.q_proj.weight": qkv[:, :, :g].reshape(d, k * g * dh).T,
        layer + "self_attn.k_proj.weight": qkv[:, :, g].reshape(d, k * dh).T,
        layer + "self_attn.v_proj.weight": qkv[:, :, g + 1].reshape(d, k * dh).T,
        layer + "self_attn.o_proj.weight": get("blocks.attn.out_kernel").reshape(k * g * dh, d).T,
        layer + "mlp.gate_proj.weight": gate_up[:, 0].T,
        layer + "mlp.up_proj.weight": gate_up[:, 1].T,
        layer + "mlp.down_proj.weight": get("blocks.mlp.down_kernel").T,
    })
    if cfg.qkv_bias:
      bias = get("blocks.attn.qkv_bias")
      out[layer + "self_attn.q_proj.bias"] = bias[:, :g].reshape(k * g * dh)
      out[layer + "self_attn.k_proj.bias"] = bias[:, g].reshape(k * dh)
      out[layer + "self_attn.v_proj.bias"] = bias[:, g + 1].reshape(k * dh)
    if cfg.attn_out_bias:
      out[layer + "self_attn.o_proj.bias"] = get("blocks.attn.out_bias")
    if cfg.mlp_bias:
      out[layer + "mlp.gate_proj.bias"] = get("blocks.mlp.gate_up_bias")[0]
      out[layer + "mlp.up_proj.bias"] = get("blocks.mlp.gate_up_bias")[1]
      out[layer + "mlp.down_proj.bias"] = get("blocks.mlp.down_bias")
  return out
