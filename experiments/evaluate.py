"""Plays an agent against a customer on held-out AirDialogue scenarios and scores it.

    python -m experiments.evaluate --agent=runs/bc_agent --customer=scripted:chatty \
        --num_dialogues=500 --workdir=runs/eval [--seed=1000 --batch_size=16 \
        --max_turns=40 --temperature=0 --top_k=0 --top_p=1.0 --max_new_tokens=64 --beta=0 \
        --customer_temperature=1.0 --customer_min_p=0]

--agent: a training workdir or scripted_agent:NAME (e.g. scripted_agent:oracle).
--customer: scripted:STYLE, a training workdir, or module.path:ClassName.
Prints the summary as one JSON object and writes it to WORKDIR/eval_<tag>.json,
with one transcript per dialogue in WORKDIR/transcripts_<tag>.jsonl.
"""

import json

from absl import flags

from data_pipelines import cli
from domains.airdialogue import environment as airdialogue_env
from workflows import config_checks, evaluate

_AGENT = flags.DEFINE_string("agent", None, "Agent spec.", required=True)
_CUSTOMER = flags.DEFINE_string("customer", None, "Customer spec.", required=True)
_NUM = flags.DEFINE_integer("num_dialogues", 100, "Dialogues to play.", lower_bound=1)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where eval_*.json / transcripts_*.jsonl go.",
                               required=True)
_SEED = flags.DEFINE_integer("seed", airdialogue_env.DEFAULT_SEED,
                             "Scenario seed (held out from the training corpora).")
_BATCH = flags.DEFINE_integer("batch_size", 16, "Dialogues played at once.", lower_bound=1)
_MAX_TURNS = flags.DEFINE_integer("max_turns", airdialogue_env.DEFAULT_MAX_TURNS,
                                  "Utterances (both sides) before a dialogue fails.",
                                  lower_bound=1)
_KB_SIZE = flags.DEFINE_integer("kb_size", 30, "Flights per table.", lower_bound=1)
_TEMPERATURE = flags.DEFINE_float("temperature", 0.0, "A learned agent's sampling "
                                  "temperature; 0 = greedy.", lower_bound=0.0)
_CUSTOMER_TEMPERATURE = flags.DEFINE_float(
    "customer_temperature", 1.0, "A learned customer's temperature (a simulator samples); the "
    "other sampling flags apply to both.", lower_bound=0.0)
_CUSTOMER_MIN_P = flags.DEFINE_float(
    "customer_min_p", 0.0, "A learned customer's min-p filter: tokens under min_p times the "
    "likeliest one are cut; 0 = off.", lower_bound=0.0, upper_bound=1.0)
_TOP_K = flags.DEFINE_integer("top_k", 0, "Top-k filter; 0 = off.", lower_bound=0)
_TOP_P = flags.DEFINE_float("top_p", 1.0, "Nucleus filter; 1 = off.", lower_bound=0.0,
                            upper_bound=1.0)
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 64, "Token cap per learned utterance.",
                               lower_bound=1)
_BETA = flags.DEFINE_float("beta", 0.0, "ILQL value-guidance strength; 0 = the BC policy.")
_TAG = flags.DEFINE_string("tag", "", "Output name suffix (default: from the specs, seed and n).")
_CPU_DEVICES = flags.DEFINE_string(
    "cpu_devices", "1", "XLA:CPU devices: 'all' = one per usable core, a learned party's rows "
    "split over them (every core decodes; docs/BENCHMARKS.md).")


def main(argv):
  del argv
  with cli.reported_as("--cpu_devices"):
    devices = evaluate.cpu_decode_devices(_CPU_DEVICES.value)
  agent = config_checks.check_party(_AGENT.value, "agent", "--agent")
  config_checks.check_party(_CUSTOMER.value, "customer", "--customer")
  if _BETA.value and agent is not None and agent.algorithm.name not in config_checks.VALUE_GUIDED:
    raise cli.BadInput(f"--beta={_BETA.value:g} needs value heads ({config_checks.VALUE_GUIDED}); "
                       f"--agent={_AGENT.value} was trained with {agent.algorithm.name!r}")
  cli.output_dir(_WORKDIR.value, "--workdir")
  sampling = dict(top_k=_TOP_K.value, top_p=_TOP_P.value, max_new_tokens=_MAX_NEW.value)
  summary = evaluate.evaluate(
      _AGENT.value, _CUSTOMER.value, num_dialogues=_NUM.value, workdir=_WORKDIR.value,
      seed=_SEED.value, batch_size=_BATCH.value, max_turns=_MAX_TURNS.value,
      kb_size=_KB_SIZE.value, tag=_TAG.value, devices=devices,
      lm_options=dict(sampling, temperature=_TEMPERATURE.value, beta=_BETA.value),
      customer_lm_options=dict(sampling, temperature=_CUSTOMER_TEMPERATURE.value,
                               min_p=_CUSTOMER_MIN_P.value))
  print(json.dumps(summary))


if __name__ == "__main__":
  cli.run(main)
