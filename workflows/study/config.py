"""The study config (experiments/configs/study_*.py), and the checks it passes before serving.

A study is fixed when it is created: its database keeps the config, and a restart with a
changed config is refused (`changed_field`), since the invitations, seeds and arms already
handed out were drawn from it. Every check here runs before anything is served or any weight
loaded, and names the config field that is wrong (`cli.BadInput`).

Fields (`make` fills the defaults):

  task                  a registered task (or module:attr) whose TaskSpec has a StudySpec
  env                   make_env options, over the StudySpec's env_options
  arms                  arm name -> party spec of the agent role (blinded: never shown)
  agent_options         options every arm's party is built with (make_party's lm_options)
  arm_options           arm name -> options over agent_options for that arm (e.g. ILQL's beta)
  scenario_seed, num_scenarios   the scenarios: env.sample(scenario_seed, num_scenarios)
  participants_per_arm  invitations = arms x participants_per_arm
  seed                  assignment order and the parties' row seeds (environment.row_seeds):
                        with seed == scenario_seed a web dialogue replays what
                        `experiments.evaluate_env --seed=SEED` plays on the same scenario
  max_turns             utterances (both sides) before the dialogue ends ("turn_limit")
  limits                max_message_chars, messages_per_minute, max_body_bytes, token_ttl_hours
  survey                items: {id, text, scale, low, high} (Likert 1..scale) or
                        {id, text, type: "number", min, max}
  batch                 max_batch, wait_ms: how agent turns of concurrent people are batched
                        (and requests to openai_model)
  openai_model          "" (off), or a model the server also serves OpenAI-compatible on /v1
                        (workflows/serve.py's specs: gguf:smollm2, a GGUF file, a Hugging Face
                        directory), e.g. for a `vs_llm:...,base_url=http://HOST:PORT/v1` arm;
                        it takes no token: whoever reaches the server may call it
  openai_name           the name /v1 serves it as (a client's `model`)
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Mapping, Sequence

import ml_collections

from data_pipelines import cli
from ilql_dialogue import registry
from workflows import config_checks
from workflows import serve

FIELDS = ("task", "env", "arms", "agent_options", "arm_options", "scenario_seed",
          "num_scenarios", "participants_per_arm", "seed", "max_turns", "limits", "survey",
          "batch", "openai_model", "openai_name")
LIMITS = {"max_message_chars": 500, "messages_per_minute": 20, "max_body_bytes": 8192,
          "token_ttl_hours": 72}
BATCH = {"max_batch": 32, "wait_ms": 5}


def _likert(item_id: str, text: str) -> dict[str, Any]:
  return {"id": item_id, "text": text, "scale": 5, "low": "strongly disagree",
          "high": "strongly agree"}


SURVEY = (
    _likert("success", "The agent did what I needed."),
    _likert("helpfulness", "The agent was helpful."),
    _likert("naturalness", "The agent wrote like a person would."),
    _likert("efficiency", "The conversation took no longer than it needed to."),
    _likert("frustration", "The conversation was frustrating."),
)
INTENDED_DONATION = {"id": "intended_donation", "type": "number", "min": 0.0, "max": 2.0,
                     "text": "How much of your $2 would you really give to Save the Children?"}

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ITEM_KEYS = {"scale": {"id", "text", "scale", "low", "high"},
              "number": {"id", "text", "type", "min", "max"}}


def make(task: str, arms: Mapping[str, str], *, max_turns: int,
         survey: Sequence[Mapping[str, Any]] = SURVEY, **fields: Any) -> ml_collections.ConfigDict:
  """A study config with the defaults above; `fields` set any other field (dict fields
  replace the default whole)."""
  unknown = sorted(set(fields) - set(FIELDS))
  if unknown:
    raise ValueError(f"study config: unknown fields {unknown}; known: {list(FIELDS)}")
  config = dict(task=task, env={}, arms=dict(arms),
                agent_options={"temperature": 0.0, "max_new_tokens": 64}, arm_options={},
                scenario_seed=1000, num_scenarios=10, participants_per_arm=10, seed=1000,
                max_turns=max_turns, limits=dict(LIMITS), survey=[dict(i) for i in survey],
                batch=dict(BATCH), openai_model="", openai_name="chat")
  config.update(fields)
  return ml_collections.ConfigDict(config)


def to_plain(config: ml_collections.ConfigDict | Mapping[str, Any]) -> dict[str, Any]:
  """The config as JSON data (what the database keeps and compares)."""
  data = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
  return json.loads(json.dumps(data, sort_keys=True, default=list))


def changed_field(old: Any, new: Any, where: str = "config") -> str | None:
  """The dotted name of the first field where two plain configs differ, or None."""
  if isinstance(old, dict) and isinstance(new, dict):
    for key in sorted(set(old) | set(new)):
      if key not in old or key not in new:
        return f"{where}.{key}"
      found = changed_field(old[key], new[key], f"{where}.{key}")
      if found:
        return found
    return None
  if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
    for i, (a, b) in enumerate(zip(old, new)):
      found = changed_field(a, b, f"{where}[{i}]")
      if found:
        return found
    return None
  return None if old == new else where


@dataclasses.dataclass(frozen=True)
class Study:
  """A checked config with what it resolves to: the task, its StudySpec, the environment
  and the scenarios, in order (scenario i is env.sample(scenario_seed, n)[i])."""

  config: ml_collections.ConfigDict
  task: registry.TaskSpec
  spec: registry.StudySpec
  env: Any
  human_role: str
  agent_role: str
  scenarios: tuple[Any, ...]

  @property
  def limits(self) -> Mapping[str, Any]:
    return self.config.limits

  def party_options(self, arm: str) -> dict[str, Any]:
    """The options the arm's party is built with: agent_options, then its arm_options."""
    return {**dict(self.config.agent_options), **dict(self.config.arm_options.get(arm, {}))}


