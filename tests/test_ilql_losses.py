"""ILQL's transitions and losses against numbers computed independently, here, by loops."""

import functools
import math

import jax
import jax.extend
import datasets
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from data_pipelines import mdp
from data_pipelines.dialogue import Dialogue, Turn
from data_pipelines.tokenization import train_tokenizer
from experiments.configs import ilql_airdialogue_quick
from ilql_dialogue import baselines, ilql, sharding, train_loop
from ilql_dialogue.bc import positions_from_mask
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.value_heads import ILQLModel, Target

GAMMA = 0.9
CTX, SPK, EOT, A, B, C = 1, 2, 3, 5, 6, 7
VOCAB = 8


def five_token_batch():
  """Row 0: one utterance [A B EOT] that ends the dialogue (terminal, reward 1).
  Row 1: a window cut inside an utterance [A B C]: truncated, so the last
  action bootstraps from V(h_4)."""
  return {
      "input_ids": np.array([[CTX, SPK, A, B, EOT], [CTX, SPK, A, B, C]], np.int32),
      "attention_mask": np.ones((2, 5), bool),
      "action_mask": np.array([[0, 0, 1, 1, 1]] * 2, bool),
      "utterance_end": np.array([[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]], bool),
      "rewards": np.array([[0, 0, 0, 0, 1.0], [0, 0, 0, 0, 0]], np.float32),
      "terminal": np.array([[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]], bool),
      "next_token_index": np.array([[-1, -1, 2, 3, -1], [-1, -1, 2, 3, 4]], np.int32),
      "next_utterance_index": np.full((2, 5), -1, np.int32),
  }


def test_q_at_position_t_is_paired_with_token_t_plus_1():
  tr = ilql.gather_transitions(five_token_batch(), 4, GAMMA, "token")
  mask = np.asarray(tr.mask_BxK)
  np.testing.assert_array_equal(mask, [[1, 1, 1, 0]] * 2)
  np.testing.assert_array_equal(np.asarray(tr.state_BxK)[mask], [1, 2, 3, 1, 2, 3])
  np.testing.assert_array_equal(np.asarray(tr.action_BxK)[mask], [A, B, EOT, A, B, C])
  np.testing.assert_array_equal(np.asarray(tr.next_state_BxK)[mask], [2, 3, -1, 2, 3, 4])
  np.testing.assert_array_equal(np.asarray(tr.reward_BxK)[mask], [0, 0, 1, 0, 0, 0])
  np.testing.assert_array_equal(np.asarray(tr.td_mask_BxK), mask)


def test_terminal_stops_the_bootstrap_and_truncated_bootstraps():
  for mode, inside in (("token", GAMMA), ("utterance", 1.0)):
    tr = ilql.gather_transitions(five_token_batch(), 4, GAMMA, mode)
    discount = np.asarray(tr.discount_BxK)[np.asarray(tr.mask_BxK)]
    # Row 0's EOT is terminal: no bootstrap. Row 1 is cut mid-utterance: its
    # last token bootstraps from the next state like any other.
    np.testing.assert_allclose(discount, [inside, inside, 0.0, inside, inside, inside])


@functools.cache
def _tokenizer():
  turns = ["hello there friend", "hi", "how are you doing today", "good thanks"]
  return train_tokenizer(turns * 10, ("agent", "user"), vocab_size=300)


def test_next_state_skips_the_other_speakers_tokens_with_one_discount():
  tok = _tokenizer()
  dialogue = Dialogue("d0", ("agent", "user"), (
      Turn("agent", "hello there friend", reward=0.5), Turn("user", "how are you doing today"),
      Turn("agent", "good thanks")), {}, 1.0)
  example = mdp.dialogue_to_example(dialogue, tok, "agent", 64, include_context=False)
  batch = {k: np.asarray(example[k])[None] for k in mdp.TOKEN_COLUMNS}
  ids = batch["input_ids"][0]
  eots = np.flatnonzero(ids == tok.eot_id)
  agent_speaker = np.flatnonzero(ids == tok.speaker_token_ids["agent"])
  first_eot, next_agent_turn = eots[0], agent_speaker[1]
  for mode in ("token", "utterance"):
    tr = ilql.gather_transitions(batch, 63, GAMMA, mode)
    k = int(np.flatnonzero(np.asarray(tr.state_BxK)[0] == first_eot - 1)[0])
    assert int(tr.action_BxK[0, k]) == tok.eot_id
    # The next decision state is the agent's next speaker token (which emits
    # its first text token), past all of the user's tokens.
    assert int(tr.next_state_BxK[0, k]) == next_agent_turn
    assert next_agent_turn - first_eot > 3
    assert float(tr.discount_BxK[0, k]) == pytest.approx(GAMMA)
    assert float(tr.reward_BxK[0, k]) == pytest.approx(0.5)


