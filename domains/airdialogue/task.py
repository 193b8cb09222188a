"""AirDialogue as a task: the agent (the policy) and the customer (the first learned simulator).

Data: the pipeline's corpora (`{root}/airdialogue/{train,eval}/dialogues.jsonl`;
the eval corpus is generated from another seed, so its scenarios are held
out) and its tokenizer (`{root}/tokenizer`).

Contexts (config.task.context). The customer reads its intent as text (about
60 tokens). The agent reads its flight table either as text (~575 tokens,
`to_dialogue.serialize_context`) or, CALM style, as a structured prefix of
NUM_ROWS = 32 rows, which keeps its sequences as short as the dialogue: the
no-flight row, the flights in table order (then padding rows), and the
reservation row, which repeats the reserved flight's fields and slot so that
"which flight is booked" is one row to attend to. Each row is TABLE_FIELDS
discrete values (0 = "none") whose embeddings models/prefix.py sums. Prices are
bucketed by $100 (the generator's step), the last bucket "$5000 and up".

Offline metric of the agent: the final action. The agent's last turn carries
the `[action] ... [/action]` block (to_dialogue.py); the evaluation decodes
that turn from the held-out history and compares the parsed action with the
one the dialogue submitted (exact: status, flight list and name) and with the
expected action (the official success rule, which accepts any flight tied at
the lowest price).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import ml_collections
import numpy as np

from data_pipelines.airdialogue import action_grammar, context as context_lib, schema, scorer
from data_pipelines.airdialogue import to_dialogue
from data_pipelines.dialogue import Dialogue
from data_pipelines.tokenization import load_tokenizer
from ilql_dialogue import tasks

NAME = "airdialogue"
CONTEXTS = {"agent": ("prefix", "text"), "customer": ("text",)}

MAX_FLIGHTS = 30
NUM_ROWS = MAX_FLIGHTS + 2
ROW_PADDING, ROW_NO_FLIGHT, ROW_FLIGHT, ROW_RESERVATION = range(4)
PRICE_STEP = 100
NUM_PRICE_BUCKETS = 51  # $0-99, $100-199, ..., $5000 and up.
HOURS = 24
DAYS = 31

# (field, number of values including 0 = none). Order is the column order of the fields array.
TABLE_FIELDS = (
    ("row_type", 4),
    ("flight_slot", MAX_FLIGHTS + 1),  # flight_number - 1000 + 1.
    ("airline", len(schema.AIRLINES) + 1),
    ("departure_airport", len(context_lib.AIRPORTS) + 1),
    ("return_airport", len(context_lib.AIRPORTS) + 1),
    ("departure_month", len(schema.MONTHS) + 1),
    ("departure_day", DAYS + 1),
    ("departure_hour", HOURS + 1),
    ("departure_time_of_day", len(schema.TIMES_OF_DAY) + 1),
    ("return_month", len(schema.MONTHS) + 1),
    ("return_day", DAYS + 1),
    ("return_hour", HOURS + 1),
    ("return_time_of_day", len(schema.TIMES_OF_DAY) + 1),
    ("class", len(schema.CLASSES) + 1),
    ("connections", len(schema.CONNECTION_LIMITS) + 1),
    ("price_bucket", NUM_PRICE_BUCKETS + 1),
)
FIELD = {name: i for i, (name, _) in enumerate(TABLE_FIELDS)}


class TableFieldError(ValueError):
  """A flight table the prefix cannot represent; the message names the dialogue and field."""


def _code(value: Any, vocabulary: Sequence[Any], where: str, field: str) -> int:
  if value not in vocabulary:
    raise TableFieldError(f"{where}: field '{field}': {value!r} is not one of {list(vocabulary)}")
  return vocabulary.index(value) + 1


def _integer(value: Any, lo: int, hi: int, where: str, field: str) -> int:
  """`value` (an int or a string of digits, as the official files mix them) in [lo, hi]."""
  if isinstance(value, str) and value.strip().isdigit():
    value = int(value)
  if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
    raise TableFieldError(f"{where}: field '{field}': {value!r} is not an integer in [{lo}, {hi}]")
  return value


def _flight_row(flight: Mapping[str, Any], where: str, prefix: str) -> np.ndarray:
  def get(key: str) -> Any:
    if key not in flight:
      raise TableFieldError(f"{where}: field '{prefix}.{key}': missing")
    return flight[key]

  row = np.zeros(len(TABLE_FIELDS), np.int32)
  number = _integer(get("flight_number"), schema.FIRST_FLIGHT_NUMBER,
                    schema.FIRST_FLIGHT_NUMBER + MAX_FLIGHTS - 1, where, f"{prefix}.flight_number")
  row[FIELD["row_type"]] = ROW_FLIGHT
  row[FIELD["flight_slot"]] = number - schema.FIRST_FLIGHT_NUMBER + 1
  row[FIELD["airline"]] = _code(get("airline"), schema.AIRLINES, where, f"{prefix}.airline")
  for leg in ("departure", "return"):
    row[FIELD[f"{leg}_airport"]] = _code(get(f"{leg}_airport"), context_lib.AIRPORTS, where,
                                         f"{prefix}.{leg}_airport")
    row[FIELD[f"{leg}_month"]] = _code(get(f"{leg}_month"), schema.MONTHS, where,
                                       f"{prefix}.{leg}_month")
    row[FIELD[f"{leg}_day"]] = _integer(get(f"{leg}_day"), 1, DAYS, where, f"{prefix}.{leg}_day")
    hour = _integer(get(f"{leg}_time_num"), 0, HOURS - 1, where, f"{prefix}.{leg}_time_num")
    row[FIELD[f"{leg}_hour"]] = hour + 1
    row[FIELD[f"{leg}_time_of_day"]] = schema.TIMES_OF_DAY.index(schema.time_of_day(hour)) + 1
  row[FIELD["class"]] = _code(get("class"), schema.CLASSES, where, f"{prefix}.class")
  row[FIELD["connections"]] = _code(get("num_connections"), schema.CONNECTION_LIMITS, where,
                                    f"{prefix}.num_connections")
  price = _integer(get("price"), 0, 10**9, where, f"{prefix}.price")
  row[FIELD["price_bucket"]] = min(price // PRICE_STEP, NUM_PRICE_BUCKETS - 1) + 1
  return row


def table_fields(agent_context: Mapping[str, Any], where: str = "<context>") -> np.ndarray:
  """The agent's table (kb.json form: {"kb": [...], "reservation": n}) as int32 [NUM_ROWS, F]."""
  for key in ("kb", "reservation"):
    if key not in agent_context:
      raise TableFieldError(f"{where}: field '{key}': missing from the agent context")
  flights = agent_context["kb"]
  if not isinstance(flights, list) or len(flights) > MAX_FLIGHTS:
    raise TableFieldError(f"{where}: field 'kb': expected a list of at most {MAX_FLIGHTS} flights")
  fields_PxF = np.zeros((NUM_ROWS, len(TABLE_FIELDS)), np.int32)
  fields_PxF[:, FIELD["row_type"]] = ROW_PADDING
  fields_PxF[0, FIELD["row_type"]] = ROW_NO_FLIGHT
  for k, flight in enumerate(flights):
    fields_PxF[1 + k] = _flight_row(flight, where, f"kb[{k}]")
  reservation = agent_context["reservation"]
  if reservation != schema.NO_RESERVATION:
    slots = fields_PxF[1:1 + len(flights), FIELD["flight_slot"]]
    slot = _integer(reservation, schema.FIRST_FLIGHT_NUMBER,
                    schema.FIRST_FLIGHT_NUMBER + MAX_FLIGHTS - 1, where, "reservation")
    matches = np.flatnonzero(slots == slot - schema.FIRST_FLIGHT_NUMBER + 1)
    if matches.size != 1:
      raise TableFieldError(f"{where}: field 'reservation': flight {reservation} appears "
                            f"{matches.size} times in the table, expected once")
    fields_PxF[-1] = fields_PxF[1 + matches[0]]
  fields_PxF[-1, FIELD["row_type"]] = ROW_RESERVATION
  return fields_PxF


