"""AdamW with warmup + cosine decay and clipping, and in-step gradient accumulation.

Accumulation is a `lax.scan` over microbatches inside the jitted step rather
than optax.MultiSteps: the optimizer then updates once per call, step counts
and schedules stay in units of real updates, and there is no host-side
counter that a resumed run could get out of sync with.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx

LossFn = Callable[[Any, Mapping[str, jax.Array], jax.Array], tuple[jax.Array, dict[str, jax.Array]]]


def learning_rate_schedule(optim: ml_collections.ConfigDict, total_steps: int) -> optax.Schedule:
  """Linear warmup from 0 to `learning_rate`, then cosine decay to
  `learning_rate * final_lr_fraction` at `total_steps`."""
  warmup = int(optim.warmup_steps)
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0,
      peak_value=optim.learning_rate,
      warmup_steps=warmup,
      decay_steps=max(int(total_steps), warmup + 1),
      end_value=optim.learning_rate * optim.final_lr_fraction)


def weight_decay_mask(params: nnx.State) -> Callable[[Any], Any]:
  """Decays weight matrices only: not norm parameters, not biases.

  Decided once from the Params' logical axis names, because shapes alone
  mislead: a norm scale stacked over layers is 2-D. Returned as a callable
  keyed by path because optax applies it to Variables at init and to raw
  arrays at update.
  """
  decayed = set()

  def visit(path, variable):
    names = tuple(variable.get_metadata().get("out_sharding") or ())
    value = variable.get_value()
    rank = value.ndim - sum(name == "layers" for name in names)
    is_bias = str(_dict_path(path)[-1]).endswith("bias")
    if rank >= 2 and "norm" not in names and not is_bias:
      decayed.add(_dict_path(path))

  jax.tree_util.tree_map_with_path(visit, params, is_leaf=lambda x: isinstance(x, nnx.Variable))

  def mask(tree):
    return jax.tree_util.tree_map_with_path(lambda path, _: _dict_path(path) in decayed, tree)

  return mask


def _dict_path(path) -> tuple[Any, ...]:
  """The state-dict keys of a path, without the `.value` step into a Variable."""
  return tuple(getattr(k, "key", getattr(k, "idx", None)) for k in path
               if not isinstance(k, jax.tree_util.GetAttrKey))


def make_optimizer(optim: ml_collections.ConfigDict, total_steps: int,
                   decay_mask: Callable[[Any], Any] | None = None
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Global-norm clipping, then AdamW on the schedule; returns the schedule too
  so the step can log the learning rate it actually used."""
  schedule = learning_rate_schedule(optim, total_steps)
  tx = optax.chain(
      optax.clip_by_global_norm(optim.grad_clip_norm),
      optax.adamw(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps,
                  weight_decay=optim.weight_decay, mask=decay_mask))
  return tx, schedule


def accumulate_gradients(loss_fn: LossFn, params: Any, batch_AxB: Mapping[str, jax.Array],
                         rng: jax.Array) -> tuple[Any, jax.Array, dict[str, jax.Array]]:
  """Mean loss, gradient and metrics over the A microbatches of `batch_AxB`.

  `loss_fn(params, microbatch, rng)` must return a mean over its microbatch;
  the result then equals one pass over the whole batch whenever microbatches
  weigh the same (e.g. same count of loss tokens). Gradients are summed in
  float32 so bfloat16 parameters do not lose small microbatch contributions.
  Microbatch i gets `fold_in(rng, i)`.
  """
  num_micro = jax.tree.leaves(batch_AxB)[0].shape[0]
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

  def body(grads_sum, xs):
    microbatch, index = xs
    (loss, metrics), grads = grad_fn(params, microbatch, jax.random.fold_in(rng, index))
    grads_sum = jax.tree.map(lambda s, g: s + g.astype(jnp.float32), grads_sum, grads)
    return grads_sum, (loss, metrics)

  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
  grads_sum, (losses, metrics) = jax.lax.scan(body, zeros, (batch_AxB, jnp.arange(num_micro)))
  grads = jax.tree.map(lambda g, p: (g / num_micro).astype(p.dtype), grads_sum, params)
  return grads, losses.mean(), jax.tree.map(jnp.mean, metrics)
