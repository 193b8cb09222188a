"""gamma of a learned AirDialogue customer against its reference (cotraining/sharpness.py).

    python -m experiments.simulator_gamma --simulator=runs/collapse/cotrain_s0 \
        --reference=runs/panel_airdialogue/customer_seed0 --temperature=0.7 \
        --transcripts=runs/collapse/compare/transcripts_start_beta0_T0_vs_customer_seed0.jsonl \
        --output=runs/collapse/gamma_cotrain_s0.json

`--simulator` is a customer workdir, a co-training workdir (its simulator is
exported first, cotraining/cotrain.py) or a population member. States are
the histories before every customer turn of `--transcripts` (its scenario
ids name the scenarios), up to `--num_states`; the simulator samples `--k`
replies at each, at `--temperature`.
"""

from __future__ import annotations

import json
import os
import tempfile

from absl import flags

from cotraining import cotrain, sharpness
from experiments import cli
from ilql_dialogue import policy_io, rollout, simulators


def scenarios_of(transcripts: str, kb_size: int) -> dict[str, rollout.Scenario]:
  """The scenarios a transcript file's ids ("seed:index") name, rebuilt from their seeds."""
  wanted: dict[int, int] = {}
  with open(transcripts) as f:
    for line in f:
      seed, index = json.loads(line)["scenario_id"].split(":")
      wanted[int(seed)] = max(wanted.get(int(seed), 0), int(index) + 1)
  return {s.scenario_id: s for seed, n in wanted.items()
          for s in rollout.make_scenarios(seed, n, kb_size)}


def measure(simulator: str, reference: str, transcripts: str, *, temperature: float,
            num_states: int, k: int, seed: int = 0, kb_size: int = 30) -> dict:
  env = rollout.AirDialogueEnv(kb_size=kb_size)
  contexts, histories = sharpness.states_from_transcripts(
      transcripts, simulators.CUSTOMER, scenarios_of(transcripts, kb_size), env, num_states)
  with tempfile.TemporaryDirectory() as exported:
    config = policy_io.read_config(simulator)
    if cotrain.enabled(config.get("rl")):
      simulator = cotrain.export_simulator(simulator, exported)
    party = simulators.make_party(simulator, simulators.CUSTOMER, temperature=temperature)
    reference_lm = simulators.make_party(reference, simulators.CUSTOMER).decoder
    return sharpness.simulator_gamma(party, reference_lm, contexts, histories, k=k, seed=seed)


def main(argv):
  del argv
  f = flags.FLAGS
  for spec, what in ((f.simulator, "--simulator"), (f.reference, "--reference")):
    cli.existing_dir(spec, what)
  cli.existing_file(f.transcripts, "--transcripts")
  cli.output_file(f.output, "--output")
  result = measure(f.simulator, f.reference, f.transcripts, temperature=f.temperature,
                   num_states=f.num_states, k=f.k, seed=f.seed)
  result.update(simulator=f.simulator, reference=f.reference, transcripts=f.transcripts)
  with open(f.output, "w") as out:
    json.dump(result, out, indent=1)
  print(json.dumps(result))


if __name__ == "__main__":
  flags.DEFINE_string("simulator", None, "Customer, co-training or population-member workdir.",
                      required=True)
  flags.DEFINE_string("reference", None, "The reference customer workdir.", required=True)
  flags.DEFINE_string("transcripts", None, "transcripts_*.jsonl whose customer turns are the "
                      "states.", required=True)
  flags.DEFINE_float("temperature", 1.0, "The simulator's sampling temperature.", lower_bound=1e-3)
  flags.DEFINE_integer("num_states", 48, "States (customer turns) measured.", lower_bound=2)
  flags.DEFINE_integer("k", 16, "Replies sampled per state.", lower_bound=2)
  flags.DEFINE_integer("seed", 0, "Sampling seed.")
  flags.DEFINE_string("output", None, "JSON written here.", required=True)
  cli.run(main)
