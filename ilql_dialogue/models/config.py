"""Architecture hyperparameters of the decoder, in one frozen dataclass.

One config type covers both families so that the trunk, the cache and the
checkpoint converters branch on a handful of flags instead of on classes:
GPT-2 (learned positions, LayerNorm, GELU, fused biases) and Llama (RoPE,
RMSNorm, SwiGLU, grouped-query attention). Qwen2 is Llama with qkv biases.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

FAMILIES = ("gpt2", "llama")
DTYPES = ("float32", "bfloat16", "float16")
# models.attention_kernels.IMPLEMENTATIONS (kept here so the config imports no jax code).
ATTENTION_IMPLS = ("auto", "reference", "blocked", "xla", "cudnn", "splash")
# jax.checkpoint_policies names accepted for `remat_policy`.
REMAT_POLICIES = (
    "nothing_saveable",
    "everything_saveable",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Hyperparameters of a decoder-only transformer.

  `prefix_field_vocab_sizes` / `prefix_num_rows` size the structured-context
  embedder (models.prefix); they are empty/zero for a plain LM.

  Speed knobs that change no parameter: `attention_impl` picks the softmax
  kernel (models.attention_kernels; "auto" is the fastest measured one for
  the backend) and `attention_block` its query-block length; `unroll_layers`
  runs the cache-free layer stack as straight-line code instead of a scan
  (no stacked per-layer activations to copy: faster on CPU, docs/BENCHMARKS.md;
  set False for deep models whose compile time matters more). The cached
  (decoding) path is always unrolled, one cache buffer per layer.
  """

  family: str = "gpt2"
  vocab_size: int = 256
  num_layers: int = 2
  d_model: int = 64
  num_heads: int = 4
  num_kv_heads: int = 4
  head_dim: int = 16
  mlp_dim: int = 256
  max_seq_len: int = 512
  norm_eps: float = 1e-5
  rope_theta: float = 10_000.0
  qkv_bias: bool = False
  attn_out_bias: bool = False
  mlp_bias: bool = False
  tie_embeddings: bool = True
  dtype: str = "float32"
  param_dtype: str = "float32"
  remat: bool = False
  remat_policy: str = "nothing_saveable"
  prefix_bidirectional: bool = False
  prefix_field_vocab_sizes: tuple[int, ...] = ()
  prefix_num_rows: int = 0
  init_std: float = 0.02
  attention_impl: str = "auto"
  attention_block: int = 128
  unroll_layers: bool = True
  copy_dim: int = 0  # A pointer head's width (models/copy_head.py); 0: none.

  def __post_init__(self):
    problems = []
    if self.family not in FAMILIES:
      problems.append(f"family={self.family!r} not in {FAMILIES}")
    for name in ("vocab_size", "num_layers", "d_model", "num_heads", "num_kv_heads",
                 "head_dim", "mlp_dim", "max_seq_len"):
      if getattr(self, name) <= 0:
        problems.append(f"{name}={getattr(self, name)} must be positive")
    if self.num_kv_heads > 0 and self.num_heads % self.num_kv_heads:
      problems.append(
          f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads}")
    if self.family == "gpt2" and self.num_kv_heads != self.num_heads:
      problems.append("gpt2 has no grouped-query attention: num_kv_heads must equal num_heads")
    if self.family == "llama" and self.head_dim % 2:
      problems.append(f"RoPE needs an even head_dim, got {self.head_dim}")
    for name in ("dtype", "param_dtype"):
      if getattr(self, name) not in DTYPES:
        problems.append(f"{name}={getattr(self, name)!r} not in {DTYPES}")
    if self.remat_policy not in REMAT_POLICIES:
      problems.append(f"remat_policy={self.remat_policy!r} not in {REMAT_POLICIES}")
    if self.attention_impl not in ATTENTION_IMPLS:
      problems.append(f"attention_impl={self.attention_impl!r} not in {ATTENTION_IMPLS}")
    if self.attention_block <= 0:
      problems.append(f"attention_block={self.attention_block} must be positive")
    if any(v <= 0 for v in self.prefix_field_vocab_sizes):
      problems.append(f"prefix_field_vocab_sizes={self.prefix_field_vocab_sizes} must be positive")
    if self.copy_dim < 0:
      problems.append(f"copy_dim={self.copy_dim} must be >= 0")
    if self.prefix_num_rows < 0:
      problems.append(f"prefix_num_rows={self.prefix_num_rows} must be >= 0")
    if problems:
      raise ValueError("ModelConfig: " + "; ".join(problems))

  @property
  def num_groups(self) -> int:
    """Query heads sharing one key/value head."""
    return self.num_heads // self.num_kv_heads

  @property
  def compute_dtype(self) -> jnp.dtype:
    return jnp.dtype(self.dtype)

  @property
  def weight_dtype(self) -> jnp.dtype:
    return jnp.dtype(self.param_dtype)

  def replace(self, **changes: Any) -> "ModelConfig":
    return dataclasses.replace(self, **changes)

  @classmethod
  def gpt2(cls, *, vocab_size: int = 50257, num_layers: int = 12, d_model: int = 768,
           num_heads: int = 12, mlp_dim: int | None = None, max_seq_len: int = 1024,
           norm_eps: float = 1e-5, **overrides: Any) -> "ModelConfig":
    """GPT-2 defaults (the 124M model unless overridden)."""
    return cls(family="gpt2", vocab_size=vocab_size, num_layers=num_layers, d_model=d_model,
               num_heads=num_heads, num_kv_heads=num_heads, head_dim=d_model // num_heads,
               mlp_dim=mlp_dim or 4 * d_model, max_seq_len=max_seq_len, norm_eps=norm_eps,
               qkv_bias=True, attn_out_bias=True, mlp_bias=True, tie_embeddings=True,
               **overrides)

  @classmethod
  def llama(cls, *, vocab_size: int = 32000, num_layers: int = 2, d_model: int = 256,
            num_heads: int = 4, num_kv_heads: int | None = None, head_dim: int | None = None,
            mlp_dim: int | None = None, max_seq_len: int = 2048, norm_eps: float = 1e-6,
            rope_theta: float = 10_000.0, qkv_bias: bool = False, tie_embeddings: bool = False,
            **overrides: Any) -> "ModelConfig":
    """Llama-style trunk; `qkv_bias=True` gives the Qwen2 variant."""
    return cls(family="llama", vocab_size=vocab_size, num_layers=num_layers, d_model=d_model,
               num_heads=num_heads, num_kv_heads=num_kv_heads or num_heads,
               head_dim=head_dim or d_model // num_heads, mlp_dim=mlp_dim or 4 * d_model,
               max_seq_len=max_seq_len, norm_eps=norm_eps, rope_theta=rope_theta,
               qkv_bias=qkv_bias, tie_embeddings=tie_embeddings, **overrides)

  @classmethod
  def from_hf_config(cls, hf_config: Any, **overrides: Any) -> "ModelConfig":
    """Reads a transformers GPT2Config / LlamaConfig / Qwen2Config.

    Raises on every feature our trunk does not implement (rope scaling,
    sliding windows, non-default activations) rather than loading a model
    that silently computes something else.
    """
    model_type = getattr(hf_config, "model_type", None)
    name = f"{type(hf_config).__name__}(model_type={model_type!r})"
    if model_type == "gpt2":
      _require(name, "activation_function", hf_config.activation_function,
               ("gelu_new", "gelu_pytorch_tanh"))
      _require(name, "scale_attn_weights", hf_config.scale_attn_weights, (True,))
      _require(name, "scale_attn_by_inverse_layer_idx",
               hf_config.scale_attn_by_inverse_layer_idx, (False,))
      _require(name, "add_cross_attention", getattr(hf_config, "add_cross_attention", False),
               (False,))
      d = hf_config.n_embd
      return cls.gpt2(vocab_size=hf_config.vocab_size, num_layers=hf_config.n_layer, d_model=d,
                      num_heads=hf_config.n_head, mlp_dim=hf_config.n_inner or 4 * d,
                      max_seq_len=hf_config.n_positions, norm_eps=hf_config.layer_norm_epsilon,
                      **overrides)
    if model_type in ("llama", "qwen2"):
      _require(name, "hidden_act", hf_config.hidden_act, ("silu",))
      rope = dict(getattr(hf_config, "rope_parameters", None) or {})
      _require(name, "rope_parameters.rope_type", rope.get("rope_type", "default"), ("default",))
      rope_theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10_000.0))
      if model_type == "qwen2":
        _require(name, "use_sliding_window", getattr(hf_config, "use_sliding_window", False),
                 (False,))
        qkv_bias, out_bias, mlp_bias = True, False, False
      else:
        _require(name, "pretraining_tp", getattr(hf_config, "pretraining_tp", 1) or 1, (1,))
        qkv_bias = out_bias = bool(hf_config.attention_bias)
        mlp_bias = bool(getattr(hf_config, "mlp_bias", False))
      num_heads = hf_config.num_attention_heads
      head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // num_heads
      return cls.llama(vocab_size=hf_config.vocab_size, num_layers=hf_config.num_hidden_layers,
                       d_model=hf_config.hidden_size, num_heads=num_heads,
                       num_kv_heads=hf_config.num_key_value_heads or num_heads,
                       head_dim=head_dim, mlp_dim=hf_config.intermediate_size,
                       max_seq_len=hf_config.max_position_embeddings,
                       norm_eps=hf_config.rms_norm_eps, rope_theta=float(rope_theta),
                       qkv_bias=qkv_bias, tie_embeddings=bool(hf_config.tie_word_embeddings),
                       **{"attn_out_bias": out_bias, "mlp_bias": mlp_bias, **overrides})
    raise ValueError(f"{name}: only gpt2, llama and qwen2 checkpoints are supported")

  def to_hf_config(self) -> Any:
    """The transformers config whose model computes what this trunk computes."""
    import transformers  # Heavy import kept off the training path.

    if self.family == "gpt2":
      return transformers.GPT2Config(
          vocab_size=self.vocab_size, n_positions=self.max_seq_len, n_embd=self.d_model,
          n_layer=self.num_layers, n_head=self.num_heads, n_inner=self.mlp_dim,
          activation_function="gelu_new", layer_norm_epsilon=self.norm_eps,
          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
          bos_token_id=None, eos_token_id=None, architectures=["GPT2LMHeadModel"])
    common = dict(
        vocab_size=self.vocab_size, hidden_size=self.d_model, intermediate_size=self.mlp_dim,
        num_hidden_layers=self.num_layers, num_attention_heads=self.num_heads,
        num_key_value_heads=self.num_kv_heads, head_dim=self.head_dim, hidden_act="silu",
        max_position_embeddings=self.max_seq_len, rms_norm_eps=self.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
        tie_word_embeddings=self.tie_embeddings, bos_token_id=None, eos_token_id=None)
    if self.qkv_bias and not self.attn_out_bias and not self.mlp_bias:
      return transformers.Qwen2Config(**common, architectures=["Qwen2ForCausalLM"])
    if self.qkv_bias != self.attn_out_bias:
      raise ValueError(
          f"no Hugging Face family has qkv_bias={self.qkv_bias} with "
          f"attn_out_bias={self.attn_out_bias} and mlp_bias={self.mlp_bias}")
    return transformers.LlamaConfig(**common, attention_bias=self.qkv_bias,
                                    mlp_bias=self.mlp_bias, architectures=["LlamaForCausalLM"])


def _require(config_name: str, field: str, value: Any, supported: tuple[Any, ...]) -> None:
  if value not in supported:
    raise ValueError(f"{config_name}: field {field}={value!r} is not supported "
                     f"(supported: {supported})")
