"""Verbalized Sampling (VS) for instruction-tuned LLMs behind an OpenAI-compatible endpoint.

An instruction-tuned simulator asked for one reply gives its modal reply
(docs/METHODS.md, Verbalized Sampling). VS asks it instead for k candidate replies as
JSON, each with the probability it gives it,

    {"responses": [{"text": "...", "probability": 0.4}, ...]}

and one candidate is drawn per row from the row's seed and turn: `uniform`
(the paper's main setting), `weighted` by the stated probabilities, or `tail`
(those capped at t, renormalized; cotraining/k_sample.tail). The prompt is
rebuilt from the whole history each turn, so a dialogue resumes at any turn
from its turn count alone (`load_histories`, ilql_dialogue/party.resume).

Any served model works (the `openai` client with a configurable base_url:
experiments/serve.py serves this project's models on loopback). Small models
often write broken JSON, so parsing is forgiving (`parse_candidates`): code
fences are stripped, the first JSON object is taken, a missing probability
is 1/k, all-zero probabilities become uniform. A reply with no usable
candidate is asked for again (`retries` times), then the raw text is the
reply; `stats` counts requests, parsed replies, retries and fallbacks, so a
run reports how often the model produced valid JSON.

Party spec (`make_party`):
    vs_llm:k=5,pick=uniform,base_url=http://127.0.0.1:8000/v1,model=NAME[,t=T,
           temperature=T,max_tokens=N,retries=R,concurrency=C]
The API key is the client's usual OPENAI_API_KEY (a loopback server ignores it).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import math
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

from cotraining import k_sample
from data_pipelines.dialogue import Turn
from ilql_dialogue import registry
from ilql_dialogue.party_spec import PartySpec

PICKS = k_sample.PICKS
DEFAULT_K = 5
DEFAULT_RETRIES = 2  # The released code's: two more requests, then the raw text.
DEFAULT_MAX_TOKENS = 512  # k short replies as JSON.
_FENCE_RE = re.compile(r"```[A-Za-z0-9_-]*")
_SEED_STREAM = 2  # SeedSequence spawn key of request seeds (k_sample uses 0 and 1).
_PICK_STREAM = 3  # SeedSequence spawn key of the picks, one generator per turn.

SYSTEM_PROMPT = """You are role-playing the {role} in a conversation.
What only you, the {role}, know:
{context}

