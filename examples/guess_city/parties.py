"""Scripted parties of the guessing game, each a plain Party (ilql_dialogue/party.py).

Name them in a config or on a command line as class specs:
`examples.guess_city.parties:Answerer` and `examples.guess_city.parties:Asker`.
All randomness (the phrasing of each turn) comes from the row's seed, so a
dialogue replays identically in any batch.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from data_pipelines.dialogue import Turn
from examples.guess_city import world


class Answerer:
  """Knows its city (its context) and answers each question truthfully, in a drawn phrasing."""

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    self.cities = [world.BY_NAME[str(c["name"]).lower()] for c in contexts]
    self.rngs = [np.random.default_rng(s) for s in seeds]

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    return [None if h is None else self._answer(city, rng, h[-1].text if h else "")
            for city, rng, h in zip(self.cities, self.rngs, histories)]

  @staticmethod
  def _answer(city: world.City, rng: np.random.Generator, question: str) -> str:
    asked = world.question_in(question)
    if asked is None:
      return world.UNCLEAR
    phrasings = world.YES if asked.holds(city) else world.NO
    return phrasings[rng.integers(len(phrasings))]


class Asker:
  """Keeps the cities every answer so far allows and asks the question that splits them
  most evenly (ties: the first in world.QUESTIONS); guesses once one city is left."""

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    del contexts  # The asker knows nothing private.
    self.rngs = [np.random.default_rng(s) for s in seeds]
    self.candidates = [list(world.CITIES) for _ in seeds]
    self.asked: list[list[world.Question]] = [[] for _ in seeds]

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    return [None if h is None else self._turn(b, h) for b, h in enumerate(histories)]

  def _turn(self, b: int, history: Sequence[Turn]) -> str:
    rng, asked = self.rngs[b], self.asked[b]
    answer = world.answer_in(history[-1].text) if history and asked else None
    if answer is not None:
      self.candidates[b] = [c for c in self.candidates[b] if asked[-1].holds(c) == answer]
    candidates = self.candidates[b] or list(world.CITIES)  # A lying answerer: start over.
    splits = [(abs(2 * sum(map(q.holds, candidates)) - len(candidates)), k)
              for k, q in enumerate(world.QUESTIONS)
              if q not in asked and 0 < sum(map(q.holds, candidates)) < len(candidates)]
    if not splits:
      return world.guess_text(candidates[rng.integers(len(candidates))])
    question = world.QUESTIONS[min(splits)[1]]
    asked.append(question)
    return question.phrasings[rng.integers(len(question.phrasings))]
