"""A language model as a party: one KV cache per batch of dialogues, kept across turns.

`LMParty` plays one role of B dialogues at once (the protocol in
ilql_dialogue/party.py). Each turn appends only what is new to the cache and
decodes the reply; nothing is encoded twice. The helpers below move, compact
and copy rows of that cache.

Role enforcement: a learned party only ever decodes its own turn. The
environment forces its speaker token, and generation masks every special token
except <|eot|> and the single-id markers of the closing blocks other roles own
(each task declares them: registry.TaskSpec.block_markers).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from data_pipelines.dialogue import Turn
from data_pipelines.mdp import SerializeContext, json_context
from data_pipelines.tokenization import DialogueTokenizer
from ilql_dialogue import registry
from ilql_dialogue.generation import decode_devices
from ilql_dialogue.generation import logits_processors as lp
from ilql_dialogue.generation import sampler
from ilql_dialogue.models import copy_head
from ilql_dialogue.models.kv_cache import init_cache
from ilql_dialogue.party import check_rows

def forbidden_token_ids(tokenizer: DialogueTokenizer, role: str,
                        block_markers: Mapping[str, Sequence[str]] | None = None) -> list[int]:
  """Ids `role` may never generate inside its own turn (see the module docstring): every
  special token but <|eot|>, and the markers of the closing blocks other roles own.

  A tokenizer of a task with such a block but without its single-id markers cannot
  mask it by one id (a warning says so when `block_markers` names the task's; by default,
  every registered task's, markers the tokenizer lacks are taken for another task's, since
  tasks share role names); the block is then only kept out of the outcome by the engine,
  which reads it from its owner's turns alone (and counts the others').
  """
  warn = block_markers is not None
  if block_markers is None:
    block_markers = registry.block_markers()
  ids = set(tokenizer.special_ids) - {tokenizer.eot_id}
  for owner, markers in block_markers.items():
    if owner == role:
      continue
    missing = [m for m in markers if m not in tokenizer.marker_ids]
    if warn and missing and owner in tokenizer.roles:
      logging.warning("tokenizer has no single-id markers %s: the %s's block is not masked for "
                      "the %s while decoding (train the tokenizer with markers=%s)",
                      missing, owner, role, list(markers))
    ids |= {tokenizer.marker_ids[m] for m in markers if m in tokenizer.marker_ids}
  return sorted(ids)


def _take_slots(kv: jax.Array, layout: str, order_BxS: jax.Array) -> jax.Array:
  """Gathers the slot axis of a cache array whose field name spells its layout (e.g. LxBxKxSxH)."""
  axes = layout.split("x")
  b_axis, s_axis = axes.index("B"), axes.index("S")
  index = order_BxS if b_axis < s_axis else order_BxS.T
  index = jnp.expand_dims(index, [i for i in range(len(axes)) if i not in (b_axis, s_axis)])
  return jnp.take_along_axis(kv, index, axis=s_axis)


@functools.partial(jax.jit, donate_argnames=("state",))
def compact(state: sampler.DecodeState) -> sampler.DecodeState:
  """Moves each row's real cache slots to the front, in order, and frees the rest.

  Rows are slot-aligned, so every turn appended or decoded costs all rows the
  widest row's slots; over a long dialogue most slots hold padding. Keys and
  values already carry their positions and a later query sees every earlier
  slot, so gathering the valid slots forward changes no result: the history
  is kept exactly, without being encoded again.
  """
  cache = state.cache
  order_BxS = jnp.argsort(~cache.valid_BxS, axis=1, stable=True)
  valid_BxS = jnp.take_along_axis(cache.valid_BxS, order_BxS, axis=1)
  changes = {"valid_BxS": valid_BxS,
             "index": jnp.max(jnp.sum(valid_BxS, axis=1, dtype=cache.index.dtype))}
  for field in dataclasses.fields(cache):
    if field.name not in changes:  # Key/value arrays (a tuple of them for StackedTrunks).
      layout = field.name.split("_", 1)[1]
      changes[field.name] = jax.tree.map(
          lambda kv, layout=layout: _take_slots(kv, layout, order_BxS), getattr(cache, field.name))
  return state.replace(cache=cache.replace(**changes))


def _pad_rows(rows: Sequence[Sequence[int]], width: int,
              pad_id: int) -> tuple[np.ndarray, np.ndarray]:
  tokens_BxT = np.full((len(rows), width), pad_id, np.int32)
  mask_BxT = np.zeros((len(rows), width), bool)
  for b, row in enumerate(rows):
    tokens_BxT[b, :len(row)] = row
    mask_BxT[b, :len(row)] = True
  return tokens_BxT, mask_BxT


def chunk_slots(rows: Sequence[Sequence[int]], chunk: int) -> int:
  """Cache slots `extend` uses for `rows`: the longest row rounded up to whole chunks."""
  return -(-max(map(len, rows)) // chunk) * chunk


def empty_state(decoder: Any, batch: int, max_len: int,
                mesh: jax.sharding.Mesh | None = None) -> sampler.DecodeState:
  """A decoding state holding nothing yet, with `max_len` cache slots per row (its rows split
  over `mesh`'s devices when given: `decode_devices`)."""
  cfg = decoder.cfg
  state = sampler.DecodeState(
      cache=init_cache(cfg, batch, max_len),
      last_hidden_BxD=jnp.zeros((batch, cfg.d_model), jnp.dtype(cfg.dtype)),
      lengths_B=jnp.zeros((batch,), jnp.int32))
  return state if mesh is None else decode_devices.split_state(state, mesh)


def extend(decoder: Any, state: sampler.DecodeState, rows: Sequence[Sequence[int]],
           pad_id: int, chunk: int) -> sampler.DecodeState:
  """Appends each row's tokens to the cache, `chunk` slots per call.

  Fixed-width pieces (a row's padding masked) mean one compiled append per
  batch size, whatever the context and turn lengths.
  """
  tokens_BxT, mask_BxT = _pad_rows(rows, chunk_slots(rows, chunk), pad_id)
  for start in range(0, tokens_BxT.shape[1], chunk):
    state = sampler.append(decoder, state, tokens_BxT[:, start:start + chunk],
                           mask_BxT[:, start:start + chunk])
  return state


def start_state(decoder: Any, prompts: Sequence[Sequence[int]], pad_id: int, chunk: int,
                max_len: int, prefix_BxPxD: jax.Array | None = None,
                mesh: jax.sharding.Mesh | None = None) -> sampler.DecodeState:
  """A cache of `max_len` slots holding the prompts (after the prefix rows, if any), its rows
  split over `mesh`'s devices when given (`decoder` then whole on each).

  Without a prefix the prompts go through `extend` from `empty_state`, so no
  prefill is compiled at all; a prefix enters with a prefill of the first chunk.
  """
  if prefix_BxPxD is None:
    return extend(decoder, empty_state(decoder, len(prompts), max_len, mesh), prompts, pad_id,
                  chunk)
  head_BxT, mask_BxT = _pad_rows([p[:chunk] for p in prompts], chunk, pad_id)
  if mesh is not None:  # prefill splits the cache as it finds the prompt's rows.
    head_BxT, mask_BxT = decode_devices.split_rows((head_BxT, mask_BxT), mesh)
  state = sampler.prefill(decoder, head_BxT, mask_BxT, max_len=max_len, prefix_BxPxD=prefix_BxPxD)
  rest = [p[chunk:] for p in prompts]
  return extend(decoder, state, rest, pad_id, chunk) if any(rest) else state


class LMParty:
  """A language model playing one role, B rows at once, with one KV cache per party.

  The cache holds each row's layout exactly as training saw it
  (data_pipelines/mdp.py): `[<|context|> serialized context] <|dialogue|>`,
  then `<|speaker|> text <|eot|>` per turn; a model that reads its context as
  a structured prefix (bc.PrefixLM, CALM's table) gets `prefix_fields(context,
  where) -> int32 [P, F]` embedded before the tokens instead. `reset` prefills the context;
  each `respond` APPENDS only what is new (the other side's turns since this
  party last spoke, then its forced speaker token) and samples until <|eot|>. A
  turn of a speaker that is no role of the environment (its OBSERVER, e.g. a tool's
  result after this party's call) is read like the other side's: the tokenizer must
  have that speaker among its roles, and this party may never write its token.
  `read_turn(turn) -> str | None` is how it reads another speaker's turn (None: not shown),
  the view its datasets were built with (Task.read_turn, e.g. a tool's record shortened);
  default the turn's text.
  Blocks are written `chunk` slots at a time (one compiled shape), and
  `compact` reclaims padding slots when the cache fills. A row ends (gets None)
  once its next block and turn would pass `row_limit` = max_positions -
  max_new_tokens, since `sampler.generate` needs room for a whole turn in every row.

  Records per row b: `generated_ids[b]` the ids this party sampled, one list per
  turn (<|eot|> included); for training on its own turns (cotraining/),
  `token_ids[b]` every id in cache order, `sampled[b]` whether this party
  sampled each, `logprobs[b]` the log-probability it was sampled with (0 for
  the others), and `prefix_fields_BxPxF` the structured prefix (None without
  one): a trainer sees the very sequence that was decoded, never a
  re-tokenization of its text. `compactions` counts compactions since `reset`.

  `devices` (two or more): each batch whose size they divide is decoded with its rows split
  over them and the weights whole on each (`generation/decode_devices.py`; on CPU, one device
  per core uses every core), the same tokens as on one device. For plain parties: the CALM
  planner and the k-sample picker work on `state` with `decoder` and keep one device.
  """

  def __init__(self, decoder: Any, tokenizer: DialogueTokenizer, role: str, *,
               max_new_tokens: int = 64, temperature: float = 1.0, top_k: int = 0,
               top_p: float = 1.0, min_p: float = 0.0, include_context: bool = True,
               serialize_context: SerializeContext = json_context,
               block_markers: Mapping[str, Sequence[str]] | None = None,
               forbidden_ids: Sequence[int] | None = None,
               hook: Callable[[int], Any] | None = None, max_positions: int | None = None,
               chunk: int = 32,
               prefix_fields: Callable[[Mapping[str, Any], str], np.ndarray] | None = None,
               read_turn: Callable[[Turn], str | None] | None = None,
               devices: Sequence[jax.Device] | None = None):
    if role not in tokenizer.speaker_token_ids:
      raise ValueError(f"LMParty: role {role!r} has no speaker token in tokenizer roles "
                       f"{list(tokenizer.roles)}")
    self.decoder = decoder
    self.devices = list(devices or ())
    self._mesh, self._model = None, decoder  # What decodes this batch (`reset`).
    self.tokenizer = tokenizer
    self.role = role
    self.max_new_tokens = max_new_tokens
    self.sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    self.include_context = include_context
    self.serialize_context = serialize_context
    self.forbidden_ids = list(forbidden_token_ids(tokenizer, role, block_markers) if forbidden_ids is None
                              else forbidden_ids)
    self._hook_factory = hook
    self.max_positions = max_positions or decoder.cfg.max_seq_len
    self.row_limit = self.max_positions - max_new_tokens
    if max_new_tokens < 1 or max_new_tokens + 2 > self.row_limit:
      raise ValueError(f"LMParty: max_new_tokens={max_new_tokens} must be in "
                       f"[1, max_positions / 2 - 1 = {self.max_positions // 2 - 1}]")
    self.chunk = chunk
    self.prefix_fields = prefix_fields
    self.read_turn = read_turn
    num_prefix = decoder.cfg.prefix_num_rows if prefix_fields is not None else 0
    if prefix_fields is not None and not hasattr(decoder, "embed_prefix"):
      raise ValueError("LMParty: prefix_fields needs a decoder with embed_prefix (bc.PrefixLM)")
    # The cache holds one context window (plus the prefix rows and one chunk;
    # each call attends only over its filled slots) and is compacted whenever
    # the next chunk or reply would not fit: after compaction no row holds more than
    # row_limit - max_new_tokens real tokens while its block is written, nor
    # more than row_limit before its reply.
    self.cache_len = self.max_positions + chunk + num_prefix
    self.generated_ids: list[list[list[int]]] = []
    self.compactions = 0

  @property
  def state(self) -> sampler.DecodeState:
    """The batch's decoding state (cache, last hidden states, positions)."""
    return self._state

  def _hook(self, batch: int) -> Any:
    # Padded with -1 to whole 16s: parties of either role share one compiled decode loop.
    ids = self.forbidden_ids + [-1] * (16 - len(self.forbidden_ids) % 16)
    forbid = lp.ForbidTokens.of(ids)
    if self._hook_factory is None:
      return forbid
    return lp.compose(self._hook_factory(batch), forbid)

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    tok = self.tokenizer
    batch = len(contexts)
    if batch == 0 or len(seeds) != batch:
      raise ValueError(f"LMParty.reset: {batch} contexts and {len(seeds)} seeds")
    prompts = []
    for b, context in enumerate(contexts):
      prompt = ([tok.context_id, *tok.encode(self.serialize_context(self.role, context))]
                if self.include_context else [])
      prompt.append(tok.dialogue_id)
      if len(prompt) + 1 + self.max_new_tokens > self.row_limit:
        raise ValueError(f"LMParty({self.role}), row {b}: the context takes {len(prompt)} "
                         f"tokens, leaving no room for a {self.max_new_tokens}-token turn in "
                         f"row_limit={self.row_limit} positions")
      prompts.append(prompt)
    split = len(self.devices) > 1 and batch % len(self.devices) == 0
    self._mesh = decode_devices.decode_mesh(self.devices) if split else None
    # Copied at each reset: a trainer may have changed the decoder's weights since the last.
    self._model = decode_devices.replicate(self.decoder, self._mesh) if split else self.decoder
    prefix_BxPxD = None
    if self.prefix_fields is not None:
      fields_BxPxF = np.stack([self.prefix_fields(c, f"{self.role} context of row {b}")
                               for b, c in enumerate(contexts)])
      prefix_BxPxD = self._model.embed_prefix(jnp.asarray(fields_BxPxF))
      self.prefix_fields_BxPxF = fields_BxPxF
    else:
      self.prefix_fields_BxPxF = None
    self._state = start_state(self._model, prompts, tok.pad_id, self.chunk, self.cache_len,
                              prefix_BxPxD, self._mesh)
    # One key per row, from that row's seed alone: a row samples the same tokens in any batch.
    self._key = jax.vmap(jax.random.key)(jnp.asarray(
        [np.random.SeedSequence(int(s)).generate_state(1)[0] for s in seeds], jnp.uint32))
    # Sampling calls per row: a row's key for its n-th reply is its own key folded with n,
    # so the row samples the same tokens however many calls other rows have had.
    self._calls = np.zeros(batch, np.int64)
    self._seen = [0] * batch  # Turns of each row's history already in the cache.
    self._last = [None] * batch  # This party's last reply per row.
    self._open = [False] * batch  # Last turn ended by the length cap, not <|eot|>.
    self._ended = [False] * batch
    self._batch_hook = self._hook(batch)
    if split:
      self._batch_hook = decode_devices.replicate_arrays(self._batch_hook, self._mesh)
    self.generated_ids = [[] for _ in range(batch)]
    self.token_ids = [list(p) for p in prompts]
    self.sampled = [[False] * len(p) for p in prompts]
    self.logprobs = [[0.0] * len(p) for p in prompts]
    self.compactions = 0

  def load_histories(self, histories: Sequence[Sequence[Turn]]) -> None:
    """After `reset`: each row takes in its history as if it had played it, its own turns
    included (up to its last one), so the next `respond` continues from there, with the
    sampling key it would have had there (`_calls` = its own turns loaded). For measuring
    a party at states it did not reach itself (cotraining/sharpness.py) and for resuming
    dialogues (party.resume); the loaded turns count as read, not sampled.

    Own turns are read as the tokenizer encodes their text: a resumed row continues as the
    played one did when its replies re-encode to the ids it sampled."""
    tok = self.tokenizer
    if len(histories) != len(self.token_ids):
      raise ValueError(f"LMParty.load_histories: {len(histories)} histories for "
                       f"{len(self.token_ids)} rows (reset)")
    own_rows = [[False] * len(ids) for ids in self.token_ids]  # Its own words: no copy source.
    for b, history in enumerate(histories):
      own = [k for k, turn in enumerate(history) if turn.speaker == self.role]
      loaded = history[:own[-1] + 1] if own else []
      for turn, text_ids in self._read(loaded):
        ids = [tok.speaker_token_ids[turn.speaker], *text_ids, tok.eot_id]
        own_rows[b] += [False] + [turn.speaker == self.role] * (len(ids) - 1)
        self.token_ids[b] += ids
        self.sampled[b] += [False] * len(ids)
        self.logprobs[b] += [0.0] * len(ids)
      self._seen[b], self._last[b] = len(loaded), loaded[-1].text if loaded else None
      self._calls[b] = sum(turn.speaker == self.role for turn in loaded)
      if len(self.token_ids[b]) + 1 + self.max_new_tokens > self.row_limit:
        raise ValueError(f"LMParty({self.role}), row {b}: a history of {len(loaded)} turns "
                         f"leaves no room for a turn in row_limit={self.row_limit}")
    prefix_BxPxD = None
    if self.prefix_fields_BxPxF is not None:
      prefix_BxPxD = self._model.embed_prefix(jnp.asarray(self.prefix_fields_BxPxF))
    self._state = start_state(self._model, self.token_ids, tok.pad_id, self.chunk,
                              self.cache_len, prefix_BxPxD, self._mesh)
    if self._state.cache.ids_BxS is not None:
      first = 0 if prefix_BxPxD is None else prefix_BxPxD.shape[1]
      self._state = self._state.replace(
          cache=copy_head.forget_own(self._state.cache, first, own_rows))

  def _new_tokens(self, b: int, history: Sequence[Turn]) -> list[int]:
    """Row b's block to append: close an unfinished turn, the new turns, our speaker token."""
    tok, seen = self.tokenizer, self._seen[b]
    if seen > len(history) or (seen and (history[seen - 1].speaker != self.role
                                         or history[seen - 1].text != self._last[b])):
      raise ValueError(f"LMParty({self.role}), row {b}: the history does not continue the "
                       f"dialogue this party has seen (it must end each row with this party's "
                       f"replies, unchanged)")
    ids = [tok.eot_id] if self._open[b] else []
    new = history[seen:]
    for k, turn in enumerate(new, seen):
      if turn.speaker == self.role or turn.speaker not in tok.speaker_token_ids:
        raise ValueError(f"LMParty({self.role}), row {b}: field 'turns[{k}].speaker': "
                         f"{turn.speaker!r} is not another role of {list(tok.roles)}")
    for turn, text_ids in self._read(new):
      ids += [tok.speaker_token_ids[turn.speaker], *text_ids, tok.eot_id]
    ids.append(tok.speaker_token_ids[self.role])
    return ids

  def _read(self, turns: Sequence[Turn]) -> list[tuple[Turn, list[int]]]:
    """(turn, its ids) of the turns this party is shown: its own as written, the others as
    `read_turn` reads them."""
    texts = [t.text if t.speaker == self.role or self.read_turn is None else self.read_turn(t)
             for t in turns]
    shown = [(t, text) for t, text in zip(turns, texts) if text is not None]
    if not shown:
      return []
    encoded = self.tokenizer.encode_batch([text for _, text in shown])
    return [(t, ids) for (t, _), ids in zip(shown, encoded)]

  def _make_room(self, slots: int) -> None:
    if int(self._state.cache.index) + slots > self.cache_len:
      self._state = compact(self._state)
      self.compactions += 1

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    batch = len(self._seen)
    check_rows(f"LMParty({self.role})", histories, batch)
    tok = self.tokenizer
    lengths_B = np.asarray(self._state.lengths_B)
    blocks: list[list[int]] = [[] for _ in range(batch)]
    active_B = np.zeros(batch, bool)
    for b, history in enumerate(histories):
      if history is None or self._ended[b]:
        continue
      block = self._new_tokens(b, history)
      if lengths_B[b] + len(block) + self.max_new_tokens > self.row_limit:
        self._ended[b] = True
        continue
      blocks[b], active_B[b] = block, True
    replies: list[str | None] = [None] * batch
    if not active_B.any():
      return replies

    tokens_BxT, mask_BxT = _pad_rows(blocks, chunk_slots(blocks, self.chunk), tok.pad_id)
    for start in range(0, tokens_BxT.shape[1], self.chunk):
      self._make_room(self.chunk)
      self._state = sampler.append(self._model, self._state,
                                   tokens_BxT[:, start:start + self.chunk],
                                   mask_BxT[:, start:start + self.chunk])
    self._make_room(self.max_new_tokens)
    params = sampler.SamplingParams.make(
        batch, max_new_tokens=np.where(active_B, self.max_new_tokens, 0),
        stop_tokens=[tok.eot_id], **self.sampling)
    key = sampler.fold_in(self._key, self._calls)
    self._calls[active_B] += 1
    self._state, tokens_BxN, logprobs_BxN, num_B = sampler.generate(
        self._model, self._state, params, key, max_new_tokens=self.max_new_tokens,
        pad_id=tok.pad_id, hook=self._batch_hook)
    tokens_BxN, logprobs_BxN, num_B = jax.device_get((tokens_BxN, logprobs_BxN, num_B))
    for b in np.flatnonzero(active_B):
      ids = tokens_BxN[b, :num_B[b]].tolist()
      self.generated_ids[b].append(ids)
      self.token_ids[b] += blocks[b] + ids
      self.sampled[b] += [False] * len(blocks[b]) + [True] * len(ids)
      self.logprobs[b] += [0.0] * len(blocks[b]) + logprobs_BxN[b, :num_B[b]].tolist()
      closed = bool(ids) and ids[-1] == tok.eot_id
      self._open[b] = not closed
      text = tok.decode(ids[:-1] if closed else ids).strip()
      replies[b] = self._last[b] = text
      self._seen[b] = len(histories[b]) + 1
    return replies


@functools.partial(jax.jit, donate_argnames=("state",))
def take_rows(state: sampler.DecodeState, src_B: jax.Array) -> sampler.DecodeState:
  """Row b of the result is row src_B[b] of `state` (cache fields name their layout: BxKxSxH)."""
  cache = state.cache
  changes = {}
  for field in dataclasses.fields(cache):
    if field.name != "index":  # One slot index serves every row.
      axis = field.name.split("_", 1)[1].split("x").index("B")
      changes[field.name] = jax.tree.map(lambda a, axis=axis: jnp.take(a, src_B, axis=axis),
                                         getattr(cache, field.name))
  return state.replace(cache=cache.replace(**changes),
                       last_hidden_BxD=state.last_hidden_BxD[src_B],
                       lengths_B=state.lengths_B[src_B])