Write {k} different possible next replies of the {role} to the conversation so far, as \
different from each other as real people would be, each with the probability (between 0 \
and 1) that the {role} would say it. Answer with JSON only, in exactly this form:
{{"responses": [{{"text": "<reply>", "probability": <number>}}, ...]}}"""


@dataclasses.dataclass(frozen=True)
class Candidate:
  text: str
  probability: float


def strip_code_fences(text: str) -> str:
  """The text without markdown fences (```json ... ```, closed or not)."""
  return _FENCE_RE.sub("", text)


def first_json_object(text: str) -> dict | None:
  """The first `{...}` in the text that decodes as a JSON object, or None."""
  decoder = json.JSONDecoder()
  for match in re.finditer(r"\{", text):
    try:
      obj, _ = decoder.raw_decode(text, match.start())
    except json.JSONDecodeError:
      continue
    if isinstance(obj, dict):
      return obj
  return None


def _probability(value: Any) -> float | None:
  """A stated probability as a float >= 0, or None when missing or not a number."""
  if isinstance(value, bool):
    return None
  try:
    p = float(value)
  except (TypeError, ValueError):
    return None
  return p if math.isfinite(p) and p >= 0 else None


def _text_and_probability(item: Any) -> tuple[Any, float | None]:
  """One "responses" item: an object {"text", "probability"} or a bare string."""
  if isinstance(item, str):
    return item, None
  if isinstance(item, dict):
    return item.get("text"), _probability(item.get("probability"))
  return None, None


def parse_candidates(text: str, k: int) -> list[Candidate] | None:
  """Up to k candidates with probabilities summing to 1, or None if there is none.

  The first JSON object's "responses" list (or the object itself, if it is
  one {"text", "probability"}); an item is such an object or a bare string.
  A missing or unreadable probability is 1/k; if all are zero, uniform.
  """
  obj = first_json_object(strip_code_fences(text))
  if obj is None:
    return None
  items = obj.get("responses") if "responses" in obj else [obj]
  if not isinstance(items, list):
    return None
  texts, probabilities = [], []
  for item in items:
    reply, p = _text_and_probability(item)
    if isinstance(reply, str) and reply.strip():
      texts.append(reply.strip())
      probabilities.append(1.0 / k if p is None else p)
  if not texts:
    return None
  texts, p_K = texts[:k], np.asarray(probabilities[:k])
  p_K = p_K / p_K.sum() if p_K.sum() > 0 else np.full(len(texts), 1.0 / len(texts))
  return [Candidate(t, float(p)) for t, p in zip(texts, p_K)]


def pick_probabilities(rule: str, candidates: Sequence[Candidate], t: float) -> np.ndarray:
  if rule == "uniform":
    return np.full(len(candidates), 1.0 / len(candidates))
  stated = np.asarray([c.probability for c in candidates])
  if rule == "weighted":
    return stated
  if rule == "tail":
    return k_sample.tail(stated, t)
  raise ValueError(f"VS pick {rule!r}: expected one of {PICKS}")


def context_text(role: str, context: Mapping[str, Any]) -> str:
  """A party's private context as the prompt shows it: as its task's models read it
  (the first registered task with that role), else as JSON."""
  for spec in registry.tasks().values():
    if role in spec.roles:
      return spec.serialize_context(role, context)
  return json.dumps(context, sort_keys=True)


def messages(role: str, context: Mapping[str, Any], history: Sequence[Turn], k: int
             ) -> list[dict[str, str]]:
  """The chat request: the role, its context and the VS instruction; then the dialogue."""
  transcript = "\n".join(f"{turn.speaker}: {turn.text}" for turn in history)
  return [{"role": "system", "content": SYSTEM_PROMPT.format(
              role=role, context=context_text(role, context), k=k)},
          {"role": "user", "content": f"The conversation so far:\n{transcript or '(none yet)'}\n\n"
                                      f"Give {k} possible next replies of the {role} as JSON."}]


def request_seed(seed: int, turn: int, attempt: int) -> int:
  """The seed sent with a request: from the row's seed, different for every turn and retry."""
  ss = np.random.SeedSequence(int(seed), spawn_key=(_SEED_STREAM, turn, attempt))
  return int(ss.generate_state(1, np.uint32)[0] >> 1)  # Fits a signed 32-bit int.


def pick_rng(seed: int, turn: int) -> np.random.Generator:
  """The generator of a row's pick at one turn: from the row's seed and the turn alone, so a
  turn picks the same whether the row's earlier replies parsed or fell back."""
  return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(_PICK_STREAM, turn)))


