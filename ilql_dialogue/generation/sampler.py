"""Batched KV-cache decoding: prefill, multi-turn append, and a `lax.while_loop` sampler.

The decoding state is a pytree (`DecodeState`) that every entry point takes and returns,
donated to `jit`: XLA writes new keys and values into the preallocated cache in place, and the
whole decode loop is one `lax.while_loop` that never returns to Python.

Rows are aligned by cache slot, not by position: every call writes its block at the same slots
for all rows (one scalar `cache.index`), padding slots are marked invalid and never attended
to, and each row's position ids count only its real tokens. So left or right padding, and turns
of different lengths appended to different rows, decode exactly like each row alone.

Traced, so varying them never recompiles: temperature, top-k, top-p, stop ids, per-row length
limits, the pad id and any logits processor's arrays or modules. Static: shapes,
`max_new_tokens`, the processor's type/structure, the cache length and the attended window.

Every call attends only over the filled part of the cache: a window of the first slots up to
the last one it can write, rounded up to `ATTEND_BUCKET` times a power of two (one compile per
bucket), so a cache sized for a whole episode costs each step only what the history holds. The
layers decode from per-layer parameters sliced once before the loop (`hoisted_layers`).

Rows may be split over devices (`decode_devices`: one CPU device per core uses every core):
`prefill` splits the new cache as its prompt's rows are, and each call keeps the split.

Randomness: `rng` is one key for the batch, or B keys (a typed key array of shape [B]); with
per-row keys a row samples the same tokens whatever batch it is in.

Log-probs: each is that of the chosen token under the distribution it was drawn from: softmax
of the processed logits (the hook, then temperature, top-k, top-p), renormalised over the kept
tokens. Greedy rows (temperature <= 0) use temperature 1 there, so their log-probs are the
processed model's, not a degenerate 0.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from ilql_dialogue.generation import decode_devices, logits_processors as lp
from ilql_dialogue.models import copy_head
from ilql_dialogue.models.kv_cache import KVCache
from ilql_dialogue.models.transformer import hoisted_layers

# Decoding attends over the cache's first slots up to the end of this call's
# tokens, rounded up to this times a power of two: one compiled loop per
# bucket, and a handful of buckets however long the dialogue grows.
ATTEND_BUCKET = 64


@struct.dataclass
class DecodeState:
  """A batch of histories held in a KV cache, ready to be extended or decoded from.

  `last_hidden_BxD` is the trunk output at each row's last real token: the
  next token's logits come from it, so `generate` never re-runs a position.
  `lengths_B` counts each row's real tokens, which is also the position id
  its next token gets.
  """

  cache: KVCache
  last_hidden_BxD: jax.Array
  lengths_B: jax.Array


@struct.dataclass
class SamplingParams:
  """Per-row sampling controls, all traced (see `SamplingParams.make`).

  `stop_tokens_BxK` lists each row's stop ids padded with -1: a row stops
  after emitting one of them (the stop token is kept in its output and its
  cache). `max_new_tokens_B` caps each row; the `max_new_tokens` argument of
  `generate` is the (static) buffer size and must be at least the largest cap.
  """

  temperature_B: jax.Array
  top_k_B: jax.Array
  top_p_B: jax.Array
  min_p_B: jax.Array
  stop_tokens_BxK: jax.Array
  max_new_tokens_B: jax.Array

  @classmethod
  def make(cls, batch_size: int, *, max_new_tokens: Any, temperature: Any = 1.0,
           top_k: Any = 0, top_p: Any = 1.0, min_p: Any = 0.0,
           stop_tokens: Any = ()) -> "SamplingParams":
    """Scalars apply to every row; sequences give one value per row.

    `stop_tokens` is either a flat list of ids shared by all rows or one list
    per row (ragged lists are padded with -1). temperature 0 means greedy,
    top_k 0, top_p 1 and min_p 0 mean no filtering.
    """
    return cls(
        temperature_B=lp.row_values(temperature, batch_size, jnp.float32),
        top_k_B=lp.row_values(top_k, batch_size, jnp.int32),
        top_p_B=lp.row_values(top_p, batch_size, jnp.float32),
        min_p_B=lp.row_values(min_p, batch_size, jnp.float32),
        stop_tokens_BxK=_stop_token_table(stop_tokens, batch_size),
        max_new_tokens_B=lp.row_values(max_new_tokens, batch_size, jnp.int32),
    )


def _stop_token_table(stop_tokens: Any, batch_size: int) -> jax.Array:
  stop_tokens = list(stop_tokens)
  if stop_tokens and all(isinstance(row, (list, tuple)) for row in stop_tokens):
    if len(stop_tokens) != batch_size:
      raise ValueError(f"stop_tokens: got {len(stop_tokens)} per-row lists for {batch_size} rows")
    rows = [list(row) for row in stop_tokens]
  else:
    rows = [stop_tokens] * batch_size
  # Widths are rounded up to a multiple of 4 so that the usual small stop sets
  # (eos, end-of-turn, ...) share one compiled shape.
  width = -(-max(1, max(len(row) for row in rows)) // 4) * 4
  return jnp.asarray([row + [-1] * (width - len(row)) for row in rows], jnp.int32)


def mask_from_lengths(lengths_B: jax.Array, width: int) -> jax.Array:
  """mask_BxW of the first `lengths_B` tokens per row: turns `generate`'s output into an `append` block."""
  return jnp.arange(width)[None, :] < jnp.asarray(lengths_B)[:, None]


