"""Registers τ²-bench retail: the task `tau2_retail` (agent and customer, tool turns), its
environment (options `split`: train / test / base real tasks, or generated, the default, so
online RL and selection never see a real task unless told; `data_dir`) and the scripted
parties `tau2_agent:SKILL` and `tau2_customer:STYLE[/FAMILY]` (`tau2_customer:scripted`: the
original customer). Its dialogues are long: play them with max_turns 200
(environment.DEFAULT_MAX_TURNS; tool turns count)."""

from __future__ import annotations

import os

import ml_collections

from domains.tau2_retail import (agents, contexts, environment, generate, parties, paths, task,
                                 turns)
from ilql_dialogue import registry


def _make_env(options: ml_collections.ConfigDict) -> environment.RetailEnv:
  return environment.RetailEnv(options.get("split", generate.SPLIT),
                               options.get("data_dir") or None)


def _check_data(task_config: ml_collections.ConfigDict, where: str) -> None:
  """The τ²-bench folder the corpus is generated from, unless the corpus is there."""
  if all(os.path.isfile(p) for p in task.corpus_paths(task_config.root).values()):
    return
  reason = paths.missing_reason(task_config.get("data_dir") or None)
  if reason is not None:
    raise ValueError(f"{where}.task.data_dir: {reason}")


TASK = registry.register_task(registry.TaskSpec(
    name=task.NAME,
    roles=environment.RetailEnv.turn_order,
    contexts=contexts.CONTEXTS,
    serialize_context=contexts.serialize_context,
    make_task=task.make_task,
    make_env=_make_env,
    block_markers={turns.AGENT: task.MARKERS},
    check_data=_check_data,
))
registry.register_party_kind(registry.PartyKind(
    "tau2_agent", parties.make_agent, check=parties.check_agent,
    usage=f"tau2_agent:SKILL ({'|'.join(agents.AGENTS)})"))
registry.register_party_kind(registry.PartyKind(
    "tau2_customer", parties.make_customer, check=parties.check_customer,
    usage=f"tau2_customer:STYLE[/FAMILY] (STYLE: {'|'.join(parties.CUSTOMER_STYLES)})"))
