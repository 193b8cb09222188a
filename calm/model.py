"""CALM as an Algorithm of the one loop: one table-conditioned LM for both roles, a reward
token and an auxiliary action head.

The model (`CALMModel`) is BC's PrefixLM (the 32-row table prefix before the dialogue tokens)
plus two small pieces:

  reward token  a learned embedding of the dialogue's reward (success 1/0 of its, possibly
                relabeled, table), added to every prefix row rather than appended as a 33rd,
                so the prefix keeps the 32 rows every party, cache and `init_from` source is
                sized for. Decoding conditions on reward 1 (`embed_prefix`' default), so a
                CALM workdir is an agent party like any BC one (policy_io).
  action head   a head over the 63 final actions (calm/actions.py), read at the `[action]`
                marker of the agent's closing turn: the state that has decided to act but not
                yet written which action. Read after the block, it would learn to copy the
                submitted action (under relabeling always the expected one) and could not
                judge an imagined rollout (calm/planning.py). `head="linear"` maps the state
                to the 63 logits; `head="state"` (calm/state.py) tracks the customer's intent
                and solves the official rules under it, so it can only get wrong what the
                customer said; `head="pooled"` is the state head whose fields each attend over
                every state up to the marker; `head="shared"` the same with each return field
                reading its departure field's values (calm/state.py SHARED_READINGS).

With `config.model.copy_dim` the LM has a copy head (models/copy_head.py) whose sources are
the tokens the agent did not write, as a BC agent's: the closing block's name is then copied
from the customer's words, which a small LM otherwise writes from its vocabulary ("Gary White"
for "Rachel White"). Planning's reward-token score reads the vocabulary logits alone, so it
refuses such a model.

The loss (`CALM.loss`) is next-token cross-entropy on BOTH roles' tokens (the LM is the policy
on agent turns and the dynamics model on customer turns), plus `action_head_weight` times the
head's cross-entropy against the expected action: every flight tied at the lowest price is
correct, so the loss is -log of the summed probability of that set. Weight 0 is the 'CALM
without the auxiliary head' ablation: the head is still built and logged, nothing trains it.

Batch keys: the agent task's (structured prefix): `input_ids`, `attention_mask`, `speaker_ids`,
`prefix_fields`, `outcome` (the reward), and the columns calm/data.py adds: `action_position`
(index of the closing turn's `[action]` marker, -1 if the window holds none) and
`expected_classes_lo` / `_hi` (the expected classes as two 32-bit sets: class c is bit c of lo
for c < 32, bit c - 32 of hi otherwise).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import chex
import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from calm import actions, state
from data_pipelines import mdp
from ilql_dialogue import bc
from ilql_dialogue.algorithm import Batch, Metrics
from ilql_dialogue.models import copy_head
from ilql_dialogue.models.heads import Head
from ilql_dialogue.models.layers import normal, param
from ilql_dialogue.models.lm_loss import token_cross_entropy

ACTION_POSITION = "action_position"
EXPECTED_LO, EXPECTED_HI = "expected_classes_lo", "expected_classes_hi"
REWARD = "outcome"  # The MDP datasets' per-dialogue outcome: success 1/0.
BITS = 32
NUM_REWARDS = 2  # Reward token values: 0 (failure), 1 (success).


HEADS = ("linear", "state", "pooled", "shared")


class CALMModel(nnx.Module):
  """PrefixLM + reward embedding + 63-way action head (module docstring).

  Keeps the LM contract of bc.PrefixLM (`cfg`, `__call__`, `logits`,
  `embed_prefix`), so the sampler, LMParty and the online evaluation decode
  it unchanged; `init_from` loads the inner `lm` (a PrefixLM) and leaves the
  reward embedding and the head fresh.
  """

  def __init__(self, cfg, *, rngs: nnx.Rngs, head: str = "linear", head_hidden_dim: int = 0,
               reads: str = "all"):
    if head not in HEADS:
      raise ValueError(f"CALM action head {head!r}: expected one of {HEADS}")
    self.cfg = cfg
    self.lm = bc.PrefixLM(cfg, rngs=rngs)
    self.reward_embed = param(rngs, normal(cfg.init_std), (NUM_REWARDS, cfg.d_model),
                              (None, "embed"), cfg.weight_dtype)
    self.action_head = (
        Head(cfg, actions.NUM_ACTIONS, rngs=rngs, hidden_dim=head_hidden_dim) if head == "linear"
        else state.StateHead(cfg, rngs=rngs, pooled=head in ("pooled", "shared"),
                             shared=head == "shared", reads=reads))

  def embed_prefix(self, fields_BxPxF: jax.Array, reward_B: jax.Array | None = None
                   ) -> jax.Array:
    """The table rows, each plus the reward token's embedding (reward 1 when not given)."""
    rows_BxPxD = self.lm.embed_prefix(fields_BxPxF)
    batch = rows_BxPxD.shape[0]
    reward_B = (jnp.ones((batch,), jnp.int32) if reward_B is None
                else jnp.clip(jnp.round(reward_B), 0, NUM_REWARDS - 1).astype(jnp.int32))
    chex.assert_shape(reward_B, (batch,))
    offset_BxD = jnp.take(self.reward_embed[...], reward_B, axis=0)
    return (rows_BxPxD.astype(jnp.float32) + offset_BxD[:, None, :].astype(jnp.float32)
            ).astype(rows_BxPxD.dtype)

  def __call__(self, tokens_BxT, positions_BxT, token_mask_BxT, *, cache=None,
               prefix_BxPxD=None):
    return self.lm(tokens_BxT, positions_BxT, token_mask_BxT, cache=cache,
                   prefix_BxPxD=prefix_BxPxD)

  def logits(self, hidden_BxNxD: jax.Array) -> jax.Array:
    return self.lm.logits(hidden_BxNxD)

  def action_logits(self, hidden_BxTxD: jax.Array, mask_BxT: jax.Array, position_B: jax.Array,
                    fields_BxPxF: jax.Array, reads_BxT: jax.Array | None = None) -> jax.Array:
    """logits_BxA over the 63 final actions (calm/actions.py) at each row's `[action]` marker
    (position_B; -1 for none reads the first token), given the row's table (which the state
    head solves the rules on) and the states up to the marker (which the pooled one reads,
    where reads_BxT allows: state.others_reads)."""
    if isinstance(self.action_head, state.StateHead):
      return self.action_head(hidden_BxTxD, mask_BxT, position_B, fields_BxPxF, reads_BxT)
    return self.action_head(state.marker_hidden(hidden_BxTxD, position_B)[:, None, :])[:, 0]


