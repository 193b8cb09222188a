"""ILQL as its reference trains it: detached value inputs, MLP heads, per-utterance CQL,
and beta = 0 in every selection sweep."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from experiments.configs import ilql_airdialogue_quick
from ilql_dialogue import ilql
from workflows import evaluate as evaluate_lib
from tests.test_ilql_losses import _tiny_model_config, five_token_batch


def _trunk_grads(config, batch):
  """Gradient of the loss on the value trunk's parameters (the shared trunk here)."""
  algorithm = ilql.ILQL.from_config(config)
  model = algorithm.init(config, nnx.Rngs(0))
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  grads = jax.grad(lambda p: algorithm.loss(nnx.merge(graphdef, p, rest), batch, None)[0])(params)
  return nnx.state(nnx.merge(graphdef, grads, rest).trunk, nnx.Param)


@pytest.mark.parametrize("separate_policy", [False, True])
def test_detached_heads_send_no_value_gradient_into_the_trunk(separate_policy):
  batch = {k: jnp.asarray(v) for k, v in five_token_batch().items()}
  # Only the value losses: with the BC term off, a detached trunk gets exactly zero.
  detached = _trunk_grads(_tiny_model_config(bc_weight=0.0, detach_q=True, detach_v=True,
                                             separate_policy=separate_policy), batch)
  assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(detached))
  attached = _trunk_grads(_tiny_model_config(bc_weight=0.0, separate_policy=separate_policy),
                          batch)
  assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(attached)) > 0.0


def test_heads_default_to_mlps_twice_the_model_width():
  config = _tiny_model_config()
  assert config.algorithm.head_hidden_dim == -1
  model = ilql.ILQL.from_config(config).init(config, nnx.Rngs(0))
  assert model.q_heads[0].hidden_kernel.shape == (16, 32)
  assert model.v_head.hidden_kernel.shape == (16, 32)
  linear = _tiny_model_config(head_hidden_dim=0)
  assert ilql.ILQL.from_config(linear).init(linear, nnx.Rngs(0)).v_head.hidden_kernel is None


def test_utterance_lengths_and_per_utterance_cql():
  """Two utterances of 3 and 1 action tokens: per-utterance CQL weighs each utterance once."""
  action_BxT = jnp.array([[0, 1, 1, 1, 0, 1]], bool)
  end_BxT = jnp.array([[0, 0, 0, 1, 0, 1]], bool)
  np.testing.assert_array_equal(np.asarray(ilql.utterance_lengths(action_BxT, end_BxT))[0, 1:],
                                [3, 3, 3, 1, 1])
  batch = {"input_ids": jnp.array([[1, 5, 6, 3, 2, 5]], jnp.int32),
           "attention_mask": jnp.ones((1, 6), bool), "action_mask": action_BxT,
           "utterance_end": end_BxT, "rewards": jnp.zeros((1, 6)),
           "terminal": jnp.array([[0, 0, 0, 0, 0, 1]], bool),
           "next_token_index": jnp.array([[-1, 1, 2, 4, -1, -1]], jnp.int32)}
  tr = ilql.gather_transitions(batch, 4, 0.9, "utterance", per_utterance=True)
  np.testing.assert_allclose(np.asarray(tr.utterance_share_BxK), [[1 / 3, 1 / 3, 1 / 3, 1.0]])
  # With Q_taken = 0 and the other 7 entries log((e^gap - 1) / 7), logsumexp Q - Q_taken = gap.
  # Gaps 1, 2, 3 (one utterance) and 10 (another): per token (1 + 2 + 3 + 10) / 4 = 4,
  # per utterance ((1 + 2 + 3) / 3 + 10) / 2 = 6.
  vocab = 8
  gaps = jnp.array([1.0, 2.0, 3.0, 10.0])
  taken_BxKxV = jnp.arange(vocab)[None, None, :] == tr.action_BxK[..., None]
  q = jnp.where(taken_BxKxV, 0.0, jnp.log((jnp.exp(gaps) - 1.0) / (vocab - 1))[None, :, None])
  zeros = jnp.zeros((1, 4))
  for normalization, expected in (("token", 4.0), ("utterance", 6.0)):
    cfg = ilql.ILQLConfig(cql_normalization=normalization)
    _, metrics = ilql.ilql_loss_terms((q,), (q,), zeros, zeros, jnp.zeros((1, 4, vocab)), tr,
                                      cfg)
    assert float(metrics["cql_loss"]) == pytest.approx(expected, rel=1e-5)


def test_every_guidance_sweep_includes_beta_zero():
  assert ilql_airdialogue_quick.GUIDANCE_BETAS[0] == 0.0
  assert ilql_airdialogue_quick.get_config().online_eval.betas[0] == 0.0


def test_selection_picks_beta_zero_when_guidance_does_not_help():
  assert evaluate_lib.best_beta({0.0: 0.40, 1.0: 0.35, 4.0: 0.10}) == 0.0
  assert evaluate_lib.best_beta({0.0: 0.40, 1.0: 0.40, 4.0: 0.10}) == 0.0  # Ties: no guidance.
  assert evaluate_lib.best_beta({0.0: 0.40, 1.0: 0.45, 4.0: 0.10}) == 1.0
