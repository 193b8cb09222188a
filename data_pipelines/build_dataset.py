"""Builds the token-level MDP dataset of one role from a Dialogue JSON-lines file.

    python -m data_pipelines.build_dataset --dialogues=FILE.jsonl \
        --tokenizer=DIR --role=ROLE --max_length=N --out=DIR \
        [--train_tokenizer --vocab_size=V] [--roles=a,b] [--num_proc=N]

With --train_tokenizer a byte-level BPE is trained on the dialogues (turn texts
and serialized private contexts) and saved to --tokenizer; otherwise
--tokenizer is loaded (any local HF tokenizer; missing dialogue tokens are
added, and the completed tokenizer is saved next to the dataset under
OUT/tokenizer so the dataset's ids always come with their vocabulary).
Prints dataset statistics as JSON. The library side is `mdp_dataset`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import datasets
from absl import flags, logging

from data_pipelines import mdp, mdp_dataset
from data_pipelines import cli
from data_pipelines.tokenization import load_tokenizer, train_tokenizer

_DIALOGUES = flags.DEFINE_string("dialogues", None, "Dialogue JSON-lines file.", required=True)
_TOKENIZER = flags.DEFINE_string(
    "tokenizer", None, "Tokenizer directory (loaded, or written with --train_tokenizer).",
    required=True)
_ROLE = flags.DEFINE_string("role", None, "Role whose turns are the actions.", required=True)
_MAX_LENGTH = flags.DEFINE_integer(
    "max_length", None, "Tokens per example; longer ones are truncated.", required=True,
    lower_bound=1)
_OUT = flags.DEFINE_string("out", None, "Output dataset directory (save_to_disk).", required=True)
_TRAIN_TOKENIZER = flags.DEFINE_bool(
    "train_tokenizer", False, "Train a byte-level BPE on the dialogues first.")
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 2048, "Vocabulary size of a trained tokenizer.",
                                   lower_bound=1)
_ROLES = flags.DEFINE_list(
    "roles", None, "Speaker roles for the tokenizer (default: all roles in --dialogues).")
_NO_CONTEXT = flags.DEFINE_bool("no_context", False, "Leave the private-context text prefix out.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace a non-empty --out directory.")
_SKIP_NO_ACTIONS = flags.DEFINE_bool(
    "skip_no_actions", False,
    "Skip (and count) dialogues where the role has no action in the window, instead of failing.")


_NUM_PROC = flags.DEFINE_integer("num_proc", 1, "Worker processes tokenizing blocks of the "
                                 "file in parallel (the dataset is the same row for row).",
                                 lower_bound=1)


def main(argv: list[str]) -> None:
  del argv
  datasets.disable_progress_bars()
  cli.existing_file(_DIALOGUES.value, "--dialogues")
  if _TRAIN_TOKENIZER.value:
    cli.output_dir(_TOKENIZER.value, "--tokenizer")
  else:
    cli.existing_dir(_TOKENIZER.value, "--tokenizer")
  cli.output_dir(_OUT.value, "--out")
  if os.path.exists(_OUT.value) and os.listdir(_OUT.value) and not _OVERWRITE.value:
    raise cli.BadInput(f"--out={_OUT.value} is not empty; pass --overwrite to replace it")
  with cli.reported_as("--dialogues"):
    roles = _ROLES.value or mdp_dataset.corpus_roles(_DIALOGUES.value)
  if _ROLE.value not in roles:
    raise cli.BadInput(f"--role={_ROLE.value}: not one of the roles {roles} of "
                       f"{'--roles' if _ROLES.value else '--dialogues'}")
  if _TRAIN_TOKENIZER.value:
    texts = mdp_dataset.tokenizer_texts(_DIALOGUES.value, mdp.json_context)
    tokenizer = train_tokenizer(texts, roles, _VOCAB_SIZE.value)
    tokenizer.save(_TOKENIZER.value)
  else:
    tokenizer = load_tokenizer(_TOKENIZER.value, roles)
  with tempfile.TemporaryDirectory(prefix="mdp_cache_") as cache_dir:
    ds, skipped = mdp_dataset.build_dataset_from_file(
        _DIALOGUES.value, tokenizer, _ROLE.value, _MAX_LENGTH.value,
        num_proc=_NUM_PROC.value, include_context=not _NO_CONTEXT.value,
        skip_no_actions=_SKIP_NO_ACTIONS.value, cache_dir=cache_dir)
    for dialogue_id in skipped:
      logging.warning("skipped %s: no action of role %s inside the window", dialogue_id,
                      _ROLE.value)
    if os.path.exists(_OUT.value):
      shutil.rmtree(_OUT.value)
    ds.save_to_disk(_OUT.value)
  tokenizer.save(os.path.join(_OUT.value, "tokenizer"))
  stats = mdp_dataset.dataset_stats(mdp_dataset.load_mdp_dataset(_OUT.value))
  stats.update(role=_ROLE.value, skipped=len(skipped), vocab_size=tokenizer.vocab_size,
               max_length=_MAX_LENGTH.value, out=_OUT.value)
  print(json.dumps(stats, indent=2))


if __name__ == "__main__":
  cli.run(main)
