"""Bot participants: parties that play the person's role of a study through its HTTP API.

A bot takes one invitation link and does what a person's browser does (workflows/study/
app.py's API): reads the state, starts, sends each turn with the number of turns it has
seen, closes with a stated number where the task ends that way (P4G's donation), answers
the survey. Its words come from a party (`make_party(spec, human_role)`) reset with the
person's private context and the participant's `human_seed`, both read from the admin
route `GET /api/admin/bot/{token}` (which also marks the participant a bot). The agent's
row seed and the person's are the ones `environment.play` gives the same scenario and
study seed, so a bot's dialogue is the one `experiments.evaluate_env` plays for the same
agent, scenario and seed: the web path can be checked against the lockstep engine.

A bot picks up wherever its participant stands (after a server restart, or a bot run
that was stopped): the party is brought to the stored dialogue with `party.resume`, and
the chat goes on. Nothing is retried: a refused request or a lost connection ends that
bot with the error recorded in its result, and running the bots again continues them.

    results = run_bots(base_url, links, admin_token, "scripted:volunteer", concurrency=32)
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Mapping, Sequence

import httpx
import ml_collections
import numpy as np

from data_pipelines.dialogue import Turn
from ilql_dialogue import party as party_lib
from ilql_dialogue import parties, registry

CHAT, SURVEY, DONE = "chat", "survey", "done"


class BotError(RuntimeError):
  """A request the server refused; the message names the route, the status and its detail."""


@dataclasses.dataclass
class BotResult:
  """One bot's run: where its participant stands and what it did to get there."""

  token: str
  scenario_key: str | None = None
  phase: str | None = None
  turns: int = 0  # Turns of the stored dialogue when the bot stopped.
  end: str | None = None  # The dialogue's end reason (None: not ended).
  completion_code: str | None = None
  sent: list[str] = dataclasses.field(default_factory=list)  # The person's turns this run sent.
  closing_value: float | None = None
  forced_close: bool = False  # At the turn limit the party had not closed: it closed with 0.
  round_trips_s: list[float] = dataclasses.field(default_factory=list)  # Per message / close.
  seconds: float = 0.0
  resumed_at: int = 0  # Turns already stored when this run began.
  transcript: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (speaker,
  # text) of the last state the server answered: every turn in it is committed.
  error: str | None = None

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def token_of(link: str) -> str:
  """The participant token of an invitation link `http://HOST:PORT/s/TOKEN` (or a token)."""
  return link.rstrip("/").rsplit("/s/", 1)[-1]


def survey_answers(items: Sequence[Mapping[str, Any]], rng: np.random.Generator) -> dict:
  """An answer to every item: a Likert point uniformly, a number uniformly in its range."""
  answers: dict[str, float] = {}
  for item in items:
    if item.get("type") == "number":
      answers[item["id"]] = round(float(rng.uniform(item["min"], item["max"])), 2)
    else:
      answers[item["id"]] = int(rng.integers(1, int(item["scale"]) + 1))
  return answers


def _history(state: Mapping[str, Any]) -> list[Turn]:
  return [Turn(t["speaker"], t["text"]) for t in state["turns"]]


class _Closing:
  """Reads a closing statement off the bot's reply with the task's own ending, for tasks
  where the person ends the dialogue by stating a number (StudySpec.closing_field). The
  person's ending does not depend on the scenario (P4G's reads any persona the same way),
  so it is read without one."""

  def __init__(self, task: str, env: Any = None):
    self.spec = registry.task(task).study
    self.env = env
    if env is None and self.spec.closing_field:
      self.env = registry.task(task).make_env(
          ml_collections.ConfigDict(dict(self.spec.env_options)))

  def value(self, role: str, text: str) -> float | None:
    """The number `text` closes with, or None when it does not close the dialogue."""
    if not self.spec.closing_field:
      return None
    ending = self.env.ending(None, role, text)
    if ending is None:
      return None
    return ending.info.get(self.spec.closing_field)


class _Bot:
  """One participant played to the end (module docstring)."""

  def __init__(self, client: httpx.AsyncClient, token: str, admin_token: str, party_spec: str,
               lm_options: Mapping[str, Any], rng: np.random.Generator, think_s: float,
               closings: dict[str, _Closing], closings_lock: asyncio.Lock, env: Any,
               max_messages: int | None, answer_survey: bool):
    self.client, self.token, self.admin = client, token, admin_token
    self.party_spec, self.lm_options = party_spec, dict(lm_options)
    self.rng, self.think_s, self.env = rng, think_s, env
    self.closings, self.closings_lock = closings, closings_lock
    self.max_messages, self.answer_survey = max_messages, answer_survey
    self.result = BotResult(token=token)

  async def request(self, method: str, path: str, body: Any = None,
                    admin: bool = False) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {self.admin}"} if admin else {}
    response = await self.client.request(method, path, json=body, headers=headers)
    if response.status_code != 200:
      try:
        detail = response.json().get("detail")
      except ValueError:
        detail = response.text[:200]
      raise BotError(f"{method} {path}: {response.status_code} {detail}")
    state = response.json()
    if "turns" in state:
      self.result.transcript = [(t["speaker"], t["text"]) for t in state["turns"]]
      self.result.phase = state.get("phase")
    return state

  async def timed(self, path: str, body: Any) -> dict[str, Any]:
    start = time.perf_counter()
    state = await self.request("POST", path, body)
    self.result.round_trips_s.append(time.perf_counter() - start)
    return state

  async def play(self) -> BotResult:
    start = time.perf_counter()
    try:
      await self._play()
    except (BotError, httpx.HTTPError, ValueError) as e:
      self.result.error = f"{type(e).__name__}: {e}"
    self.result.seconds = time.perf_counter() - start
    return self.result

  async def _play(self) -> None:
    r, api = self.result, f"/api/s/{self.token}"
    state = await self.request("GET", api)
    r.resumed_at, r.turns, r.end = len(state["turns"]), len(state["turns"]), state["end_reason"]
    if state["phase"] == DONE:  # Finished in an earlier run.
      r.completion_code = state.get("completion_code")
      return
    private = await self.request("GET", f"/api/admin/bot/{self.token}", admin=True)
    r.scenario_key = private["scenario_key"]
    role = state["human_role"]
    async with self.closings_lock:  # The first bot of a task builds its reader; others wait.
      if state["task"] not in self.closings:
        self.closings[state["task"]] = await asyncio.to_thread(_Closing, state["task"], self.env)
    closing = self.closings[state["task"]]
    if state["phase"] == "instructions":
      state = await self.request("POST", f"{api}/start")
    if state["phase"] == CHAT:
      party = await asyncio.to_thread(parties.make_party, self.party_spec, role,
                                      **self.lm_options)
      contexts, seeds = [private["context"]], [int(private["human_seed"])]
      if state["turns"]:
        await asyncio.to_thread(party_lib.resume, party, contexts, seeds, [_history(state)],
                                role=role)
      else:
        await asyncio.to_thread(party.reset, contexts, seeds)
    # A closing task's dialogue that reached its turn limit has ended but waits for the
    # person's closing statement (must_close).
    while state["phase"] == CHAT and (not state["ended"] or state.get("must_close")):
      if self.max_messages is not None and len(r.sent) >= self.max_messages:
        break  # A person who leaves mid-chat.
      if self.think_s:
        await asyncio.sleep(self.think_s)
      reply = (await asyncio.to_thread(party.respond, [_history(state)]))[0]
      if reply is None:
        raise BotError(f"the party {self.party_spec} ended the dialogue (answered None) at "
                       f"turn {len(state['turns'])}; a person cannot, so it stops here")
      value = closing.value(role, reply)
      if value is None and state.get("must_close"):
        # A person at the last turn must state the number; lockstep play would end at the turn
        # limit instead. Closing with the range's low end keeps the bot going, and says so.
        value, r.forced_close = state["closing"]["min"], True
      if value is not None and state.get("closing"):
        r.closing_value = float(value)
        state = await self.timed(f"{api}/close",
                                 {"value": float(value), "turn": len(state["turns"])})
      else:
        r.sent.append(reply)
        state = await self.timed(f"{api}/message", {"text": reply, "turn": len(state["turns"])})
    r.turns, r.end = len(state["turns"]), state.get("end_reason")
    if state["phase"] == SURVEY and self.answer_survey:
      state = await self.request("POST", f"{api}/survey",
                                 {"answers": survey_answers(state["survey"], self.rng)})
    r.phase, r.completion_code = state["phase"], state.get("completion_code")


async def play_bots(base_url: str, links: Sequence[str], admin_token: str, party_spec: str, *,
                    concurrency: int = 8, seed: int = 0,
                    lm_options: Mapping[str, Any] | None = None, think_s: float = 0.0,
                    timeout_s: float = 600.0, env: Any = None, max_messages: int | None = None,
                    answer_survey: bool = True) -> list[BotResult]:
  """`run_bots` in a running event loop."""
  if concurrency < 1:
    raise ValueError(f"concurrency={concurrency} must be >= 1")
  gate = asyncio.Semaphore(concurrency)
  closings: dict[str, _Closing] = {}
  closings_lock = asyncio.Lock()
  registry.load_plugins()  # Once, here: the bots build their parties on worker threads.
  limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
  async with httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout_s,
                               limits=limits) as client:

    async def one(i: int, link: str) -> BotResult:
      async with gate:
        bot = _Bot(client, token_of(link), admin_token, party_spec, lm_options or {},
                   np.random.default_rng([seed, i]), think_s, closings, closings_lock, env,
                   max_messages, answer_survey)
        return await bot.play()

    return list(await asyncio.gather(*(one(i, link) for i, link in enumerate(links))))


def run_bots(base_url: str, links: Sequence[str], admin_token: str, party_spec: str, *,
             concurrency: int = 8, seed: int = 0, lm_options: Mapping[str, Any] | None = None,
             think_s: float = 0.0, timeout_s: float = 600.0, env: Any = None,
             max_messages: int | None = None, answer_survey: bool = True) -> list[BotResult]:
  """Plays every invitation in `links` with a bot of `party_spec`, `concurrency` at once;
  one BotResult per link, in order (a failed bot carries its `error`; none is retried).

  `seed` draws the survey answers (bot i: default_rng([seed, i])); the party's own seed is
  the participant's human_seed. `lm_options` build a learned party; `think_s` waits before
  each turn, as a person reads and types; `env` is the task's environment, built when
  needed (to read a closing statement) unless given. Bots that behave as people who drop
  out: `max_messages` leaves the chat after that many turns, `answer_survey=False` leaves
  the survey unanswered.
  """
  return asyncio.run(play_bots(base_url, links, admin_token, party_spec,
                               concurrency=concurrency, seed=seed, lm_options=lm_options,
                               think_s=think_s, timeout_s=timeout_s, env=env,
                               max_messages=max_messages, answer_survey=answer_survey))
