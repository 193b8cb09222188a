"""The end-to-end pipeline: raw dialogues -> tokenizer -> MDP datasets -> statistics.

Each stage writes into its own folder of the workdir and is skipped when its
output already exists, so an interrupted `make run` continues where it stopped.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from typing import Any, Callable

import datasets
import ml_collections
from absl import logging

from data_pipelines import mdp_dataset, tokenization
from data_pipelines.airdialogue import action_grammar, selfplay, to_dialogue
from data_pipelines.dialogue import read_jsonl, write_jsonl

SPLITS = ("train", "eval")


def _stage(name: str, done_marker: str, fn: Callable[[], Any]) -> None:
  """Runs `fn` unless `done_marker` exists; writes the marker only on success."""
  if os.path.exists(done_marker):
    logging.info("stage %s: already done (%s)", name, done_marker)
    return
  logging.info("stage %s", name)
  fn()
  with open(done_marker, "w") as f:
    f.write("done\n")


def generate_airdialogue(config: ml_collections.ConfigDict, workdir: str) -> dict[str, str]:
  """Writes official-format corpora for both splits and their Dialogue JSON lines."""
  paths = {}
  for split in SPLITS:
    out_dir = os.path.join(workdir, "airdialogue", split)
    paths[split] = os.path.join(out_dir, "dialogues.jsonl")

    def make(out_dir=out_dir, split=split):
      cfg = config.airdialogue
      selfplay.write_corpus(out_dir, cfg[f"{split}_dialogues"], seed=cfg[f"{split}_seed"],
                            kb_size=cfg.kb_size)
      write_jsonl(os.path.join(out_dir, "dialogues.jsonl"), to_dialogue.read_dialogues(
          os.path.join(out_dir, "data.json"), os.path.join(out_dir, "kb.json")))

    os.makedirs(out_dir, exist_ok=True)
    _stage(f"generate airdialogue/{split}", os.path.join(out_dir, ".done"), make)
  return paths


def train_tokenizer(config: ml_collections.ConfigDict, dialogues_path: str, out_dir: str) -> None:
  """A byte-level BPE on the training split only: eval text never shapes the vocabulary."""

  def make():
    # The action markers are single ids so that decoding can forbid them to the customer.
    tokenizer = tokenization.train_tokenizer(
        mdp_dataset.tokenizer_texts(dialogues_path, to_dialogue.serialize_context), to_dialogue.ROLES, config.tokenizer.vocab_size,
        markers=(action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG))
    tokenizer.save(out_dir)

  os.makedirs(out_dir, exist_ok=True)
  _stage("tokenizer", os.path.join(out_dir, ".done"), make)


def build_mdp_datasets(config: ml_collections.ConfigDict, dialogue_paths: dict[str, str],
                       tokenizer_dir: str, workdir: str) -> dict[str, dict[str, Any]]:
  """One MDP dataset per (role, split); returns their statistics."""
  tokenizer = tokenization.load_tokenizer(tokenizer_dir)
  stats = {}
  for role, split in itertools.product(config.mdp.roles, SPLITS):
    out_dir = os.path.join(workdir, "datasets", f"airdialogue_{role}", split)

    def make(role=role, split=split, out_dir=out_dir):
      cache_dir = out_dir + ".cache"
      ds = mdp_dataset.build_dataset(
          read_jsonl(dialogue_paths[split]), tokenizer, role, config.mdp.max_length,
          serialize_context=to_dialogue.serialize_context, cache_dir=cache_dir)
      ds.save_to_disk(out_dir)
      shutil.rmtree(cache_dir, ignore_errors=True)

    _stage(f"dataset {role}/{split}", out_dir + ".done", make)
    stats[f"{role}/{split}"] = mdp_dataset.dataset_stats(mdp_dataset.load_mdp_dataset(out_dir))
  return stats


def run(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  datasets.disable_progress_bars()
  os.makedirs(workdir, exist_ok=True)
  dialogue_paths = generate_airdialogue(config, workdir)
  tokenizer_dir = os.path.join(workdir, "tokenizer")
  train_tokenizer(config, dialogue_paths["train"], tokenizer_dir)
  report: dict[str, Any] = {"workdir": workdir}
  for split in SPLITS:
    with open(os.path.join(workdir, "airdialogue", split, "stats.json")) as f:
      corpus = json.load(f)
    report[f"airdialogue/{split}"] = {k: corpus[k] for k in ("n", "success_rate", "expected_status")}
  report["datasets"] = build_mdp_datasets(config, dialogue_paths, tokenizer_dir, workdir)
  with open(os.path.join(workdir, "report.json"), "w") as f:
    json.dump(report, f, indent=2)
  print(json.dumps(report, indent=2))
  return report
