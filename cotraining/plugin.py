"""Registers online RL (GRPO, RLOO, PPO) and the sampling wrappers this package brings:
the k-sample picker (`pick:`) and Verbalized Sampling through an LLM endpoint (`vs_llm:`)."""

from __future__ import annotations

import ml_collections

from cotraining import algorithms, k_sample, vs_llm
from ilql_dialogue import registry


def _policy_gradient(config: ml_collections.ConfigDict):
  if config.algorithm.name == "ppo":
    return algorithms.PPO.from_config(config)
  return algorithms.PolicyGradient.from_config(config)


for _name in ("grpo", "rloo", "ppo"):
  registry.register_algorithm(_name, _policy_gradient)
registry.register_party_kind(registry.PartyKind(
    "pick", k_sample.from_spec, options=k_sample.OPTIONS, target="party",
    usage="pick:[k=K,pick=RULE,t=T:]PATH"))
registry.register_party_kind(registry.PartyKind(
    "vs_llm", vs_llm.from_spec, options=vs_llm.OPTIONS, target="none", check=vs_llm.check,
    usage="vs_llm:k=K,base_url=URL,model=NAME[,...]"))
