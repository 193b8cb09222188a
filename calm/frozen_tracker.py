"""An intent tracker on a frozen pretrained model's states, for the agent's closing action.

CALM's own tracker reads the intent off our small trunk, which learns the words it was trained
on and little else: customers who speak otherwise are misread (docs/RESULTS.md). A pretrained
model has read far more ways of saying an airport or a date. This tracker keeps CALM's state
head (calm/state.StateHead: pooled, each return field sharing its departure readings) and feeds
it SmolLM2-135M's first K layers over the dialogue as plain text ("Customer: ...\\nAgent: ...\\n"),
frozen; it reads the customer's text tokens. Only the head learns, on dialogues whose intents
are known.

States are standardized per dimension with the training states' statistics, so one learning rate
suits any model's scale. Batches are sorted by length and padded to a multiple of LENGTH_STEP
per batch: few compiled shapes, little padding.

A saved tracker is a directory: `tracker.json` (the source model and its depth) and
`params.npz` (the head's parameters and the standardizer).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from flax.nnx import traversals

from calm import state
from domains.airdialogue.parties import AGENT, CUSTOMER
from ilql_dialogue import bc
from ilql_dialogue.models import borrow
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.transformer import Transformer

LENGTH_STEP = 64  # Encoded lengths are padded up to a multiple of this: few compiles.
ENCODE_BATCH = 16
Turns = Sequence[tuple[str, str]]  # (speaker, text) per turn.


@dataclasses.dataclass(frozen=True)
class Encoded:
  """A trunk's frozen states at the positions the tracker reads, packed to the left."""

  hidden_NxTxD: np.ndarray
  mask_NxT: np.ndarray
  seconds: float  # Wall time of the trunk's forward passes (compilation excluded).
  tokens: int  # Tokens the trunk read.


def _pad(rows: Sequence[Sequence[Any]], width: int, fill: Any, dtype: Any) -> np.ndarray:
  out = np.full((len(rows), width), fill, dtype)
  for b, row in enumerate(rows):
    out[b, :len(row)] = row
  return out


