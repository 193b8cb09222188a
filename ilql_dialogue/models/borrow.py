"""Trunks in our vocabulary that start from a pretrained GGUF model's knowledge.

Our dialogue tokenizer (a small byte-level BPE) shares no ids with the
pretrained model's, so its rows cannot be copied; each of our tokens borrows
the mean input-embedding row of the source pieces its text tokenizes into
(`mean_rows`). Special tokens, and tokens whose text yields no piece, keep
their fresh init (`rows_N` False).

  embeddings  our trunk as configured; the borrowed rows, 576-d for SmolLM2,
              are projected onto their top d_model principal components, each
              rescaled to the trunk's init scale (`fit_projection`,
              deterministic: SVD with each component's sign fixed).
  layers      a trunk of the source's width whose K layers are the source's
              layers 0..K-1 (`architecture`); the borrowed rows are used as
              they are. Its final norm starts fresh: the source's is fitted to
              the output of its last layer, not of layer K-1.

The source ties its output to its input embedding, so an untied LM head
starts as the same borrowed table.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import numpy as np

from ilql_dialogue.models import gguf_io
from ilql_dialogue.models.config import ModelConfig

KINDS = ("embeddings", "layers")
# ModelConfig fields a `layers` trunk takes from its source; the rest (vocab, length, tying,
# dtype, prefix, init) stay as the experiment config sets them.
LAYER_FIELDS = ("family", "d_model", "num_heads", "num_kv_heads", "head_dim", "mlp_dim",
                "norm_eps", "rope_theta", "qkv_bias", "attn_out_bias", "mlp_bias")
Weights = dict[str, tuple[np.ndarray, np.ndarray | None]]  # name -> (value, rows it sets).


@dataclasses.dataclass(frozen=True)
class Projection:
  """rows_NxD -> (rows - mean) @ components * scale: the top principal directions."""

  mean_D: np.ndarray
  components_DxK: np.ndarray
  scale_K: np.ndarray

  def __call__(self, rows_NxD: np.ndarray) -> np.ndarray:
    return ((rows_NxD - self.mean_D) @ self.components_DxK * self.scale_K).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Source:
  """A pretrained GGUF model: architecture, float32 weights (our names), its tokenizer."""

  cfg: ModelConfig
  weights: dict[str, np.ndarray]
  tokenizer: Any  # transformers.PreTrainedTokenizerFast


@functools.lru_cache(maxsize=1)
def load_source(path: str) -> Source:
  """Read once per process: the start-up of every LM in a model and the benchmark reuse it."""
  return Source(source_config(path), gguf_io.gguf_weights(path),
                gguf_io.load_gguf_tokenizer(path))


@functools.lru_cache(maxsize=4)
def source_config(path: str) -> ModelConfig:
  """The source's architecture from its metadata (start-up checks read it before any weight)."""
  return gguf_io.gguf_config(path)


def default_path() -> str:
  """SmolLM2-135M-Instruct's GGUF file (FileNotFoundError with the install command)."""
  return str(gguf_io.smollm2_path())


def architecture(source_cfg: ModelConfig, num_layers: int) -> dict[str, Any]:
  """The config.model fields of a `layers` trunk: the source's width, `num_layers` deep."""
  return {**{name: getattr(source_cfg, name) for name in LAYER_FIELDS}, "num_layers": num_layers}


def token_pieces(ours: Any, special_ids: Sequence[int], theirs: Any) -> list[list[int]]:
  """For each id of our tokenizer `ours`, the ids of `theirs` its text tokenizes into.

  Both are transformers tokenizers. A byte-level token ('Ġbook') is decoded to
  its text (' book') and tokenized by `theirs` without special tokens. A token
  that is part of a UTF-8 character has no text: its byte-level string goes
  through their BPE model directly (both use the same byte alphabet). Special
  ids get no piece.
  """
  special = set(special_ids)
  pieces = []
  for token_id, token in enumerate(ours.convert_ids_to_tokens(list(range(len(ours))))):
    if token_id in special or token is None:
      pieces.append([])
      continue
    text = ours.convert_tokens_to_string([token])
    if "\ufffd" in text:
      ids = [theirs.convert_tokens_to_ids(t.value)
             for t in theirs.backend_tokenizer.model.tokenize(token)]
    else:
      ids = theirs(text, add_special_tokens=False).input_ids
    pieces.append([i for i in ids if i is not None])
  return pieces