def positions_from_mask(mask_BxT: jax.Array, start_B: jax.Array) -> jax.Array:
  """Position ids that count only real tokens, continuing each row from `start_B`."""
  counts_BxT = jnp.cumsum(mask_BxT.astype(jnp.int32), axis=1)
  return start_B[:, None] + jnp.maximum(counts_BxT - 1, 0)


def _absorb_block(model: Any, cache: KVCache, last_hidden_BxD: jax.Array,
                  lengths_B: jax.Array, tokens_BxT: jax.Array, mask_BxT: jax.Array,
                  prefix_BxPxD: jax.Array | None = None) -> DecodeState:
  """Runs one block through the model into the cache and tracks each row's last real token."""
  mask_BxT = mask_BxT.astype(jnp.bool_)
  positions_BxT = positions_from_mask(mask_BxT, lengths_B)
  extra = {} if prefix_BxPxD is None else {"prefix_BxPxD": prefix_BxPxD}
  hidden_BxTxD, cache = model(tokens_BxT, positions_BxT, mask_BxT, cache=cache, **extra)
  num_real_B = jnp.sum(mask_BxT, axis=1, dtype=jnp.int32)
  last_real_B = tokens_BxT.shape[1] - 1 - jnp.argmax(mask_BxT[:, ::-1], axis=1)
  block_last_BxD = jnp.take_along_axis(hidden_BxTxD, last_real_B[:, None, None], axis=1)[:, 0]
  last_hidden_BxD = jnp.where((num_real_B > 0)[:, None],
                              block_last_BxD.astype(last_hidden_BxD.dtype), last_hidden_BxD)
  return DecodeState(cache=cache, last_hidden_BxD=last_hidden_BxD, lengths_B=lengths_B + num_real_B)


def _absorb_in_window(model: Any, state: DecodeState, tokens_BxT: jax.Array,
                     mask_BxT: jax.Array, prefix_BxPxD: jax.Array | None,
                     window: int) -> DecodeState:
  """`_absorb_block` over the cache's first `window` slots, which hold every slot it writes.

  The block's queries attend over the window instead of the whole buffer, so a
  cache sized for a whole episode does not make each call pay for its empty
  slots (measured in docs/BENCHMARKS.md).
  """
  full_cache = state.cache
  state = _absorb_block(model, full_cache.window(window), state.last_hidden_BxD,
                        state.lengths_B, tokens_BxT, mask_BxT, prefix_BxPxD)
  return state.replace(cache=full_cache.write_window(state.cache))