TABLE_PREFIX = tasks.TablePrefix(
    field_vocab_sizes=tuple(size for _, size in TABLE_FIELDS), num_rows=NUM_ROWS,
    fields=table_fields)


# --- Data ---------------------------------------------------------------------


def dialogue_paths(root: str) -> dict[str, str]:
  """Where the pipeline (workflows/quickstart.py) writes each split's dialogues."""
  return {split: os.path.join(root, NAME, split, "dialogues.jsonl") for split in tasks.SPLITS}


def _check_context(role: str, context: str) -> None:
  if role not in CONTEXTS:
    raise ValueError(f"config.task.role={role!r}; AirDialogue roles are {list(CONTEXTS)}")
  if context not in CONTEXTS[role]:
    raise ValueError(f"config.task.context={context!r}; the {role} reads {list(CONTEXTS[role])}")


def build_datasets(root: str, role: str, context: str, max_length: int,
                   tokenizer_dir: str | None = None) -> dict[str, str]:
  """The MDP datasets of `role` from the pipeline's corpora (built if missing).

  `tokenizer_dir` defaults to the pipeline's BPE (`{root}/tokenizer`).
  """
  _check_context(role, context)
  paths = dialogue_paths(root)
  for path in (*paths.values(), os.path.join(tokenizer_dir or os.path.join(root, "tokenizer"),
                                             "tokenizer.json")):
    if not os.path.exists(path):
      raise FileNotFoundError(f"{path}: missing; run `make run` (python -m experiments.pipeline "
                              f"--workdir={root}) to generate the AirDialogue corpora first")

  def check_table(d: Dialogue) -> None:
    table_fields(d.context.get("agent", {}), f"dialogue {d.dialogue_id!r}")

  return tasks.build_role_datasets(
      tasks.dataset_dir(root, NAME, role, context, max_length, tokenizer_dir), paths,
      load_tokenizer(tokenizer_dir or os.path.join(root, "tokenizer"), to_dialogue.ROLES),
      role, max_length,
      serialize_context=to_dialogue.serialize_context, include_context=context == "text",
      check=check_table if context == "prefix" else None)