def mean_rows(pieces: Sequence[Sequence[int]], embed_VxD: np.ndarray, num_rows: int
              ) -> tuple[np.ndarray, np.ndarray]:
  """(rows_NxD, borrowed_N): row n the mean of `embed` over pieces[n]; N = num_rows >= ids."""
  rows_NxD = np.zeros((num_rows, embed_VxD.shape[1]), np.float32)
  borrowed_N = np.zeros(num_rows, bool)
  for n, ids in enumerate(pieces):
    if ids:
      rows_NxD[n] = embed_VxD[np.asarray(ids)].mean(axis=0, dtype=np.float64)
      borrowed_N[n] = True
  return rows_NxD, borrowed_N


def fit_projection(rows_NxD: np.ndarray, d_out: int, init_std: float) -> Projection:
  """PCA of the rows onto `d_out` components, each scaled to std init_std (whitened).

  Whitened because a random init's rows are isotropic: with one scale for all
  components the leading few carry most of the variance, the tokens are hard
  to tell apart in the rest, and the trunk learned slower than from a random
  init (benchmarks/borrow.py).
  """
  if d_out > min(rows_NxD.shape):
    raise ValueError(f"cannot project {rows_NxD.shape[0]} rows of width {rows_NxD.shape[1]} "
                     f"onto {d_out} components")
  rows = rows_NxD.astype(np.float64)
  mean_D = rows.mean(axis=0)
  _, _, vt_DxD = np.linalg.svd(rows - mean_D, full_matrices=False)
  components_DxK = vt_DxD[:d_out].T
  # SVD fixes each direction up to sign: make the largest loading positive.
  largest_K = components_DxK[np.abs(components_DxK).argmax(axis=0), np.arange(d_out)]
  components_DxK = components_DxK * np.sign(largest_K)
  scale_K = init_std / ((rows - mean_D) @ components_DxK).std(axis=0)
  return Projection(mean_D, components_DxK, scale_K)


def borrowed_table(source: Source, ours: Any, special_ids: Sequence[int], num_rows: int,
                   project_to: int | None = None, init_std: float = 0.02
                   ) -> tuple[np.ndarray, np.ndarray, Projection | None]:
  """(table_NxD, borrowed_N, projection): our tokens' mean source rows, projected to
  `project_to` dimensions when given (fitted on the borrowed rows only)."""
  pieces = token_pieces(ours, special_ids, source.tokenizer)
  rows_NxD, borrowed_N = mean_rows(pieces, source.weights["embed"], num_rows)
  if project_to is None:
    return rows_NxD, borrowed_N, None
  projection = fit_projection(rows_NxD[borrowed_N], project_to, init_std)
  return np.where(borrowed_N[:, None], projection(rows_NxD), 0.0), borrowed_N, projection


def weights(kind: str, cfg: ModelConfig, source: Source, ours: Any,
            special_ids: Sequence[int]) -> Weights:
  """The trunk parameters (our flat names) a `kind` trunk of `cfg` starts from."""
  if kind not in KINDS:
    raise ValueError(f"borrow kind {kind!r} not in {KINDS}")
  project_to = cfg.d_model if kind == "embeddings" else None
  if kind == "layers" and cfg.d_model != source.cfg.d_model:
    raise ValueError(f"a layers trunk has the source's width {source.cfg.d_model}, not "
                     f"d_model={cfg.d_model}")
  table_NxD, borrowed_N, _ = borrowed_table(source, ours, special_ids, cfg.vocab_size,
                                            project_to, cfg.init_std)
  out: Weights = {"embed": (table_NxD, borrowed_N)}
  if not cfg.tie_embeddings:
    out["lm_head"] = (table_NxD.T, borrowed_N)
  if kind == "layers":
    if cfg.num_layers > source.cfg.num_layers:
      raise ValueError(f"num_layers={cfg.num_layers}: the source has {source.cfg.num_layers}")
    for name, value in source.weights.items():
      if name.startswith("blocks."):
        out[name] = (value[:cfg.num_layers], None)
  return out
