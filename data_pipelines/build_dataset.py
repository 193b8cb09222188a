"""Builds, saves and loads the token-level MDP dataset of one role.

    python -m data_pipelines.build_dataset --dialogues=FILE.jsonl \
        --tokenizer=DIR --role=ROLE --max_length=N --out=DIR \
        [--train_tokenizer --vocab_size=V] [--roles=a,b]

With --train_tokenizer a byte-level BPE is trained on the dialogues (turn texts
and serialized private contexts) and saved to --tokenizer; otherwise
--tokenizer is loaded (any local HF tokenizer; missing dialogue tokens are
added, and the completed tokenizer is saved next to the dataset under
OUT/tokenizer so the dataset's ids always come with their vocabulary).
Prints dataset statistics as JSON.

Examples are streamed through `datasets.Dataset.from_generator`, which writes
Arrow shards as it goes, so memory stays bounded by one writer batch.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from typing import Any, Callable, Iterable, Iterator

import datasets
import numpy as np
import pyarrow.compute as pc
from absl import app, flags, logging

from data_pipelines import mdp
from data_pipelines.dialogue import Dialogue, read_jsonl
from data_pipelines.tokenization import DialogueTokenizer, load_tokenizer, train_tokenizer

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


def load_mdp_dataset(directory: str) -> datasets.Dataset:
  """`datasets.load_from_disk`, checking that the columns are the MDP columns."""
  ds = datasets.load_from_disk(directory)
  if not isinstance(ds, datasets.Dataset):
    raise ValueError(f"{directory}: expected one Dataset, found {type(ds).__name__}")
  missing = [name for name in FEATURES if name not in ds.column_names]
  if missing:
    raise ValueError(f"{directory}: field(s) {missing} missing; not an MDP dataset")
  return ds


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


def _tokenizer_texts(path: str, serialize_context: mdp.SerializeContext) -> Iterator[str]:
  for dialogue in read_jsonl(path):
    for role in dialogue.roles:
      yield serialize_context(role, dialogue.context.get(role, {}))
    for turn in dialogue.turns:
      yield turn.text


def _corpus_roles(path: str) -> list[str]:
  roles: dict[str, None] = {}
  for dialogue in read_jsonl(path):
    roles.update(dict.fromkeys(dialogue.roles))
  return list(roles)


_DIALOGUES = flags.DEFINE_string("dialogues", None, "Dialogue JSON-lines file.", required=True)
_TOKENIZER = flags.DEFINE_string(
    "tokenizer", None, "Tokenizer directory (loaded, or written with --train_tokenizer).",
    required=True)
_ROLE = flags.DEFINE_string("role", None, "Role whose turns are the actions.", required=True)
_MAX_LENGTH = flags.DEFINE_integer(
    "max_length", None, "Tokens per example; longer ones are truncated.", required=True)
_OUT = flags.DEFINE_string("out", None, "Output dataset directory (save_to_disk).", required=True)
_TRAIN_TOKENIZER = flags.DEFINE_bool(
    "train_tokenizer", False, "Train a byte-level BPE on the dialogues first.")
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 2048, "Vocabulary size of a trained tokenizer.")
_ROLES = flags.DEFINE_list(
    "roles", None, "Speaker roles for the tokenizer (default: all roles in --dialogues).")
_NO_CONTEXT = flags.DEFINE_bool("no_context", False, "Leave the private-context text prefix out.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace a non-empty --out directory.")
_SKIP_NO_ACTIONS = flags.DEFINE_bool(
    "skip_no_actions", False,
    "Skip (and count) dialogues where the role has no action in the window, instead of failing.")


def main(argv: list[str]) -> None:
  del argv
  datasets.disable_progress_bars()
  if os.path.exists(_OUT.value) and os.listdir(_OUT.value) and not _OVERWRITE.value:
    raise app.UsageError(f"--out={_OUT.value} is not empty; pass --overwrite to replace it")
  roles = _ROLES.value or _corpus_roles(_DIALOGUES.value)
  if _TRAIN_TOKENIZER.value:
    texts = _tokenizer_texts(_DIALOGUES.value, mdp.json_context)
    tokenizer = train_tokenizer(texts, roles, _VOCAB_SIZE.value)
    tokenizer.save(_TOKENIZER.value)
  else:
    tokenizer = load_tokenizer(_TOKENIZER.value, roles)
  skipped: list[str] = []

  def on_no_actions(dialogue_id: str, reason: str) -> None:
    logging.warning("skipped: %s", reason)
    skipped.append(dialogue_id)

  with tempfile.TemporaryDirectory(prefix="mdp_cache_") as cache_dir:
    ds = build_dataset(
        read_jsonl(_DIALOGUES.value), tokenizer, _ROLE.value, _MAX_LENGTH.value,
        include_context=not _NO_CONTEXT.value,
        on_no_actions=on_no_actions if _SKIP_NO_ACTIONS.value else None,
        cache_dir=cache_dir)
    if os.path.exists(_OUT.value):
      shutil.rmtree(_OUT.value)
    ds.save_to_disk(_OUT.value)
  tokenizer.save(os.path.join(_OUT.value, "tokenizer"))
  stats = dataset_stats(load_mdp_dataset(_OUT.value))
  stats.update(role=_ROLE.value, skipped=len(skipped), vocab_size=tokenizer.vocab_size,
               max_length=_MAX_LENGTH.value, out=_OUT.value)
  print(json.dumps(stats, indent=2))


if __name__ == "__main__":
  app.run(main)
