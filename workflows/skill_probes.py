"""Skill probes: the two copying skills every learned AirDialogue party needs, measured cheaply.

  agent     the closing turn decoded greedily from the true held-out history:
            the final action's accuracies against the expected action
            (name, status, flight, success; tasks/airdialogue.final_turn_metrics).
  customer  for each of CUSTOMER_FIELDS, the customer's first turn that states
            that field in the held-out dialogue, decoded greedily from the true
            history before it: the share that state the intent's value (the
            name: contain the full name; the others: read by the scripted
            agent's slot parser, as workflows/customer_fidelity.py reads
            whole evaluations).

They are what "time to skill" is measured with (docs/RESULTS.md): the updates
until the agent's name accuracy and the customer's name rate pass 0.8. As a
loop EvalFn they run at every evaluation of a run whose config has
`skill_probes.num_dialogues > 0`, on the first held-out dialogues (fixed, so
steps compare).
"""

from __future__ import annotations

from typing import Sequence

import ml_collections
from flax import nnx

from data_pipelines.airdialogue import agents
from data_pipelines.dialogue import Dialogue, read_jsonl
from ilql_dialogue import tasks
from ilql_dialogue.value_heads import ILQLModel
from workflows import offline_eval

ROLES = {"lm": ("agent", "customer"), "agent": ("agent",), "customer": ("customer",)}
# The name, then a field copied from the intent's text that is seldom guessed right
# (an airport code: 1 in ~40; a day: 1 in ~30).
CUSTOMER_FIELDS = ("name", "departure_airport", "departure_day")


def states(text: str, field: str, intent: dict) -> bool:
  """Whether `text` states the intent's value of `field`."""
  if field == "name":
    return intent["name"].lower() in text.lower()
  return str(agents.extract_slots(text).get(field)) == str(intent[field])


def _field_turn(dialogue: Dialogue, field: str) -> int | None:
  """Index (among the customer's turns) of the first one that states the intent's `field`."""
  intent = dialogue.context["customer"]
  turns = [t for t in dialogue.turns if t.speaker == "customer"]
  return next((k for k, t in enumerate(turns) if states(t.text, field, intent)), None)


def _role_task(config: ml_collections.ConfigDict, role: str) -> tasks.Task:
  fields = config.task.to_dict()
  fields.update(role=role, context="prefix" if role == "agent" else "text")
  fields.pop("mixture", None)
  fields.pop("kb_size", None)
  return tasks.make_task(ml_collections.ConfigDict({"task": fields}))


def probe_fn(config: ml_collections.ConfigDict):
  """An EvalFn for the run's role(s), or None when the config asks for no probes."""
  settings = config.get("skill_probes")
  if settings is None or settings.num_dialogues <= 0 or config.task.role not in ROLES:
    return None
  probes = []
  for role in ROLES[config.task.role]:
    task = _role_task(config, role)
    for field in ("action",) if role == "agent" else CUSTOMER_FIELDS:
      dialogues: list[Dialogue] = []
      prompts = []
      for dialogue in read_jsonl(task.dialogue_paths["eval"]):
        utterance = -1 if role == "agent" else _field_turn(dialogue, field)
        if utterance is None:
          continue
        dialogues.append(dialogue)
        prompts.append(offline_eval.final_turn_prompt(dialogue, task, utterance))
        if len(dialogues) == settings.num_dialogues:
          break
      probes.append((role, field, task, dialogues, prompts))

  def eval_fn(model: nnx.Module, step: int) -> dict[str, float]:
    del step
    if isinstance(model, ILQLModel):  # Greedy, unguided: the policy alone.
      model = model.policy
    out = {}
    for role, field, task, dialogues, prompts in probes:
      decoded = offline_eval.decode_final_turns(model, task, dialogues, prompts,
                                                settings.batch_size, settings.max_new_tokens)
      if role == "agent":
        metrics = task.final_turn_metrics(dialogues, decoded)
        out.update({f"skill/agent_{k.split('/')[-1]}": v for k, v in metrics.items()})
      else:
        out[f"skill/customer_{field}_rate"] = customer_rate(dialogues, decoded, field)
    return out

  return eval_fn


def customer_rate(dialogues: Sequence[Dialogue], decoded: Sequence[str], field: str) -> float:
  """The share of decoded turns that state the intent's `field`."""
  hits = sum(states(text, field, d.context["customer"]) for d, text in zip(dialogues, decoded))
  return hits / max(len(dialogues), 1)
