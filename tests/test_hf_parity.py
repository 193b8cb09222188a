"""Our trunk reproduces transformers+torch logits in float32, and export round-trips."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from ilql_dialogue.models.hf_io import export_hf, load_hf

VOCAB = 211
TOL = 1e-4


def _hf_configs():
  common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                bos_token_id=None, eos_token_id=None)
  return {
      "gpt2": transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                      n_positions=64, bos_token_id=None, eos_token_id=None),
      "llama": transformers.LlamaConfig(**common, rope_parameters={"rope_type": "default",
                                                                    "rope_theta": 500.0}),
      "llama_tied_bias": transformers.LlamaConfig(**common, tie_word_embeddings=True,
                                                  attention_bias=True, mlp_bias=True),
      "qwen2": transformers.Qwen2Config(**common),
  }


def _save_random_hf(name, tmp_path):
  torch.manual_seed(0)
  hf = transformers.AutoModelForCausalLM.from_config(_hf_configs()[name]).eval()
  with torch.no_grad():  # Non-trivial norms and biases so a wrong mapping shows.
    for pname, p in hf.named_parameters():
      if pname.endswith("bias") or "norm" in pname or "ln_" in pname:
        p.add_(0.1 * torch.randn_like(p))
  path = tmp_path / name
  hf.save_pretrained(path)
  return hf, path


def _batch(rng, batch, length, padding):
  """Tokens, attention mask and HF-style positions (cumsum(mask) - 1, clipped at 0)."""
  tokens = rng.integers(0, VOCAB, (batch, length))
  lengths = rng.integers(1, length + 1, batch)
  lengths[0] = length
  mask = np.zeros((batch, length), np.int64)
  for b, n in enumerate(lengths):
    if padding == "right":
      mask[b, :n] = 1
    else:
      mask[b, length - n:] = 1
  positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
  return tokens, mask, positions


def _hf_logits(hf, tokens, mask, positions):
  with torch.no_grad():
    return hf(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
              position_ids=torch.tensor(positions)).logits.numpy()


def _our_logits(model, tokens, mask, positions):
  return np.asarray(_jit_logits(model, jnp.asarray(tokens), jnp.asarray(positions),
                                jnp.asarray(mask, bool)))


@nnx.jit
def _jit_logits(model, tokens, positions, mask):
  return model.logits(model(tokens, positions, mask)[0])


def _max_diff_at_real_tokens(a, b, mask):
  return float(np.abs(a - b)[mask.astype(bool)].max())


@pytest.mark.parametrize("name", ["gpt2", "llama", "llama_tied_bias", "qwen2"])
def test_load_matches_transformers_logits(name, tmp_path):
  hf, path = _save_random_hf(name, tmp_path)
  cfg, model = load_hf(path)
  assert cfg.num_kv_heads == (4 if name == "gpt2" else 2)
  rng = np.random.default_rng(0)
  for length, padding in [(9, "right"), (17, "left"), (32, "left")]:
    tokens, mask, positions = _batch(rng, 3, length, padding)
    diff = _max_diff_at_real_tokens(_hf_logits(hf, tokens, mask, positions),
                                    _our_logits(model, tokens, mask, positions), mask)
    assert diff < TOL, (name, length, padding, diff)


@pytest.mark.parametrize("name", ["gpt2", "qwen2", "llama_tied_bias"])
def test_export_roundtrips_through_transformers(name, tmp_path):
  _, path = _save_random_hf(name, tmp_path)
  cfg, model = load_hf(path)
  (path / "tokenizer.json").write_text("{}")
  export_hf(model, cfg, tmp_path / "exported", tokenizer_dir=path)
  assert (tmp_path / "exported" / "tokenizer.json").is_file()
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "exported").eval()
  assert type(reloaded).__name__.lower().startswith(name.split("_")[0])
  tokens, mask, positions = _batch(np.random.default_rng(1), 2, 11, "left")
  diff = _max_diff_at_real_tokens(_hf_logits(reloaded, tokens, mask, positions),
                                  _our_logits(model, tokens, mask, positions), mask)
  assert diff < TOL, diff
  cfg2, model2 = load_hf(tmp_path / "exported")
  assert cfg2 == cfg
  np.testing.assert_array_equal(_our_logits(model2, tokens, mask, positions),
                                _our_logits(model, tokens, mask, positions))


def test_unmapped_checkpoint_tensor_is_an_error(tmp_path):
  import safetensors.numpy
  _, path = _save_random_hf("llama", tmp_path)
  tensors = safetensors.numpy.load_file(path / "model.safetensors")
  tensors["model.layers.0.self_attn.rotary_extra.weight"] = np.zeros(3, np.float32)
  safetensors.numpy.save_file(tensors, path / "model.safetensors")
  with pytest.raises(ValueError, match="rotary_extra"):
    load_hf(path)


def test_unsupported_rope_scaling_is_an_error(tmp_path):
  hf_cfg = _hf_configs()["llama"]
  hf_cfg.rope_parameters = {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}
  hf_cfg.save_pretrained(tmp_path)
  with pytest.raises(ValueError, match="rope_type"):
    load_hf(tmp_path)