def _expected_losses(q, tq, v_states, v_all, logits, batch, cfg):
  """The ILQL formulas of docs/METHODS.md, one transition at a time."""
  q_terms, v_terms, cql_terms, bc_terms, bc_weights = [[], []], [], [[], []], [], []
  for b in range(batch["input_ids"].shape[0]):
    for i in np.flatnonzero(batch["action_mask"][b]):
      s, a = i - 1, batch["input_ids"][b, i]
      nxt = batch["next_token_index"][b, i]
      terminal = batch["terminal"][b, i]
      gamma = cfg.gamma if cfg.discount == "token" else (
          cfg.gamma if batch["utterance_end"][b, i] else 1.0)
      v_next = 0.0 if terminal else v_all[b, nxt]
      target = batch["rewards"][b, i] + (0.0 if terminal else gamma) * v_next
      q_hat = min(tq[0][b, s, a], tq[1][b, s, a])
      for n in range(2):
        q_terms[n].append((target - q[n][b, s, a]) ** 2)
        cql_terms[n].append(math.log(sum(math.exp(x) for x in q[n][b, s])) - q[n][b, s, a])
      diff = q_hat - v_states[b, s]
      v_terms.append((cfg.tau if diff >= 0 else 1 - cfg.tau) * diff ** 2)
      weight = 1.0 if cfg.awac_temperature == 0 else min(
          math.exp(diff / cfg.awac_temperature), cfg.awac_max_weight)
      log_z = math.log(sum(math.exp(x) for x in logits[b, s]))
      bc_terms.append(weight * (log_z - logits[b, s, a]))
      bc_weights.append(weight)
  mean = lambda xs: sum(xs) / len(xs)
  q_loss = mean(q_terms[0]) + mean(q_terms[1])
  cql_loss = mean(cql_terms[0]) + mean(cql_terms[1])
  total = q_loss + mean(v_terms) + cfg.cql_weight * cql_loss + cfg.bc_weight * mean(bc_terms)
  return {"loss": total, "q_loss": q_loss, "v_loss": mean(v_terms), "cql_loss": cql_loss,
          "bc_loss": mean(bc_terms), "bc_weight_mean": mean(bc_weights)}


@pytest.mark.parametrize("discount,awac", [("token", 0.0), ("utterance", 0.5)])
def test_every_loss_term_on_the_five_token_example(discount, awac):
  cfg = ilql.ILQLConfig(gamma=GAMMA, tau=0.7, cql_weight=0.3, bc_weight=0.5,
                        awac_temperature=awac, awac_max_weight=1.5, discount=discount)
  batch = five_token_batch()
  rng = np.random.default_rng(0)
  q = rng.normal(size=(2, 2, 5, VOCAB)).astype(np.float32)  # [head, B, T, V] at every state.
  tq = (q + rng.normal(scale=0.3, size=q.shape)).astype(np.float32)
  v_all = rng.normal(size=(2, 5)).astype(np.float32)
  logits = rng.normal(size=(2, 5, VOCAB)).astype(np.float32)

  tr = ilql.gather_transitions(batch, 4, cfg.gamma, cfg.discount)
  at_states = lambda x: np.take_along_axis(
      x, np.asarray(tr.state_BxK)[(None,) * (x.ndim - 3) + (..., None)], axis=-2)
  loss, metrics = ilql.ilql_loss_terms(
      jnp.asarray(at_states(q)), jnp.asarray(at_states(tq)),
      jnp.asarray(np.take_along_axis(v_all, np.asarray(tr.state_BxK), 1)),
      jnp.asarray(np.take_along_axis(v_all, np.maximum(np.asarray(tr.next_state_BxK), 0), 1)),
      jnp.asarray(at_states(logits[None])[0]), tr, cfg)
  expected = _expected_losses(q, tq, v_all, v_all, logits, batch, cfg)
  assert float(loss) == pytest.approx(expected["loss"], rel=1e-5)
  for name in ("q_loss", "v_loss", "cql_loss", "bc_loss", "bc_weight_mean"):
    assert float(metrics[name]) == pytest.approx(expected[name], rel=1e-5), name