def make_task(task_config: ml_collections.ConfigDict) -> tasks.Task:
  """The task of config.task.role (the agent or the customer)."""
  role, context = task_config.role, task_config.context
  built = build_datasets(task_config.root, role, context, task_config.max_length,
                         task_config.tokenizer or None)
  tokenizer, loaded = tasks.load_role_datasets(built)
  return tasks.Task(
      name=NAME, role=role, context=context, tokenizer=tokenizer, datasets=loaded,
      dialogue_paths=dialogue_paths(task_config.root),
      serialize_context=to_dialogue.serialize_context, include_context=context == "text",
      prefix=TABLE_PREFIX if context == "prefix" else None,
      final_turn_metrics=final_turn_metrics if role == "agent" else None)


# --- Offline metric -------------------------------------------------------------


def exact_match(pred: schema.Action, target: schema.Action) -> bool:
  """Same status, same flight list, same name (compared as the scorer compares names)."""
  return (pred.status == target.status and tuple(pred.flights) == tuple(target.flights)
          and scorer.normalize_name(pred.name) == scorer.normalize_name(target.name))


def final_action_metrics(decoded: Sequence[str], submitted: Sequence[schema.Action],
                         expected: Sequence[schema.Action]) -> dict[str, float]:
  """Rates over all decoded final turns; an unparsable turn is a failure and is counted.

  Besides the two exact matches, the scorer's per-part accuracies against the
  expected action (status, flight, name) say which part a model gets wrong.
  """
  if not len(decoded) == len(submitted) == len(expected):
    raise ValueError(f"{len(decoded)} decodings, {len(submitted)} submitted and "
                     f"{len(expected)} expected actions")
  n = len(decoded)
  counts = dict.fromkeys(("exact_match_submitted", "success_expected", "status_acc_expected",
                          "flight_acc_expected", "name_acc_expected"), 0)
  unparsable = 0
  for text, sub, exp in zip(decoded, submitted, expected):
    try:
      pred = action_grammar.parse_action(text)
    except action_grammar.ActionParseError:
      unparsable += 1
      continue
    counts["exact_match_submitted"] += exact_match(pred, sub)
    counts["success_expected"] += scorer.is_success(pred, exp)
    counts["status_acc_expected"] += scorer.status_correct(pred, exp)
    counts["flight_acc_expected"] += scorer.flight_correct(pred, exp)
    counts["name_acc_expected"] += scorer.name_correct(pred, exp)
  return {
      "final_action/n": n,
      **{f"final_action/{k}": v / n if n else float("nan") for k, v in counts.items()},
      "final_action/unparsable": unparsable,
      "final_action/unparsable_rate": unparsable / n if n else float("nan"),
  }


def _meta_action(dialogue: Dialogue, key: str) -> schema.Action:
  value = dialogue.meta.get(key)
  if not isinstance(value, dict) or not {"status", "name", "flight"} <= set(value):
    raise ValueError(f"dialogue {dialogue.dialogue_id!r}: field 'meta.{key}': expected an action "
                     f"object with status, name and flight, got {value!r}")
  return schema.Action(value["status"], value["name"], tuple(value["flight"]))


def final_turn_metrics(dialogues: Sequence[Dialogue], decoded: Sequence[str]) -> dict[str, float]:
  return final_action_metrics(decoded, [_meta_action(d, "action") for d in dialogues],
                              [_meta_action(d, "expected_action") for d in dialogues])
