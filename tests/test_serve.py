"""The OpenAI-compatible server (workflows/serve.py) on loopback, with a tiny random chat model:
concurrent requests decode as one batch and give exactly what each gives alone; errors are
OpenAI-style 400 / 404 / 413 bodies; its routes mount into another app."""

import concurrent.futures
import copy
import threading

import fastapi
import httpx
import openai
import pytest

from workflows import http_serving, serve

NAME = "tiny"
# Prompts of different lengths, one past PROMPT_BUCKET tokens: a batch pads them wider than alone.
PROMPTS = ["hi", "hello there", "what is the fare to Boston?", "x " * 80, "ok",
           "book a flight", "a" * 150, "thanks"]
GREEDY = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "seed": None}
SAMPLED = {"temperature": 1.0, "top_p": 0.9, "max_tokens": 12, "seed": 2024}


def _options(index):
  return SAMPLED if index % 2 else GREEDY


def _messages(text):
  return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]


def _request(text, options):
  return {"model": NAME, "messages": _messages(text), **{k: v for k, v in options.items()
                                                          if v is not None}}


@pytest.fixture(scope="module")
def chat():
  return serve.tiny_chat_model()


@pytest.fixture(scope="module")
def alone(chat):
  """Each prompt's reply decoded alone (ChatModel.complete: a batch of one)."""
  return [chat.complete(_messages(text), **_options(i)) for i, text in enumerate(PROMPTS)]


@pytest.fixture(scope="module")
def server(chat):
  # A long wait lets every request of the test's burst join one batch.
  app = serve.make_app(chat, NAME, {"max_batch": 8, "wait_s": 0.2}, max_body_bytes=4096)
  with http_serving.running(app) as base_url:
    yield base_url, app.state.batcher


def test_concurrent_requests_decode_together_and_as_each_would_alone(server, alone):
  base_url, batcher = server
  start = threading.Barrier(len(PROMPTS))

  def ask(index):
    start.wait()
    return httpx.post(f"{base_url}/v1/chat/completions",
                      json=_request(PROMPTS[index], _options(index)), timeout=60).json()

  before = len(batcher.batch_sizes)
  with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
    answers = list(pool.map(ask, range(len(PROMPTS))))
  sizes = batcher.batch_sizes[before:]
  assert sum(sizes) == len(PROMPTS) and max(sizes) > 1, sizes
  for answer, reply in zip(answers, alone):  # Greedy and seeded rows alike replay alone.
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": reply["text"]}
    assert answer["choices"][0]["finish_reason"] == reply["finish_reason"]
    assert answer["usage"]["prompt_tokens"] == reply["prompt_tokens"]
    assert answer["usage"]["completion_tokens"] == reply["completion_tokens"]
    assert answer["object"] == "chat.completion" and answer["model"] == NAME


def test_a_seed_replays_and_no_seed_varies(chat):
  prompt = chat.encode(_messages("hello"), **{**SAMPLED, "max_tokens": 24})
  unseeded = chat.encode(_messages("hello"), **{**SAMPLED, "max_tokens": 24, "seed": None})
  first, second, *free = chat.complete_batch([prompt, prompt, unseeded, unseeded])
  assert first == second == chat.complete_batch([prompt])[0]
  assert free[0]["text"] != free[1]["text"]


def test_min_p_reaches_its_own_row(chat):
  """min_p = 1 keeps only the likeliest token, so a sampled row answers as greedy does, beside
  a row sampled without it in the same batch."""
  greedy = chat.encode(_messages("hello"), **{**GREEDY, "max_tokens": 24})
  cut = chat.encode(_messages("hello"), **{**SAMPLED, "max_tokens": 24, "min_p": 1.0})
  free = chat.encode(_messages("hello"), **{**SAMPLED, "max_tokens": 24})
  expected, = chat.complete_batch([greedy])
  got, sampled = chat.complete_batch([cut, free])
  assert got["text"] == expected["text"] and sampled["text"] != expected["text"]


def test_a_stop_token_ends_its_row_and_is_not_in_the_text(chat):
  stops_at_once = copy.copy(chat)
  stops_at_once.stop_ids = list(range(len(chat.tokenizer)))  # Every token ends the reply.
  prompts = [chat.encode(_messages(text), **{**GREEDY, "max_tokens": 24}) for text in PROMPTS[:3]]
  for reply in stops_at_once.complete_batch(prompts):
    assert (reply["text"], reply["finish_reason"], reply["completion_tokens"]) == ("", "stop", 1)


