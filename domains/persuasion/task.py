"""Persuasion for Good as a task: the persuader (the policy) and the persuadee (a simulator).

`build_datasets` turns the real corpus in ../shared into the task's files:

    {root}/persuasion/{train,eval}/dialogues.jsonl   loader.train_test_split (10% held
                                                     out by a fixed hash of the ids)
    {root}/persuasion/tokenizer                      byte-level BPE on the train split
    {root}/datasets/persuasion_{role}_{context}_L{max_length}/{train,eval}

The persuadee's last turn ends with its donation statement
(`loader.with_donation_statement`, e.g. `[donate] 0.50 [/donate]`), so a
persuadee simulator learns to end by stating what it gives, and a rollout's
reward (donation / 2) can be read off the simulator's own words. The
persuader sees the statement too, as the other side's words.

Contexts (config.task.context): "text" shows the role its own persona (the
loader's traits, compact `key=value` text; missing traits are left out) and
"none" shows nothing. Dialogues are long (with the 2,048-id BPE: median ~500
tokens, 90th percentile ~790, the persona adds ~150), so windows of
`max_length` cut some of them; `stats.json` next to each dataset says how many.

Offline metric of the persuadee: donation error. The evaluation decodes its
final turn from the held-out history and parses the statement; the mean
absolute error against the real (clipped) donation is over the parsable
ones, and the unparsable ones are counted and reported on their own.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import ml_collections
import numpy as np

from data_pipelines import tokenization
from data_pipelines.dialogue import Dialogue, read_jsonl, write_jsonl
from data_pipelines.persuasion import loader
from ilql_dialogue import tasks

NAME = "persuasion"
CONTEXTS = ("text", "none")
# One token each, so the statement is short and a decoder can keep a role from opening one.
MARKERS = (loader.DONATION_OPEN, loader.DONATION_CLOSE)


def serialize_persona(role: str, persona: Mapping[str, Any]) -> str:
  """E.g. `extrovert=3.2, age=34, sex=Male`; numbers to one decimal, None traits left out."""
  del role  # Both roles' personas have the same traits.
  items = []
  for key, value in persona.items():
    if value is None:
      continue
    if isinstance(value, float):
      value = f"{round(value, 1):g}"
    items.append(f"{key}={value}")
  return ", ".join(items)


def corpus_paths(root: str) -> dict[str, str]:
  return {split: os.path.join(root, NAME, split, "dialogues.jsonl") for split in tasks.SPLITS}


def write_corpus(root: str, data_dir: str | None = None, test_fraction: float = 0.1,
                 seed: int = 0, vocab_size: int = 2048) -> tuple[dict[str, str], str]:
  """Writes the train and held-out dialogues (with donation statements) and a BPE trained on
  the train split only; each is skipped when it exists. Returns (dialogue paths, BPE dir)."""
  paths = corpus_paths(root)
  tokenizer_dir = os.path.join(root, NAME, "tokenizer")
  if not all(os.path.exists(p) for p in paths.values()):
    dialogues = loader.load_dialogues(data_dir, with_labels=False, donation_statement=True)
    train, held_out = loader.train_test_split(dialogues, test_fraction, seed)
    for split, part in zip(tasks.SPLITS, (train, held_out)):
      os.makedirs(os.path.dirname(paths[split]), exist_ok=True)
      write_jsonl(paths[split] + ".partial", part)
      os.rename(paths[split] + ".partial", paths[split])
  if not os.path.exists(os.path.join(tokenizer_dir, "tokenizer.json")):
    train = list(read_jsonl(paths["train"]))
    texts = [serialize_persona(role, d.context.get(role, {})) for d in train for role in d.roles]
    texts += [t.text for d in train for t in d.turns]
    tokenization.train_tokenizer(texts, loader.ROLES, vocab_size, markers=MARKERS).save(
        tokenizer_dir)
  return paths, tokenizer_dir


def build_datasets(root: str, roles: Sequence[str] = loader.ROLES, context: str = "text",
                   max_length: int = 1024, *, data_dir: str | None = None,
                   tokenizer_dir: str | None = None,
                   vocab_size: int = 2048) -> dict[str, dict[str, str]]:
  """Everything the P4G tasks read, under `root` (the pipeline's workdir); returns, per role,
  the dataset path of each split.

  `data_dir` defaults to $P4G_DATA_DIR (data_pipelines/persuasion/loader.py); `tokenizer_dir`
  (an HF tokenizer) replaces the corpus's own BPE of `vocab_size` ids.
  """
  if context not in CONTEXTS:
    raise ValueError(f"context={context!r}; Persuasion for Good contexts are {list(CONTEXTS)}")
  paths, corpus_tokenizer = write_corpus(root, data_dir, vocab_size=vocab_size)
  tokenizer = tokenization.load_tokenizer(tokenizer_dir or corpus_tokenizer, loader.ROLES,
                                          MARKERS)
  out = {}
  for role in roles:
    if role not in loader.ROLES:
      raise ValueError(f"role={role!r}; Persuasion for Good roles are {list(loader.ROLES)}")
    out[role] = tasks.build_role_datasets(
        tasks.dataset_dir(root, NAME, role, context, max_length, tokenizer_dir), paths,
        tokenizer, role, max_length, serialize_context=serialize_persona,
        include_context=context == "text")
  return out


def make_task(task_config: ml_collections.ConfigDict) -> tasks.Task:
  role, context = task_config.role, task_config.context
  built = build_datasets(task_config.root, (role,), context, task_config.max_length,
                         data_dir=task_config.data_dir or None,
                         tokenizer_dir=task_config.tokenizer or None)
  tokenizer, loaded = tasks.load_role_datasets(built[role])
  return tasks.Task(
      name=NAME, role=role, context=context, tokenizer=tokenizer, datasets=loaded,
      dialogue_paths=corpus_paths(task_config.root), serialize_context=serialize_persona,
      include_context=context == "text",
      final_turn_metrics=final_turn_metrics if role == "persuadee" else None)


def donation_metrics(decoded: Sequence[str], donations: Sequence[float]) -> dict[str, float]:
  """Mean absolute error of the stated donations that parse; unparsable ones counted apart."""
  if len(decoded) != len(donations):
    raise ValueError(f"{len(decoded)} decodings for {len(donations)} donations")
  stated, real = [], []
  for text, donation in zip(decoded, donations):
    try:
      stated.append(loader.parse_donation(text))
      real.append(donation)
    except loader.DonationParseError:
      continue
  n, parsed = len(decoded), len(stated)
  stated, real = np.asarray(stated, np.float64), np.asarray(real, np.float64)
  return {
      "donation/n": n,
      "donation/mae": float(np.abs(stated - real).mean()) if parsed else float("nan"),
      "donation/mean_stated": float(stated.mean()) if parsed else float("nan"),
      "donation/mean_real": float(np.mean(donations)) if n else float("nan"),
      "donation/unparsable": n - parsed,
      "donation/unparsable_rate": (n - parsed) / n if n else float("nan"),
  }


def final_turn_metrics(dialogues: Sequence[Dialogue], decoded: Sequence[str]) -> dict[str, float]:
  donations = []
  for d in dialogues:
    if "donation" not in d.meta:
      raise ValueError(f"dialogue {d.dialogue_id!r}: field 'meta.donation': missing")
    donations.append(float(d.meta["donation"]))
  return donation_metrics(decoded, donations)
