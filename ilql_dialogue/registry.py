"""config.algorithm.name -> the Algorithm it names, for the launcher and for restoring.

One table, so a checkpoint is always rebuilt with the module structure it was
trained with. Building an algorithm never reads weights: `model.init_from`
is applied to the initial train state (ilql_dialogue/init_from.py).
"""

from __future__ import annotations

from typing import Any, Callable

import ml_collections

from ilql_dialogue import baselines, bc, ilql



def _only_fields(fields: tuple[str, ...], make: Callable[[ml_collections.ConfigDict], Any]
                 ) -> Callable[[ml_collections.ConfigDict], Any]:
  """`make`, refusing config.algorithm fields it would silently ignore (a typo such as
  `top_fration` must not train plain BC). ILQL and MC check theirs in their dataclasses."""

  def checked(config: ml_collections.ConfigDict) -> Any:
    unknown = sorted(set(config.algorithm) - {"name", *fields})
    if unknown:
      raise ValueError(f"config.algorithm: unknown fields {unknown}; known: {sorted(fields)}")
    return make(config)

  return checked


def _policy_gradient(config: ml_collections.ConfigDict) -> Any:
  """GRPO / RLOO / PPO (cotraining/algorithms.py), imported only when named."""
  from cotraining import algorithms

  if config.algorithm.name == "ppo":
    return algorithms.PPO.from_config(config)
  return algorithms.PolicyGradient.from_config(config)


def _calm(config: ml_collections.ConfigDict) -> Any:
  """CALM (calm/model.py), imported only when named."""
  from calm import model

  return model.CALM.from_config(config)


ALGORITHMS: dict[str, Callable[[ml_collections.ConfigDict], Any]] = {
    "bc": _only_fields((), lambda config: bc.BC()),
    "ilql": ilql.ILQL.from_config,
    "filtered_bc": _only_fields(("top_fraction",), baselines.FilteredBC.from_config),
    "mc_value": baselines.MCValue.from_config,
    "grpo": _policy_gradient,
    "rloo": _policy_gradient,
    "ppo": _policy_gradient,
    "calm": _calm,
}


def make_algorithm(config: ml_collections.ConfigDict, where: str = "config") -> Any:
  name = config.algorithm.name
  if name not in ALGORITHMS:
    raise ValueError(f"{where}: field 'algorithm.name': {name!r}; known: {sorted(ALGORITHMS)}")
  return ALGORITHMS[name](config)
