"""Task success and the soft score of a final AirDialogue action.

Success follows the official evaluator: status equal, flight right, name equal.
Names are compared lower-cased and stripped as in the toolkit, and runs of
internal whitespace are collapsed to one space as well, so "John  Smith" and
"john smith" are the same passenger (a double space typed by a human rater is
not a different name). The toolkit's soft score computed a character-level F1
and ignored its own weights; this one is token-level and weighted as stated.
"""

from __future__ import annotations

import collections
import math
from typing import Iterable

from data_pipelines.airdialogue import schema

NAME_WEIGHT = 0.2
FLIGHT_WEIGHT = 0.5
STATUS_WEIGHT = 0.3


def normalize_name(name: str) -> str:
  return " ".join(name.lower().split())


def status_correct(pred: schema.Action, expected: schema.Action) -> bool:
  return pred.status == expected.status


def flight_correct(pred: schema.Action, expected: schema.Action) -> bool:
  """No flight when none is expected, or the single predicted flight is among the expected.

  Several expected flights are all acceptable (ties at the lowest price), but a
  prediction names one flight; a prediction with two or more is wrong.
  """
  if not pred.flights:
    return not expected.flights
  return len(pred.flights) == 1 and pred.flights[0] in expected.flights


def name_correct(pred: schema.Action, expected: schema.Action) -> bool:
  return normalize_name(pred.name) == normalize_name(expected.name)


def is_success(pred: schema.Action, expected: schema.Action) -> bool:
  return (status_correct(pred, expected) and flight_correct(pred, expected)
          and name_correct(pred, expected))


def name_f1(pred: str, expected: str) -> float:
  """Token-level F1 over lower-cased name tokens (two empty names agree fully)."""
  pred_tokens = normalize_name(pred).split()
  expected_tokens = normalize_name(expected).split()
  if not pred_tokens and not expected_tokens:
    return 1.0
  common = sum((collections.Counter(pred_tokens) & collections.Counter(expected_tokens)).values())
  if common == 0:
    return 0.0
  precision = common / len(pred_tokens)
  recall = common / len(expected_tokens)
  return 2 * precision * recall / (precision + recall)


def soft_score(pred: schema.Action, expected: schema.Action) -> float:
  return (NAME_WEIGHT * name_f1(pred.name, expected.name)
          + FLIGHT_WEIGHT * flight_correct(pred, expected)
          + STATUS_WEIGHT * status_correct(pred, expected))


def score_corpus(pairs: Iterable[tuple[schema.Action, schema.Action]]) -> dict[str, float]:
  """Means over (predicted, expected) pairs; consumes a stream, holding only the sums.

  An empty corpus has no rates: they are NaN rather than a misleading 0.
  """
  n = 0
  sums = collections.Counter()
  for pred, expected in pairs:
    n += 1
    status_ok = status_correct(pred, expected)
    flight_ok = flight_correct(pred, expected)
    name_ok = name_correct(pred, expected)
    sums["success_rate"] += status_ok and flight_ok and name_ok
    sums["status_acc"] += status_ok
    sums["flight_acc"] += flight_ok
    sums["name_acc"] += name_ok
    sums["soft_score"] += soft_score(pred, expected)
  keys = ("success_rate", "status_acc", "flight_acc", "name_acc", "soft_score")
  return {"n": n, **{k: (sums[k] / n if n else math.nan) for k in keys}}
