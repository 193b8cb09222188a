"""The trained policy and the frozen reference its KL term is measured against.

One module, so the reference is sharded and checkpointed with the policy
(exact resume restores it) and `config.model.init_from` writes the starting
weights into both (init_from.language_models finds every LM). The reference
holds `Reference` variables, not `nnx.Param`s: the loop's optimizer updates
Params only, so the reference never moves.

PPO's critic is a value head on the policy's trunk (shared features, its
loss weighted by vf_coef), so the state holds one trunk to train.

The module speaks the LM contract by delegating to the policy, so a GRPO
workdir loads as a party like any BC workdir (policy_io).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


class Reference(nnx.Variable):
  """A frozen copy of a policy parameter: no gradient, no optimizer state."""


def frozen_copy(module: nnx.Module) -> nnx.Module:
  """A copy of `module` whose Params are References (fresh buffers: the train
  state is donated, and two variables sharing a buffer would donate it twice)."""
  graphdef, state = nnx.split(module)

  def to_reference(variable):
    if not isinstance(variable, nnx.Param):
      return variable
    return Reference(jnp.copy(variable.get_value()), **variable.get_metadata())

  return nnx.merge(graphdef, jax.tree.map(to_reference, state,
                                          is_leaf=lambda x: isinstance(x, nnx.Variable)))


class PolicyWithReference(nnx.Module):
  """`policy` (trained) and `reference` (its frozen start), same architecture; PPO adds
  `value_head`, a scalar head on the policy's hidden states (fresh under init_from)."""

  def __init__(self, policy: nnx.Module, value_head: nnx.Module | None = None):
    self.policy = policy
    self.reference = frozen_copy(policy)
    self.value_head = value_head

  @property
  def cfg(self):
    return self.policy.cfg

  def __call__(self, tokens_BxT, positions_BxT, token_mask_BxT, *, cache=None,
               prefix_BxPxD=None):
    return self.policy(tokens_BxT, positions_BxT, token_mask_BxT, cache=cache,
                       prefix_BxPxD=prefix_BxPxD)

  def logits(self, hidden_BxNxD: jax.Array) -> jax.Array:
    return self.policy.logits(hidden_BxNxD)

  def embed_prefix(self, fields_BxPxF: jax.Array) -> jax.Array:
    return self.policy.embed_prefix(fields_BxPxF)
