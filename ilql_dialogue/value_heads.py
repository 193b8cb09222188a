"""The ILQL model: one trunk, the policy's LM head, Q heads, a V head and their targets.

The trunk is any module with the LM contract (models.Transformer, or
bc.PrefixLM for a structured context, possibly from a pretrained checkpoint);
the heads are sized by the ModelConfig. Shared trunk (default): the policy
logits come from the trunk's own LM head, so a train step runs the trunk once
and decoding runs it once per token (the value heads read the sampler's
hidden state). `separate_policy` adds a second trunk for the policy, which
keeps value gradients out of the language model at the price of a second
forward.

Target networks are copies whose variables are `Target`, not `nnx.Param`: the
optimizer (which updates Params only) never touches them, they keep the
logical axis names of their source (so they are sharded like it) and they are
checkpointed with the rest of the state. `polyak_update` moves them towards
the online weights inside the jitted step.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.heads import ScalarHead, VocabHead
from ilql_dialogue.models.transformer import Transformer

# rngs -> a module with the trunk contract (Transformer, bc.PrefixLM, a pretrained one).
TrunkFactory = Callable[[nnx.Rngs], nnx.Module]


class Target(nnx.Variable):
  """A Polyak-averaged copy of a parameter: no gradient, no optimizer state."""


def target_copy(module: nnx.Module) -> nnx.Module:
  """A copy of `module` whose Params are Targets (fresh buffers, same metadata).

  Fresh buffers because the train state is donated to the step: two variables
  sharing one buffer would donate it twice.
  """
  graphdef, state = nnx.split(module)

  def to_target(variable):
    if not isinstance(variable, nnx.Param):
      return variable
    return Target(jnp.copy(variable.get_value()), **variable.get_metadata())

  return nnx.merge(graphdef, jax.tree.map(to_target, state,
                                          is_leaf=lambda x: isinstance(x, nnx.Variable)))


def polyak_update(target: nnx.Module, online: nnx.Module, rate: float) -> None:
  """target <- rate * online + (1 - rate) * target, in place (same module structure)."""
  target_state = nnx.state(target, Target)
  online_values = nnx.to_pure_dict(nnx.state(online, nnx.Param))
  averaged = optax.incremental_update(online_values, nnx.to_pure_dict(target_state), rate)
  nnx.replace_by_pure_dict(target_state, averaged)
  nnx.update(target, target_state)


class ILQLModel(nnx.Module):
  """Trunk(s) plus value heads; heads run on gathered hidden states only.

  Attributes:
    trunk: the value trunk, and the policy too unless `policy_trunk` is set.
    policy_trunk: separate policy trunk or None.
    q_heads: `num_q_heads` vocabulary-sized Q heads (ILQL uses two and takes
      their minimum against over-estimation).
    v_head: scalar V head.
    target_q_heads: Target copies of `q_heads`, or None (`target_q=False`,
      e.g. for Monte-Carlo regression, which has no bootstrap).
    target_trunk: Target copy of `trunk` for the target Q heads, or None (the
      target heads then read the online trunk's hidden states).
  """

  def __init__(self, cfg: ModelConfig, make_trunk: TrunkFactory | None = None, *,
               rngs: nnx.Rngs, num_q_heads: int = 2, head_hidden_dim: int = 0,
               separate_policy: bool = False, target_q: bool = True,
               target_trunk: bool = False):
    if num_q_heads < 1:
      raise ValueError(f"num_q_heads={num_q_heads} must be >= 1")
    if target_trunk and not target_q:
      raise ValueError("target_trunk=True needs target_q=True: only target Q heads read it")
    make_trunk = make_trunk or (lambda rngs: Transformer(cfg, rngs=rngs))
    self.cfg = cfg
    self.trunk = make_trunk(rngs)
    self.policy_trunk = make_trunk(rngs) if separate_policy else None
    self.q_heads = nnx.List([VocabHead(cfg, rngs=rngs, hidden_dim=head_hidden_dim)
                             for _ in range(num_q_heads)])
    self.v_head = ScalarHead(cfg, rngs=rngs, hidden_dim=head_hidden_dim)
    self.target_q_heads = (nnx.List([target_copy(h) for h in self.q_heads])
                           if target_q else None)
    self.target_trunk = target_copy(self.trunk) if target_trunk else None

  @property
  def policy(self) -> nnx.Module:
    """The module that produces the policy's logits (what a sampler decodes with)."""
    return self.trunk if self.policy_trunk is None else self.policy_trunk

  def q_values(self, hidden_BxKxD: jax.Array, *, target: bool = False) -> tuple[jax.Array, ...]:
    """Q_BxKxV (float32) of each head. A tuple, not a stacked array: stacking
    would copy every [B, K, V] block forward and backward for nothing."""
    heads = self.target_q_heads if target else self.q_heads
    if heads is None:
      raise ValueError("this ILQLModel was built with target_q=False")
    return tuple(head(hidden_BxKxD) for head in heads)

  def update_targets(self, rate: float) -> None:
    """Polyak-averages the targets towards the online weights (in place)."""
    if self.target_q_heads is not None:
      for target, online in zip(self.target_q_heads, self.q_heads):
        polyak_update(target, online, rate)
    if self.target_trunk is not None:
      polyak_update(self.target_trunk, self.trunk, rate)
