r"""Scores the final actions in an official AirDialogue `data.json`.

  python -m data_pipelines.airdialogue.score --data=data.json [--kb=kb.json]

Prints one JSON object (n, success_rate, status_acc, flight_acc, name_acc,
soft_score) comparing each line's `action` with its `expected_action`. A line
without `expected_action` gets it from the solver, which needs `--kb`. Bad
input exits non-zero with `FILE:LINE: field 'F': reason` on stderr.
"""

from __future__ import annotations

import json
from typing import Iterator

from absl import flags

from data_pipelines import cli
from data_pipelines.airdialogue import official_io
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import scorer
from data_pipelines.airdialogue import solver

def action_pairs(
    data_path: str, kb_path: str | None = None) -> Iterator[tuple[schema.Action, schema.Action]]:
  """(predicted, expected) per line, streamed; raises AirDialogueFormatError on bad lines."""
  for line, sample in official_io.enumerate_samples(data_path, kb_path):
    if sample.action is None:
      raise official_io.format_error(data_path, line, "action", "missing; nothing to score")
    expected = sample.expected_action
    if expected is None:
      if sample.table is None:
        raise official_io.format_error(
            data_path, line, "expected_action", "missing, and no --kb to compute it from")
      expected = solver.expected_action(sample.intent, sample.table)
    yield sample.action, expected


def score_files(data_path: str, kb_path: str | None = None) -> dict[str, float]:
  result = scorer.score_corpus(action_pairs(data_path, kb_path))
  if result["n"] == 0:
    raise official_io.format_error(data_path, 1, official_io.LINE_FIELD, "no records to score")
  return result


def main(argv: list[str]) -> None:
  del argv
  data, kb = flags.FLAGS.data, flags.FLAGS.kb
  cli.existing_file(data, "--data")
  if kb:
    cli.existing_file(kb, "--kb")
  try:
    result = score_files(data, kb)
  except (official_io.AirDialogueFormatError, OSError) as e:  # FILE:LINE: field 'F': reason.
    raise cli.BadInput(str(e)) from None
  print(json.dumps(result))


if __name__ == "__main__":
  # Defined here, not at import: calm.relabel's tests and others import score_files.
  flags.DEFINE_string("data", None, "Official data.json (one dialogue per line).",
                      required=True)
  flags.DEFINE_string("kb", None, "Line-aligned kb.json; needed for lines without expected_action.")
  cli.run(main)