def class_bits(classes: Sequence[int]) -> tuple[int, int]:
  """Action classes as the two 32-bit sets (lo, hi) the batches carry (`expected_set` reads)."""
  lo = sum(1 << c for c in classes if c < BITS)
  hi = sum(1 << (c - BITS) for c in classes if c >= BITS)
  return lo, hi


def expected_set(lo_B: jax.Array, hi_B: jax.Array) -> jax.Array:
  """bool [B, 63]: the two 32-bit class sets of the batch as one mask."""
  bits_K = jnp.arange(BITS, dtype=jnp.uint32)
  lo_BxK = (lo_B.astype(jnp.uint32)[:, None] >> bits_K) & 1
  hi_BxK = (hi_B.astype(jnp.uint32)[:, None] >> bits_K) & 1
  return jnp.concatenate([lo_BxK, hi_BxK], axis=1)[:, :actions.NUM_ACTIONS].astype(bool)


def action_head_metrics(logits_BxA: jax.Array, target_BxA: jax.Array, valid_B: jax.Array
                        ) -> tuple[jax.Array, Metrics]:
  """Mean -log P(expected set) over valid rows, and how often the argmax is in the set.

  A row counts when it has a decision state (`valid_B`) and a non-empty set.
  """
  chex.assert_equal_shape([logits_BxA, target_BxA])
  logits_BxA = logits_BxA.astype(jnp.float32)
  valid_B = valid_B & jnp.any(target_BxA, axis=-1)
  log_set_B = (jax.nn.logsumexp(jnp.where(target_BxA, logits_BxA, -jnp.inf), axis=-1)
               - jax.nn.logsumexp(logits_BxA, axis=-1))
  hit_B = jnp.take_along_axis(target_BxA, jnp.argmax(logits_BxA, axis=-1)[:, None], axis=-1)[:, 0]
  weights_B = valid_B.astype(jnp.float32)
  count = jnp.maximum(weights_B.sum(), 1.0)
  loss = -(jnp.where(valid_B, log_set_B, 0.0) * weights_B).sum() / count
  accuracy = (hit_B * weights_B).sum() / count
  return loss, {"action_head/loss": loss, "action_head/accuracy": accuracy,
                "action_head/rows": weights_B.sum()}


