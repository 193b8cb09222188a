"""Tasks: one role of one corpus, as data for the training loop and the offline evaluation.

A task knows where its dialogues are, how the role's private context reaches
the model (text tokens, a structured prefix, or nothing), builds the role's
token-level MDP datasets on first use, and turns their batches into what an
algorithm reads. Algorithms and the loop never see a corpus name: AirDialogue
and Persuasion for Good differ only in the `Task` their module builds.

Config fields (config.task): name (a registered task, or module:attr naming a
registry.TaskSpec), role,
context, root (the pipeline's workdir, e.g. runs/quickstart), max_length,
tokenizer ("" = the BPE trained on the corpus; a directory = that HF
tokenizer, e.g. the one of a `model.init_from` HF / GGUF model, with the dialogue tokens
appended), and the task module's own. The datasets live in

    {root}/datasets/{name}_{role}_{context}_L{max_length}[_{tokenizer name}]/{train,eval}

each with the tokenizer that made it under `tokenizer/`, so a dataset is
never read with another vocabulary. Build them before a multi-host launch
(each task's `build_datasets`): hosts building at once would race.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import datasets
import jax
import ml_collections
import numpy as np

from data_pipelines import batching, mdp, mdp_dataset
from data_pipelines.dialogue import Dialogue, Turn, read_jsonl
from data_pipelines.tokenization import DialogueTokenizer, load_tokenizer
from ilql_dialogue import bc, init_from, registry

SPLITS = ("train", "eval")
VOCAB_MULTIPLE = 128  # Embedding rows are padded so the "vocab" axis divides over tensor shards.

# (context_json of one example, where it came from) -> int32 [num_rows, num_fields].
PrefixFieldsFn = Callable[[Mapping[str, Any], str], np.ndarray]
# (held-out dialogues, the model's decoding of each one's final role turn) -> metrics.
FinalTurnMetricsFn = Callable[[Sequence[Dialogue], Sequence[str]], dict[str, float]]


@dataclasses.dataclass(frozen=True)
class TablePrefix:
  """A structured context: `num_rows` rows of discrete fields (see models/prefix.py)."""

  field_vocab_sizes: tuple[int, ...]
  num_rows: int
  fields: PrefixFieldsFn


@dataclasses.dataclass(frozen=True)
class Task:
  """One role of one corpus: its datasets and how to read and judge them.

  `dialogue_paths[split]` are the Dialogue JSON lines the MDP datasets were
  built from; the offline evaluation decodes their final role turns.
  `final_turn_metrics` scores those decodings (None: the role has no
  machine-readable final turn, only loss and perplexity are reported).
  """

  name: str
  role: str
  context: str
  tokenizer: DialogueTokenizer
  datasets: Mapping[str, datasets.Dataset]
  dialogue_paths: Mapping[str, str]
  serialize_context: mdp.SerializeContext
  include_context: bool
  prefix: TablePrefix | None = None
  final_turn_metrics: FinalTurnMetricsFn | None = None
  # config -> the loop's TrainData, for a task that streams its training rows instead of
  # reading datasets["train"] (e.g. domains/airdialogue/lm_task.py).
  train_stream: Callable[[ml_collections.ConfigDict], Any] | None = None
  # How the role's model reads another speaker's turn (None: not shown), the view its datasets
  # were built with; a party playing it reads the same (LMParty.read_turn). None: the text.
  read_turn: Callable[[Turn], str | None] | None = None


def dataset_dir(root: str, name: str, role: str, context: str, max_length: int,
                tokenizer_dir: str | None = None) -> str:
  suffix = f"_{os.path.basename(os.path.normpath(tokenizer_dir))}" if tokenizer_dir else ""
  return os.path.join(root, "datasets", f"{name}_{role}_{context}_L{max_length}{suffix}")


def build_role_datasets(
    out_dir: str,
    dialogue_paths: Mapping[str, str],
    tokenizer: DialogueTokenizer,
    role: str,
    max_length: int,
    *,
    serialize_context: mdp.SerializeContext,
    include_context: bool,
    check: Callable[[Dialogue], None] | None = None,
) -> dict[str, str]:
  """Builds `out_dir/{split}` (skipping splits already built); returns their paths.

  `check(dialogue)` runs on every dialogue first, so a record the task cannot
  represent (e.g. an airport without a prefix code) fails the build naming
  its file and line, not a training step hours later. A split is written to
  a temporary folder and renamed when complete: an interrupted build leaves
  nothing that looks finished.
  """
  out = {}
  for split in SPLITS:
    final = os.path.join(out_dir, split)
    out[split] = final
    if os.path.isdir(final):
      continue
    partial = final + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    ds = mdp_dataset.build_dataset(
        _checked(read_jsonl(dialogue_paths[split]), check), tokenizer, role, max_length,
        serialize_context=serialize_context, include_context=include_context,
        cache_dir=partial + ".cache")
    ds.save_to_disk(partial)
    tokenizer.save(os.path.join(partial, "tokenizer"))
    with open(os.path.join(partial, "stats.json"), "w") as f:
      json.dump({**mdp_dataset.dataset_stats(ds), "dialogues": dialogue_paths[split]}, f,
                indent=2)
    shutil.rmtree(partial + ".cache", ignore_errors=True)
    os.rename(partial, final)
  return out


def _checked(dialogues: Iterable[Dialogue],
             check: Callable[[Dialogue], None] | None) -> Iterator[Dialogue]:
  for dialogue in dialogues:
    if check is not None:
      check(dialogue)
    yield dialogue


def load_role_datasets(paths: Mapping[str, str]) -> tuple[DialogueTokenizer, dict[str, Any]]:
  """The MDP datasets of every split and the one tokenizer they share."""
  loaded = {split: mdp_dataset.load_mdp_dataset(path) for split, path in paths.items()}
  tokenizers = {split: os.path.join(path, "tokenizer", "tokenizer.json")
                for split, path in paths.items()}
  texts = {split: open(path, encoding="utf-8").read() for split, path in tokenizers.items()}
  if len(set(texts.values())) != 1:
    raise ValueError(
        f"the splits were built with different tokenizers: {sorted(tokenizers.values())}")
  return load_tokenizer(os.path.dirname(tokenizers[SPLITS[0]])), loaded


def make_task(config: ml_collections.ConfigDict) -> Task:
  """The Task named by config.task.name, its datasets built if missing."""
  spec = registry.task(config.task.name)
  if spec.make_task is None:
    raise ValueError(f"config.task.name={config.task.name!r}: the task builds no datasets")
  return spec.make_task(config.task)


def configure_model(config: ml_collections.ConfigDict, task: Task) -> None:
  """Fills in what config.model takes from the data: vocabulary, prefix, source architecture.

  vocab_size <= 0 takes the tokenizer's size rounded up to VOCAB_MULTIPLE.
  With `model.init_from` (ilql_dialogue/init_from.py): a Hugging Face or GGUF
  source decides the architecture and needs the data in its vocabulary
  (config.task.tokenizer); a training workdir must share this task's tokenizer.
  """
  model = config.model
  vocab = task.tokenizer.vocab_size
  spec = model.get("init_from", "")
  source = init_from.parse(spec) if spec else None
  if source is not None and source.kind != "workdir" and not config.task.get("tokenizer"):
    raise ValueError(f"config.model.init_from={spec!r} needs the data in its own vocabulary: "
                     "set config.task.tokenizer to its tokenizer directory")
  if source is not None:
    init_from.check_tokenizer(spec, task.tokenizer)
  with config.unlocked():
    if model.vocab_size <= 0:
      model.vocab_size = -(-vocab // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    elif model.vocab_size < vocab:
      raise ValueError(f"config.model.vocab_size={model.vocab_size} is smaller than the "
                       f"tokenizer of task {task.name}/{task.role} ({vocab} ids)")
    init_from.adopt_architecture(config)
    if task.prefix is None:
      model.prefix_field_vocab_sizes, model.prefix_num_rows = (), 0
    else:
      model.prefix_field_vocab_sizes = task.prefix.field_vocab_sizes
      model.prefix_num_rows = task.prefix.num_rows


def add_prefix_fields(task: Task, dataset: datasets.Dataset,
                      batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Adds `prefix_fields` [B, P, F] built from each row's context_json (padding rows: zeros)."""
  if task.prefix is None:
    return batch
  rows_B = batch["example_index"]
  fields_BxPxF = np.zeros((len(rows_B), task.prefix.num_rows, len(task.prefix.field_vocab_sizes)),
                          np.int32)
  real = np.flatnonzero(rows_B >= 0)
  table = dataset.with_format("arrow")[rows_B[real].tolist()]
  for b, context, dialogue_id in zip(real, table.column("context_json").to_pylist(),
                                     table.column("dialogue_id").to_pylist()):
    fields_BxPxF[b] = task.prefix.fields(json.loads(context), f"dialogue {dialogue_id!r}")
  return {**batch, bc.PREFIX_FIELDS: fields_BxPxF}


