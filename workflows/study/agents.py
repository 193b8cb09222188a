"""The study's agents: one party per arm, built at start-up, answering many people at once.

A party is a batch of dialogues in lockstep; people arrive whenever they like. So the
waiting agent turns of one arm (rows of different people, at different turns) are gathered by
workflows/microbatch.py and answered as one batch: the arm's party is brought to where each
row stands (`party.resume`: a row replays what lockstep play would have said, same seed, same
reply), then `respond` answers every row. The batch is padded to a power of two with copies of
its first row (their replies dropped), so a jitted party compiles for few shapes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from data_pipelines import cli
from data_pipelines.dialogue import Turn
from ilql_dialogue import party as party_lib
from ilql_dialogue import parties
from workflows import microbatch
from workflows.study import config as study_config


@dataclasses.dataclass(frozen=True)
class TurnRequest:
  """One agent turn to produce: the agent's private context, its row seed and the dialogue so
  far (empty when the agent opens)."""

  context: Mapping[str, Any]
  seed: int
  history: tuple[Turn, ...]


def padded_size(n: int) -> int:
  return 1 << max(0, n - 1).bit_length()


class Agents:
  """The arms' parties behind one MicroBatcher (all of them run on its worker thread)."""

  def __init__(self, study: study_config.Study,
               make_party: Callable[..., party_lib.Party] = parties.make_party):
    self.role = study.agent_role
    self.parties = {}
    for arm, spec in study.config.arms.items():
      with cli.reported_as(f"config.arms.{arm}={spec}"):  # E.g. a customer asked to be an agent.
        self.parties[arm] = make_party(spec, study.agent_role, **study.party_options(arm))
    batch = study.config.batch
    self.batcher = microbatch.MicroBatcher(self._respond, max_batch=batch.max_batch,
                                           wait_s=batch.wait_ms / 1000, name="study-agents")

  def _respond(self, arm: str, requests: Sequence[TurnRequest]) -> list[str | None]:
    rows = list(requests) + [requests[0]] * (padded_size(len(requests)) - len(requests))
    party = self.parties[arm]
    histories = [list(r.history) for r in rows]
    party_lib.resume(party, [r.context for r in rows], [r.seed for r in rows], histories,
                     role=self.role)
    replies = party.respond(histories)
    if not isinstance(replies, (list, tuple)) or len(replies) != len(rows):
      raise ValueError(f"arm {arm}: respond returned {replies!r:.200} for {len(rows)} rows")
    for reply in replies:
      if reply is not None and not isinstance(reply, str):
        raise ValueError(f"arm {arm}: a reply is {type(reply).__name__}, not str or None")
    return list(replies[:len(requests)])

  async def reply(self, arm: str, request: TurnRequest) -> str | None:
    """The arm's next turn in this dialogue (None: the party ended it)."""
    return await self.batcher.call(arm, request)

  def close(self) -> None:
    self.batcher.close()