@functools.partial(jax.jit, static_argnames=("window",), donate_argnames=("cache",))
def _prefill(model, cache, tokens_BxT, mask_BxT, prefix_BxPxD, *, window):
  # The empty cache comes in as an argument: created inside jit it would be
  # a constant, and XLA spends seconds constant-folding attention over it.
  batch = tokens_BxT.shape[0]
  state = DecodeState(cache=cache,
                      last_hidden_BxD=jnp.zeros((batch, model.cfg.d_model),
                                                jnp.dtype(model.cfg.dtype)),
                      lengths_B=jnp.zeros((batch,), jnp.int32))
  return _absorb_in_window(model, state, tokens_BxT, mask_BxT, prefix_BxPxD, window)


@functools.partial(jax.jit, static_argnames=("window",), donate_argnames=("state",))
def _append(model, state, tokens_BxT, mask_BxT, *, window):
  return _absorb_in_window(model, state, tokens_BxT, mask_BxT, None, window)


def _check_block(name: str, tokens_BxT: Any, mask_BxT: Any, batch_size: int | None = None) -> None:
  if tokens_BxT.ndim != 2 or tokens_BxT.shape != mask_BxT.shape:
    raise ValueError(f"{name}: tokens {tokens_BxT.shape} and mask {mask_BxT.shape} must both be [B, T]")
  if batch_size is not None and tokens_BxT.shape[0] != batch_size:
    raise ValueError(f"{name}: {tokens_BxT.shape[0]} rows for a state of {batch_size} rows")


def _check_capacity(name: str, model: Any, state: DecodeState, slots: int,
                    new_tokens_B: jax.Array) -> int:
  """Refuses a call that would run past the cache or past the model's position table;
  returns the slots already used.

  Under jit XLA would clamp the cache write (overwriting history) and the
  position lookup, so this is checked on the host: one small device read per
  call, never inside the decode loop.
  """
  used, longest = (int(x) for x in jax.device_get(
      (state.cache.index, jnp.max(state.lengths_B + new_tokens_B))))
  if used + slots > state.cache.max_len:
    raise ValueError(f"{name}: cache has {state.cache.max_len - used} free slots of "
                     f"{state.cache.max_len}, needs {slots}; prefill with a larger max_len")
  if longest > model.cfg.max_seq_len:
    raise ValueError(f"{name}: a row would reach {longest} tokens, past the model's "
                     f"max_seq_len={model.cfg.max_seq_len}")
  return used


def prefill(model: Any, tokens_BxT: jax.Array, mask_BxT: jax.Array, *, max_len: int,
            prefix_BxPxD: jax.Array | None = None) -> DecodeState:
  """Encodes prompts (left- or right-padded, `mask_BxT` marks real tokens) into a new cache.

  `max_len` is the number of cache slots for the whole episode: prefix rows,
  prompt, every appended turn and every generated token. Give every row at
  least one real token (e.g. BOS): a row without one has no hidden state to
  decode from and would start from zeros. A prompt whose rows are split over devices
  (`decode_devices.split_rows`) gets a cache split the same way.
  """
  tokens_BxT, mask_BxT = jnp.asarray(tokens_BxT, jnp.int32), jnp.asarray(mask_BxT, jnp.bool_)
  _check_block("prefill", tokens_BxT, mask_BxT)
  num_prefix = 0 if prefix_BxPxD is None else prefix_BxPxD.shape[1]
  if num_prefix + tokens_BxT.shape[1] > max_len:
    raise ValueError(f"prefill: {num_prefix} prefix rows + {tokens_BxT.shape[1]} tokens "
                     f"exceed max_len={max_len}")
  if tokens_BxT.shape[1] > model.cfg.max_seq_len:
    raise ValueError(f"prefill: {tokens_BxT.shape[1]} tokens exceed the model's "
                     f"max_seq_len={model.cfg.max_seq_len}")
  cache = decode_devices.empty_cache(model.cfg, tokens_BxT, max_len)
  return _prefill(model, cache, tokens_BxT, mask_BxT, prefix_BxPxD,
                  window=attend_window(max_len, num_prefix + tokens_BxT.shape[1]))


