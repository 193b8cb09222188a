"""The guessing game as an `ilql_dialogue.environment.Environment`.

  scenarios   a secret city each; scenario i of seed s is city perm_r[i % 20] with
              perm_r = default_rng([s, r]).permutation(20), r = i // 20: every 20 in a
              row cover all cities, and a seed's first `num` are the same for any num.
  contexts    the answerer gets its city and its facts; the asker gets nothing.
  turn order  the asker first.
  ending      an asker turn holding "[guess]" ends the game (an answerer's never does).
  reward      1 when the guess block names the secret city, else 0.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from examples.guess_city import world
from ilql_dialogue import environment

GUESS = "guess"
DEFAULT_MAX_TURNS = 20  # Ten questions; the scripted asker needs at most six.


class Scenario(NamedTuple):
  key: str
  city: world.City


class GuessCityEnv:
  """The game for the engine (module docstring)."""

  turn_order = world.ROLES
  seed_streams = {world.ASKER: 0, world.ANSWERER: 1}
  OUTCOME = GUESS

  def sample(self, seed: int, num: int) -> list[Scenario]:
    n = len(world.CITIES)
    orders = [np.random.default_rng([seed, r]).permutation(n) for r in range(-(-num // n))]
    return [Scenario(f"{seed}:{i}", world.CITIES[orders[i // n][i % n]]) for i in range(num)]

  def scenario_key(self, scenario: Scenario) -> str:
    return scenario.key

  def context(self, scenario: Scenario, role: str) -> dict[str, Any]:
    if role not in world.ROLES:
      raise ValueError(f"unknown role {role!r}; expected one of {list(world.ROLES)}")
    return dict(world.context_of(scenario.city)) if role == world.ANSWERER else {}

  def ending(self, scenario: Scenario, role: str, text: str) -> environment.Ending | None:
    if role != world.ASKER or not world.has_guess(text):
      return None
    guessed = world.guessed_city(text)
    return environment.Ending(GUESS, {"guess": guessed.name if guessed else None,
                                      "correct": guessed == scenario.city})

  def reward(self, episode: environment.Episode) -> float:
    return float(bool(episode.info.get("correct")))

  def metrics(self, episodes: Sequence[environment.Episode]) -> dict[str, float]:
    """How often the asker guessed at all, and in how many questions."""
    guessed = [e for e in episodes if e.end_reason == GUESS]
    return {"guess_rate": len(guessed) / len(episodes),
            "questions": float(np.mean([(len(e.turns) - 1) / 2 for e in guessed]))
            if guessed else float("nan")}
