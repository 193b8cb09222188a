r"""Streams official AirDialogue files into one Arrow IPC stream file, batch by batch.

  python -m data_pipelines.airdialogue.arrow --data=data.json --kb=kb.json --out=train.arrow

Lines are validated by `official_io` and written every `--batch_size` rows, so
memory stays flat however long the corpus is; `--num_proc=N` parses in N
worker processes and gives the same file. The output is the format
`datasets` memory-maps: `datasets.Dataset.from_file(out)` opens it without a
copy. One row per dialogue; intent, actions and flights are structs holding the
official keys, and whatever the schema does not know (timestamps, search_info,
unknown keys) goes, per level, into an `extra_json` string so that
`row_to_json` gives back the original JSON objects. Prints one JSON line:
rows, wall and CPU seconds, and the peak RSS of the process and of its largest worker.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import multiprocessing
import operator
import os
import resource
import time
from typing import Any, Iterable, Mapping

from absl import flags
import pyarrow as pa

from data_pipelines import cli
from data_pipelines.airdialogue import official_io
from data_pipelines.airdialogue import schema

_DATA = flags.DEFINE_string("data", None, "Official data.json.")
_KB = flags.DEFINE_string("kb", None, "Line-aligned official kb.json.")
_OUT = flags.DEFINE_string("out", None, "Output Arrow IPC stream file.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 4096, "Rows per RecordBatch.")
_NUM_PROC = flags.DEFINE_integer("num_proc", 1, "Worker processes parsing in parallel.",
                                 lower_bound=1)

EXTRA = "extra_json"
_STR = pa.string()
_INT = pa.int64()

INTENT_TYPE = pa.struct([
    ("name", _STR), ("goal", _STR),
    ("departure_airport", _STR), ("return_airport", _STR),
    ("departure_month", _STR), ("departure_day", _STR),
    ("return_month", _STR), ("return_day", _STR),
    ("max_price", _INT), ("max_connections", _INT),
    ("departure_time", _STR), ("return_time", _STR),
    ("class", _STR), ("airline_preference", _STR),
    (EXTRA, _STR),
])
FLIGHT_TYPE = pa.struct([
    ("flight_number", _INT), ("airline", _STR),
    ("departure_airport", _STR), ("return_airport", _STR),
    ("departure_month", _STR), ("departure_day", _STR),
    ("return_month", _STR), ("return_day", _STR),
    ("departure_time_num", _INT), ("return_time_num", _INT),
    ("class", _STR), ("num_connections", _INT), ("price", _INT),
    (EXTRA, _STR),
])
ACTION_TYPE = pa.struct([
    ("status", _STR), ("name", _STR), ("flight", pa.list_(_INT)), (EXTRA, _STR)])
SCHEMA = pa.schema([
    ("intent", INTENT_TYPE),
    ("kb", pa.list_(FLIGHT_TYPE)),
    ("reservation", _INT),
    ("kb_extra_json", _STR),
    ("dialogue", pa.list_(_STR)),
    ("action", ACTION_TYPE),
    ("expected_action", ACTION_TYPE),
    ("correct_sample", pa.bool_()),
    (EXTRA, _STR),
])


def _attr(arrow_name: str) -> str:
  """The schema attribute behind an Arrow field named by its official JSON key."""
  return {"class": "flight_class", "flight": "flights"}.get(arrow_name, arrow_name)


def _getter(struct_type: pa.StructType) -> operator.attrgetter:
  """Reads a record's schema fields in Arrow order, as one tuple (C speed, no dicts)."""
  return operator.attrgetter(*(_attr(f.name) for f in struct_type if f.name != EXTRA))


_INTENT_GET = _getter(INTENT_TYPE)
_FLIGHT_GET = _getter(FLIGHT_TYPE)
_ACTION_GET = _getter(ACTION_TYPE)
_NULL_ACTION = (None,) * (ACTION_TYPE.num_fields - 1)


def _extra_json(extra: Mapping[str, Any]) -> str | None:
  return json.dumps(dict(extra)) if extra else None


