"""CALM's state head: under a posterior that puts all its mass on the true intent, its argmax is
the official solver's expected action, on generated scenes of every goal; tracking targets and
loss read the intent as coded."""

import jax.numpy as jnp
import numpy as np
import pytest

from calm import actions, state
from data_pipelines.airdialogue import context, solver
from ilql_dialogue.tasks import airdialogue


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
  from experiments import state_probe

  fields_BxPxF = np.stack([airdialogue.table_fields(table.to_json()) for _, table in _scenes(8, 5)])
  blanked = state_probe.blank_table(fields_BxPxF)
  is_flight = fields_BxPxF[..., airdialogue.FIELD["row_type"]] == airdialogue.ROW_FLIGHT
  for name, k in airdialogue.FIELD.items():
    if name in state_probe.BLANKED:
      assert (blanked[..., k][is_flight] == 1).all()
      np.testing.assert_array_equal(blanked[..., k][~is_flight], fields_BxPxF[..., k][~is_flight])
    else:
      np.testing.assert_array_equal(blanked[..., k], fields_BxPxF[..., k])
