"""CALM's state head: under a posterior that puts all its mass on the true intent, its argmax is
the official solver's expected action, on generated scenes of every goal; tracking targets and
loss read the intent as coded."""

import jax.numpy as jnp
import numpy as np
import pytest

from calm import actions, state
from data_pipelines.airdialogue import context, solver
from domains.airdialogue import task as airdialogue


def _scenes(n, seed):
  rng = np.random.default_rng(seed)
  return [context.sample_context(rng, 30) for _ in range(n)]


def _one_hot(codes_BxK):
  return [jnp.where(jnp.arange(size)[None] == codes_BxK[:, k:k + 1], 0.0, state.NEG)
          for k, (_, size) in enumerate(state.TRACKED)]


@pytest.mark.parametrize("seed", [0, 1])
def test_a_certain_state_solves_to_the_expected_action(seed):
  scenes = _scenes(300, seed)
  fields_BxPxF = np.stack([airdialogue.table_fields(table.to_json()) for _, table in scenes])
  codes_BxK = np.stack([state.intent_codes(intent) for intent, _ in scenes])
  picks = np.asarray(jnp.argmax(state.solve(_one_hot(codes_BxK), jnp.asarray(fields_BxPxF)),
                                axis=-1))
  statuses = set()
  for (intent, table), pick in zip(scenes, picks):
    expected = solver.expected_action(intent, table)
    statuses.add(expected.status)
    assert pick in actions.action_classes(expected), (expected, actions.class_action(int(pick)))
  assert statuses == {"book", "change", "cancel", "no_flight", "no_reservation"}


def test_one_wrong_field_moves_the_pick():
  """The right airports are what make a flight valid: track the wrong departure airport and
  the booking the solver expects is no longer the pick."""
  for intent, table in _scenes(200, 3):
    expected = solver.expected_action(intent, table)
    if expected.status == "book":
      break
  fields = jnp.asarray(airdialogue.table_fields(table.to_json())[None])
  codes = state.intent_codes(intent)[None].copy()
  right = int(jnp.argmax(state.solve(_one_hot(codes), fields)[0]))
  codes[0, state.TRACKED_NAMES.index("departure_airport")] %= len(context.AIRPORTS)
  codes[0, state.TRACKED_NAMES.index("departure_airport")] += 1  # Another airport.
  wrong = int(jnp.argmax(state.solve(_one_hot(codes), fields)[0]))
  assert right in actions.action_classes(expected) and wrong not in actions.action_classes(expected)


def test_codes_fit_the_heads_and_the_loss_reads_them():
  codes_BxK = np.stack([state.intent_codes(intent) for intent, _ in _scenes(200, 4)])
  sizes = np.asarray([size for _, size in state.TRACKED])
  assert (codes_BxK >= 0).all() and (codes_BxK < sizes).all()
  loss, metrics = state.tracking_loss(_one_hot(codes_BxK), jnp.asarray(codes_BxK),
                                      jnp.ones(len(codes_BxK), bool))
  assert float(loss) == 0.0 and all(float(metrics[f"state/{n}"]) == 1.0
                                     for n in state.TRACKED_NAMES)
  uniform = [jnp.full((len(codes_BxK), size), -np.log(size)) for _, size in state.TRACKED]
  loss, _ = state.tracking_loss(uniform, jnp.asarray(codes_BxK), jnp.ones(len(codes_BxK), bool))
  assert float(loss) == pytest.approx(np.mean(np.log(sizes)), rel=1e-5)


def test_the_probe_blanks_only_the_flight_rows_dates_and_airports():
  from workflows import state_probe

  fields_BxPxF = np.stack([airdialogue.table_fields(table.to_json()) for _, table in _scenes(8, 5)])
  blanked = state.blank_table(fields_BxPxF)
  is_flight = fields_BxPxF[..., airdialogue.FIELD["row_type"]] == airdialogue.ROW_FLIGHT
  for name, k in airdialogue.FIELD.items():
    if name in state.BLANKED:
      assert (blanked[..., k][is_flight] == 1).all()
      np.testing.assert_array_equal(blanked[..., k][~is_flight], fields_BxPxF[..., k][~is_flight])
    else:
      np.testing.assert_array_equal(blanked[..., k], fields_BxPxF[..., k])


def _head(pooled, d_model=48, seed=0, shared=False, reads="all"):
  from flax import nnx
  import types
  cfg = types.SimpleNamespace(d_model=d_model, init_std=0.02, compute_dtype=jnp.float32,
                              weight_dtype=jnp.float32)
  return state.StateHead(cfg, rngs=nnx.Rngs(seed), pooled=pooled, shared=shared, reads=reads)


