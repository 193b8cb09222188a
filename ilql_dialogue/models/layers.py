"""Parameter helper, the projection every layer uses, norms and feed-forward blocks.

Every weight is created through `param`, which attaches logical axis names
(the fixed vocabulary below) so ilql_dialogue/sharding.py can place any
parameter without knowing the model. Weights are stored in `param_dtype` and
cast to the compute dtype where they are used; norm statistics are always
taken in float32, as both reference implementations do.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from ilql_dialogue.models.config import ModelConfig

LOGICAL_AXES = ("vocab", "embed", "mlp", "heads", "kv_heads", "head_dim", "layers", "norm",
                "prefix_rows", "head_hidden", "head_in", "copy")

Initializer = Callable[[jax.Array, tuple[int, ...], jnp.dtype], jax.Array]


def param(rngs: nnx.Rngs, init: Initializer, shape: tuple[int, ...],
          names: tuple[str | None, ...], dtype: jnp.dtype) -> nnx.Param:
  """A parameter annotated with logical axis names.

  Eager sharding is off: placement is decided once, for the whole state, from
  `nnx.get_partition_spec` and the mesh rules, not at construction time.
  """
  if len(names) != len(shape) or any(n is not None and n not in LOGICAL_AXES for n in names):
    raise ValueError(f"axis names {names} do not fit shape {shape} / vocabulary {LOGICAL_AXES}")
  return nnx.Param(init(rngs.params(), shape, dtype), out_sharding=names, eager_sharding=False)


def normal(std: float) -> Initializer:
  return nnx.initializers.normal(std)


zeros: Initializer = nnx.initializers.zeros
ones: Initializer = nnx.initializers.ones


def dense(x: jax.Array, kernel: jax.Array, *, n_in: int = 1, transposed: bool = False,
          preferred_element_type: jnp.dtype | None = None) -> jax.Array:
  """x's last `n_in` axes contracted with the kernel's first `n_in` (its last, if `transposed`).

  Computed as one 2-D matmul over x's flattened leading axes. Why: with the
  leading [B, T] axes kept, XLA:CPU computes the weight gradient of
  `x_BxTxD @ W` as a dot of two transposed operands, after physically
  transposing the output gradient, a dot much slower than the same product
  with one operand transposed (measured in docs/BENCHMARKS.md). Flattened,
  the weight gradient is a plain [N, I]^T [N, O] product. The reshapes merge
  whole axes, so a batch sharded over the mesh stays sharded.
  """
  lead = x.shape[:x.ndim - n_in]
  if transposed:
    in_shape, out_shape = kernel.shape[kernel.ndim - n_in:], kernel.shape[:kernel.ndim - n_in]
  else:
    in_shape, out_shape = kernel.shape[:n_in], kernel.shape[n_in:]
  if x.shape[x.ndim - n_in:] != in_shape:
    raise ValueError(f"dense: x {x.shape} does not contract with kernel {kernel.shape}")
  x_NxI = x.reshape(math.prod(lead), math.prod(in_shape))
  kernel_2d = (kernel.reshape(math.prod(out_shape), -1) if transposed
               else kernel.reshape(math.prod(in_shape), -1))
  matmul = _matmul_cpu if jax.default_backend() == "cpu" else _matmul
  return matmul(x_NxI, kernel_2d, transposed, preferred_element_type).reshape(lead + out_shape)


def _matmul(x_NxI: jax.Array, kernel_2d: jax.Array, transposed: bool,
            preferred_element_type: jnp.dtype | None) -> jax.Array:
  """y_NxO = x_NxI kernel, the kernel [I, O], or [O, I] if `transposed`."""
  return jax.lax.dot_general(x_NxI, kernel_2d, (((1,), (1 if transposed else 0,)), ((), ())),
                             preferred_element_type=preferred_element_type)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _matmul_cpu(x_NxI, kernel_2d, transposed, preferred_element_type):
  """`_matmul`, with the kernel's gradient computed in the layout XLA:CPU is fast at.

  The gradient [R, C] is a product A^T B contracting the N rows. When R > C
  (an MLP's down projection, the tied embedding) XLA:CPU's matmul (YNNPACK)
  is slower at it than at the [C, R] product B^T A transposed afterwards
  (measured in docs/BENCHMARKS.md); the barrier keeps XLA from folding that
  transpose back into the dot.
  """
  return _matmul(x_NxI, kernel_2d, transposed, preferred_element_type)


def _matmul_cpu_forward(x_NxI, kernel_2d, transposed, preferred_element_type):
  return _matmul(x_NxI, kernel_2d, transposed, preferred_element_type), (x_NxI, kernel_2d)


def _matmul_cpu_backward(transposed, preferred_element_type, residuals, dy_NxO):
  del preferred_element_type
  x_NxI, kernel_2d = residuals
  dx_NxI = jax.lax.dot_general(dy_NxO, kernel_2d, (((1,), (0 if transposed else 1,)), ((), ())),
                               preferred_element_type=jnp.float32).astype(x_NxI.dtype)
  a, b = (dy_NxO, x_NxI) if transposed else (x_NxI, dy_NxO)  # dkernel = a^T b, contracting N.
  contract_rows = (((0,), (0,)), ((), ()))
  if kernel_2d.shape[0] > kernel_2d.shape[1]:
    dkernel = jax.lax.optimization_barrier(
        jax.lax.dot_general(b, a, contract_rows, preferred_element_type=jnp.float32)).T
  else:
    dkernel = jax.lax.dot_general(a, b, contract_rows, preferred_element_type=jnp.float32)
  return dx_NxI, dkernel.astype(kernel_2d.dtype)


_matmul_cpu.defvjp(_matmul_cpu_forward, _matmul_cpu_backward)


class LayerNorm(nnx.Module):
  """GPT-2 LayerNorm (scale and bias, statistics in float32)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.eps = cfg.norm_eps
    self.scale = param(rngs, ones, (cfg.d_model,), ("norm",), cfg.weight_dtype)
    self.bias = param(rngs, zeros, (cfg.d_model,), ("norm",), cfg.weight_dtype)

  def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
    x = x_BxTxD.astype(jnp.float32)
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + self.eps)
    y = y * self.scale[...].astype(jnp.float32) + self.bias[...].astype(jnp.float32)
    return y.astype(x_BxTxD.dtype)