def append(model: Any, state: DecodeState, tokens_BxT: jax.Array,
           mask_BxT: jax.Array) -> DecodeState:
  """Extends every row's history with a block (e.g. the other speaker's turn) without re-encoding it.

  Rows may have different numbers of real tokens in the block, padding
  anywhere; a row with none keeps its history unchanged. `state` is donated.
  """
  tokens_BxT, mask_BxT = jnp.asarray(tokens_BxT, jnp.int32), jnp.asarray(mask_BxT, jnp.bool_)
  _check_block("append", tokens_BxT, mask_BxT, state.cache.batch_size)
  used = _check_capacity("append", model, state, tokens_BxT.shape[1], jnp.sum(mask_BxT, axis=1))
  return _append(model, state, tokens_BxT, mask_BxT,
                 window=attend_window(state.cache.max_len, used + tokens_BxT.shape[1]))


def fold_in(rng: jax.Array, data: Any) -> jax.Array:
  """`jax.random.fold_in` for one key, or for per-row keys [B]: each folded with the scalar
  `data`, or with its own `data[b]` when `data` has one value per row."""
  if rng.ndim == 0:
    return jax.random.fold_in(rng, data)
  if jnp.ndim(data) == 0:
    return jax.vmap(jax.random.fold_in, in_axes=(0, None))(rng, data)
  return jax.vmap(jax.random.fold_in)(rng, jnp.asarray(data, jnp.uint32))


def _categorical(rng: jax.Array, logits_BxV: jax.Array) -> jax.Array:
  if rng.ndim == 0:
    return jax.random.categorical(rng, logits_BxV, axis=-1)
  return jax.vmap(lambda key, logits_V: jax.random.categorical(key, logits_V))(rng, logits_BxV)


