"""The participants' dialogues as a state machine: what each request may do, and what it writes.

A participant moves invited -> instructions -> chat -> survey -> done, one phase at a time and
never back. Every request is checked before anything is written (a refused one writes
nothing: 4xx), and each write is committed before the reply, so a reply the person saw
survives a crash; a person's turn committed without the agent's reply (the server died in
between) gets its reply at their next request. One person's requests are serialized by a
per-person lock; the agent turns of many people are batched (agents.py). The HTTP routes
(app.py) only hand requests to `Sessions`, whose every answer is the person's whole state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import re
import secrets
import time
from typing import Any, AsyncIterator, Callable, Mapping

import fastapi
import pydantic

from data_pipelines.dialogue import Turn
from ilql_dialogue import environment
from workflows.study import agents as agents_lib
from workflows.study import config as study_config
from workflows.study import store as store_lib

_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
RATE_WINDOW_S = 60.0


class _Body(pydantic.BaseModel):
  model_config = pydantic.ConfigDict(extra="forbid", strict=True)


class MessageBody(_Body):
  text: str
  turn: int


class CloseBody(_Body):
  value: float
  turn: int | None = None


class SurveyBody(_Body):
  answers: dict[str, float]


def _error(status: int, detail: str) -> fastapi.HTTPException:
  return fastapi.HTTPException(status_code=status, detail=detail)


def _plain(value: Any) -> Any:
  """An outcome value as JSON data (numpy numbers as floats)."""
  if isinstance(value, (str, type(None))):
    return value
  try:
    return float(value)
  except (TypeError, ValueError):
    return str(value)


class Sessions:
  """The participants' dialogues: checks, phase changes, turns and the agents' replies."""

  def __init__(self, study: study_config.Study, store: store_lib.Store,
               agents: agents_lib.Agents, clock: Callable[[], float] = time.time):
    self.study, self.store, self.agents, self.clock = study, store, agents, clock
    self.env, self.spec = study.env, study.spec
    self._locks: dict[int, asyncio.Lock] = {}
    self.instructions = [" ".join(p.split()) for p in re.split(r"\n\s*\n", self.spec.instructions)
                         if p.strip()]
    self.forbidden_markers = [m for role, markers in study.task.block_markers.items()
                              if role != study.human_role for m in markers]

  def lock(self, participant_id: int) -> asyncio.Lock:
    return self._locks.setdefault(participant_id, asyncio.Lock())

  @contextlib.asynccontextmanager
  async def locked(self, token: str) -> AsyncIterator[dict[str, Any]]:
    """The token's participant under their lock, read again once it is held: another request
    of theirs may have changed it while this one waited (403 / 410 as `participant`)."""
    async with self.lock(self.participant(token)["id"]):
      yield self.participant(token)

  # --- reading ---

  def participant(self, token: str, *, done_ok: bool = False) -> dict[str, Any]:
    """The token's participant; 403 unknown or expired, 410 finished (unless `done_ok`)."""
    found = self.store.participant(token) if _TOKEN_RE.match(token) else None
    if found is None:
      raise _error(403, "unknown link: please check the address you were given")
    if found["phase"] == "done":
      if done_ok:
        return found
      raise _error(410, "this link has been used: the study is finished")
    if found["expires_at"] is not None and self.clock() > found["expires_at"]:
      raise _error(403, "this link has expired")
    return found

  def scenario(self, participant: Mapping[str, Any]) -> Any:
    return self.study.scenarios[participant["scenario_index"]]

  def next_speaker(self, turns: list[dict[str, Any]]) -> str:
    order = self.env.turn_order
    return order[len(turns) % len(order)]

  def agent_due(self, participant: Mapping[str, Any], turns: list[dict[str, Any]]) -> bool:
    return (participant["phase"] == "chat" and participant["end_reason"] is None
            and self.next_speaker(turns) == self.study.agent_role)

  def must_close(self, participant: Mapping[str, Any], turns: list[dict[str, Any]]) -> bool:
    """A closing task's person at their last turn: only the closing statement fits."""
    return (self.spec.closing_field is not None and participant["phase"] == "chat"
            and not self.agent_due(participant, turns)
            and (participant["end_reason"] is not None
                 or len(turns) + len(self.env.turn_order) >= self.study.config.max_turns))

  def state(self, participant: Mapping[str, Any], turns: list[dict[str, Any]] | None = None,
            *, pending: bool | None = None) -> dict[str, Any]:
    turns = self.store.turns(participant["id"]) if turns is None else turns
    human = self.study.human_role
    phase = "instructions" if participant["phase"] == "invited" else participant["phase"]
    context = self.env.context(self.scenario(participant), human)
    spec = self.spec
    closing = None if spec.closing_field is None else {
        "field": spec.closing_field, "min": spec.closing_range[0], "max": spec.closing_range[1]}
    return {
        "phase": phase, "task": self.study.task.name, "human_role": human,
        "instructions": self.instructions,
        "card": [[str(label), str(value)] for label, value in spec.card(context)],
        "turns": [{"speaker": t["speaker"], "you": t["speaker"] == human, "text": t["text"]}
                  for t in turns],
        "ended": phase in ("survey", "done") or participant["end_reason"] is not None,
        "end_reason": participant["end_reason"], "closing": closing,
        "must_close": self.must_close(participant, turns),
        "survey": [dict(item) for item in self.study.config.survey],
        "completion_code": participant["completion_code"],
        "limits": {"max_message_chars": self.study.limits.max_message_chars,
                   "max_turns": self.study.config.max_turns},
        "agent_pending": self.agent_due(participant, turns) if pending is None else pending,
    }

  # --- writing ---

  def _finish(self, db: Any, participant: Mapping[str, Any], turns: list[dict[str, Any]],
              ending: environment.Ending, now: float, *, closed: bool = False) -> None:
    """Ends the dialogue: scored, and on to the survey. In a closing task only the person's
    closing statement (`closed`) does that; any other ending keeps the chat open for it."""
    if self.spec.closing_field is not None and not closed:
      self.store.update_participant(db, participant["id"], end_reason=ending.reason, ended_at=now)
      return
    scenario = self.scenario(participant)
    episode = environment.Episode(
        scenario=scenario, key=self.env.scenario_key(scenario),
        turns=tuple(Turn(t["speaker"], t["text"]) for t in turns), end_reason=ending.reason,
        info=dict(ending.info))
    outcome = {k: _plain(v) for k, v in self.spec.outcome(self.env, episode).items()}
    self.store.update_participant(db, participant["id"], phase="survey", end_reason=ending.reason,
                                  ended_at=now, outcome_json=json.dumps(outcome))

  def _add_turn(self, participant: Mapping[str, Any], turns: list[dict[str, Any]], speaker: str,
                text: str, latency_s: float | None = None, *,
                closing: float | None = None) -> None:
    """Commits one turn, and the dialogue's end when it ends it (`closing`: the person's
    closing statement of that number, which always ends it)."""
    now = self.clock()
    turn = {"participant_id": participant["id"], "idx": len(turns), "speaker": speaker,
            "text": text, "created_at": now, "latency_s": latency_s}
    turns = turns + [turn]
    ending = self.env.ending(self.scenario(participant), speaker, text)
    closed = ending is not None and speaker == self.study.human_role  # The person's statement.
    if closing is not None:
      ending = ending or environment.Ending("closed", {self.spec.closing_field: closing})
      closed = True
    if ending is None and len(turns) >= self.study.config.max_turns:
      ending = environment.Ending(environment.TURN_LIMIT)
    with self.store.transaction() as db:
      self.store.insert_turn(db, participant["id"], turn["idx"], speaker, text, now, latency_s)
      if ending is not None:
        self._finish(db, participant, turns, ending, now, closed=closed)

  async def agent_turn(self, participant: Mapping[str, Any], since: float) -> None:
    """The agent's turn if it is due (the caller holds the person's lock); latency_s counts
    from `since` (time.perf_counter at the person's committed turn) to the reply."""
    participant = self.store.participant_by_id(participant["id"])
    turns = self.store.turns(participant["id"])
    if not self.agent_due(participant, turns):
      return
    scenario = self.scenario(participant)
    request = agents_lib.TurnRequest(
        context=self.env.context(scenario, self.study.agent_role),
        seed=participant["agent_seed"],
        history=tuple(Turn(t["speaker"], t["text"]) for t in turns))
    try:
      reply = await self.agents.reply(participant["arm"], request)
    except Exception:  # noqa: BLE001 (the person's turn stays; the next request retries)
      logging.exception("participant %d: the agent failed", participant["id"])
      raise _error(503, "the agent could not reply; please reload the page to try again") from None
    latency = time.perf_counter() - since
    if reply is None:  # The party ended the dialogue (e.g. its context is full).
      with self.store.transaction() as db:
        self._finish(db, participant, turns,
                     environment.Ending(environment.party_ended(self.study.agent_role)),
                     self.clock())
      return
    self._add_turn(participant, turns, self.study.agent_role, reply, latency)

  async def ensure_agent_turn(self, participant: Mapping[str, Any]) -> dict[str, Any]:
    """The state, with an agent turn that is due (e.g. after a restart) produced first; when
    another request of this person is producing it, the state says it is pending."""
    lock = self.lock(participant["id"])
    if self.agent_due(participant, self.store.turns(participant["id"])):
      if lock.locked():
        return self.state(participant, pending=True)
      async with lock:
        await self.agent_turn(participant, time.perf_counter())
    return self.state(self.store.participant_by_id(participant["id"]))

  async def view(self, token: str) -> dict[str, Any]:
    participant = self.participant(token, done_ok=True)
    if participant["phase"] == "invited":
      now = self.clock()
      with self.store.transaction() as db:
        self.store.update_participant(
            db, participant["id"], phase="instructions",
            expires_at=now + 3600.0 * self.study.limits.token_ttl_hours)
      participant = self.store.participant_by_id(participant["id"])
    return await self.ensure_agent_turn(participant)

  async def start(self, token: str) -> dict[str, Any]:
    async with self.locked(token) as participant:
      if participant["phase"] in ("invited", "instructions"):
        now = self.clock()
        fields = {"phase": "chat", "started_at": now}
        if participant["expires_at"] is None:
          fields["expires_at"] = now + 3600.0 * self.study.limits.token_ttl_hours
        with self.store.transaction() as db:
          self.store.update_participant(db, participant["id"], **fields)
        await self.agent_turn(participant, time.perf_counter())
    return await self.ensure_agent_turn(self.store.participant_by_id(participant["id"]))

  def _check_person_turn(self, participant: Mapping[str, Any], turns: list[dict[str, Any]],
                         turn: int | None) -> None:
    if participant["phase"] != "chat":
      raise _error(409, f"the conversation is not open (phase {participant['phase']})")
    if turn is not None and turn != len(turns):
      raise _error(409, f"turn {turn} is not the next turn ({len(turns)} turns so far); "
                        "reload the page")
    if self.agent_due(participant, turns):
      raise _error(409, "wait for the agent's reply")

  def _checked_text(self, text: str) -> str:
    """The message stripped; 422 when empty, too long, or holding another role's block."""
    text, limit = text.strip(), self.study.limits.max_message_chars
    if not text:
      raise _error(422, "the message is empty")
    if len(text) > limit:
      raise _error(422, f"the message is over {limit} characters (max_message_chars)")
    lowered = text.lower()
    for marker in self.forbidden_markers:
      if marker.lower() in lowered:
        raise _error(422, f"a message may not contain {marker}")
    return text

  async def message(self, token: str, body: MessageBody) -> dict[str, Any]:
    async with self.locked(token) as participant:
      text = self._checked_text(body.text)
      turns = self.store.turns(participant["id"])
      self._check_person_turn(participant, turns, body.turn)
      if participant["end_reason"] is not None:
        raise _error(409, "the conversation has ended")
      if len(turns) >= self.study.config.max_turns:
        raise _error(409, f"the conversation is at its limit of {self.study.config.max_turns} "
                          "turns")
      if self.must_close(participant, turns):
        raise _error(409, f"this is your last turn: please state your {self.spec.closing_field}"
                          " to end the conversation")
      now = self.clock()
      recent = self.store.recent_turns(participant["id"], self.study.human_role,
                                       now - RATE_WINDOW_S)
      per_minute = self.study.limits.messages_per_minute
      if recent >= per_minute:
        raise _error(429, f"more than {per_minute} messages a minute; please wait a moment")
      self._add_turn(participant, turns, self.study.human_role, text)
      await self.agent_turn(participant, time.perf_counter())
    return self.state(self.store.participant_by_id(participant["id"]))

  async def close(self, token: str, body: CloseBody) -> dict[str, Any]:
    spec = self.spec
    if spec.closing_field is None:
      raise _error(409, f"task {self.study.task.name} has no closing statement")
    low, high = spec.closing_range
    if not math.isfinite(body.value) or not low <= body.value <= high:
      raise _error(422, f"{spec.closing_field} {body.value!r} is not in [{low}, {high}]")
    async with self.locked(token) as participant:
      turns = self.store.turns(participant["id"])
      self._check_person_turn(participant, turns, body.turn)
      self._add_turn(participant, turns, self.study.human_role, spec.closing_turn(body.value),
                     closing=body.value)
    return self.state(self.store.participant_by_id(participant["id"]))

  async def survey(self, token: str, body: SurveyBody) -> dict[str, Any]:
    async with self.locked(token) as participant:
      if participant["phase"] != "survey":
        raise _error(409, f"the survey is not open (phase {participant['phase']})")
      try:
        answers = study_config.check_answers(self.study.config.survey, body.answers)
      except ValueError as e:
        raise _error(422, str(e)) from None
      with self.store.transaction() as db:
        self.store.update_participant(db, participant["id"], phase="done",
                                      survey_json=json.dumps(answers), finished_at=self.clock(),
                                      completion_code=secrets.token_hex(4).upper())
    return self.state(self.store.participant_by_id(participant["id"]))

  # --- admin ---

  def check_admin(self, authorization: str | None) -> None:
    scheme, _, given = (authorization or "").partition(" ")
    expected = self.store.meta().get("admin_token_sha256", "")
    if scheme.lower() != "bearer" or not given or not hmac.compare_digest(
        store_lib.token_hash(given.strip()), expected):
      raise _error(403, "admin routes need Authorization: Bearer ADMIN_TOKEN (WORKDIR/admin_token)")

  def bot(self, token: str) -> dict[str, Any]:
    participant = self.participant(token)
    with self.store.transaction() as db:
      self.store.update_participant(db, participant["id"], kind="bot")
    return {"scenario_key": participant["scenario_key"],
            "human_seed": participant["human_seed"],
            "context": self.env.context(self.scenario(participant), self.study.human_role)}

  def summary(self) -> dict[str, Any]:
    arms = {arm: dict.fromkeys(store_lib.PHASES, 0) for arm in self.study.config.arms}
    kinds: dict[str, int] = {}
    participants = self.store.participants()
    for p in participants:
      arms[p["arm"]][p["phase"]] += 1
      kinds[p["kind"]] = kinds.get(p["kind"], 0) + 1
    return {"task": self.study.task.name, "participants": len(participants), "arms": arms,
            "kinds": kinds}