def _tiny_model_config(**algorithm):
  c = ilql_airdialogue_quick.get_config()
  c.model = ml_collections.ConfigDict(dict(
      family="gpt2", vocab_size=VOCAB, num_layers=1, d_model=16, num_heads=2, num_kv_heads=2,
      head_dim=8, mlp_dim=32, max_seq_len=32))
  c.algorithm.update(gamma=GAMMA, **algorithm)
  c.train.update(batch_size=2, steps=10)
  return c


def test_model_loss_reads_q_and_v_at_the_state_before_each_action():
  config = _tiny_model_config(discount="token", cql_weight=0.2)
  algorithm = ilql.ILQL.from_config(config)
  model = algorithm.init(config, nnx.Rngs(0))
  batch = five_token_batch()
  graphdef, state = nnx.split(model)
  loss, metrics = jax.jit(lambda state, batch: algorithm.loss(
      nnx.merge(graphdef, state), batch, None))(state, batch)

  mask = jnp.asarray(batch["attention_mask"])
  hidden = model.trunk(jnp.asarray(batch["input_ids"]), positions_from_mask(mask), mask)[0]
  q = np.asarray(model.q_values(hidden))  # Every head at every position.
  tq = np.asarray(model.q_values(hidden, target=True))
  v_all = np.asarray(model.v_head(hidden))
  logits = np.asarray(model.trunk.logits(hidden))
  expected = _expected_losses(q, tq, v_all, v_all, logits, batch, algorithm.cfg)
  assert float(loss) == pytest.approx(expected["loss"], rel=1e-4)
  assert float(metrics["q_loss"]) == pytest.approx(expected["q_loss"], rel=1e-4)


def _every_other_token_batch(rows, length):
  """Random tokens; every odd position is an action, each bootstrapping from the next state."""
  rng = np.random.default_rng(0)
  return {
      "input_ids": rng.integers(1, VOCAB, (rows, length)).astype(np.int32),
      "attention_mask": np.ones((rows, length), bool),
      "action_mask": np.tile(np.arange(length) % 2 == 1, (rows, 1)),
      "utterance_end": np.zeros((rows, length), bool),
      "rewards": rng.normal(size=(rows, length)).astype(np.float32),
      "terminal": np.zeros((rows, length), bool),
      "next_token_index": np.tile(np.where(np.arange(length) < length - 1,
                                           np.arange(length), -1), (rows, 1)).astype(np.int32),
  }


def test_actions_over_the_budget_make_the_loss_nan():
  batch = _every_other_token_batch(2, 32)  # 16 actions per row.
  assert ilql.action_budget(32, 0.25) == 8
  tr = ilql.gather_transitions(batch, 8, GAMMA, "token")
  np.testing.assert_array_equal(np.asarray(tr.overflow_B), [8, 8])
  loss, metrics = ilql.fail_on_overflow(jnp.float32(1.0), {}, tr.overflow_B)
  assert np.isnan(float(loss)) and float(metrics["actions_over_budget"]) == 8.0
  tr = ilql.gather_transitions(batch, ilql.action_budget(32, 0.5), GAMMA, "token")
  loss, metrics = ilql.fail_on_overflow(jnp.float32(1.0), {}, tr.overflow_B)
  assert float(loss) == 1.0 and float(metrics["actions_over_budget"]) == 0.0


def test_polyak_arithmetic():
  cfg = ModelConfig.gpt2(vocab_size=VOCAB, num_layers=1, d_model=8, num_heads=2, max_seq_len=8)
  model = ILQLModel(cfg, rngs=nnx.Rngs(0), target_trunk=True)
  online = model.q_heads[0].out_kernel
  target = model.target_q_heads[0].out_kernel
  online[...] = jnp.full(online.shape, 3.0)
  target[...] = jnp.full(target.shape, 1.0)
  model.trunk.embed[...] = jnp.full(model.trunk.embed.shape, 2.0)
  model.target_trunk.embed[...] = jnp.zeros(model.trunk.embed.shape)
  model.update_targets(0.25)
  np.testing.assert_allclose(np.asarray(target[...]), 0.25 * 3.0 + 0.75 * 1.0)
  np.testing.assert_allclose(np.asarray(model.target_trunk.embed[...]), 0.5)
  np.testing.assert_allclose(np.asarray(online[...]), 3.0)  # The source is untouched.
  assert isinstance(target, Target) and not isinstance(target, nnx.Param)