def test_a_shared_head_reads_each_return_field_with_its_departure_fields_values():
  """With one attention score everywhere, a field's posterior is the mean of its readings:
  shared, the return fields' equal the departure fields'; unshared, they differ."""
  from flax import nnx
  rng = np.random.default_rng(2)
  hidden = jnp.asarray(rng.normal(size=(2, 7, 48)), jnp.float32)
  args = (hidden, jnp.ones((2, 7), bool), jnp.asarray([6, 4]))
  for shared in (True, False):
    head = _head(pooled=True, shared=shared)
    head.kernel.set_value(jnp.asarray(rng.normal(0, 0.5, head.kernel.get_value().shape),
                                      jnp.float32))
    log_p = dict(zip(state.TRACKED_NAMES, head.tracked(*args)))
    for ret, dep in state.SHARED_READINGS.items():
      assert np.allclose(log_p[ret], log_p[dep]) == shared, (ret, shared)


def test_on_the_table_the_airports_weigh_only_those_its_flights_serve():
  scenes = _scenes(50, 5)
  fields_BxPxF = jnp.asarray(np.stack([airdialogue.table_fields(t.to_json()) for _, t in scenes]))
  uniform = [jnp.full((50, size), -np.log(size)) for _, size in state.TRACKED]
  weighed = dict(zip(state.TRACKED_NAMES, state.on_table(uniform, fields_BxPxF)))
  for b, (intent, table) in enumerate(scenes):
    served = {0} | {context.AIRPORTS.index(a) + 1 for f in table.flights
                    for a in (f.departure_airport, f.return_airport)}
    for name in state.AIRPORT_FIELDS:
      p_V = np.exp(np.asarray(weighed[name][b]))
      assert p_V.sum() == pytest.approx(1.0, abs=1e-5)
      assert p_V[sorted(served)] == pytest.approx(1 / len(served), abs=1e-5)
      assert state.intent_codes(intent)[state.TRACKED_NAMES.index(name)] in served
    assert np.allclose(weighed["goal"][b], uniform[0][b])  # Other fields are untouched.


def test_the_pooled_head_reads_the_states_up_to_the_marker_and_nothing_else():
  from flax import nnx
  head = _head(pooled=True)
  rng = np.random.default_rng(0)
  for p in nnx.state(head, nnx.Param).values():  # Non-zero attention scores.
    p.set_value(jnp.asarray(rng.normal(0, 0.3, p.get_value().shape), jnp.float32))
  hidden = jnp.asarray(rng.normal(size=(3, 10, 48)), jnp.float32)
  mask = jnp.asarray(np.arange(10)[None] < np.array([[10], [8], [6]]))
  position = jnp.asarray([7, 5, -1])
  before = head.tracked(hidden, mask, position)
  after_marker = hidden.at[0, 8:].add(5.0).at[1, 6:].add(5.0).at[2, 1:].add(5.0)
  for x, y in zip(before, head.tracked(after_marker, mask, position)):
    np.testing.assert_allclose(x, y, rtol=1e-6)  # Later states, padding: not read.
  for x, y in zip(before, head.tracked(hidden.at[:, 0].add(5.0), mask, position)):
    assert np.all(np.abs(np.asarray(x - y)).max(-1) > 1e-3)  # The first state is read by all.


def test_with_every_state_alike_the_pooled_head_is_the_marker_readout():
  pooled, marker = _head(pooled=True), _head(pooled=False)
  hidden = jnp.broadcast_to(jnp.asarray(np.random.default_rng(1).normal(size=(2, 1, 48)),
                                        jnp.float32), (2, 9, 48))
  args = (hidden, jnp.ones((2, 9), bool), jnp.asarray([8, 3]))
  for x, y in zip(pooled.tracked(*args), marker.tracked(*args)):
    np.testing.assert_allclose(x, y, atol=1e-5)