def _bad(field: str, message: str) -> cli.BadInput:
  return cli.BadInput(f"config.{field}: {message}")


def _int(config: ml_collections.ConfigDict, field: str, low: int) -> int:
  value = config[field]
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    raise _bad(field, f"{value!r}; an integer >= {low}")
  return value


def _mapping(config: ml_collections.ConfigDict, field: str) -> Mapping[str, Any]:
  value = config[field]
  if not isinstance(value, (ml_collections.ConfigDict, Mapping)):
    raise _bad(field, f"{value!r}; a mapping")
  return value


def check_limits(limits: Mapping[str, Any]) -> None:
  cli.check_known_fields(limits, LIMITS, "config.limits")
  for name in LIMITS:
    value = limits.get(name)
    if value is None:
      raise _bad(f"limits.{name}", "missing")
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not numeric or not value > 0 or not math.isfinite(value) or (
        name != "token_ttl_hours" and not isinstance(value, int)):
      raise _bad(f"limits.{name}", f"{value!r}; a positive "
                 + ("number" if name == "token_ttl_hours" else "integer"))


def check_survey(survey: Sequence[Mapping[str, Any]]) -> None:
  if not isinstance(survey, (list, tuple)):
    raise _bad("survey", f"{survey!r}; a list of items")
  seen = set()
  for i, item in enumerate(survey):
    where = f"survey[{i}]"
    if not isinstance(item, Mapping):
      raise _bad(where, f"{item!r}; an item is a mapping")
    kind = "number" if item.get("type") == "number" else "scale"
    if "type" in item and item["type"] != "number":
      raise _bad(f"{where}.type", f"{item['type']!r}; only 'number' (or a 'scale')")
    cli.check_known_fields(item, _ITEM_KEYS[kind], f"config.{where}")
    missing = sorted(_ITEM_KEYS[kind] - set(item))
    if missing:
      raise _bad(where, f"missing {missing}")
    if not isinstance(item["id"], str) or not _NAME_RE.match(item["id"]) or item["id"] in seen:
      raise _bad(f"{where}.id", f"{item['id']!r}; a unique name of letters, digits, _ or -")
    seen.add(item["id"])
    for key in ("text",) + (("low", "high") if kind == "scale" else ()):
      if not isinstance(item[key], str) or not item[key].strip():
        raise _bad(f"{where}.{key}", f"{item[key]!r}; a non-empty text")
    if kind == "scale":
      scale = item["scale"]
      if isinstance(scale, bool) or not isinstance(scale, int) or not 2 <= scale <= 11:
        raise _bad(f"{where}.scale", f"{scale!r}; an integer from 2 to 11")
    else:
      low, high = item["min"], item["max"]
      if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                 for v in (low, high)) or not low < high:
        raise _bad(f"{where}.min", f"[{low!r}, {high!r}]; finite numbers, min < max")


def check_openai(config: ml_collections.ConfigDict) -> None:
  """The /v1 model: off (""), or one `serve.load_chat_model` finds, under a plain name."""
  model, name = config.openai_model, config.openai_name
  if not isinstance(model, str):
    raise _bad("openai_model", f"{model!r}; '' (off) or a model spec")
  if model:
    with cli.reported_as(f"config.openai_model={model}"):
      serve.check_model(model)
  if not isinstance(name, str) or not re.fullmatch(r"[\w.:/-]{1,128}", name):
    raise _bad("openai_name", f"{name!r}; a model name (letters, digits, . _ : / -)")


