"""The common practice, for comparison: a learned party re-encoding its whole history every turn.

`RePrefill` wraps an `LMParty` and, before each of its turns, throws the
KV cache away and encodes the row's whole sequence so far again (prefix,
context and every turn), then lets the party append the new turns and
decode as usual. Under greedy decoding it must say exactly what the
cache-keeping party says (tests/test_cotraining_rollouts.py); the benchmark
(benchmarks/rollout_cache.py) times the two side by side.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import jax.numpy as jnp

from data_pipelines.dialogue import Turn
from ilql_dialogue.lm_party import LMParty, start_state
from ilql_dialogue.models import copy_head


class RePrefill:
  """`party`, re-prefilled from its own records (`LMParty.token_ids`) at every turn."""

  def __init__(self, party: LMParty):
    self.party = party
    self.role = party.role

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    self.party.reset(contexts, seeds)

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    party = self.party
    prefix_BxPxD = None
    if party.prefix_fields_BxPxF is not None:
      prefix_BxPxD = party.decoder.embed_prefix(jnp.asarray(party.prefix_fields_BxPxF))
    party._state = start_state(party.decoder, party.token_ids, party.tokenizer.pad_id,
                                          party.chunk, party.cache_len, prefix_BxPxD)
    if party._state.cache.ids_BxS is not None:  # Its sampled words are no copy source.
      first = 0 if prefix_BxPxD is None else prefix_BxPxD.shape[1]
      party._state = party._state.replace(
          cache=copy_head.forget_own(party._state.cache, first, party.sampled))
    return party.respond(histories)
