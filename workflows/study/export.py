"""A study's finished dialogues as training data: Dialogue JSON lines, and AirDialogue's files.

Each dialogue that ended (the task's ending or the turn limit; a person who left
mid-chat has no outcome and is not exported) becomes one `Dialogue`
(data_pipelines/dialogue.py): the turns as stored, each role's private context
from the study's own scenarios (the task's environment rebuilt from the config
the database holds), `outcome` the environment's return of that dialogue (as in
the corpora: AirDialogue success, P4G donation / 2), and in `meta` the stored
outcome fields, the survey, the arm and the participant. For AirDialogue the
same dialogues are also written in the official `data.json` + `kb.json` format
(data_pipelines/airdialogue/official_io.py), which the offline pipeline reads
like any AirDialogue release: the agent's parsed action, the expected action,
`correct_sample`, and the study fields under the extra key "study".

`dialogues_jsonl` and `official` return text, for the server's admin export;
`write_jsonl` and `write_official` write files, for the report's command line.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

import ml_collections

from data_pipelines import cli
from data_pipelines import dialogue as dialogue_lib
from data_pipelines.airdialogue import official_io, schema
from domains.airdialogue import environment as airdialogue_env
from ilql_dialogue import environment, registry
from workflows.study import report

SOURCE = "study"


def make_env(config: Mapping[str, Any]) -> Any:
  """The study's environment: config.env merged over the task's StudySpec.env_options."""
  spec = registry.task(config["task"])
  if spec.make_env is None or spec.study is None:
    raise ValueError(f"task {config['task']!r} has no environment or no StudySpec")
  options = {**dict(spec.study.env_options), **dict(config.get("env") or {})}
  return spec.make_env(ml_collections.ConfigDict(options))


def scenarios(env: Any, config: Mapping[str, Any]) -> list[Any]:
  return env.sample(int(config["scenario_seed"]), int(config["num_scenarios"]))


def _scenario(env: Any, drawn: Sequence[Any], p: Mapping[str, Any]) -> Any:
  """The participant's scenario; its key must be the stored one (a changed corpus or
  generator would otherwise pair turns with another scenario's contexts)."""
  scenario = drawn[p["scenario_index"]]
  if env.scenario_key(scenario) != p["scenario_key"]:
    raise ValueError(f"participant {p['id']}: scenario {p['scenario_index']} is now "
                     f"{env.scenario_key(scenario)!r}, the study stored {p['scenario_key']!r}")
  return scenario


def episode(env: Any, scenario: Any, p: Mapping[str, Any],
            turns: Sequence[Mapping[str, Any]]) -> environment.Episode:
  """The stored dialogue as the engine's Episode: what the ending read off its last turn."""
  played = tuple(dialogue_lib.Turn(t["speaker"], t["text"]) for t in turns)
  ending = env.ending(scenario, played[-1].speaker, played[-1].text) if played else None
  reason = p.get("end_reason") or (ending.reason if ending else environment.TURN_LIMIT)
  info = dict(ending.info) if ending is not None and ending.reason == reason else {}
  return environment.Episode(scenario=scenario, key=p["scenario_key"], turns=played,
                             end_reason=reason, info=info)


def _finished(study: report.Study) -> list[Mapping[str, Any]]:
  return [p for p in study.participants if report.ended(p)]


def _study_meta(study: report.Study, p: Mapping[str, Any]) -> dict[str, Any]:
  return {"source": SOURCE, "participant_id": p["id"], "arm": p["arm"],
          "arm_spec": study.config.get("arms", {}).get(p["arm"]), "kind": p.get("kind"),
          "scenario_key": p["scenario_key"], "scenario_index": p["scenario_index"],
          "agent_seed": p["agent_seed"], "human_seed": p["human_seed"], "phase": p["phase"],
          "end_reason": p.get("end_reason")}


