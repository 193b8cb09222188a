"""Builds, saves and loads the token-level MDP dataset of one role.

Examples are streamed through `datasets.Dataset.from_generator`, which writes
Arrow shards as it goes, so memory stays bounded by one writer batch.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import multiprocessing
import os
import tempfile
import uuid
from typing import Any, Callable, Iterable, Iterator

import datasets
import numpy as np
import pyarrow.compute as pc

from data_pipelines import mdp, tokenization
from data_pipelines.dialogue import Dialogue, read_jsonl
from data_pipelines.tokenization import DialogueTokenizer

FEATURES = datasets.Features({
    "dialogue_id": datasets.Value("string"),
    "role": datasets.Value("string"),
    "outcome": datasets.Value("float32"),
    "context_json": datasets.Value("string"),
    "truncated": datasets.Value("bool"),
    "length": datasets.Value("int32"),
    "untruncated_length": datasets.Value("int32"),
    **{name: datasets.List(datasets.Value(np.dtype(dtype).name))
       for name, dtype in mdp.TOKEN_DTYPES.items()},
})


def build_dataset(
    dialogues: Iterable[Dialogue],
    tokenizer: DialogueTokenizer,
    role: str,
    max_length: int,
    *,
    serialize_context: mdp.SerializeContext = mdp.json_context,
    include_context: bool = True,
    on_no_actions: Callable[[str, str], None] | None = None,
    cache_dir: str | None = None,
) -> datasets.Dataset:
  """One MDP example per dialogue, in input order, as a memory-mapped Dataset.

  A dialogue where the role has no action inside the window raises
  mdp.NoActionsError, unless `on_no_actions(dialogue_id, reason)` is given: then
  it is skipped and reported there, so nothing disappears unnoticed.
  `cache_dir` holds the Arrow files backing the result (a fresh temporary
  directory by default); use `save_to_disk` to keep the dataset.
  """

  counts = {"read": 0, "kept": 0}

  def examples() -> Iterator[dict[str, Any]]:
    for dialogue in dialogues:
      counts["read"] += 1
      try:
        example = mdp.dialogue_to_example(
            dialogue, tokenizer, role, max_length,
            serialize_context=serialize_context, include_context=include_context)
      except mdp.NoActionsError as e:
        if on_no_actions is None:
          raise
        on_no_actions(dialogue.dialogue_id, str(e))
        continue
      counts["kept"] += 1
      yield example

  cache_dir = cache_dir or tempfile.mkdtemp(prefix="mdp_dataset_")
  # A fresh fingerprint: hashing the generator would capture the tokenizer and a
  # consumed iterator, and a hash collision would silently return stale data.
  try:
    return datasets.Dataset.from_generator(
        examples, features=FEATURES, cache_dir=cache_dir, fingerprint=uuid.uuid4().hex)
  except datasets.exceptions.DatasetGenerationError as e:
    if isinstance(e.__cause__, ValueError):  # Bad data: surface the error naming file/dialogue/field.
      raise e.__cause__ from None
    raise
  except ValueError:
    if counts["kept"] == 0:  # datasets' own message ("corresponds to no data") does not say why.
      raise ValueError(
          f"no MDP example for role {role!r}: {counts['read']} dialogues read, none kept") from None
    raise


def build_dataset_from_file(
    path: str,
    tokenizer: DialogueTokenizer,
    role: str,
    max_length: int,
    *,
    num_proc: int = 1,
    serialize_context: mdp.SerializeContext = mdp.json_context,
    include_context: bool = True,
    skip_no_actions: bool = False,
    cache_dir: str | None = None,
) -> tuple[datasets.Dataset, list[str]]:
  """`build_dataset` of a JSON-lines file in `num_proc` processes: (dataset, skipped ids).

  Worker w tokenizes the w-th contiguous block of lines into its own Arrow
  files, and the parent concatenates them in order, so the result is the
  one-process dataset row for row. Workers are spawned, never forked (the
  caller may hold JAX's threads). A dialogue without an action is an error
  unless `skip_no_actions`; skipped ids come back from every worker, and a
  worker's bad record raises in the parent with its file, line and field.
  """
  if num_proc < 1:
    raise ValueError(f"num_proc must be >= 1, got {num_proc}")
  cache_dir = cache_dir or tempfile.mkdtemp(prefix="mdp_dataset_")
  options = dict(path=path, tokenizer=tokenizer, role=role, max_length=max_length,
                 serialize_context=serialize_context, include_context=include_context,
                 skip_no_actions=skip_no_actions)
  if num_proc == 1:
    return _build_block(None, os.path.join(cache_dir, "block0"), **options)
  with open(path, encoding="utf-8") as f:
    num_lines = sum(1 for _ in f)
  bounds = np.linspace(1, num_lines + 1, num_proc + 1).round().astype(int)
  context = multiprocessing.get_context("spawn")
  with concurrent.futures.ProcessPoolExecutor(num_proc, mp_context=context) as pool:
    futures = [pool.submit(_build_block_files, (int(a), int(b)),
                           os.path.join(cache_dir, f"block{w}"),
                           datasets.is_progress_bar_enabled(), **options)
               for w, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
    parts = [future.result() for future in futures]  # In block order; re-raises a worker's error.
  files = [name for names, _ in parts for name in names]
  if not files:
    raise ValueError(f"no MDP example for role {role!r}: {num_lines} lines of {path}, none kept")
  ds = datasets.concatenate_datasets([datasets.Dataset.from_file(name) for name in files])
  return ds, [dialogue_id for _, skipped in parts for dialogue_id in skipped]


def _build_block(lines: tuple[int, int] | None, cache_dir: str, *, path: str,
                 skip_no_actions: bool, **options: Any) -> tuple[datasets.Dataset | None, list[str]]:
  """(the dataset of `path`'s lines in `lines`, the ids skipped); None when a block of a
  parallel build kept nothing (every dialogue in it skipped)."""
  skipped: list[str] = []
  try:
    ds = build_dataset(read_jsonl(path, lines), cache_dir=cache_dir,
                       on_no_actions=(lambda dialogue_id, _: skipped.append(dialogue_id))
                       if skip_no_actions else None, **options)
  except ValueError:
    if lines is None or not skipped:  # A whole file with nothing kept is the caller's error.
      raise
    return None, skipped
  return ds, skipped


def _build_block_files(lines: tuple[int, int], cache_dir: str, progress_bars: bool,
                       **options: Any) -> tuple[list[str], list[str]]:
  """A worker's block: (its Arrow files, in order; the ids it skipped). A spawned worker
  starts with datasets' defaults, so it takes the parent's progress-bar setting."""
  if not progress_bars:
    datasets.disable_progress_bars()
  ds, skipped = _build_block(lines, cache_dir, **options)
  return ([] if ds is None else [f["filename"] for f in ds.cache_files]), skipped


def load_mdp_dataset(directory: str) -> datasets.Dataset:
  """`datasets.load_from_disk`, checking that the columns are the MDP columns."""
  ds = datasets.load_from_disk(directory)
  if not isinstance(ds, datasets.Dataset):
    raise ValueError(f"{directory}: expected one Dataset, found {type(ds).__name__}")
  missing = [name for name in FEATURES if name not in ds.column_names]
  if missing:
    raise ValueError(f"{directory}: field(s) {missing} missing; not an MDP dataset")
  return ds


def parse_part(spec: str) -> tuple[int, int] | None:
  """'K/N' -> (K, N), the K-th of N disjoint parts (0 <= K < N); '' -> None (everything)."""
  if not spec:
    return None
  part, sep, parts = spec.partition("/")
  if not (sep and part.isdigit() and parts.isdigit() and 0 <= int(part) < int(parts)):
    raise ValueError(f"data part {spec!r}: expected K/N with 0 <= K < N, e.g. 0/2")
  return int(part), int(parts)


def dialogue_part(ds: datasets.Dataset, part: int, parts: int) -> datasets.Dataset:
  """The rows of the dialogues in part `part` of `parts` disjoint parts, by a stable hash of
  the dialogue id: every window of a dialogue lands in the same part, and the parts are the
  same on every machine and run, so simulators trained on different parts never share a
  dialogue (a panel that differs in data, cotraining/panels.py)."""
  ids = ds["dialogue_id"]
  keep = {i for i in set(ids)
          if int.from_bytes(hashlib.sha1(i.encode()).digest()[:8], "big") % parts == part}
  rows = [r for r, i in enumerate(ids) if i in keep]
  if not rows:
    raise ValueError(f"data part {part}/{parts}: none of the {len(set(ids))} dialogues falls "
                     "in it")
  return ds.select(rows)


def dataset_stats(ds: datasets.Dataset, batch_size: int = 4096) -> dict[str, Any]:
  """Corpus statistics, read batch by batch from Arrow without materializing rows."""
  examples = tokens = actions = truncated = terminals = 0
  for table in ds.with_format("arrow").iter(batch_size=batch_size):
    examples += table.num_rows
    tokens += pc.sum(table.column("length")).as_py() or 0
    actions += pc.sum(pc.list_flatten(table.column("action_mask")).cast("int64")).as_py() or 0
    terminals += pc.sum(pc.list_flatten(table.column("terminal")).cast("int64")).as_py() or 0
    truncated += pc.sum(table.column("truncated").cast("int64")).as_py() or 0
  return {
      "examples": examples,
      "tokens": tokens,
      "mean_length": tokens / max(examples, 1),
      "truncated_fraction": truncated / max(examples, 1),
      "terminal_fraction": terminals / max(examples, 1),
      "action_token_fraction": actions / max(tokens, 1),
  }


def tokenizer_texts(path: str, serialize_context: mdp.SerializeContext) -> Iterator[str]:
  """Every text a model will read from a Dialogue file: private contexts and turns,
  with the leading space the tokenizer encodes them with (tokenization.TEXT_PREFIX)."""
  for dialogue in read_jsonl(path):
    for role in dialogue.roles:
      yield tokenization.TEXT_PREFIX + serialize_context(role, dialogue.context.get(role, {}))
    for turn in dialogue.turns:
      yield tokenization.TEXT_PREFIX + turn.text


def corpus_roles(path: str) -> list[str]:
  roles: dict[str, None] = {}
  for dialogue in read_jsonl(path):
    roles.update(dict.fromkeys(dialogue.roles))
  return list(roles)
