"""config.algorithm.name -> the Algorithm it names, for the launcher and for restoring.

One table, so a checkpoint is always rebuilt with the module structure it was
trained with. A config whose `model.hf_checkpoint` is set starts the trunk
from those weights; restoring clears it, since the checkpoint has them.
"""

from __future__ import annotations

from typing import Any, Callable

import ml_collections

from ilql_dialogue import baselines, bc, ilql

ALGORITHMS: dict[str, Callable[[ml_collections.ConfigDict], Any]] = {
    "bc": lambda config: bc.BC(bc.lm_factory(config)),
    "ilql": ilql.ILQL.from_config,
    "filtered_bc": baselines.FilteredBC.from_config,
    "mc_value": baselines.MCValue.from_config,
}


def make_algorithm(config: ml_collections.ConfigDict, where: str = "config") -> Any:
  name = config.algorithm.name
  if name not in ALGORITHMS:
    raise ValueError(f"{where}: field 'algorithm.name': {name!r}; known: {sorted(ALGORITHMS)}")
  return ALGORITHMS[name](config)