def _boundaries(config: ml_collections.ConfigDict) -> tuple[int, ...] | None:
  return tuple(config.data.bucket_boundaries) or None


def train_data(task: Task, config: ml_collections.ConfigDict):
  """The loop's TrainData: resumable length-bucketed batches of this host's rows
  (each host reads only its share from Arrow; batching.batches), or the task's own stream."""
  if task.train_stream is not None:
    return task.train_stream(config)
  dataset = task.datasets["train"]
  host = (jax.process_index(), jax.process_count())

  def from_step(start: int) -> Iterator[dict[str, np.ndarray]]:
    for batch in batching.stream(dataset, config.train.batch_size, config.seed, start,
                                 boundaries=_boundaries(config), host=host):
      yield add_prefix_fields(task, dataset, batch)

  return from_step


def eval_batches(task: Task, config: ml_collections.ConfigDict, split: str = "eval",
                 limit: int | None = None) -> list[dict[str, np.ndarray]]:
  """The first `limit` (default config.data.eval_batches; 0 = all) batches of a split, in a
  fixed order."""
  limit = config.data.eval_batches if limit is None else limit
  dataset = task.datasets[split]
  out = []
  for batch in batching.batches(dataset, config.train.batch_size, config.seed, epoch=0,
                                boundaries=_boundaries(config)):
    out.append(add_prefix_fields(task, dataset, batch))
    if len(out) == limit:
      break
  return out
