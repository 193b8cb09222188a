"""CALM's training data: the official-format corpus, optionally relabeled, as agent-prefix datasets
with the action head's targets.

    python -m calm.data --config=experiments/configs/calm_airdialogue_quick.py \
        [--config.calm_data.relabel=False] [--config.calm_data.source_root=runs/quickstart]

(the same config and overrides as the training run that reads the data).

`prepare` reads the pipeline's official files (`{source_root}/airdialogue/
{train,eval}/data.json + kb.json`), passes the training split through
calm.relabel when `relabel` (the held-out split never: its expected actions
and rewards are the true ones the head's accuracy is measured against),
writes `{out_root}/airdialogue/{split}/dialogues.jsonl` and the tokenizer, and
builds the agent task's structured-prefix datasets (domains/airdialogue/task.py) in
`{out_root}/datasets/...` with three more per-dialogue columns:

  action_position        index of the first `[action]` marker in the row's tokens
                         (the agent's closing turn), -1 if the window has none
  expected_classes_lo/hi the expected action's classes (calm/actions.py, every
                         tied flight) as two 32-bit sets
  intent_{field}         the customer's intent, one code per field the state head
                         tracks (calm/state.py TRACKED), so it learns to track
                         the corpus's multi-turn dialogues and not only scenes

Batching passes numeric per-example columns through, so CALM's batches carry
them while everything else reads these datasets as a plain agent task. Every
dialogue token is kept (both roles): CALM's loss weights them by `speaker_ids`.

The config's `task.root` is a reference to `calm_data.{source_root,relabel,seed}`
(equal to `prepared_root`), so a training run reads the data this CLI wrote with
the same overrides. Preparing runs before training: the launcher validates the
paths a config names before it builds anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import Any

import datasets
import ml_collections
import numpy as np
from absl import flags

from calm import actions, model as calm_model, relabel as relabel_lib, state
from data_pipelines import dialogue as dialogue_lib
from data_pipelines import cli
from data_pipelines.airdialogue import action_grammar, schema, to_dialogue
from data_pipelines.tokenization import load_tokenizer
from domains.airdialogue import task as airdialogue
from domains.airdialogue.parties import intent_from_json
from ilql_dialogue import tasks

SPLITS = tasks.SPLITS
CONTEXT = "prefix"
ROLE = "agent"
DONE = ".done"
FORMAT = 2  # Bumped when the columns change: a build of another format is redone.


def prepared_root(source_root: str, relabel: bool, seed: int) -> str:
  """Where `prepare` writes for these options (the configs compute the same path)."""
  return os.path.join(source_root, "calm", f"relabel={relabel},seed={seed}")


def class_sets(action_json: Any) -> tuple[int, int]:
  """(lo, hi) bit sets of an expected action's classes; (0, 0) when it has none."""
  if not isinstance(action_json, dict):
    return 0, 0
  try:
    classes = actions.action_classes(schema.Action(
        action_json["status"], action_json.get("name", ""), tuple(action_json["flight"])))
  except (KeyError, ValueError):
    return 0, 0
  return calm_model.class_bits(classes)


def _write_split(source_root: str, out_root: str, split: str, relabel: bool, seed: int
                 ) -> dict[str, Any] | None:
  """dialogues.jsonl of one split (relabeled first when asked); the relabeling stats."""
  src = os.path.join(source_root, airdialogue.NAME, split)
  out = os.path.join(out_root, airdialogue.NAME, split)
  os.makedirs(out, exist_ok=True)
  data, kb = os.path.join(src, "data.json"), os.path.join(src, "kb.json")
  for path in (data, kb):
    if not os.path.exists(path):
      raise FileNotFoundError(f"{path}: missing; run `make run` (python -m experiments.pipeline "
                              f"--workdir={source_root}) to generate the AirDialogue corpora")
  stats = None
  if relabel and split == "train":
    official = os.path.join(out, "official")
    stats = relabel_lib.relabel_files(data, kb, official, seed)
    data, kb = os.path.join(official, "data.json"), os.path.join(official, "kb.json")
  dialogue_lib.write_jsonl(os.path.join(out, "dialogues.jsonl"),
                           to_dialogue.read_dialogues(data, kb))
  return stats


def _intent_codes(dialogue: dialogue_lib.Dialogue, path: str) -> np.ndarray:
  try:
    return state.intent_codes(intent_from_json(dialogue.context["customer"]))
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"{path}: dialogue {dialogue.dialogue_id!r}: context.customer is not an "
                     f"intent the state head can code ({e!r})") from None