@dataclasses.dataclass(frozen=True)
class CALM:
  """The CALM Algorithm (module docstring). `head` is "linear" (`head_hidden_dim` 0: no hidden
  layer), "state" or "pooled" (with `state_weight` on the tracking loss where a batch has the
  intent)."""

  action_head_weight: float = 1.0
  head: str = "linear"
  head_hidden_dim: int = 0
  state_weight: float = 1.0
  reads: str = "all"  # A pooled head's: "all" positions, or "others" (not the agent's turns).

  FIELDS = ("action_head_weight", "head", "head_hidden_dim", "state_weight", "reads")

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> "CALM":
    fields = {k: v for k, v in config.algorithm.items() if k != "name"}
    unknown = sorted(set(fields) - set(cls.FIELDS))
    if unknown:
      raise ValueError(f"config.algorithm: unknown fields {unknown}; known: {list(cls.FIELDS)}")
    return cls(**fields)

  def init(self, config: ml_collections.ConfigDict, rngs: nnx.Rngs) -> CALMModel:
    cfg = bc.model_config(config)
    if not cfg.prefix_field_vocab_sizes:
      raise ValueError("CALM reads the table as a structured prefix: the task must have "
                       "context='prefix' (config.task.context)")
    return CALMModel(cfg, rngs=rngs, head=self.head, head_hidden_dim=self.head_hidden_dim,
                     reads=self.reads)

  def loss(self, model: CALMModel, batch: Batch, rng: jax.Array) -> tuple[jax.Array, Metrics]:
    del rng  # Deterministic.
    missing = [k for k in (bc.PREFIX_FIELDS, REWARD, ACTION_POSITION, EXPECTED_LO, EXPECTED_HI)
               if k not in batch]
    if missing:
      raise ValueError(f"CALM batch lacks {missing}: train on the datasets calm/data.py prepares "
                       f"(config.task.root = its out_root)")
    tokens_BxT = batch["input_ids"]
    mask_BxT = batch["attention_mask"].astype(bool)
    chex.assert_rank(tokens_BxT, 2)
    prefix_BxPxD = model.embed_prefix(batch[bc.PREFIX_FIELDS], batch[REWARD])
    hidden_BxTxD, _ = model(tokens_BxT, bc.positions_from_mask(mask_BxT), mask_BxT,
                            prefix_BxPxD=prefix_BxPxD)
    # With a copy head (config.model.copy_dim) every token may also point at an earlier token
    # the agent did not write: the customer's words, which its name and airports come from.
    ce_BxT, correct_BxT = token_cross_entropy(
        model.logits, hidden_BxTxD[:, :-1], tokens_BxT[:, 1:],
        score_fn=copy_head.sequence_score_fn(model, hidden_BxTxD, tokens_BxT,
                                             copy_head.source_mask(mask_BxT,
                                                                   batch["action_mask"])))
    speaker_BxT = batch["speaker_ids"][:, 1:]
    dialogue_BxT = mask_BxT[:, 1:] & (speaker_BxT != mdp.CONTEXT_SPEAKER)
    lm_loss, metrics = bc.weighted_metrics(ce_BxT, correct_BxT, dialogue_BxT)
    agent_BxT = dialogue_BxT & batch["action_mask"][:, 1:].astype(bool)
    metrics["agent_loss"], _ = bc.weighted_metrics(ce_BxT, correct_BxT, agent_BxT)
    # The dynamics half: the customer's turns and the speaker tokens the environment forces.
    metrics["dynamics_loss"], _ = bc.weighted_metrics(ce_BxT, correct_BxT,
                                                      dialogue_BxT & ~agent_BxT)
    metrics["lm_loss"] = lm_loss
    position_B, fields_BxPxF = batch[ACTION_POSITION], batch[bc.PREFIX_FIELDS]
    # Not the agent's own turns: what decoding's state.others_reads computes from the tokens.
    reads_BxT = mask_BxT & ~batch["action_mask"].astype(bool)
    tracked = (model.action_head.tracked(hidden_BxTxD, mask_BxT, position_B, reads_BxT)
               if isinstance(model.action_head, state.StateHead) else None)
    codes_BxK = state.batch_codes(batch)
    has_state_B = (position_B >= 0) & batch.get("row_mask", True)
    if tracked is None:
      logits_BxA = model.action_logits(hidden_BxTxD, mask_BxT, position_B, fields_BxPxF,
                                       reads_BxT)
    else:
      logits_BxA = state.solve(tracked, fields_BxPxF)
    head_loss, head_metrics = action_head_metrics(
        logits_BxA, expected_set(batch[EXPECTED_LO], batch[EXPECTED_HI]), has_state_B)
    loss = lm_loss + self.action_head_weight * head_loss
    if tracked is not None and codes_BxK is not None:
      state_loss, state_metrics = state.tracking_loss(tracked, codes_BxK, has_state_B)
      loss = loss + self.state_weight * state_loss
      head_metrics.update(state_metrics)
    return loss, {**metrics, **head_metrics, "loss": loss}
