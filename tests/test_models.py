"""Trunk shapes, masking, structured prefix, heads, axis names, remat, bf16."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from ilql_dialogue.models import (Head, ModelConfig, ScalarHead, StructuredPrefix, Transformer,
                                  VocabHead, init_cache)
from ilql_dialogue.models.layers import LOGICAL_AXES

VOCAB = 61
PREFIX_FIELDS = (4, 9, 3)
CONFIGS = {
    "gpt2": ModelConfig.gpt2(vocab_size=VOCAB, num_layers=2, d_model=32, num_heads=4,
                             max_seq_len=32, prefix_field_vocab_sizes=PREFIX_FIELDS,
                             prefix_num_rows=5, prefix_bidirectional=True),
    "llama": ModelConfig.llama(vocab_size=VOCAB, num_layers=2, d_model=32, num_heads=4,
                               num_kv_heads=2, mlp_dim=48,
                               prefix_field_vocab_sizes=PREFIX_FIELDS, prefix_num_rows=5,
                               prefix_bidirectional=True),
}


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def family(request):
  return request.param


@pytest.fixture(scope="module")
def model(family):
  return Transformer(CONFIGS[family], rngs=nnx.Rngs(0))


def _inputs(batch=2, length=8, seed=0):
  tokens = jax.random.randint(jax.random.key(seed), (batch, length), 0, VOCAB)
  mask = jnp.ones((batch, length), bool).at[1, -3:].set(False)  # Right padding in row 1.
  positions = jnp.broadcast_to(jnp.arange(length), (batch, length))
  return tokens, positions, mask


@nnx.jit
def _forward(model, tokens, positions, mask, prefix=None):
  return model(tokens, positions, mask, prefix_BxPxD=prefix)[0]


@nnx.jit
def _forward_logits(model, tokens, positions, mask):
  return model.logits(model(tokens, positions, mask)[0])


def test_shapes_and_logits(model, family):
  tokens, positions, mask = _inputs()
  hidden, cache = nnx.jit(lambda m: m(tokens, positions, mask))(model)
  assert hidden.shape == (2, 8, 32) and cache is None
  logits = model.logits(hidden[:, -1:])
  assert logits.shape == (2, 1, VOCAB) and logits.dtype == jnp.float32
  cfg = CONFIGS[family]
  flipped = Transformer(cfg.replace(tie_embeddings=not cfg.tie_embeddings), rngs=nnx.Rngs(1))
  untied = model if model.lm_head is not None else flipped
  assert (model.lm_head is None) == cfg.tie_embeddings
  assert untied.logits(hidden).shape == (2, 8, VOCAB)


def test_causal_and_padding_never_attended(model):
  tokens, positions, mask = _inputs()
  base = _forward(model, tokens, positions, mask)
  later = _forward(model, tokens.at[:, 5].set((tokens[:, 5] + 1) % VOCAB), positions, mask)
  np.testing.assert_allclose(later[:, :5], base[:, :5], atol=1e-6)
  assert not np.allclose(later[:, 5:], base[:, 5:])
  # Row 1 slots 5..7 are padding: their ids must not reach row 1's real tokens.
  padded = _forward(model, tokens.at[1, 5:].set(0), positions, mask)
  np.testing.assert_allclose(padded[1, :5], base[1, :5], atol=1e-6)


def test_prefix_rows_condition_tokens(model, family):
  cfg = CONFIGS[family]
  embed = StructuredPrefix(cfg, rngs=nnx.Rngs(3))
  fields = jnp.stack([jax.random.randint(jax.random.key(i), (2, 5), 0, n)
                      for i, n in enumerate(PREFIX_FIELDS)], axis=-1)
  prefix = embed(fields)
  assert prefix.shape == (2, 5, 32)
  tokens, positions, mask = _inputs()
  with_prefix = _forward(model, tokens, positions, mask, prefix)
  assert with_prefix.shape == (2, 8, 32)
  other = _forward(model, tokens, positions, mask, embed(fields.at[:, 2, 1].add(1) % 9))
  assert not np.allclose(with_prefix, other)
  # A prefix row is the sum of its field embeddings plus its row embedding.
  table = embed.field_embed[...]
  row = table[fields[0, 1, 0]] + table[4 + fields[0, 1, 1]] + table[13 + fields[0, 1, 2]]
  np.testing.assert_allclose(prefix[0, 1], row + embed.row_embed[1], atol=1e-6)


@nnx.jit
def _prefix_keys_after_prefill(model, prefix, tokens):
  """Layer-1 keys [B, K, P, H] of the prefix slots: they show what layer 0 let each row see."""
  positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
  cache = init_cache(model.cfg, tokens.shape[0], 16)
  _, cache = model(tokens, positions, jnp.ones(tokens.shape, bool), cache=cache,
                   prefix_BxPxD=prefix)
  return cache.k_BxKxSxH[1][:, :, :prefix.shape[1]]


@pytest.mark.parametrize("bidirectional", [True, False])
def test_prefix_attention_pattern(family, bidirectional):
  cfg = CONFIGS[family].replace(prefix_bidirectional=bidirectional)
  model = Transformer(cfg, rngs=nnx.Rngs(4))
  prefix = jax.random.normal(jax.random.key(5), (1, 5, 32))
  tokens = jax.random.randint(jax.random.key(6), (1, 4), 0, VOCAB)
  base = _prefix_keys_after_prefill(model, prefix, tokens)
  bump_D = jax.random.normal(jax.random.key(7), (32,))  # Not constant: LayerNorm removes that.
  last_row_changed = _prefix_keys_after_prefill(model, prefix.at[:, -1].add(bump_D), tokens)
  row0_sees_last = not np.allclose(base[:, :, 0], last_row_changed[:, :, 0], atol=1e-6)
  assert row0_sees_last == bidirectional
  tokens_changed = _prefix_keys_after_prefill(model, prefix, (tokens + 1) % VOCAB)
  np.testing.assert_allclose(tokens_changed, base, atol=1e-6)  # Prefix never sees tokens.


def test_prefix_rejects_out_of_range_field():
  embed = StructuredPrefix(CONFIGS["llama"], rngs=nnx.Rngs(0))
  fields = jnp.zeros((1, 2, 3), jnp.int32).at[0, 1, 2].set(3)
  with pytest.raises(ValueError, match="field 2 of row 1 .* 3, outside \\[0, 3\\)"):
    embed(fields)
  assert np.isnan(np.asarray(jax.jit(embed.__call__)(fields))[0, 1]).all()


def test_heads_on_gathered_positions(model, family):
  cfg = CONFIGS[family]
  tokens, positions, mask = _inputs()
  hidden = _forward(model, tokens, positions, mask)
  idx_BxN = jnp.array([[1, 6, 7], [0, 2, 4]])
  gathered_BxNxD = jnp.take_along_axis(hidden, idx_BxN[..., None], axis=1)
  q_head = VocabHead(cfg, rngs=nnx.Rngs(1), hidden_dim=16)
  v_head = ScalarHead(cfg, rngs=nnx.Rngs(2))
  action_head = Head(cfg, 63, rngs=nnx.Rngs(3))
  q_BxNxV, v_BxN = q_head(gathered_BxNxD), v_head(gathered_BxNxD)
  assert q_BxNxV.shape == (2, 3, VOCAB) and v_BxN.shape == (2, 3)
  assert action_head(gathered_BxNxD[:, -1]).shape == (2, 63)
  np.testing.assert_allclose(q_BxNxV[1, 2], q_head(hidden)[1, 4], atol=1e-5)
  np.testing.assert_allclose(v_BxN[0, 1], v_head(hidden)[0, 6], atol=1e-5)


def test_every_parameter_has_logical_axis_names(model, family):
  cfg = CONFIGS[family]
  modules = {"trunk": model, "prefix": StructuredPrefix(cfg, rngs=nnx.Rngs(0)),
             "q": VocabHead(cfg, rngs=nnx.Rngs(0), hidden_dim=8),
             "v": ScalarHead(cfg, rngs=nnx.Rngs(0))}
  used = set()
  for name, module in modules.items():
    for path, var in nnx.to_flat_state(nnx.state(module, nnx.Param)):
      names = var.get_metadata().get("out_sharding")
      assert names is not None and len(names) == var[...].ndim, (name, path, names)
      assert all(n is None or n in LOGICAL_AXES for n in names), (name, path, names)
      if path[0] == "blocks":
        assert names[0] == "layers" and var[...].shape[0] == cfg.num_layers, (path, names)
      used |= set(names) - {None}
  assert {"vocab", "embed", "mlp", "heads", "kv_heads", "head_dim", "layers", "norm",
          "prefix_rows"} <= used
  specs = nnx.get_partition_spec(nnx.state(model, nnx.Param))
  assert specs["blocks"]["attn"]["qkv_kernel"].get_value() == jax.P(
      "layers", "embed", "kv_heads", None, "head_dim")


def _loss_and_grads(model, tokens, positions, mask):
  def loss_fn(m):
    hidden, _ = m(tokens, positions, mask)
    logits = m.logits(hidden[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()
  return nnx.jit(nnx.value_and_grad(loss_fn))(model)


def test_remat_gives_identical_gradients():
  cfg = CONFIGS["llama"]
  tokens, positions, mask = _inputs()
  plain = Transformer(cfg, rngs=nnx.Rngs(7))
  remat = Transformer(cfg.replace(remat=True, remat_policy="dots_saveable"), rngs=nnx.Rngs(7))
  loss_a, grads_a = _loss_and_grads(plain, tokens, positions, mask)
  loss_b, grads_b = _loss_and_grads(remat, tokens, positions, mask)
  np.testing.assert_allclose(loss_a, loss_b, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), grads_a, grads_b)


def test_tiny_lm_learns_a_sequence():
  """Gradients flow through the scanned layers: a fixed sequence gets memorised."""
  cfg = CONFIGS["gpt2"]
  model = Transformer(cfg, rngs=nnx.Rngs(8))
  optimizer = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)
  tokens = jax.random.randint(jax.random.key(9), (4, 12), 0, VOCAB)
  positions = jnp.broadcast_to(jnp.arange(12), (4, 12))
  mask = jnp.ones((4, 12), bool)

  @nnx.jit
  def step(model, optimizer):
    def loss_fn(m):
      hidden, _ = m(tokens, positions, mask)
      logits = m.logits(hidden[:, :-1])
      return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss

  first = float(step(model, optimizer))
  for _ in range(60):
    last = float(step(model, optimizer))
  assert first > 3.5 and last < 0.5, (first, last)


def test_bfloat16_compute(model, family):
  cfg = CONFIGS[family]
  bf16 = Transformer(cfg.replace(dtype="bfloat16"), rngs=nnx.Rngs(10))
  nnx.update(bf16, nnx.state(model, nnx.Param))  # Same float32 weights, bf16 compute.
  tokens, positions, mask = _inputs()
  assert _forward(bf16, tokens, positions, mask).dtype == jnp.bfloat16
  logits_bf16 = _forward_logits(bf16, tokens, positions, mask)
  logits_f32 = _forward_logits(model, tokens, positions, mask)
  assert logits_bf16.dtype == jnp.float32 and np.isfinite(logits_bf16).all()
  assert float(jnp.max(jnp.abs(logits_bf16 - logits_f32))) < 0.05


def test_bfloat16_parameters():
  cfg = CONFIGS["llama"].replace(dtype="bfloat16", param_dtype="bfloat16")
  model = Transformer(cfg, rngs=nnx.Rngs(11))
  dtypes = {v.dtype for v in jax.tree.leaves(nnx.state(model, nnx.Param))}
  assert dtypes == {jnp.dtype(jnp.bfloat16)}
  assert np.isfinite(_forward_logits(model, *_inputs())).all()


def test_config_validation_and_hf_config_roundtrip():
  with pytest.raises(ValueError, match="family"):
    ModelConfig(family="t5")
  with pytest.raises(ValueError, match="num_kv_heads"):
    ModelConfig(family="gpt2", num_heads=4, num_kv_heads=2)
  with pytest.raises(ValueError, match="multiple"):
    ModelConfig.llama(num_heads=6, num_kv_heads=4, d_model=48)
  for cfg in [CONFIGS["gpt2"], CONFIGS["llama"], CONFIGS["llama"].replace(qkv_bias=True)]:
    back = ModelConfig.from_hf_config(cfg.to_hf_config())
    keep = ("prefix_field_vocab_sizes", "prefix_num_rows", "prefix_bidirectional")
    assert back.replace(**{k: getattr(cfg, k) for k in keep}) == cfg


def test_out_of_range_ids_raise_eagerly_and_give_nan_under_jit(model):
  tokens, positions, mask = _inputs()
  with pytest.raises(ValueError, match="token id -1 at \\[0, 3\\]"):
    model(tokens.at[0, 3].set(-1), positions, mask)
  hidden = _forward(model, tokens.at[0, 3].set(VOCAB), positions, mask)
  assert np.isnan(hidden[0, 3:]).all() and np.isfinite(hidden[1]).all()