def dialogues(db_path: str, env: Any = None) -> list[dialogue_lib.Dialogue]:
  """Every dialogue of the study that ended, as a Dialogue (module docstring). `env`: the
  study's environment when the caller has it (a server does), else built from the config."""
  study = report.read_study(db_path)
  env = make_env(study.config) if env is None else env
  drawn = scenarios(env, study.config)
  human_role = registry.task(study.config["task"]).study.human_role
  out = []
  for p in _finished(study):
    scenario = _scenario(env, drawn, p)
    played = episode(env, scenario, p, study.turns.get(p["id"], ()))
    out.append(dialogue_lib.Dialogue(
        dialogue_id=f"{SOURCE}:{p['id']}", roles=tuple(env.turn_order), turns=played.turns,
        context={role: env.context(scenario, role) for role in env.turn_order},
        outcome=float(env.reward(played)),
        meta={**_study_meta(study, p), "outcome": json.loads(p["outcome_json"]),
              "survey": json.loads(p["survey_json"]) if p.get("survey_json") else None,
              "human_role": human_role}))
  return out


def dialogues_jsonl(db_path: str, env: Any = None) -> str:
  """`dialogues` as Dialogue JSON lines (data_pipelines.dialogue.read_jsonl reads them)."""
  return "".join(json.dumps(d.to_json(), ensure_ascii=False) + "\n"
                 for d in dialogues(db_path, env))


def _sample(study: report.Study, p: Mapping[str, Any], played: environment.Episode,
            scenario: airdialogue_env.Scenario) -> schema.Sample:
  result = airdialogue_env.to_result(played)
  extra = _study_meta(study, p)
  action = result.action
  numbers = {f.flight_number for f in scenario.table.flights}
  if action is not None and not set(action.flights) <= numbers:
    # The official format only names flights of the table; the block stays in the text.
    extra["action_outside_table"] = action.to_json()
    action = None
  return schema.Sample(
      intent=scenario.intent, table=scenario.table,
      dialogue=tuple(f"{t.speaker}: {t.text}" for t in played.turns), action=action,
      expected_action=scenario.expected_action, correct_sample=result.success,
      extra={SOURCE: extra})


def official(db_path: str, env: Any = None) -> tuple[list[str], list[str]]:
  """AirDialogue's ended dialogues as the official files' aligned lines: (data.json lines,
  kb.json lines), one JSON object per string, without newlines; ValueError for another task.
  `env` as in `dialogues`."""
  study = report.read_study(db_path)
  env = make_env(study.config) if env is None else env
  if not isinstance(env, airdialogue_env.AirDialogueEnv):
    raise ValueError(f"task {study.config['task']!r}: the official data.json / kb.json "
                     "format is AirDialogue's")
  drawn = scenarios(env, study.config)
  data_lines, kb_lines = [], []
  for p in _finished(study):
    scenario = _scenario(env, drawn, p)
    sample = _sample(study, p, episode(env, scenario, p, study.turns.get(p["id"], ())),
                     scenario)
    data_lines.append(official_io.data_line(sample))
    kb_lines.append(official_io.kb_line(sample.table))
  return data_lines, kb_lines


def write_jsonl(db_path: str, path: str) -> int:
  """Writes `dialogues_jsonl` to `path`; returns how many dialogues."""
  text = dialogues_jsonl(db_path)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return text.count("\n")


def write_official(db_path: str, out_dir: str) -> int:
  """Writes `official` as out_dir/data.json and out_dir/kb.json; returns how many lines."""
  data_lines, kb_lines = official(db_path)
  os.makedirs(out_dir, exist_ok=True)
  for name, lines in (("data.json", data_lines), ("kb.json", kb_lines)):
    with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
      f.writelines(line + "\n" for line in lines)
  return len(data_lines)


def check_outputs(jsonl: str = "", official_dir: str = "") -> None:
  """The export paths can be written (cli.BadInput naming the flag otherwise)."""
  if jsonl:
    cli.output_file(jsonl, "--export_jsonl")
  if official_dir:
    cli.output_dir(official_dir, "--export_official")


def run(workdir: str, *, jsonl: str = "", official_dir: str = "") -> dict[str, int]:
  """experiments.human_study_report's --export_jsonl / --export_official: checks the paths
  (cli.BadInput), writes the exports; returns how many dialogues each holds."""
  db_path = report.study_db(workdir)
  check_outputs(jsonl, official_dir)
  written = {}
  if jsonl:
    written["jsonl"] = write_jsonl(db_path, jsonl)
  if official_dir:
    with cli.reported_as("--export_official"):
      written["official"] = write_official(db_path, official_dir)
  return written