def _round_up(n: int) -> int:
  return -(-n // LENGTH_STEP) * LENGTH_STEP


def jit_trunk(model: nnx.Module) -> Callable[..., jax.Array]:
  """hidden_BxTxD of `model` (frozen) over a padded batch, with an optional table prefix."""
  graphdef, params = nnx.split(model)

  @jax.jit
  def run(params, tokens_BxT, mask_BxT, prefix_fields_BxPxF):
    model = nnx.merge(graphdef, params)
    prefix = (None if prefix_fields_BxPxF is None
              else model.embed_prefix(prefix_fields_BxPxF))
    hidden_BxTxD, _ = model(tokens_BxT, bc.positions_from_mask(mask_BxT), mask_BxT,
                            prefix_BxPxD=prefix)
    return hidden_BxTxD

  return lambda *args: run(params, *args)


class Trunk:
  """Frozen states for the tracker: `rows` lays a dialogue out as (token ids, the positions the
  tracker reads); `forward` is the jitted trunk over a padded batch of such dialogues."""

  name: str
  cfg: ModelConfig

  def rows(self, dialogue: Any) -> tuple[list[int], list[bool]]:
    raise NotImplementedError

  def forward(self, tokens_BxT: np.ndarray, mask_BxT: np.ndarray,
              batch: Sequence[Any]) -> jax.Array:
    raise NotImplementedError

  def encode(self, dialogues: Sequence[Any],
             rows: Sequence[tuple[list[int], list[bool]]] | None = None) -> Encoded:
    """Batches of similar length (sorted), each padded to its own multiple of LENGTH_STEP;
    a width's first batch runs twice, so its compilation is not timed. `rows`: the
    dialogues' `rows`, where the caller already has them."""
    rows = [self.rows(d) for d in dialogues] if rows is None else rows
    reads_width = _round_up(max(1, max(sum(reads) for _, reads in rows)))
    hidden = np.zeros((len(rows), reads_width, self.cfg.d_model), np.float32)
    mask = np.zeros((len(rows), reads_width), bool)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    seconds, compiled = 0.0, set()
    for start in range(0, len(order), ENCODE_BATCH):
      picked = order[start:start + ENCODE_BATCH]
      filled = picked + picked[:1] * (ENCODE_BATCH - len(picked))  # One batch size.
      width = _round_up(max(1, max(len(rows[i][0]) for i in filled)))
      tokens_BxT = _pad([rows[i][0] for i in filled], width, 0, np.int32)
      mask_BxT = _pad([[True] * len(rows[i][0]) for i in filled], width, False, bool)
      batch = [dialogues[i] for i in filled]
      if width not in compiled:
        np.asarray(self.forward(tokens_BxT, mask_BxT, batch))
        compiled.add(width)
      began = time.perf_counter()
      hidden_BxTxD = np.asarray(self.forward(tokens_BxT, mask_BxT, batch))
      seconds += time.perf_counter() - began
      for b, i in enumerate(picked):
        reads = np.asarray(rows[i][1], bool)
        states = hidden_BxTxD[b, :len(reads)][reads]
        hidden[i, :len(states)] = states
        mask[i, :len(states)] = True
    return Encoded(hidden, mask, seconds, sum(len(ids) for ids, _ in rows))


class SmolLM2Trunk(Trunk):
  """SmolLM2-135M-Instruct's embeddings and first `num_layers` layers, frozen, over the turns
  as plain text; a dialogue is anything with `turns` ((speaker, text) pairs)."""

  SPEAKERS = {CUSTOMER: "Customer", AGENT: "Agent"}

  def __init__(self, num_layers: int, path: str | None = None):
    self.path = path or borrow.default_path()
    source = borrow.load_source(self.path)
    if not 1 <= num_layers <= source.cfg.num_layers:
      raise ValueError(f"smollm2 layers={num_layers}: the source has 1..{source.cfg.num_layers}")
    self.num_layers = num_layers
    self.cfg = dataclasses.replace(source.cfg, num_layers=num_layers)
    graphdef, params = nnx.split(nnx.eval_shape(lambda: Transformer(self.cfg,
                                                                    rngs=nnx.Rngs(0))))
    flat = traversals.flatten_mapping(nnx.to_pure_dict(params), sep=".")
    weights = {name: jnp.asarray(source.weights[name][:num_layers]
                                 if name.startswith("blocks.") else source.weights[name])
               for name in flat}
    nnx.replace_by_pure_dict(params, traversals.unflatten_mapping(weights, sep="."))
    self.model = nnx.merge(graphdef, params)
    self.tokenizer = source.tokenizer
    self.heads = {speaker: self.tokenizer(f"{label}:", add_special_tokens=False).input_ids
                  for speaker, label in self.SPEAKERS.items()}  # Each turn's "Customer:" ids.
    self.name = f"smollm2:{num_layers}"
    self._run = jit_trunk(self.model)

  def rows(self, dialogue: Any) -> tuple[list[int], list[bool]]:
    ids, reads, _ = self.tokenize(dialogue)
    return ids, reads

  def tokenize(self, dialogue: Any) -> tuple[list[int], list[bool], list[tuple[int, int, int]]]:
    """(ids, reads, spans): spans[j] is the (turn, start, end) characters of the turn's text
    that read position j covers."""
    ids, reads, spans = [], [], []
    for turn, (speaker, text) in enumerate(dialogue.turns):
      head = self.heads[speaker]
      body = self.tokenizer(f" {text}\n", add_special_tokens=False, return_offsets_mapping=True)
      ids += head + body.input_ids
      reads += [False] * len(head) + [speaker == CUSTOMER] * len(body.input_ids)
      if speaker == CUSTOMER:  # Offsets into " {text}\n": one less into the text.
        spans += [(turn, max(a - 1, 0), min(b - 1, len(text))) for a, b in body.offset_mapping]
    return ids, reads, spans

  def forward(self, tokens_BxT, mask_BxT, batch):
    del batch
    return self._run(jnp.asarray(tokens_BxT), jnp.asarray(mask_BxT), None)


@dataclasses.dataclass(frozen=True)
class Standardizer:
  mean_D: np.ndarray
  std_D: np.ndarray

  @classmethod
  def fit(cls, train: Encoded) -> "Standardizer":
    picked_MxD = train.hidden_NxTxD[train.mask_NxT]
    return cls(picked_MxD.mean(0), picked_MxD.std(0) + 1e-6)

  def __call__(self, hidden: np.ndarray) -> np.ndarray:
    return ((hidden - self.mean_D) / self.std_D).astype(np.float32)


def new_head(cfg: ModelConfig, seed: int) -> state.StateHead:
  head_cfg = dataclasses.replace(cfg, dtype="float32", param_dtype="float32")
  return state.StateHead(head_cfg, rngs=nnx.Rngs(seed), pooled=True, shared=True, reads="all")


def _fit(head: nnx.Module, loss_fn: Callable[[nnx.Module, jax.Array], jax.Array],
         num_rows: int, *, steps: int, batch_size: int, learning_rate: float,
         seed: int) -> nnx.Module:
  """AdamW on `loss_fn(head, index_B)` over `steps` batches of rows drawn without replacement;
  nothing is read back inside the loop."""
  optimizer = nnx.Optimizer(head, optax.adamw(learning_rate, weight_decay=1e-4), wrt=nnx.Param)

  @nnx.jit
  def step(head, optimizer, index_B):
    loss, grads = nnx.value_and_grad(loss_fn)(head, index_B)
    optimizer.update(head, grads)
    return loss

  rng = np.random.default_rng(seed)
  index_SxB = jnp.asarray(np.stack([rng.choice(num_rows, batch_size, replace=False)
                                    for _ in range(steps)]))
  for index_B in index_SxB:
    step(head, optimizer, index_B)
  return head


def train_head(train: Encoded, codes_NxK: np.ndarray, cfg: ModelConfig, *, steps: int,
               batch_size: int, learning_rate: float, seed: int
               ) -> tuple[state.StateHead, Standardizer]:
  """A fresh pooled tracker fitted to `train`'s states and intent codes, and its standardizer."""
  standardize = Standardizer.fit(train)
  hidden = jnp.asarray(standardize(train.hidden_NxTxD))
  mask, codes = jnp.asarray(train.mask_NxT), jnp.asarray(codes_NxK)

  def loss_fn(head, index_B):
    mask_BxT = mask[index_B]
    log_p = head.tracked(hidden[index_B], mask_BxT, jnp.full(index_B.shape, mask.shape[1] - 1),
                         None)
    return state.tracking_loss(log_p, codes[index_B], jnp.ones(index_B.shape, bool))[0]

  head = _fit(new_head(cfg, seed), loss_fn, len(codes_NxK), steps=steps, batch_size=batch_size,
              learning_rate=learning_rate, seed=seed)
  return head, standardize


@nnx.jit
def _tracked(head: state.StateHead, hidden_BxTxD: jax.Array, mask_BxT: jax.Array
             ) -> list[jax.Array]:
  return head.tracked(hidden_BxTxD, mask_BxT, jnp.full(mask_BxT.shape[:1], mask_BxT.shape[1] - 1),
                      None)


def read(head: state.StateHead, standardize: Standardizer, encoded: Encoded,
         batch_size: int = 64) -> list[np.ndarray]:
  """One [N, V] log posterior per TRACKED field over `encoded`'s dialogues."""
  parts = []
  for start in range(0, len(encoded.mask_NxT), batch_size):
    part = slice(start, start + batch_size)
    parts.append([np.asarray(x) for x in _tracked(
        head, jnp.asarray(standardize(encoded.hidden_NxTxD[part])),
        jnp.asarray(encoded.mask_NxT[part]))])
  return [np.concatenate(fields) for fields in zip(*parts)]


class NameHead(nnx.Module):
  """A span pointer over the read positions (extractive QA's start and end scores): where the
  customer's name begins and ends in what they said. The closing block's name is then copied
  from the customer's words, as a person would, instead of written token by token."""

  def __init__(self, d_model: int, *, rngs: nnx.Rngs):
    self.score = nnx.Linear(d_model, 2, kernel_init=nnx.initializers.zeros_init(), rngs=rngs)

  def __call__(self, hidden_BxTxD: jax.Array, mask_BxT: jax.Array
               ) -> tuple[jax.Array, jax.Array]:
    """(log P(start = t), log P(end = t)), each [B, T] over the masked positions."""
    scores_BxTx2 = self.score(hidden_BxTxD.astype(jnp.float32))
    scores_BxTx2 = jnp.where(mask_BxT[..., None], scores_BxTx2, -jnp.inf)
    log_p_BxTx2 = jax.nn.log_softmax(scores_BxTx2, axis=1)
    return log_p_BxTx2[..., 0], log_p_BxTx2[..., 1]


def name_targets(spans: Sequence[tuple[int, int, int]], turns: Turns, name: str, width: int
                 ) -> tuple[np.ndarray, np.ndarray]:
  """bool [width] starts and ends: the read positions where each mention of `name` (any case)
  in the customer's turns begins and ends."""
  starts, ends = np.zeros(width, bool), np.zeros(width, bool)
  wanted = name.strip().lower()
  for turn, (speaker, text) in enumerate(turns):
    if speaker != CUSTOMER or not wanted:
      continue
    found = text.lower().find(wanted)
    while found >= 0:
      last = found + len(wanted) - 1
      for j, (t, a, b) in enumerate(spans):
        if t == turn and a <= found < b:
          starts[j] = True
        if t == turn and a <= last < b:
          ends[j] = True
      found = text.lower().find(wanted, found + 1)
  return starts, ends


def train_name_head(train: Encoded, standardize: Standardizer, starts_NxT: np.ndarray,
                    ends_NxT: np.ndarray, *, steps: int, batch_size: int, learning_rate: float,
                    seed: int) -> NameHead:
  """A fresh NameHead fitted to the mentions' starts and ends (rows with none carry no loss):
  each row's loss is -log of the probability on any of its starts, and of its ends."""
  hidden = jnp.asarray(standardize(train.hidden_NxTxD))
  mask = jnp.asarray(train.mask_NxT)
  starts, ends = jnp.asarray(starts_NxT), jnp.asarray(ends_NxT)
  has_N = jnp.asarray(starts_NxT.any(1) & ends_NxT.any(1))

  def loss_fn(head, index_B):
    log_start_BxT, log_end_BxT = head(hidden[index_B], mask[index_B])
    gold = lambda log_p, at: jax.nn.logsumexp(jnp.where(at[index_B], log_p, -jnp.inf), axis=1)
    valid_B = has_N[index_B]
    nll_B = -(gold(log_start_BxT, starts) + gold(log_end_BxT, ends))
    return jnp.sum(jnp.where(valid_B, nll_B, 0.0)) / jnp.maximum(valid_B.sum(), 1)

  return _fit(NameHead(train.hidden_NxTxD.shape[-1], rngs=nnx.Rngs(seed)), loss_fn,
              len(starts_NxT), steps=steps, batch_size=batch_size, learning_rate=learning_rate,
              seed=seed)


MAX_NAME_TOKENS = 8


@nnx.jit
def _name_scores(head: NameHead, hidden_BxTxD: jax.Array, mask_BxT: jax.Array):
  return head(hidden_BxTxD, mask_BxT)


def extract_names(head: NameHead, standardize: Standardizer, encoded: Encoded,
                  spans: Sequence[Sequence[tuple[int, int, int]]], turns: Sequence[Turns]
                  ) -> tuple[list[str | None], np.ndarray]:
  """(each dialogue's likeliest span (start, then the best end within MAX_NAME_TOKENS of it in
  the same turn) as the customer wrote it, trimmed of spaces and punctuation, None where the
  customer said nothing; confidence_N, the lower of the pointer's probabilities of that start
  and that end, 0 where None). The pointer is trained only where a name was said, so where
  none was its end is spread over the words: the confidence says whether a name was given."""
  names, confidence = [], np.zeros(len(encoded.mask_NxT))
  for start in range(0, len(encoded.mask_NxT), 64):
    part = slice(start, start + 64)
    log_start, log_end = (np.asarray(x) for x in _name_scores(
        head, jnp.asarray(standardize(encoded.hidden_NxTxD[part])),
        jnp.asarray(encoded.mask_NxT[part])))
    for row, (ls_T, le_T) in enumerate(zip(log_start, log_end)):
      i = start + row
      if not spans[i]:
        names.append(None)
        continue
      first = int(np.argmax(ls_T[:len(spans[i])]))
      turn = spans[i][first][0]
      window = [j for j in range(first, min(first + MAX_NAME_TOKENS, len(spans[i])))
                if spans[i][j][0] == turn]
      last = max(window, key=lambda j: le_T[j])
      text = turns[i][turn][1][spans[i][first][1]:spans[i][last][2]]
      names.append(text.strip(" \t\n.,;:!?'\"") or None)
      confidence[i] = np.exp(min(ls_T[first], le_T[last])) if names[-1] else 0.0
  return names, confidence


@dataclasses.dataclass(frozen=True)
class _Dialogue:
  turns: Turns


class FrozenTracker:
  """A trained head on SmolLM2's frozen states, with an optional name pointer: `read` takes
  dialogues as (speaker, text) turns; `save` / `load` keep it in a directory (module
  docstring)."""

  def __init__(self, trunk: SmolLM2Trunk, head: state.StateHead, standardize: Standardizer,
               name_head: NameHead | None = None):
    self.trunk, self.head, self.standardize = trunk, head, standardize
    self.name_head = name_head

  def read(self, dialogues: Sequence[Turns], name_confidence: bool = False
           ) -> tuple[list[np.ndarray], list[str | None]] | tuple[
               list[np.ndarray], list[str | None], np.ndarray]:
    """(one [N, V] log posterior per TRACKED field, each dialogue's name as the customer wrote
    it: None without a name pointer or where the customer said nothing), and with
    `name_confidence` the pointer's confidence_N in each name (extract_names)."""
    wrapped = [_Dialogue(tuple(turns)) for turns in dialogues]
    tokenized = [self.trunk.tokenize(d) for d in wrapped]
    encoded = self.trunk.encode(wrapped, [(ids, reads) for ids, reads, _ in tokenized])
    log_p = read(self.head, self.standardize, encoded)
    if self.name_head is None:
      if name_confidence:
        raise ValueError("FrozenTracker.read(name_confidence=True) needs a name pointer")
      return log_p, [None] * len(wrapped)
    names, confidence_N = extract_names(self.name_head, self.standardize, encoded,
                                        [spans for _, _, spans in tokenized],
                                        [d.turns for d in wrapped])
    return (log_p, names, confidence_N) if name_confidence else (log_p, names)

  def tracked(self, dialogues: Sequence[Turns]) -> list[np.ndarray]:
    return self.read(dialogues)[0]

  def save(self, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    arrays = {"mean_D": self.standardize.mean_D, "std_D": self.standardize.std_D}
    for prefix, module in (("head", self.head), ("name", self.name_head)):
      if module is not None:
        flat = traversals.flatten_mapping(nnx.to_pure_dict(nnx.state(module, nnx.Param)), sep=".")
        arrays.update({f"{prefix}.{k}": np.asarray(v) for k, v in flat.items()})
    np.savez(os.path.join(directory, "params.npz"), **arrays)
    with open(os.path.join(directory, "tracker.json"), "w") as f:
      json.dump({"source": "smollm2", "path": self.trunk.path,
                 "num_layers": self.trunk.num_layers,
                 "name_pointer": self.name_head is not None}, f, indent=2)

  @classmethod
  def load(cls, directory: str) -> "FrozenTracker":
    meta_path = os.path.join(directory, "tracker.json")
    try:
      with open(meta_path) as f:
        meta = json.load(f)
      arrays = dict(np.load(os.path.join(directory, "params.npz")))
    except (OSError, ValueError) as err:
      raise ValueError(f"frozen tracker {directory!r}: cannot read it ({err})") from err
    if meta.get("source") != "smollm2" or not isinstance(meta.get("num_layers"), int):
      raise ValueError(f"{meta_path}: expected source 'smollm2' and an int num_layers, "
                       f"got {meta}")
    if importlib.util.find_spec("torch") is None:  # transformers' GGUF reader imports it.
      raise ValueError(f"frozen tracker {directory!r} reads SmolLM2's tokenizer with "
                       "transformers' GGUF reader, which needs torch: "
                       "pip install -r requirements-dev.txt")
    path = meta.get("path") if meta.get("path") and os.path.exists(meta["path"]) else None
    trunk = SmolLM2Trunk(meta["num_layers"], path)
    head = _restored(new_head(trunk.cfg, 0), arrays, "head", directory)
    name_head = (_restored(NameHead(trunk.cfg.d_model, rngs=nnx.Rngs(0)), arrays, "name",
                           directory) if meta.get("name_pointer") else None)
    return cls(trunk, head, Standardizer(arrays["mean_D"], arrays["std_D"]), name_head)


def _restored(module: nnx.Module, arrays: dict[str, np.ndarray], prefix: str, directory: str):
  params = nnx.state(module, nnx.Param)
  expected = traversals.flatten_mapping(nnx.to_pure_dict(params), sep=".")
  missing = sorted(f"{prefix}.{k}" for k in expected if f"{prefix}.{k}" not in arrays)
  if missing:
    raise ValueError(f"{directory}/params.npz: missing {missing}")
  nnx.replace_by_pure_dict(params, traversals.unflatten_mapping(
      {k: jnp.asarray(arrays[f"{prefix}.{k}"]) for k in expected}, sep="."))
  nnx.update(module, params)
  return module