def sample_from_logits(logits_BxV: jax.Array, params: SamplingParams,
                       rng: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Chooses one token per row and returns (tokens_B, logprobs_B).

  `rng` is one key, or B per-row keys (module docstring).

  Filters (top-k, top-p, min-p) apply after the temperature, as in transformers. They and
  the Gumbel noise behind sampling are skipped (`lax.cond` on traced flags) when no row needs
  them, so greedy decoding costs an argmax.
  """
  logits_BxV = lp.apply_temperature(logits_BxV.astype(jnp.float32), params.temperature_B)
  vocab = logits_BxV.shape[-1]
  needs_filter = jnp.any(((params.top_k_B > 0) & (params.top_k_B < vocab))
                         | (params.top_p_B < 1.0) | (params.min_p_B > 0))
  logits_BxV = jax.lax.cond(
      needs_filter,
      lambda x: lp.filter_min_p(lp.filter_top_k_top_p(x, params.top_k_B, params.top_p_B),
                                params.min_p_B),
      lambda x: x,
      logits_BxV)
  greedy_B = params.temperature_B <= 0
  tokens_B = jax.lax.cond(
      jnp.all(greedy_B),
      lambda x: jnp.argmax(x, axis=-1).astype(jnp.int32),
      lambda x: jnp.where(greedy_B, jnp.argmax(x, axis=-1),
                          _categorical(rng, x)).astype(jnp.int32),
      logits_BxV)
  logprobs_BxV = jax.nn.log_softmax(logits_BxV, axis=-1)
  logprobs_B = jnp.take_along_axis(logprobs_BxV, tokens_B[:, None], axis=-1)[:, 0]
  return tokens_B, logprobs_B


@struct.dataclass
class _Loop:
  step: jax.Array
  state: DecodeState
  done_B: jax.Array
  tokens_BxN: jax.Array
  logprobs_BxN: jax.Array
  generated_B: jax.Array


@functools.partial(jax.jit, static_argnames=("max_new_tokens", "attend_len"),
                   donate_argnames=("state",))
def _generate(model, state, params, rng, pad_id, hook, *, max_new_tokens, attend_len):
  batch = state.lengths_B.shape[0]
  full_cache = state.cache
  state = state.replace(cache=full_cache.window(attend_len))

  def cond(loop: _Loop) -> jax.Array:
    return (loop.step < max_new_tokens) & ~jnp.all(loop.done_B)

  def body(loop: _Loop) -> _Loop:
    st = loop.state
    logits_BxV = copy_head.next_token_logits(model, st.last_hidden_BxD, st.cache)
    if hook is not None:
      logits_BxV = hook(logits_BxV, lp.StepState(
          hidden_BxD=st.last_hidden_BxD, tokens_BxN=loop.tokens_BxN, step=loop.step,
          position_B=st.lengths_B, done_B=loop.done_B))
    tokens_B, logprobs_B = sample_from_logits(
        logits_BxV, params, fold_in(rng, loop.step))
    active_B = ~loop.done_B
    tokens_B = jnp.where(active_B, tokens_B, pad_id)
    logprobs_B = jnp.where(active_B, logprobs_B, 0.0)
    generated_B = loop.generated_B + active_B
    stopped_B = jnp.any(tokens_B[:, None] == params.stop_tokens_BxK, axis=1)
    done_B = loop.done_B | (active_B & (stopped_B | (generated_B >= params.max_new_tokens_B)))
    # The chosen token joins the history (stop tokens included), so the next
    # step's hidden state and a later `append` both see it.
    next_state = _absorb_block(model, st.cache, st.last_hidden_BxD, st.lengths_B,
                               tokens_B[:, None], active_B[:, None])
    if next_state.cache.ids_BxS is not None:  # What the model writes is no copy source.
      next_state = next_state.replace(cache=copy_head.forget_slot(next_state.cache,
                                                                  st.cache.index))
    return _Loop(
        step=loop.step + 1,
        state=next_state,
        done_B=done_B,
        tokens_BxN=jax.lax.dynamic_update_slice(loop.tokens_BxN, tokens_B[:, None], (0, loop.step)),
        logprobs_BxN=jax.lax.dynamic_update_slice(
            loop.logprobs_BxN, logprobs_B[:, None], (0, loop.step)),
        generated_B=generated_B)

  loop = _Loop(
      step=jnp.zeros((), jnp.int32),
      state=state,
      done_B=params.max_new_tokens_B <= 0,
      tokens_BxN=jnp.full((batch, max_new_tokens), pad_id, jnp.int32),
      logprobs_BxN=jnp.zeros((batch, max_new_tokens), jnp.float32),
      generated_B=jnp.zeros((batch,), jnp.int32))
  with hoisted_layers(model):
    loop = jax.lax.while_loop(cond, body, loop)
  state = loop.state.replace(cache=full_cache.write_window(loop.state.cache))
  return state, loop.tokens_BxN, loop.logprobs_BxN, loop.generated_B


def attend_window(max_len: int, last_slot: int) -> int:
  """Slots a decode loop attends over: `last_slot` rounded up to ATTEND_BUCKET * 2^k."""
  window = ATTEND_BUCKET
  while window < last_slot:
    window *= 2
  return min(max_len, window)


def generate(model: Any, state: DecodeState, params: SamplingParams, rng: jax.Array, *,
             max_new_tokens: int, pad_id: int = 0, hook: lp.LogitsProcessor | None = None,
             ) -> tuple[DecodeState, jax.Array, jax.Array, jax.Array]:
  """Samples up to `max_new_tokens` per row from `state`; returns (state, tokens, logprobs, lengths).

  tokens_BxN holds each row's `lengths_B` new tokens (stop token included)
  followed by `pad_id`; logprobs_BxN is 0 past them. The returned state holds
  the generated tokens, ready for `append` or another `generate`. The loop
  exits as soon as every row is done. `state` is donated; `hook` (a logits
  processor pytree) runs on the model's logits before the sampling controls.
  """
  batch = state.cache.batch_size
  if params.temperature_B.shape != (batch,):
    raise ValueError(f"generate: sampling params for {params.temperature_B.shape} rows, state has {batch}")
  used = _check_capacity("generate", model, state, max_new_tokens, jnp.asarray(max_new_tokens))
  attend_len = attend_window(state.cache.max_len, used + max_new_tokens)
  return _generate(model, state, params, rng, jnp.asarray(pad_id, jnp.int32), hook,
                   max_new_tokens=max_new_tokens, attend_len=attend_len)