def check_answers(survey: Sequence[Mapping[str, Any]], answers: Any) -> dict[str, float]:
  """The answers to every survey item, checked; ValueError names the first wrong one."""
  if not isinstance(answers, Mapping):
    raise ValueError("answers: an object of item id -> number")
  ids = [item["id"] for item in survey]
  unknown = sorted(set(answers) - set(ids))
  if unknown:
    raise ValueError(f"answers: unknown items {unknown}")
  missing = [i for i in ids if i not in answers]
  if missing:
    raise ValueError(f"answers: every item is required; missing {missing}")
  out = {}
  for item in survey:
    value = answers[item["id"]]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
      raise ValueError(f"answers.{item['id']}: {value!r} is not a number")
    if item.get("type") == "number":
      if not item["min"] <= value <= item["max"]:
        raise ValueError(f"answers.{item['id']}: {value!r} not in [{item['min']}, {item['max']}]")
    elif value != int(value) or not 1 <= value <= item["scale"]:
      raise ValueError(f"answers.{item['id']}: {value!r}; an integer from 1 to {item['scale']}")
    out[item["id"]] = value
  return out


def load(config: ml_collections.ConfigDict) -> Study:
  """Checks every field (BadInput naming it), then builds the environment and scenarios."""
  cli.check_known_fields(config, FIELDS, "config")
  missing = [f for f in FIELDS if f not in config]
  if missing:
    raise cli.BadInput(f"config: missing field(s) {missing}")
  if not isinstance(config.task, str) or not config.task:
    raise _bad("task", f"{config.task!r}; a task name")
  with cli.reported_as(f"config.task={config.task}"):
    task = registry.task(config.task)
  spec = task.study
  if spec is None:
    raise _bad("task", f"{config.task}: the task defines no human study (TaskSpec.study)")
  if task.make_env is None:
    raise _bad("task", f"{config.task}: the task has no environment")
  agent_role = task.other_role(spec.human_role)
  arms = _mapping(config, "arms")
  if not arms:
    raise _bad("arms", "no arms; name at least one party spec")
  for name, party in arms.items():
    if not _NAME_RE.match(name):
      raise _bad(f"arms.{name}", "an arm name is letters, digits, _ or -")
    if not isinstance(party, str):
      raise _bad(f"arms.{name}", f"{party!r}; a party spec")
    config_checks.check_party(party, agent_role, f"config.arms.{name}")
  _mapping(config, "agent_options")
  for name, options in _mapping(config, "arm_options").items():
    if name not in arms:
      raise _bad(f"arm_options.{name}", f"no such arm; arms: {sorted(arms)}")
    if not isinstance(options, (ml_collections.ConfigDict, Mapping)):
      raise _bad(f"arm_options.{name}", f"{options!r}; a mapping")
  for field, low in (("scenario_seed", 0), ("num_scenarios", 1), ("participants_per_arm", 1),
                     ("seed", 0), ("max_turns", 2)):
    _int(config, field, low)
  check_limits(_mapping(config, "limits"))
  check_survey(config.survey)
  batch = _mapping(config, "batch")
  cli.check_known_fields(batch, BATCH, "config.batch")
  if not isinstance(batch.get("max_batch"), int) or batch.get("max_batch") < 1:
    raise _bad("batch.max_batch", f"{batch.get('max_batch')!r}; an integer >= 1")
  wait = batch.get("wait_ms")
  if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait < 10_000:
    raise _bad("batch.wait_ms", f"{wait!r}; milliseconds in [0, 10000)")
  check_openai(config)
  env_options = {**dict(spec.env_options), **dict(_mapping(config, "env"))}
  with cli.reported_as("config.env"):
    env = task.make_env(ml_collections.ConfigDict(env_options))
  if spec.human_role not in env.turn_order or agent_role not in env.turn_order:
    raise _bad("task", f"{config.task}: roles {list(env.turn_order)} lack "
                       f"{spec.human_role!r} or {agent_role!r}")
  with cli.reported_as("config.num_scenarios"):
    scenarios = tuple(env.sample(config.scenario_seed, config.num_scenarios))
  keys = [env.scenario_key(s) for s in scenarios]
  if len(set(keys)) != len(keys):
    raise _bad("num_scenarios", f"{config.num_scenarios} scenarios share keys; fewer scenarios")
  return Study(config=config, task=task, spec=spec, env=env, human_role=spec.human_role,
               agent_role=agent_role, scenarios=scenarios)