def test_targets_follow_the_online_weights_inside_the_jitted_train_step():
  rate = 0.3
  config = _tiny_model_config(polyak_rate=rate, target_trunk=True)
  mesh = sharding.make_mesh()
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, ilql.ILQL.from_config(config), mesh)
    state = training.init()
    before = nnx.merge(training.graphdef, state).model
    target_before = jax.device_get(nnx.to_pure_dict(nnx.state(before.target_q_heads, Target)))
    online_before = jax.device_get(nnx.to_pure_dict(nnx.state(before.q_heads, nnx.Param)))
    batch = {k: np.asarray(v) for k, v in five_token_batch().items()}
    for _ in range(2):  # Step 1 is at learning rate 0 (warmup); step 2 moves the weights.
      state, metrics = training.step(state, train_loop.place_batch(batch, config, mesh))
    after = nnx.merge(training.graphdef, state).model
  assert np.isfinite(float(metrics["loss"]))
  online_after = jax.device_get(nnx.to_pure_dict(nnx.state(after.q_heads, nnx.Param)))
  target_after = jax.device_get(nnx.to_pure_dict(nnx.state(after.target_q_heads, Target)))
  assert jax.tree.leaves(target_before)[0] == pytest.approx(jax.tree.leaves(online_before)[0])
  step1 = jax.tree.map(lambda o, t: rate * o + (1 - rate) * t, online_before, target_before)
  expected = jax.tree.map(lambda o, t: rate * o + (1 - rate) * t, online_after, step1)
  moved = jax.tree.map(lambda a, b: np.abs(a - b).max(), online_after, online_before)
  assert max(jax.tree.leaves(moved)) > 1e-4  # The online weights did change.
  jax.tree.map(lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7),
               target_after, expected)


def test_memory_stays_linear_in_batch_times_length():
  """No intermediate of the loss (or its gradient) is as large as a (B*T)^2 pairing matrix."""
  config = _tiny_model_config()
  algorithm = ilql.ILQL.from_config(config)
  model = algorithm.init(config, nnx.Rngs(0))
  rows, length = 8, 16
  batch = _every_other_token_batch(rows, length)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def loss_fn(params, batch):
    return algorithm.loss(nnx.merge(graphdef, params, rest), batch, None)[0]

  jaxpr = jax.make_jaxpr(jax.grad(loss_fn))(params, batch)
  sizes = []

  def visit(jpr):
    for eqn in jpr.eqns:
      sizes.extend(math.prod(v.aval.shape) for v in eqn.outvars if hasattr(v.aval, "shape"))
      for sub in jax.extend.core.jaxprs_in_params(eqn.params):
        visit(sub)

  visit(jaxpr.jaxpr)
  assert max(sizes) < (rows * length) ** 2, max(sizes)


def test_config_errors_name_the_field():
  with pytest.raises(ValueError, match="tau=1.5"):
    ilql.ILQLConfig(tau=1.5)
  with pytest.raises(ValueError, match="discount='episode'"):
    ilql.ILQLConfig(discount="episode")
  with pytest.raises(ValueError, match=r"unknown fields \['gama'\]"):
    ilql.ILQLConfig.from_config(ml_collections.ConfigDict({"name": "ilql", "gama": 0.9}))


# Baselines (ilql_dialogue/baselines.py): returns-to-go, the MC loss, the return filter.


def _two_utterance_batch():
  """Agent [a EOT] (turn reward 0.5), user [u EOT], agent [b EOT] (terminal, reward 1)."""
  action = np.zeros((1, 10), bool)
  action[0, [2, 3, 8, 9]] = True
  end = np.zeros((1, 10), bool)
  end[0, [3, 9]] = True
  rewards = np.zeros((1, 10), np.float32)
  rewards[0, 3], rewards[0, 9] = 0.5, 1.0
  terminal = np.zeros((1, 10), bool)
  terminal[0, 9] = True
  return {"input_ids": np.array([[CTX, SPK, A, EOT, SPK, B, EOT, SPK, C, EOT]], np.int32),
          "attention_mask": np.ones((1, 10), bool), "action_mask": action,
          "utterance_end": end, "rewards": rewards, "terminal": terminal}


