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

`resume` brings a fresh party to where B dialogues stand, each at its own turn
(e.g. a server answering people of different sessions in one batch). A party
may offer `load_histories(histories)` for it (LMParty: one prefill); any
other party is replayed through `respond`.
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


def own_turns(history: Sequence[Turn], role: str | None) -> list[int]:
  """Indices of the turns of `history` that the party about to speak after it said: those of
  `role`, or, for a party that names no role, every second turn back from the end (two
  parties alternate)."""
  if role is not None:
    return [k for k, turn in enumerate(history) if turn.speaker == role]
  return list(range(len(history) - 2, -1, -2))[::-1]


def resume(party: Party, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int],
           histories: Sequence[Sequence[Turn]], *, role: str | None = None) -> None:
  """`reset(contexts, seeds)`, then brings every row to where it stands after its own last
  turn in `histories[b]`, as if it had played it: the next `respond(histories)` gives the
  reply lockstep `environment.play` would give there (same seed, same reply).

  Rows may stand at different turns. A party with `load_histories` loads them; any other
  is replayed: `respond` is called on each history prefix before one of its own turns,
  the k-th of every row in the k-th call (rows with no k-th turn get None, as finished
  rows do), and must say what was recorded. `role` names the party's turns (default: the
  party's `role` attribute, else every second turn back from the end).

  Raises:
    ValueError: a replayed reply differs from the recorded turn (naming row and turn).
  """
  if len(histories) != len(contexts):
    raise ValueError(f"resume: {len(histories)} histories for {len(contexts)} contexts")
  party.reset(contexts, seeds)
  load = getattr(party, "load_histories", None)
  if load is not None:
    load(histories)
    return
  role = role if role is not None else getattr(party, "role", None)
  own = [own_turns(history, role) for history in histories]
  for step in range(max(map(len, own), default=0)):
    prefixes = [list(h[:turns[step]]) if step < len(turns) else None
                for h, turns in zip(histories, own)]
    replies = party.respond(prefixes)
    for b, prefix in enumerate(prefixes):
      if prefix is None:
        continue
      recorded = histories[b][own[b][step]].text
      if replies[b] != recorded:
        raise ValueError(f"resume: row {b}, turn {own[b][step]}: the party says "
                         f"{replies[b]!r:.200}, the history has {recorded!r:.200}")


def check_rows(name: str, histories: Sequence[Any], batch: int) -> None:
  if len(histories) != batch:
    raise ValueError(f"{name}.respond: {len(histories)} histories for {batch} rows (reset)")