def test_the_pooled_head_learns_to_copy_a_mentioned_value_the_marker_readout_cannot():
  """Synthetic states: position t holds its token's value (one-hot) plus a role tag ('from',
  'to' or filler); the departure airport is the value tagged 'from', the return airport the one
  tagged 'to', at random positions among distractors. The marker's own state says nothing."""
  import optax
  from flax import nnx
  k_dep, k_ret = (state.TRACKED_NAMES.index(n) for n in ("departure_airport",
                                                         "return_airport"))
  airports = state.TRACKED[k_dep][1]
  rows, length, d_model = 64, 12, 48
  rng = np.random.default_rng(2)

  def batch():
    values_BxT = rng.integers(1, airports, (rows, length))
    tags_BxT = np.zeros((rows, length), int)  # 0 filler, 1 'from', 2 'to'.
    for b in range(rows):
      i, j = rng.choice(length - 1, 2, replace=False)
      tags_BxT[b, i], tags_BxT[b, j] = 1, 2
    hidden = np.zeros((rows, length, d_model), np.float32)
    hidden[np.arange(rows)[:, None], np.arange(length)[None], values_BxT] = 1.0
    hidden[np.arange(rows)[:, None], np.arange(length)[None], airports + tags_BxT] = 1.0
    hidden[:, -1] = 0.0  # The marker: no information of its own.
    codes_BxK = np.zeros((rows, len(state.TRACKED)), np.int32)
    codes_BxK[:, k_dep] = values_BxT[tags_BxT == 1]
    codes_BxK[:, k_ret] = values_BxT[tags_BxT == 2]
    return jnp.asarray(hidden), jnp.asarray(codes_BxK)

  def accuracy(pooled):
    head = _head(pooled, d_model)
    optimizer = nnx.Optimizer(head, optax.adam(3e-2), wrt=nnx.Param)
    args = (jnp.ones((rows, length), bool), jnp.full((rows,), length - 1))

    @nnx.jit
    def step(head, optimizer, hidden, codes):
      def loss(head):
        log_p = head.tracked(hidden, *args)
        return sum(-jnp.take_along_axis(log_p[k], codes[:, k:k + 1], 1).mean()
                   for k in (k_dep, k_ret))
      value, grads = nnx.value_and_grad(loss)(head)
      optimizer.update(head, grads)
      return value

    for _ in range(300):
      assert np.isfinite(float(step(head, optimizer, *batch())))
    hidden, codes = batch()
    log_p = head.tracked(hidden, *args)
    return np.mean([np.mean(np.asarray(jnp.argmax(log_p[k], -1)) == np.asarray(codes[:, k]))
                    for k in (k_dep, k_ret)])

  assert accuracy(pooled=True) > 0.9
  assert accuracy(pooled=False) < 0.15  # Chance is 1/30.


def test_others_reads_is_the_complement_of_the_agents_action_mask():
  """Decoding computes from the tokens alone what training reads off the MDP's action_mask."""
  from data_pipelines import mdp
  from data_pipelines.airdialogue import selfplay, to_dialogue
  from domains.airdialogue import lm_task
  from data_pipelines.airdialogue import action_grammar
  from data_pipelines.tokenization import train_tokenizer
  samples = list(selfplay.generate_samples([3, 0], 4, 30))
  tok = train_tokenizer([line.partition(": ")[2] for s in samples for line in s.dialogue],
                        to_dialogue.ROLES, 400,
                        markers=(action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG))
  rng = np.random.default_rng(0)
  rows = []
  for i, sample in enumerate(samples):
    d = lm_task.scene(sample, rng, f"s{i}")
    rows.append(mdp.dialogue_to_example(d, tok, "agent", 384,
                                        serialize_context=to_dialogue.serialize_context,
                                        include_context=False))
  width = max(len(r["input_ids"]) for r in rows) + 3  # Padding after every row.
  tokens = np.full((len(rows), width), tok.pad_id, np.int32)
  mask = np.zeros((len(rows), width), bool)
  action = np.zeros((len(rows), width), bool)
  for b, r in enumerate(rows):
    n = len(r["input_ids"])
    tokens[b, :n], mask[b, :n], action[b, :n] = r["input_ids"], True, r["action_mask"]
  reads = state.others_reads(jnp.asarray(tokens), jnp.asarray(mask),
                             tok.speaker_token_ids["agent"],
                             jnp.asarray(list(tok.speaker_token_ids.values())))
  np.testing.assert_array_equal(np.asarray(reads), mask & ~action)
  assert action.any() and (mask & ~action).any()


def test_a_head_reading_others_ignores_the_positions_it_may_not_read():
  from flax import nnx
  rng = np.random.default_rng(0)
  heads = {reads: _head(pooled=True, shared=True, reads=reads) for reads in state.READS}
  for head in heads.values():
    for p in nnx.state(head, nnx.Param).values():
      p.set_value(jnp.asarray(np.random.default_rng(1).normal(0, 0.3, p.get_value().shape),
                              jnp.float32))
  hidden = jnp.asarray(rng.normal(size=(2, 10, 48)), jnp.float32)
  mask, position = jnp.ones((2, 10), bool), jnp.asarray([9, 9])
  reads = jnp.asarray(np.arange(10)[None] % 3 != 1).repeat(2, 0)  # Positions 1, 4, 7: agent's.
  changed = hidden.at[:, 1::3].add(5.0)
  for name, head in heads.items():
    gaps = [float(jnp.abs(x - y).max()) for x, y in zip(head.tracked(hidden, mask, position, reads),
                                                        head.tracked(changed, mask, position, reads))]
    assert (max(gaps) < 1e-6) if name == "others" else (min(gaps) > 1e-3), (name, gaps)
  with pytest.raises(ValueError, match="pooled"):
    _head(pooled=False, reads="others")
