"""Success, per-part correctness and the soft score of final actions."""

import math

import pytest

from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import scorer


def _a(status: str, name: str = "Jane Doe", flights: tuple[int, ...] = ()) -> schema.Action:
  return schema.Action(status=status, name=name, flights=flights)


@pytest.mark.parametrize("pred,expected,success", [
    (_a("book", flights=(1003,)), _a("book", flights=(1001, 1003)), True),
    (_a("book", flights=(1002,)), _a("book", flights=(1001, 1003)), False),
    (_a("book"), _a("book", flights=(1001,)), False),
    (_a("book", flights=(1001, 1003)), _a("book", flights=(1001, 1003)), False),
    (_a("no_flight"), _a("no_flight"), True),
    (_a("no_flight", flights=(1001,)), _a("no_flight"), False),
    (_a("cancel"), _a("no_reservation"), False),
    (_a("book", "  JANE   doe ", (1001,)), _a("book", "Jane Doe", (1001,)), True),
    (_a("book", "Jane\tDoe\n", (1001,)), _a("book", "jane doe", (1001,)), True),
    (_a("book", "JaneDoe", (1001,)), _a("book", "Jane Doe", (1001,)), False),
    (_a("book", "Jane Do", (1001,)), _a("book", "Jane Doe", (1001,)), False),
])
def test_is_success(pred, expected, success):
  assert scorer.is_success(pred, expected) is success
  assert success == (scorer.status_correct(pred, expected) and scorer.flight_correct(pred, expected)
                     and scorer.name_correct(pred, expected))


def test_parts_are_independent():
  pred, expected = _a("change", "John Doe", (1001,)), _a("book", "Jane Doe", (1001,))
  assert not scorer.status_correct(pred, expected)
  assert scorer.flight_correct(pred, expected)
  assert not scorer.name_correct(pred, expected)


def test_name_f1_is_token_level():
  assert scorer.name_f1("Jane Doe", "jane  DOE") == 1.0
  assert scorer.name_f1("Jane Smith", "Jane Doe") == pytest.approx(0.5)
  assert scorer.name_f1("Jane", "Jane Doe") == pytest.approx(2 / 3)
  assert scorer.name_f1("Jan Doh", "Jane Doe") == 0.0  # Characters overlap; tokens do not.
  assert scorer.name_f1("", "") == 1.0
  assert scorer.name_f1("", "Jane Doe") == 0.0


def test_soft_score_weights():
  expected = _a("book", "Jane Doe", (1001,))
  assert scorer.soft_score(expected, expected) == pytest.approx(1.0)
  half_name = scorer.soft_score(_a("book", "Jane Smith", (1002,)), expected)
  assert half_name == pytest.approx(0.2 * 0.5 + 0.3)
  assert scorer.soft_score(_a("no_flight", "Jane Doe"), expected) == pytest.approx(0.2)
  assert scorer.soft_score(_a("change", "Bob Roe", (1001,)), expected) == pytest.approx(0.5)


def test_score_corpus_streams_pairs():
  pairs = [
      (_a("book", flights=(1001,)), _a("book", flights=(1001,))),
      (_a("book", "X Y", (1001,)), _a("book", flights=(1001,))),
      (_a("no_flight"), _a("book", flights=(1001,))),
      (_a("cancel"), _a("cancel")),
  ]
  result = scorer.score_corpus(iter(pairs))
  assert result["n"] == 4
  assert result["success_rate"] == pytest.approx(0.5)
  assert result["status_acc"] == pytest.approx(0.75)
  assert result["flight_acc"] == pytest.approx(0.75)
  assert result["name_acc"] == pytest.approx(0.75)
  soft = [1.0, 0.8, 0.2, 1.0]
  assert result["soft_score"] == pytest.approx(sum(soft) / 4)
  empty = scorer.score_corpus([])
  assert empty["n"] == 0 and math.isnan(empty["success_rate"])
