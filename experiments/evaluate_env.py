"""Plays a party against an opponent in any registered task's environment (e.g. Persuasion
for Good, or a `module:attr` task) on held-out scenarios, and reports the mean reward.

    python -m experiments.evaluate_env --env=persuasion --role=persuader \
        --party=runs/p4g/grpo_s0 --opponent=runs/p4g/persuadee_s1 \
        --num_dialogues=102 --workdir=runs/p4g/eval [--split=eval --seed=1000 \
        --temperature=0 --opponent_temperature=1.0 --max_new_tokens=48 --max_turns=24]

    python -m experiments.evaluate_env --env=tau2_retail --role=agent \
        --party=tau2_agent:oracle --opponent=tau2_customer:scripted --split=test \
        --num_dialogues=40 --max_turns=200 --workdir=runs/tau2/eval

--party / --opponent: a party spec (a training workdir, WORKDIR@STEP for one of its
saved steps, a registered kind, or module.path:ClassName); the opponent plays every
role but --role.
Scenarios are env.sample(seed, n) of --split: for P4G the personas of the
held-out dialogues ("eval", 102), seed 1000 for reports (checkpoint selection
uses 2000, training 100000+). Prints the summary as one JSON object and writes
eval_<tag>.json (mean reward ± s.e., P4G's stated / unparsable / missing
donations) and one transcript per dialogue to transcripts_<tag>.jsonl.
"""

import json

import ml_collections
from absl import flags

from data_pipelines import cli
from ilql_dialogue import registry
from workflows import config_checks, evaluate

_ENV = flags.DEFINE_string("env", "persuasion", "A registered task (or module:attr naming a "
                           "TaskSpec) whose environment is played.")
_SPLIT = flags.DEFINE_string("split", "eval", "Scenario split, as the task's environment names "
                             "them (P4G: train, eval; tau2_retail: train, test, base, "
                             "generated).")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "The task's data; '' = its default "
                                "($P4G_DATA_DIR, $TAU2_RETAIL_DATA_DIR).")
_ROLE = flags.DEFINE_string("role", None, "The role --party plays.", required=True)
_PARTY = flags.DEFINE_string("party", None, "Party spec playing --role.", required=True)
_OPPONENT = flags.DEFINE_string("opponent", None, "Party spec playing the other roles.",
                                required=True)
_NUM = flags.DEFINE_integer("num_dialogues", 102, "Dialogues to play.", lower_bound=1)
_SEED = flags.DEFINE_integer("seed", 1000, "Scenario seed (apart from selection's 2000).",
                             lower_bound=0)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where eval_*.json / transcripts_*.jsonl go.",
                               required=True)
_BATCH = flags.DEFINE_integer("batch_size", 16, "Dialogues played at once.", lower_bound=1)
_MAX_TURNS = flags.DEFINE_integer("max_turns", 24, "Utterances (both sides) before a dialogue "
                                  "ends without an outcome.", lower_bound=1)
_TEMPERATURE = flags.DEFINE_float("temperature", 0.0, "The party's temperature; 0 = greedy.",
                                  lower_bound=0.0)
_OPPONENT_TEMPERATURE = flags.DEFINE_float("opponent_temperature", 1.0, "A learned opponent's "
                                           "temperature (a simulator samples).", lower_bound=0.0)
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 48, "Token cap per learned utterance.",
                                lower_bound=1)
_TAG = flags.DEFINE_string("tag", "", "Output name suffix (default: from the specs, seed and n).")
_CPU_DEVICES = flags.DEFINE_string(
    "cpu_devices", "1", "XLA:CPU devices: 'all' = one per usable core, a learned party's rows "
    "split over them (every core decodes; docs/BENCHMARKS.md).")


def main(argv):
  del argv
  with cli.reported_as("--cpu_devices"):
    devices = evaluate.cpu_decode_devices(_CPU_DEVICES.value)
  if _DATA_DIR.value:
    cli.existing_dir(_DATA_DIR.value, "--data_dir")
  with cli.reported_as("--env"):
    spec = registry.task(_ENV.value)
  if spec.make_env is None:
    raise cli.BadInput(f"--env={_ENV.value}: the task has no environment")
  with cli.reported_as(f"--env={_ENV.value} --split={_SPLIT.value}"):
    env = spec.make_env(ml_collections.ConfigDict(dict(
        env=_ENV.value, split=_SPLIT.value, data_dir=_DATA_DIR.value)))
  if _ROLE.value not in env.turn_order:
    raise cli.BadInput(f"--role={_ROLE.value}: {_ENV.value}'s roles are {list(env.turn_order)}")
  config_checks.check_party(_PARTY.value, _ROLE.value, "--party")
  for role in env.turn_order:
    if role != _ROLE.value:
      config_checks.check_party(_OPPONENT.value, role, "--opponent")
  cli.output_dir(_WORKDIR.value, "--workdir")
  summary = evaluate.evaluate_environment(
      env, _ROLE.value, _PARTY.value, _OPPONENT.value, num_dialogues=_NUM.value,
      workdir=_WORKDIR.value, seed=_SEED.value, batch_size=_BATCH.value,
      max_turns=_MAX_TURNS.value, tag=_TAG.value, devices=devices,
      lm_options=dict(temperature=_TEMPERATURE.value, max_new_tokens=_MAX_NEW.value),
      opponent_options=dict(temperature=_OPPONENT_TEMPERATURE.value,
                            max_new_tokens=_MAX_NEW.value))
  print(json.dumps(summary))


if __name__ == "__main__":
  cli.run(main)