class VSLLMParty:
  """A simulator served behind an OpenAI-compatible endpoint, answering by VS (module docstring).

  `candidates[b]` and `picked[b]` are row b's candidates at its last turn and
  the index picked (None: no reply, or the raw-text fallback).
  """

  def __init__(self, role: str, client: Any, model: str, *, k: int = DEFAULT_K,
               pick: str = "uniform", t: float = k_sample.DEFAULT_TAIL,
               temperature: float = 1.0, max_tokens: int = DEFAULT_MAX_TOKENS,
               retries: int = DEFAULT_RETRIES, concurrency: int = 8):
    if k < 1 or retries < 0 or concurrency < 1:
      raise ValueError(f"VSLLMParty: k={k} and concurrency={concurrency} must be >= 1, "
                       f"retries={retries} >= 0")
    if pick not in PICKS:
      raise ValueError(f"VS pick {pick!r}: expected one of {PICKS}")
    if not 0.0 < t <= 1.0:
      raise ValueError(f"VS: tail threshold t={t} must be in (0, 1]")
    self.role, self.client, self.model = role, client, model
    self.k, self.pick, self.t = k, pick, t
    self.temperature, self.max_tokens = temperature, max_tokens
    self.retries, self.concurrency = retries, concurrency
    self.stats = collections.Counter(requests=0, parsed=0, retries=0, fallbacks=0)

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    if len(contexts) != len(seeds):
      raise ValueError(f"VSLLMParty.reset: {len(contexts)} contexts and {len(seeds)} seeds")
    self._contexts, self._seeds = list(contexts), [int(s) for s in seeds]
    self._turns = [0] * len(seeds)
    self.candidates: list[list[Candidate] | None] = [None] * len(seeds)
    self.picked: list[int | None] = [None] * len(seeds)

  def load_histories(self, histories: Sequence[Sequence[Turn]]) -> None:
    """After `reset`: each row continues after its own turns in its history (module
    docstring); only its turn count is kept between turns."""
    if len(histories) != len(self._seeds):
      raise ValueError(f"VSLLMParty.load_histories: {len(histories)} histories for "
                       f"{len(self._seeds)} rows (reset)")
    self._turns = [sum(turn.speaker == self.role for turn in h) for h in histories]

  def _complete(self, b: int, history: Sequence[Turn], attempt: int) -> str:
    response = self.client.chat.completions.create(
        model=self.model, messages=messages(self.role, self._contexts[b], history, self.k),
        temperature=self.temperature, max_tokens=self.max_tokens,
        seed=request_seed(self._seeds[b], self._turns[b], attempt))
    return response.choices[0].message.content or ""

  def _candidates(self, b: int, history: Sequence[Turn]
                  ) -> tuple[list[Candidate] | None, str, int]:
    """Row b's parsed candidates (None after every retry failed), the last raw text, and
    the number of requests it took. Runs in worker threads: counts are kept by the caller."""
    for attempt in range(self.retries + 1):
      raw = self._complete(b, history, attempt)
      candidates = parse_candidates(raw, self.k)
      if candidates is not None:
        break
    return candidates, raw, attempt + 1

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    if len(histories) != len(self._seeds):
      raise ValueError(f"VSLLMParty.respond: {len(histories)} histories for "
                       f"{len(self._seeds)} rows (reset)")
    live = [b for b, h in enumerate(histories) if h is not None]
    with concurrent.futures.ThreadPoolExecutor(self.concurrency) as pool:
      results = list(pool.map(lambda b: self._candidates(b, histories[b]), live))
    replies: list[str | None] = [None] * len(histories)
    for b, (candidates, raw, requests) in zip(live, results):
      turn, self._turns[b] = self._turns[b], self._turns[b] + 1
      self.candidates[b], self.picked[b] = candidates, None
      self.stats.update(requests=requests, retries=requests - 1)
      self.stats["parsed" if candidates is not None else "fallbacks"] += 1
      if candidates is None:
        replies[b] = strip_code_fences(raw).strip()
        continue
      j = int(pick_rng(self._seeds[b], turn).choice(
          len(candidates), p=pick_probabilities(self.pick, candidates, self.t)))
      self.picked[b], replies[b] = j, candidates[j].text
    return replies


OPTIONS = {"k": int, "pick": str, "t": float, "base_url": str, "model": str,
           "temperature": float, "max_tokens": int, "retries": int, "concurrency": int}


def check(spec: PartySpec, role: str) -> None:
  """An endpoint spec names its endpoint and model (all a start-up can check)."""
  missing = {"base_url", "model"} - set(spec.options)
  if missing:
    raise ValueError(f"party spec {spec}: needs {sorted(missing)}")


def from_spec(spec: PartySpec, role: str, **lm_options: Any) -> VSLLMParty:
  """The party a `vs_llm:` spec names. Of `lm_options` (meant for our checkpoints) only
  `temperature` applies, unless the spec sets its own; the endpoint bounds reply lengths."""
  import openai  # Only runs that talk to an endpoint need the client.

  check(spec, role)
  options = dict(spec.options)
  base_url, model = options.pop("base_url"), options.pop("model")
  if "temperature" not in options and lm_options.get("temperature") is not None:
    options["temperature"] = lm_options["temperature"]
  client = openai.OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "unused"))
  return VSLLMParty(role, client, model, **options)
