"""The party protocol: one side of a batch of dialogues, learned or scripted.

Every participant in a rollout (a trained policy, a learned simulator, a
scripted party, a user's own class) implements two methods and nothing else;
the engine (ilql_dialogue/environment.py) never looks inside a party:

    reset(contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None
        Starts B new dialogues. `contexts[b]` is THIS party's private context
        in row b, as JSON, never the other side's. `seeds[b]` is a
        non-negative int; a party draws all its randomness from it, so a
        dialogue replays identically whatever batch it lands in.
    respond(histories: Sequence[Sequence[Turn] | None]) -> list[str | None]
        Returns the next utterance of every row. `histories[b]` is row b's
        whole dialogue so far (`data_pipelines.dialogue.Turn`s of both sides,
        the other side's last turn at the end), or None for a row that has
        finished: its reply must be None. A party may answer None for a live
        row to end that dialogue (e.g. its context window is full); the
        engine records it as ended by that party, and it counts as a failure.

The engine calls `respond` once per turn with all rows at once, so a learned
party decodes the whole batch in one call. Parties are named by spec strings
(ilql_dialogue/party_spec.py) and built by ilql_dialogue/parties.py.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

from data_pipelines.dialogue import Turn


class Party(Protocol):
  """One side of B dialogues played in lockstep (see the module docstring)."""

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    ...

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    ...


def check_rows(name: str, histories: Sequence[Any], batch: int) -> None:
  if len(histories) != batch:
    raise ValueError(f"{name}.respond: {len(histories)} histories for {batch} rows (reset)")