@pytest.mark.parametrize("mode", ["token", "utterance"])
def test_returns_to_go_use_ilqls_discounting(mode):
  batch = _two_utterance_batch()
  g = lambda i: GAMMA if mode == "token" or batch["utterance_end"][0, i] else 1.0
  g9 = 1.0
  g8 = g(8) * g9
  g3 = 0.5 + g(3) * g8  # The user's tokens between 3 and 8 are skipped, one discount.
  g2 = g(2) * g3
  got = np.asarray(baselines.returns_to_go(batch, GAMMA, mode))[0]
  np.testing.assert_allclose(got[[2, 3, 8, 9]], [g2, g3, g8, g9], rtol=1e-6)
  np.testing.assert_array_equal(got[[0, 1, 4, 5, 6, 7]], 0.0)


def test_returns_to_go_stop_at_a_terminal():
  batch = _two_utterance_batch()
  batch["terminal"][0, 3] = True  # An episode ending at 3: what follows is not its future.
  got = np.asarray(baselines.returns_to_go(batch, GAMMA, "token"))[0]
  np.testing.assert_allclose(got[[2, 3]], [GAMMA * 0.5, 0.5], rtol=1e-6)


def test_mc_loss_terms_by_hand():
  cfg = baselines.MCConfig(value_weight=0.5, awr_temperature=2.0, awr_max_weight=1.2)
  q = np.array([[0.1, 0.4, 0.0]], np.float32)
  v = np.array([[0.3, -0.2, 0.0]], np.float32)
  g = np.array([[1.0, 0.0, 0.0]], np.float32)
  logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [1 / 3] * 3]], np.float32))
  actions = np.array([[0, 2, 1]], np.int32)
  bc_mask = np.array([[1, 1, 0]], bool)
  value_mask = np.array([[1, 0, 0]], bool)  # Slot 1 is from a truncated row.
  loss, metrics = baselines.mc_loss_terms(*map(jnp.asarray, (q, v, logits, actions, g, bc_mask,
                                                             value_mask)), cfg)
  w0 = min(math.exp((1.0 - 0.3) / 2.0), 1.2)  # = 1.2 (clipped); slot 1 keeps weight 1.
  bc = (w0 * -math.log(0.5) + 1.0 * -math.log(0.8)) / 2
  value = (1.0 - 0.1) ** 2 + (1.0 - 0.3) ** 2
  assert float(metrics["bc_loss"]) == pytest.approx(bc, rel=1e-5)
  assert float(loss) == pytest.approx(bc + 0.5 * value, rel=1e-5)


def test_mc_value_trains_values_on_complete_episodes_only():
  config = _tiny_model_config()
  config.algorithm = ml_collections.ConfigDict(dict(name="mc_value", gamma=GAMMA))
  algorithm = baselines.MCValue.from_config(config)
  model = algorithm.init(config, nnx.Rngs(0))
  batch = {**five_token_batch(), "truncated": np.array([False, True])}
  graphdef, state = nnx.split(model)
  loss, metrics = jax.jit(lambda state, batch: algorithm.loss(
      nnx.merge(graphdef, state), batch, None))(state, batch)
  assert np.isfinite(float(loss))
  assert float(metrics["mc_rows"]) == 1 and float(metrics["mc_truncated_rows"]) == 1
  # Row 0's actions all earn the terminal reward 1, discounted per token.
  assert float(metrics["return_mean"]) == pytest.approx((GAMMA ** 2 + GAMMA + 1) / 3, rel=1e-6)
  with pytest.raises(ValueError, match="'truncated' missing"):
    algorithm.loss(model, five_token_batch(), None)


def test_filtered_bc_keeps_the_top_fraction_by_return():
  dataset = datasets.Dataset.from_dict({
      "rewards": [[0.0, 1.0], [0.0, 0.5, 0.5], [0.0, 0.0], [0.25], [0.0, 1.0]],
      "outcome": [1.0, 1.0, 0.0, 2.0, 1.0],
      "truncated": [False, False, False, True, False],
  })
  # Example 3 is truncated: its outcome (2.0) is added to its in-window rewards.
  np.testing.assert_allclose(baselines.dialogue_returns(dataset), [1.0, 1.0, 0.0, 2.25, 1.0])
  kept = baselines.FilteredBC(0.4).filter_dataset(dataset)
  assert kept["outcome"] == [1.0, 2.0]  # Example 3, then the first of the tied 1.0s (example 0).
  assert len(baselines.FilteredBC(0.5).filter_dataset(dataset)) == 3
  with pytest.raises(ValueError, match="top_fraction=0"):
    baselines.FilteredBC(0.0)
  with pytest.raises(ValueError, match=r"\['truncated'\] missing"):
    baselines.dialogue_returns(dataset.remove_columns("truncated"))
