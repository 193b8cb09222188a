r"""CALM task relabeling: each dialogue gets a table under which its submitted action is correct.

  python -m calm.relabel --data=data.json [--kb=kb.json] --out_dir=DIR [--seed=0]

writes DIR/data.json and DIR/kb.json (official format, line-aligned with the
input) and DIR/stats.json. Each dialogue keeps its intent, utterances and
submitted action; its table is edited (calm/table_edits.py) so that the
official solver's expected action accepts the submitted one, and
`expected_action` / `correct_sample` are recomputed by the official rules, so
its reward is 1. Without --kb, a table is first drawn around each intent
(calm/intent_table.py).

Some dialogues cannot be made a success by any table. They are kept with
reward 0 and counted, by reason:

  no_action                 the agent submitted nothing (or nothing parsable)
  status_unreachable        no table leads the intent's goal to that status
                            (e.g. change for a book goal)
  wrong_number_of_flights   book/change without exactly one flight, or another
                            status naming a flight
  flight_not_in_table       the submitted flight is not a row of the table
  flight_violates_intent    the submitted flight's row breaks a constraint of
                            the intent; the row is kept, as the dialogue talks
                            about it, so no table makes it the expected flight
  empty_table               a reservation is needed but the table has no flight
  wrong_name                the submitted name is not the intent's; the table
                            is still relabeled, so that the name is the only
                            thing wrong

Those kept for another reason than wrong_name keep their input table. Every
written line carries `relabel`: its outcome, the flights whose rows were
edited and, if the reservation changed, `reservation_was`. A dialogue draws
only from numpy's SeedSequence([seed, line]): one seed gives byte-identical
files, and no dialogue's table depends on another's.
Bad input stops with `FILE:LINE: field 'F': reason`.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import time
from typing import Any, Iterator

import numpy as np
from absl import flags

from calm import intent_table
from calm import table_edits
from data_pipelines import cli
from data_pipelines.airdialogue import official_io
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import scorer
from data_pipelines.airdialogue import solver

RELABEL_KEY = "relabel"  # data.json key of each line's outcome and edited flights.
RELABELED = "relabeled"
WRONG_NAME = "wrong_name"
KEPT_REASONS = ("no_action", "status_unreachable", "wrong_number_of_flights",
                "flight_not_in_table", "flight_violates_intent", "empty_table")
OUTCOMES = (RELABELED, WRONG_NAME) + KEPT_REASONS
# The statuses the solver can give each goal, for some table.
STATUSES_OF_GOAL = {"book": ("book", "no_flight"),
                    "change": ("change", "no_flight", "no_reservation"),
                    "cancel": ("cancel", "no_reservation")}
_FLIGHT_STATUSES = ("book", "change")


def unreachable_reason(intent: schema.Intent, table: schema.FlightTable,
                       action: schema.Action | None) -> str | None:
  """Why no table that keeps the submitted row makes `action` expected; None if one does."""
  if action is None:
    return "no_action"
  if action.status not in STATUSES_OF_GOAL[intent.goal]:
    return "status_unreachable"
  if len(action.flights) != (action.status in _FLIGHT_STATUSES):
    return "wrong_number_of_flights"
  if action.flights:
    row = next((f for f in table.flights if f.flight_number == action.flights[0]), None)
    if row is None:
      return "flight_not_in_table"
    if not solver.matching_flights(intent, schema.FlightTable(flights=(row,)))[0]:
      return "flight_violates_intent"
  if table_edits.needs_reservation(action.status, intent.goal) and not table.flights:
    return "empty_table"
  return None


def name_is_right(intent: schema.Intent, action: schema.Action) -> bool:
  """The official name rule, against the name the solver puts in the expected action."""
  return scorer.normalize_name(action.name) == scorer.normalize_name(
      solver.standardize_name(intent.name))


def _with_conforming_row(intent: schema.Intent, table: schema.FlightTable, number: int,
                         rng: np.random.Generator) -> schema.FlightTable:
  """A drawn table whose row `number` is made to meet the intent (no dialogue fixes it)."""
  return dataclasses.replace(table, flights=tuple(
      table_edits.conforming(f, intent, rng) if f.flight_number == number else f
      for f in table.flights))


def relabel_sample(sample: schema.Sample,
                   rng: np.random.Generator) -> tuple[schema.Sample, str]:
  """The sample under its relabeled table, with its outcome (one of OUTCOMES).

  A sample without a table (no kb.json) gets one drawn around its intent,
  whose submitted row is then made to meet the intent, as no kb describes it.
  """
  intent, action, table = sample.intent, sample.action, sample.table
  drawn = table is None
  if drawn:
    table = intent_table.table_for_intent(intent, rng)
    if action is not None and len(action.flights) == 1:
      table = _with_conforming_row(intent, table, action.flights[0], rng)
  outcome = unreachable_reason(intent, table, action)
  record: dict[str, Any] = {"edited_flights": []}
  if outcome is None:
    relabeled, edited = table_edits.table_for_action(intent, table, action, rng)
    record["edited_flights"] = list(edited)
    if relabeled.reservation != table.reservation:
      record["reservation_was"] = table.reservation
    table = relabeled
    outcome = RELABELED if name_is_right(intent, action) else WRONG_NAME
  record["outcome"] = outcome
  if drawn:
    record["table"] = "drawn"
  expected = solver.expected_action(intent, table)
  correct = action is not None and scorer.is_success(action, expected)
  if correct != (outcome == RELABELED):  # The solver judges; a disagreement is a bug here.
    raise AssertionError(f"calm.relabel: outcome {outcome!r}, but the solver's expected action "
                         f"{expected} {'accepts' if correct else 'rejects'} {action}")
  return dataclasses.replace(sample, table=table, expected_action=expected,
                             correct_sample=correct,
                             extra={**sample.extra, RELABEL_KEY: record}), outcome


class RelabelStats:
  """Outcome counts overall, per goal and per submitted status, from a stream of samples.

  Relabeling aims at every dialogue whose action parses and whose name is
  right ("eligible"); `eligible_not_relabeled` says why the rest of those are
  beyond any table (a status the goal cannot lead to, a flight that breaks
  the intent).
  """

  def __init__(self):
    # (kind, name) -> Counter of outcomes, and of ("eligible", outcome).
    self._counts: dict[tuple[str, str], collections.Counter] = collections.defaultdict(
        collections.Counter)
    self._edited_flights = 0
    self._relabeled_tables = 0

  def add(self, sample: schema.Sample, relabeled: schema.Sample, outcome: str) -> schema.Sample:
    action = sample.action
    eligible = action is not None and name_is_right(sample.intent, action)
    status = action.status if action is not None else "none"
    for group in (("all", "all"), ("goal", sample.intent.goal), ("submitted_status", status)):
      counts = self._counts[group]
      counts[outcome] += 1
      if eligible:
        counts["eligible", outcome] += 1
    edited = relabeled.extra[RELABEL_KEY]["edited_flights"]
    self._edited_flights += len(edited)
    self._relabeled_tables += outcome in (RELABELED, WRONG_NAME)
    return relabeled

  @staticmethod
  def _rates(counts: collections.Counter) -> dict[str, Any]:
    n = sum(counts[o] for o in OUTCOMES)
    eligible = sum(counts["eligible", o] for o in OUTCOMES)
    return {
        "n": n,
        "outcomes": {o: counts[o] for o in OUTCOMES if counts[o]},
        "relabeled_fraction": counts[RELABELED] / n,
        "eligible": eligible,
        "relabeled_fraction_of_eligible": counts[RELABELED] / eligible if eligible else None,
        "eligible_not_relabeled": {o: counts["eligible", o] for o in KEPT_REASONS
                                   if counts["eligible", o]},
    }

  def summary(self) -> dict[str, Any]:
    if not self._counts:
      raise ValueError("no samples to summarize")

    def by(kind: str) -> dict[str, dict[str, Any]]:
      return {name: self._rates(c) for (k, name), c in sorted(self._counts.items()) if k == kind}

    return {
        **self._rates(self._counts["all", "all"]),
        "edited_flights_per_relabeled_table": (
            self._edited_flights / self._relabeled_tables if self._relabeled_tables else None),
        "per_goal": by("goal"),
        "per_submitted_status": by("submitted_status"),
    }


def relabeled_samples(data_path: str, kb_path: str | None, seed: int,
                      stats: RelabelStats) -> Iterator[schema.Sample]:
  """Relabels the official files line by line (constant memory), tallying into `stats`."""
  for line, sample in official_io.enumerate_samples(data_path, kb_path):
    relabeled, outcome = relabel_sample(sample, np.random.default_rng([seed, line]))
    yield stats.add(sample, relabeled, outcome)


def relabel_files(data_path: str, kb_path: str | None, out_dir: str, seed: int = 0
                  ) -> dict[str, Any]:
  """Writes OUT_DIR/data.json, kb.json and stats.json; returns the stats.

  Raises AirDialogueFormatError (FILE:LINE: field 'F': reason) on a bad record.
  """
  os.makedirs(out_dir, exist_ok=True)
  stats = RelabelStats()
  start = time.perf_counter()
  n = official_io.write_samples(relabeled_samples(data_path, kb_path, seed, stats),
                                os.path.join(out_dir, "data.json"),
                                os.path.join(out_dir, "kb.json"))
  seconds = time.perf_counter() - start
  if n == 0:
    raise official_io.format_error(data_path, 1, official_io.LINE_FIELD, "no records to relabel")
  summary = stats.summary()
  summary["timing"] = {"seconds": seconds, "seconds_per_10000_dialogues": seconds / n * 10_000}
  summary["config"] = {"data": data_path, "kb": kb_path, "seed": seed}
  with open(os.path.join(out_dir, "stats.json"), "w", encoding="utf-8") as f:
    json.dump(summary, f, indent=2, sort_keys=True)
    f.write("\n")
  return summary


def main(argv: list[str]) -> None:
  del argv
  data_path = cli.existing_file(flags.FLAGS.data, "--data")
  kb_path = cli.existing_file(flags.FLAGS.kb, "--kb") if flags.FLAGS.kb else None
  out_dir = cli.output_dir(flags.FLAGS.out_dir, "--out_dir")
  for path, what in ((data_path, "--data"), (kb_path, "--kb")):
    for name in ("data.json", "kb.json"):
      written = os.path.join(out_dir, name)
      if path is not None and os.path.exists(written) and os.path.samefile(path, written):
        raise cli.BadInput(f"{what}={path}: --out_dir={out_dir} would overwrite it")
  try:
    summary = relabel_files(data_path, kb_path, out_dir, flags.FLAGS.seed)
  except (official_io.AirDialogueFormatError, OSError) as e:  # FILE:LINE: field 'F': reason.
    raise cli.BadInput(str(e)) from None
  print(f"relabeled {summary['outcomes'].get(RELABELED, 0)} of {summary['n']} dialogues "
        f"({summary['relabeled_fraction_of_eligible']} of those whose action parses and "
        f"name is right) into {out_dir}")


if __name__ == "__main__":
  # Defined here, not at import, so that importing this module defines no flags.
  flags.DEFINE_string("data", None, "Official data.json (one dialogue per line).", required=True)
  flags.DEFINE_string("kb", None, "Line-aligned kb.json; without it a table is drawn per intent.")
  flags.DEFINE_string("out_dir", None, "Directory for data.json, kb.json and stats.json.",
                      required=True)
  flags.DEFINE_integer("seed", 0, "Seed of every draw (with each line's number).", lower_bound=0)
  cli.run(main)
