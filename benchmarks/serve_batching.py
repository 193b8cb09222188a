"""The OpenAI-compatible server batching concurrent requests vs serving one at a time.

  python -m benchmarks.serve_batching [--model=tiny --clients=1,8,32 --requests=4 --max_tokens=32]

Two servers of the same ChatModel on loopback (workflows/serve.py): one
batching the requests that wait at the same moment (MicroBatcher
max_batch=32), one decoding one request at a time (max_batch=1). For each
number of concurrent clients, both serve the same closed loop: every client
sends `--requests` chat completions one after another, each a different
seeded sampled prompt capped at `--max_tokens`. Every batch shape is compiled
before timing. Clients run as threads of this process, on the same cores as
the server. Prints a markdown table: requests/second, p50 and p95 latency, and
the mean batch the batched server decoded. `--model=tiny` is a random 2-layer
toy (no download); gguf:smollm2 or any model `experiments.serve` takes also works.
"""

from __future__ import annotations

import concurrent.futures
import logging
import statistics
import threading
import time
from typing import Any

import httpx
import numpy as np
from absl import flags

from benchmarks import report
from data_pipelines import cli
from workflows import http_serving, serve

_MODEL = flags.DEFINE_string("model", "tiny", "tiny (a random toy), gguf:smollm2, a .gguf file "
                             "or a Hugging Face directory with a chat template.")
_CLIENTS = flags.DEFINE_list("clients", ["1", "8", "32"], "Concurrent clients, one row each.")
_REQUESTS = flags.DEFINE_integer("requests", 4, "Requests each client sends, one after another.")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", 32, "max_tokens of every request.")
_MAX_BATCH = flags.DEFINE_integer("max_batch", 32, "The batched server's MicroBatcher max_batch.")
_WAIT_MS = flags.DEFINE_float("wait_ms", 5.0, "The batched server's MicroBatcher wait.")

TOPICS = ["a flight to Boston", "changing my booking", "the cheapest fare", "a refund",
          "a window seat", "cancelling a trip", "donating to charity", "the weather"]


def request_body(index: int) -> dict[str, Any]:
  topic = TOPICS[index % len(TOPICS)]
  return {"model": "bench", "temperature": 0.8, "top_p": 0.95, "seed": index,
          "max_tokens": _MAX_TOKENS.value,
          "messages": [{"role": "system", "content": "You are a helpful travel agent."},
                       {"role": "user", "content": f"Tell me about {topic}, request {index}."}]}


def compile_shapes(chat: serve.ChatModel, max_batch: int) -> None:
  """Decodes every power-of-two batch once, so no timed request waits for a compile."""
  body = request_body(0)
  prompt = chat.encode(body["messages"], **serve.sampling_options(body))
  size = 1
  while size <= max_batch:
    chat.complete_batch([prompt] * size)
    size *= 2


def closed_loop(base_url: str, clients: int, requests: int) -> tuple[float, list[float]]:
  """(wall seconds, per-request latencies) of `clients` threads each sending `requests`."""
  start = threading.Barrier(clients + 1)

  def client(number: int) -> list[float]:
    latencies = []
    with httpx.Client(timeout=600) as http:
      start.wait()
      for n in range(requests):
        sent = time.perf_counter()
        response = http.post(f"{base_url}/v1/chat/completions",
                             json=request_body(number * requests + n))
        response.raise_for_status()
        latencies.append(time.perf_counter() - sent)
    return latencies

  with concurrent.futures.ThreadPoolExecutor(clients) as pool:
    futures = [pool.submit(client, c) for c in range(clients)]
    start.wait()
    began = time.perf_counter()
    latencies = [t for future in futures for t in future.result()]
  return time.perf_counter() - began, latencies


def main(_):
  logging.getLogger("httpx").setLevel(logging.WARNING)  # Not a line per request.
  chat = serve.tiny_chat_model() if _MODEL.value == "tiny" else serve.load_chat_model(
      _MODEL.value)
  compile_shapes(chat, _MAX_BATCH.value)
  servers = {"batched": {"max_batch": _MAX_BATCH.value, "wait_s": _WAIT_MS.value / 1000},
             "one at a time": {"max_batch": 1, "wait_s": 0.0}}
  rows = []
  apps = {name: serve.make_app(chat, "bench", options) for name, options in servers.items()}
  with http_serving.running(apps["batched"]) as batched_url, \
       http_serving.running(apps["one at a time"]) as single_url:
    urls = {"batched": batched_url, "one at a time": single_url}
    for clients in (int(c) for c in _CLIENTS.value):
      for name, app in apps.items():
        closed_loop(urls[name], clients, 1)  # Warm the connections and the event loop.
        first_batch = len(app.state.batcher.batch_sizes)
        wall, latencies = closed_loop(urls[name], clients, _REQUESTS.value)
        sizes = app.state.batcher.batch_sizes[first_batch:]
        rows.append((clients, name, len(latencies) / wall,
                     1000 * float(np.percentile(latencies, 50)),
                     1000 * float(np.percentile(latencies, 95)), statistics.fmean(sizes)))
  model = "a random 2-layer toy (d_model 32)" if _MODEL.value == "tiny" else _MODEL.value
  print(f"\nServing {model} on {report.cpu_name()}: every client sends {_REQUESTS.value} "
        f"requests in turn (max_tokens={_MAX_TOKENS.value}, sampled, seeded).\n")
  print("| clients | server | requests/s | p50 latency (ms) | p95 latency (ms) | mean batch |")
  print("|---:|---|---:|---:|---:|---:|")
  for clients, name, rate, p50, p95, batch in rows:
    print(f"| {clients} | {name} | {rate:.1f} | {p50:.0f} | {p95:.0f} | {batch:.1f} |")


if __name__ == "__main__":
  cli.run(main)