def _with_head_columns(ds: datasets.Dataset, dialogues_path: str, marker_id: int
                       ) -> datasets.Dataset:
  dialogues = list(dialogue_lib.read_jsonl(dialogues_path))
  sets = {d.dialogue_id: class_sets(d.meta.get("expected_action")) for d in dialogues}
  codes = {d.dialogue_id: _intent_codes(d, dialogues_path) for d in dialogues}

  def add(batch: dict[str, list]) -> dict[str, list]:
    positions = []
    for ids in batch["input_ids"]:
      hits = np.flatnonzero(np.asarray(ids) == marker_id)
      positions.append(int(hits[0]) if hits.size else -1)
    lo, hi = zip(*(sets[i] for i in batch["dialogue_id"]))
    codes_BxK = np.stack([codes[i] for i in batch["dialogue_id"]])
    return {calm_model.ACTION_POSITION: positions, calm_model.EXPECTED_LO: list(lo),
            calm_model.EXPECTED_HI: list(hi),
            **{name: codes_BxK[:, k].tolist() for k, name in enumerate(state.INTENT_COLUMNS)}}

  features = ds.features.copy()
  features[calm_model.ACTION_POSITION] = datasets.Value("int32")
  features[calm_model.EXPECTED_LO] = datasets.Value("uint32")
  features[calm_model.EXPECTED_HI] = datasets.Value("uint32")
  for name in state.INTENT_COLUMNS:
    features[name] = datasets.Value("int32")
  # A fingerprint of its own: datasets cannot hash the closure, and warns when left to try.
  fingerprint = hashlib.sha256(f"{ds._fingerprint}:{dialogues_path}:{marker_id}".encode())
  return ds.map(add, batched=True, features=features, new_fingerprint=fingerprint.hexdigest()[:16])


def _format(final: str) -> int:
  try:
    with open(os.path.join(final, "calm.json"), encoding="utf-8") as f:
      return json.load(f).get("format", 1)
  except (OSError, ValueError):
    return 0


def prepare(source_root: str, out_root: str, *, relabel: bool = True, seed: int = 0,
            max_length: int = 1024, tokenizer_dir: str | None = None) -> str:
  """Writes the CALM data of `source_root` into `out_root` (module docstring); returns the
  datasets directory. Skipped when already complete; a partial build is redone."""
  final = tasks.dataset_dir(out_root, airdialogue.NAME, ROLE, CONTEXT, max_length, tokenizer_dir)
  if os.path.exists(os.path.join(final, DONE)) and _format(final) == FORMAT:
    return final
  stats = {split: _write_split(source_root, out_root, split, relabel, seed) for split in SPLITS}
  token_src = tokenizer_dir or os.path.join(source_root, "tokenizer")
  if tokenizer_dir is None:
    shutil.rmtree(os.path.join(out_root, "tokenizer"), ignore_errors=True)
    shutil.copytree(token_src, os.path.join(out_root, "tokenizer"))
  tokenizer = load_tokenizer(token_src, to_dialogue.ROLES)
  if action_grammar.OPEN_TAG not in tokenizer.marker_ids:
    raise ValueError(f"{token_src}: the tokenizer has no single-id {action_grammar.OPEN_TAG!r} "
                     f"marker; CALM's head reads the state at it")
  staging = final + ".staging"
  shutil.rmtree(staging, ignore_errors=True)
  shutil.rmtree(final, ignore_errors=True)
  paths = airdialogue.dialogue_paths(out_root)
  built = tasks.build_role_datasets(
      staging, paths, tokenizer, ROLE, max_length,
      serialize_context=to_dialogue.serialize_context, include_context=False,
      check=lambda d: airdialogue.table_fields(d.context.get(ROLE, {}),
                                               f"dialogue {d.dialogue_id!r}"))
  for split in SPLITS:
    ds = _with_head_columns(datasets.load_from_disk(built[split]), paths[split],
                            tokenizer.marker_ids[action_grammar.OPEN_TAG])
    ds.save_to_disk(os.path.join(final, split))
    shutil.copytree(os.path.join(built[split], "tokenizer"),
                    os.path.join(final, split, "tokenizer"))
    shutil.copy(os.path.join(built[split], "stats.json"), os.path.join(final, split, "stats.json"))
  shutil.rmtree(staging)
  with open(os.path.join(final, "calm.json"), "w", encoding="utf-8") as f:
    json.dump({"format": FORMAT, "source_root": source_root, "relabel": relabel, "seed": seed,
               "relabel_stats": stats["train"]}, f, indent=2)
  with open(os.path.join(final, DONE), "w") as f:
    f.write("done\n")
  return final


def prepare_for(config: ml_collections.ConfigDict) -> str:
  """`prepare` for a CALM config (config.calm_data, config.task); a no-op once built."""
  data, task = config.calm_data, config.task
  expected = prepared_root(data.source_root, data.relabel, data.seed)
  if os.path.normpath(task.root) != os.path.normpath(expected):
    raise ValueError(f"config.task.root={task.root!r}: CALM prepares its data in {expected!r} "
                     f"(from config.calm_data); leave task.root to the config's reference")
  return prepare(data.source_root, task.root, relabel=data.relabel, seed=data.seed,
                 max_length=task.max_length, tokenizer_dir=task.tokenizer or None)


def main(argv: list[str]) -> None:
  del argv
  try:
    path = prepare_for(flags.FLAGS.config)
  except (FileNotFoundError, ValueError) as e:
    raise cli.BadInput(str(e)) from None
  print(f"CALM datasets in {path}")


if __name__ == "__main__":
  # Defined here, not at import, so that importing this module defines no flags.
  cli.define_config_file("config", None, "A CALM config file (experiments/configs/calm_*.py).",
                         lock_config=True)
  cli.run(main)
