"""layers.dense: the einsum it replaces, and the weight-gradient layout it exists for."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ilql_dialogue.models.layers import dense


def _normal(seed, shape, dtype=jnp.float32):
  return jax.random.normal(jax.random.key(seed), shape, dtype)


@pytest.mark.parametrize("x_shape, kernel_shape, n_in, transposed, spec", [
    ((2, 5, 8), (8, 12), 1, False, "btd,df->btf"),            # MLP up
    ((2, 5, 8), (8, 3, 4, 2), 1, False, "btd,dkch->btkch"),   # fused qkv
    ((2, 5, 3, 4), (3, 4, 8), 2, False, "btnh,nhd->btd"),     # attention out
    ((2, 5, 8), (11, 8), 1, True, "btd,vd->btv"),             # tied logits
    ((7, 8), (8, 6), 1, False, "nd,do->no"),                  # gathered head rows
    ((0, 5, 8), (8, 6), 1, False, "btd,do->bto"),             # an empty batch
])
def test_dense_equals_the_einsum(x_shape, kernel_shape, n_in, transposed, spec):
  x, kernel = _normal(0, x_shape), _normal(1, kernel_shape)
  np.testing.assert_allclose(dense(x, kernel, n_in=n_in, transposed=transposed),
                             jnp.einsum(spec, x, kernel), rtol=1e-6, atol=1e-6)


def test_dense_accumulates_16_bit_inputs_in_the_requested_dtype():
  x, kernel = _normal(0, (2, 3, 8), jnp.bfloat16), _normal(1, (8, 5), jnp.bfloat16)
  out = dense(x, kernel, preferred_element_type=jnp.float32)
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(out, jnp.einsum("btd,do->bto", x, kernel,
                                             preferred_element_type=jnp.float32), rtol=1e-6)


def test_dense_rejects_axes_that_do_not_contract():
  with pytest.raises(ValueError, match=r"\(2, 3, 8\) does not contract with kernel \(6, 5\)"):
    dense(jnp.zeros((2, 3, 8)), jnp.zeros((6, 5)))


def _doubly_transposed_dots(hlo: str) -> list[str]:
  """2-D dots whose operands are both read transposed: lhs contracts its rows, rhs its columns."""
  return [line.strip() for line in hlo.splitlines()
          if re.search(r"\bdot\(", line) and "batch_dims" not in line
          and "lhs_contracting_dims={0}" in line and "rhs_contracting_dims={1}" in line]


def test_weight_gradients_of_a_batch_of_sequences_are_plain_matmuls():
  """Through a [B, T, D] -> F -> D block, XLA:CPU must not transpose the output gradient
  and read both dot operands transposed (3.2x slower than one transposed operand)."""
  x_BxTxD, up_DxF, down_FxD = _normal(0, (4, 16, 32)), _normal(1, (32, 64)), _normal(2, (64, 32))

  def loss(up, down):
    return jnp.sum(jnp.sin(dense(jax.nn.gelu(dense(x_BxTxD, up)), down)))

  hlo = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(up_DxF, down_FxD).compile().as_text()
  assert re.search(r"\bdot\(", hlo)
  assert not _doubly_transposed_dots(hlo)


@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
@pytest.mark.parametrize("kernel_shape, transposed, spec", [
    ((8, 24), False, "btd,df->btf"),   # fewer rows than columns
    ((24, 8), False, "btf,fd->btd"),   # more rows: the gradient goes through the transposed dot
    ((40, 8), True, "btd,vd->btv"),    # tied logits
])
def test_dense_gradients_equal_the_einsums(dtype, tol, kernel_shape, transposed, spec):
  in_dim = kernel_shape[1] if transposed else kernel_shape[0]
  x, kernel = _normal(0, (2, 5, in_dim), dtype), _normal(1, kernel_shape, dtype)
  cotangent = _normal(2, jnp.einsum(spec, x, kernel).shape, jnp.float32)

  def loss(fn, x, kernel):
    return jnp.sum(fn(x, kernel).astype(jnp.float32) * cotangent)

  ours = lambda x, kernel: dense(x, kernel, transposed=transposed,
                                 preferred_element_type=jnp.float32)
  theirs = lambda x, kernel: jnp.einsum(spec, x, kernel, preferred_element_type=jnp.float32)
  for got, want in zip(jax.grad(lambda *a: loss(ours, *a), argnums=(0, 1))(x, kernel),
                       jax.grad(lambda *a: loss(theirs, *a), argnums=(0, 1))(x, kernel)):
    assert got.dtype == want.dtype == dtype
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=tol, atol=tol)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a layout rule of XLA:CPU's matmul")
def test_a_tall_kernels_gradient_is_computed_wide_on_cpu():
  """dW [64, 16] is computed as the [16, 64] product and transposed (1.8x faster on CPU)."""
  x_BxTxF, down_FxD = _normal(0, (2, 3, 64)), _normal(1, (64, 16))
  hlo = jax.jit(jax.grad(lambda w: jnp.sum(jnp.sin(dense(x_BxTxF, w))))).lower(
      down_FxD).compile().as_text()
  dots = [line for line in hlo.splitlines()  # Products that contract the N = 6 rows.
          if re.search(r"\bdot\(", line) and "lhs_contracting_dims={0}" in line]
  assert any("f32[16,64]" in line.split("=")[1] for line in dots), dots
  assert not any("f32[64,16]" in line.split("=")[1] for line in dots), dots