class RMSNorm(nnx.Module):
  """Llama RMSNorm: normalise in float32, cast back, then scale (HF's order)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.eps = cfg.norm_eps
    self.scale = param(rngs, ones, (cfg.d_model,), ("norm",), cfg.weight_dtype)

  def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
    x = x_BxTxD.astype(jnp.float32)
    y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + self.eps)
    return self.scale[...].astype(x_BxTxD.dtype) * y.astype(x_BxTxD.dtype)


def make_norm(cfg: ModelConfig, *, rngs: nnx.Rngs) -> LayerNorm | RMSNorm:
  return LayerNorm(cfg, rngs=rngs) if cfg.family == "gpt2" else RMSNorm(cfg, rngs=rngs)


class GeluMLP(nnx.Module):
  """GPT-2 feed-forward: D -> F (tanh GELU) -> D, with biases."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.dtype = cfg.compute_dtype
    pd = cfg.weight_dtype
    self.up_kernel = param(rngs, normal(cfg.init_std), (cfg.d_model, cfg.mlp_dim),
                           ("embed", "mlp"), pd)
    self.up_bias = param(rngs, zeros, (cfg.mlp_dim,), ("mlp",), pd) if cfg.mlp_bias else None
    # GPT-2 scales residual-branch outputs by 1/sqrt(2 * num_layers) at init.
    out_std = cfg.init_std / (2 * cfg.num_layers) ** 0.5
    self.down_kernel = param(rngs, normal(out_std), (cfg.mlp_dim, cfg.d_model),
                             ("mlp", "embed"), pd)
    self.down_bias = param(rngs, zeros, (cfg.d_model,), ("embed",), pd) if cfg.mlp_bias else None

  def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
    h_BxTxF = dense(x_BxTxD, self.up_kernel[...].astype(self.dtype))
    if self.up_bias is not None:
      h_BxTxF = h_BxTxF + self.up_bias[...].astype(self.dtype)
    h_BxTxF = jax.nn.gelu(h_BxTxF, approximate=True)
    y_BxTxD = dense(h_BxTxF, self.down_kernel[...].astype(self.dtype))
    if self.down_bias is not None:
      y_BxTxD = y_BxTxD + self.down_bias[...].astype(self.dtype)
    return y_BxTxD


class SwiGLU(nnx.Module):
  """Llama feed-forward: silu(x W_gate) * (x W_up) -> W_down.

  Gate and up projections are one [D, 2, F] kernel so they cost one matmul.
  """

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.dtype = cfg.compute_dtype
    pd = cfg.weight_dtype
    self.gate_up_kernel = param(rngs, normal(cfg.init_std), (cfg.d_model, 2, cfg.mlp_dim),
                                ("embed", None, "mlp"), pd)
    self.gate_up_bias = (param(rngs, zeros, (2, cfg.mlp_dim), (None, "mlp"), pd)
                         if cfg.mlp_bias else None)
    out_std = cfg.init_std / (2 * cfg.num_layers) ** 0.5
    self.down_kernel = param(rngs, normal(out_std), (cfg.mlp_dim, cfg.d_model),
                             ("mlp", "embed"), pd)
    self.down_bias = param(rngs, zeros, (cfg.d_model,), ("embed",), pd) if cfg.mlp_bias else None

  def __call__(self, x_BxTxD: jax.Array) -> jax.Array:
    h_BxTx2xF = dense(x_BxTxD, self.gate_up_kernel[...].astype(self.dtype))
    if self.gate_up_bias is not None:
      h_BxTx2xF = h_BxTx2xF + self.gate_up_bias[...].astype(self.dtype)
    h_BxTxF = jax.nn.silu(h_BxTx2xF[:, :, 0]) * h_BxTx2xF[:, :, 1]
    y_BxTxD = dense(h_BxTxF, self.down_kernel[...].astype(self.dtype))
    if self.down_bias is not None:
      y_BxTxD = y_BxTxD + self.down_bias[...].astype(self.dtype)
    return y_BxTxD


def make_mlp(cfg: ModelConfig, *, rngs: nnx.Rngs) -> GeluMLP | SwiGLU:
  return GeluMLP(cfg, rngs=rngs) if cfg.family == "gpt2" else SwiGLU(cfg, rngs=rngs)