def _struct_array(struct_type: pa.StructType, rows: list[tuple], extras: list[str | None],
                  null_mask: list[bool] | None = None) -> pa.StructArray:
  columns = list(zip(*rows)) if rows else [()] * (struct_type.num_fields - 1)
  arrays = [pa.array(column, f.type) for column, f in zip(columns, struct_type)]
  arrays.append(pa.array(extras, pa.string()))
  mask = None if null_mask is None else pa.array(null_mask, pa.bool_())
  return pa.StructArray.from_arrays(arrays, fields=list(struct_type), mask=mask)


class _BatchBuilder:
  """Collects samples column by column; far cheaper than converting nested row dicts."""

  def __init__(self):
    self.num_rows = 0
    self._intents, self._intent_extras = [], []
    self._flights, self._flight_extras, self._kb_offsets = [], [], [0]
    self._reservations, self._kb_extras, self._dialogues = [], [], []
    self._actions = {"action": ([], [], []), "expected_action": ([], [], [])}
    self._correct, self._extras = [], []

  def add(self, sample: schema.Sample) -> None:
    if sample.table is None:
      raise ValueError("a sample without a flight table cannot become an Arrow row; "
                       "pass its kb.json")
    self.num_rows += 1
    self._intents.append(_INTENT_GET(sample.intent))
    self._intent_extras.append(_extra_json(sample.intent.extra))
    flights = sample.table.flights
    self._flights.extend(map(_FLIGHT_GET, flights))
    self._flight_extras.extend(_extra_json(f.extra) for f in flights)
    self._kb_offsets.append(self._kb_offsets[-1] + len(flights))
    self._reservations.append(sample.table.reservation)
    self._kb_extras.append(_extra_json(sample.table.extra))
    self._dialogues.append(sample.dialogue)
    for key, (rows, extras, nulls) in self._actions.items():
      action = getattr(sample, key)
      rows.append(_NULL_ACTION if action is None else _ACTION_GET(action))
      extras.append(None if action is None else _extra_json(action.extra))
      nulls.append(action is None)
    self._correct.append(sample.correct_sample)
    self._extras.append(_extra_json(sample.extra))

  def build(self) -> pa.RecordBatch:
    flights = _struct_array(FLIGHT_TYPE, self._flights, self._flight_extras)
    columns = {
        "intent": _struct_array(INTENT_TYPE, self._intents, self._intent_extras),
        "kb": pa.ListArray.from_arrays(pa.array(self._kb_offsets, pa.int32()), flights),
        "reservation": pa.array(self._reservations, _INT),
        "kb_extra_json": pa.array(self._kb_extras, _STR),
        "dialogue": pa.array(self._dialogues, pa.list_(_STR)),
        **{key: _struct_array(ACTION_TYPE, *parts) for key, parts in self._actions.items()},
        "correct_sample": pa.array(self._correct, pa.bool_()),
        EXTRA: pa.array(self._extras, _STR),
    }
    return pa.RecordBatch.from_arrays([columns[name] for name in SCHEMA.names], schema=SCHEMA)


def _join_extra(struct: Mapping[str, Any]) -> dict[str, Any]:
  """A struct back to its JSON object: null (absent) keys dropped, extras merged back."""
  out = {k: v for k, v in struct.items() if k != EXTRA and v is not None}
  if struct.get(EXTRA) is not None:
    out.update(json.loads(struct[EXTRA]))
  return out


