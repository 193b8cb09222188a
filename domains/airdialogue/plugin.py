"""Registers AirDialogue: the task, its environment and its scripted parties (the corpus's
customers and agents, and the people-like evaluation customers).

Role "lm" is the dialogue LM of both roles (domains/airdialogue/lm_task.py);
"agent" and "customer" are the two parties' datasets (task.py).
"""

from __future__ import annotations

import os

import ml_collections

from data_pipelines.airdialogue import action_grammar, to_dialogue
from domains.airdialogue import environment, lm_task, parties, people_like, study, task
from ilql_dialogue import registry


def _make_task(task_config: ml_collections.ConfigDict):
  if task_config.role == "lm":
    return lm_task.make_task(task_config)
  return task.make_task(task_config)


def _check_data(task_config: ml_collections.ConfigDict, where: str) -> None:
  """The pipeline's corpora and tokenizer exist (or the tokenizer the config names)."""
  required = list(task.dialogue_paths(task_config.root).values())
  tokenizer = task_config.get("tokenizer") or os.path.join(task_config.root, "tokenizer")
  required.append(os.path.join(tokenizer, "tokenizer.json"))
  for path in required:
    if not os.path.isfile(path):
      raise ValueError(f"{where}.task.root={task_config.root}: {path} missing; run `make run` "
                       f"(python -m experiments.pipeline --workdir={task_config.root}) first")


TASK = registry.register_task(registry.TaskSpec(
    name=task.NAME,
    roles=(parties.CUSTOMER, parties.AGENT),
    contexts={**task.CONTEXTS, "lm": ("prefix",)},
    serialize_context=to_dialogue.serialize_context,
    make_task=_make_task,
    make_env=lambda options: environment.AirDialogueEnv(reward=options.get("reward", "success")),
    block_markers={parties.AGENT: (action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG)},
    check_data=_check_data,
    study=study.STUDY,
))
registry.register_party_kind(registry.PartyKind(
    "scripted", parties.make_customer, usage="scripted:STYLE[/FAMILY]"))
registry.register_party_kind(registry.PartyKind(
    "scripted_agent", parties.make_agent, usage="scripted_agent:NAME[/FAMILY]"))
registry.register_party_kind(registry.PartyKind(
    people_like.KIND, people_like.make_customer, check=people_like.check,
    usage=f"{people_like.KIND}:PERSONA ({'|'.join(people_like.PERSONAS)})"))