def test_the_openai_client_talks_to_it(server, alone):
  base_url, _ = server
  client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
  assert [m.id for m in client.models.list().data] == [NAME]
  answer = client.chat.completions.create(model=NAME, messages=_messages(PROMPTS[1]),
                                          max_tokens=12, temperature=1.0, top_p=0.9, seed=2024)
  assert answer.choices[0].message.content == alone[1]["text"]
  assert answer.usage.total_tokens == alone[1]["prompt_tokens"] + alone[1]["completion_tokens"]
  with pytest.raises(openai.NotFoundError):
    client.completions.create(model=NAME, prompt="the legacy route")


@pytest.mark.parametrize("body, says", [
    (b"{not json", "bad request"),
    (b"[1, 2]", "JSON object"),
    (b'{"model": "tiny"}', "messages"),
    (b'{"messages": "hi"}', "must be a list"),
    (b'{"messages": [{"role": "user"}]}', "content"),
    (b'{"messages": [{"role": "user", "content": 3}]}', "string"),
    (b'{"messages": [], "temperature": -1}', "temperature"),
    (b'{"messages": [], "top_p": 0}', "top_p"),
    (b'{"messages": [], "min_p": 1.5}', "min_p"),
    (b'{"messages": [], "max_tokens": 0}', "max_tokens"),
    (b'{"messages": [], "max_tokens": 1e999}', "bad request"),
    (b'{"messages": [], "seed": "seven"}', "not an integer"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9999}', "context of 512"),
    (b'{"messages": []}', "empty conversation"),
])
def test_bad_requests_are_400_with_an_openai_error_body(server, body, says):
  base_url, _ = server
  response = httpx.post(f"{base_url}/v1/chat/completions", content=body,
                        headers={"Content-Type": "application/json"})
  assert response.status_code == 400
  error = response.json()["error"]
  assert says in error["message"] and error["type"] == "invalid_request_error"


def test_unknown_routes_404_and_big_bodies_413(server):
  base_url, _ = server
  for method, path in [("GET", "/v1/nothing"), ("POST", "/v1/completions"), ("GET", "/")]:
    response = httpx.request(method, f"{base_url}{path}")
    assert response.status_code == 404 and path in response.json()["error"]["message"]
  big = _request("z" * 5000, GREEDY)
  response = httpx.post(f"{base_url}/v1/chat/completions", json=big)
  assert response.status_code == 413 and "4096 bytes" in response.json()["error"]["message"]

  def chunks():  # No Content-Length: the limit holds while reading.
    yield b'{"messages": [{"role": "user", "content": "'
    for _ in range(10):
      yield b"z" * 1000
    yield b'"}]}'

  response = httpx.post(f"{base_url}/v1/chat/completions", content=chunks())
  assert response.status_code == 413


def test_one_at_a_time_serves_alone_and_binds_loopback(chat, alone):
  app = serve.make_app(chat, NAME, {"max_batch": 1, "wait_s": 0.0})
  with http_serving.running(app) as base_url:
    assert base_url.startswith("http://127.0.0.1:")
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
      answers = list(pool.map(lambda i: httpx.post(
          f"{base_url}/v1/chat/completions", json=_request(PROMPTS[i], _options(i)),
          timeout=60).json(), range(3)))
  assert app.state.batcher.batch_sizes == [1, 1, 1]
  assert [a["choices"][0]["message"]["content"] for a in answers] == [
      r["text"] for r in alone[:3]]


def test_its_router_mounts_into_another_app_and_closes_the_batcher(chat):
  served = serve.make_app(chat, NAME, {"max_batch": 4})
  host = fastapi.FastAPI()

  @host.get("/health")
  def health():
    return {"ok": True}

  host.include_router(served.router)
  with http_serving.running(host) as base_url:
    assert httpx.get(f"{base_url}/health").json() == {"ok": True}
    assert httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"] == NAME
    answer = httpx.post(f"{base_url}/v1/chat/completions", json=_request("hi", GREEDY),
                        timeout=60)
    assert answer.status_code == 200
  with pytest.raises(RuntimeError, match="closed"):  # The host's shutdown closed it.
    served.state.batcher.submit(NAME, None)


def test_an_api_key_is_required_when_set(chat, alone, tmp_path):
  key = "k3y-" * 6
  app = serve.make_app(chat, NAME, {"max_batch": 2}, api_key=key)
  with http_serving.running(app) as base_url:
    for headers in ({}, {"Authorization": "Bearer wrong-key-wrong-key"}, {"Authorization": key}):
      refused = httpx.get(f"{base_url}/v1/models", headers=headers)
      assert refused.status_code == 401, refused.text
      assert "API_KEY" in refused.json()["error"]["message"]
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key)
    reply = client.chat.completions.create(model=NAME, messages=_messages(PROMPTS[0]),
                                           max_tokens=8, temperature=0.0)
    assert reply.choices[0].message.content == alone[0]["text"]
  (tmp_path / "short").write_text("short\n")
  with pytest.raises(serve.cli.BadInput, match="16 or more"):
    serve.read_api_key(str(tmp_path / "short"))