def row_to_json(row: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
  """The (data.json, kb.json) objects a row came from, as `ds[i]` or `to_pylist()` gives rows."""
  data = {"intent": _join_extra(row["intent"])}
  for key in ("action", "expected_action"):
    if row[key] is not None:
      data[key] = _join_extra(row[key])
  data["dialogue"] = list(row["dialogue"])
  if row["correct_sample"] is not None:
    data["correct_sample"] = row["correct_sample"]
  if row[EXTRA] is not None:
    data.update(json.loads(row[EXTRA]))
  kb = {"kb": [_join_extra(f) for f in row["kb"]], "reservation": row["reservation"]}
  if row["kb_extra_json"] is not None:
    kb.update(json.loads(row["kb_extra_json"]))
  return data, kb


def write_arrow(samples: Iterable[schema.Sample], out_path: str, batch_size: int = 4096) -> int:
  """Writes samples as RecordBatches of `batch_size` rows; returns the row count.

  Writes to a temporary name and renames at the end, so a run that stops on a
  bad record leaves no truncated file that looks complete.
  """
  if batch_size < 1:
    raise ValueError(f"batch_size must be >= 1, got {batch_size}")
  tmp_path = f"{out_path}.tmp-{os.getpid()}"
  n = 0
  try:
    with pa.ipc.new_stream(tmp_path, SCHEMA) as writer:
      batch = _BatchBuilder()
      for sample in samples:
        batch.add(sample)
        if batch.num_rows == batch_size:
          writer.write_batch(batch.build())
          n += batch.num_rows
          batch = _BatchBuilder()
      if batch.num_rows:
        writer.write_batch(batch.build())
        n += batch.num_rows
    os.replace(tmp_path, out_path)
  finally:
    if os.path.exists(tmp_path):
      os.remove(tmp_path)
  return n


def _convert_blocks(data_path: str, kb_path: str, out_path: str, batch_size: int,
                    worker: int, num_proc: int) -> int:
  """One worker's share: blocks of `batch_size` lines, block b going to worker b % num_proc."""
  samples = (sample for _, sample in official_io.enumerate_samples(
      data_path, kb_path, keep=lambda line: (line - 1) // batch_size % num_proc == worker))
  return write_arrow(samples, out_path, batch_size)


def convert(data_path: str, kb_path: str, out_path: str, batch_size: int = 4096,
            num_proc: int = 1) -> int:
  """Official files -> one Arrow stream file; returns the row count.

  With `num_proc` > 1, worker processes parse and validate interleaved blocks
  of `batch_size` lines into their own files (each reads every line but
  parses only its blocks: parsing is what costs), then the blocks are copied
  back in file order. The output is the same file as with one process, and
  memory stays one batch per process.
  """
  if num_proc < 1:
    raise ValueError(f"num_proc must be >= 1, got {num_proc}")
  if num_proc == 1:
    return write_arrow(official_io.read_samples(data_path, kb_path), out_path, batch_size)
  parts = [f"{out_path}.part{w}-{os.getpid()}" for w in range(num_proc)]
  tmp_path = f"{out_path}.tmp-{os.getpid()}"
  try:
    with concurrent.futures.ProcessPoolExecutor(
        num_proc, mp_context=multiprocessing.get_context("spawn")) as pool:
      rows = sum(pool.map(_convert_blocks, *zip(*[
          (data_path, kb_path, part, batch_size, w, num_proc) for w, part in enumerate(parts)])))
    # Plain reads, not memory maps: mapped pages would count as this process's memory.
    readers = [pa.ipc.open_stream(pa.OSFile(part)) for part in parts]
    with pa.ipc.new_stream(tmp_path, SCHEMA) as writer:
      for block in itertools.count():
        try:
          writer.write_batch(readers[block % num_proc].read_next_batch())
        except StopIteration:  # Blocks are dealt in turn: the first missing one is the end.
          break
    os.replace(tmp_path, out_path)
  finally:
    for path in (*parts, tmp_path):
      if os.path.exists(path):
        os.remove(path)
  return rows


def main(argv: list[str]) -> None:
  del argv
  cli.existing_file(_DATA.value, "--data")
  cli.existing_file(_KB.value, "--kb")
  cli.output_file(_OUT.value, "--out")
  start = time.perf_counter()
  try:
    rows = convert(_DATA.value, _KB.value, _OUT.value, _BATCH_SIZE.value, _NUM_PROC.value)
  except (official_io.AirDialogueFormatError, OSError) as e:  # FILE:LINE: field 'F': reason.
    raise cli.BadInput(str(e)) from None
  usage = {who: resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                    resource.RUSAGE_CHILDREN)}
  print(json.dumps({
      "rows": rows,
      "wall_s": round(time.perf_counter() - start, 2),
      "cpu_s": round(sum(u.ru_utime + u.ru_stime for u in usage.values()), 2),
      # KiB on Linux; a worker's peak is the largest child's.
      "peak_rss_mib": round(usage[resource.RUSAGE_SELF].ru_maxrss / 1024, 1),
      "worker_peak_rss_mib": round(usage[resource.RUSAGE_CHILDREN].ru_maxrss / 1024, 1),
  }))


if __name__ == "__main__":
  flags.mark_flags_as_required(["data", "kb", "out"])
  cli.run(main)
