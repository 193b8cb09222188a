"""gamma of a learned simulator against its reference (cotraining/sharpness.py).

(`python -m experiments.simulator_gamma` runs it; its docstring has the commands.)

`--simulator` is a simulator workdir (the AirDialogue customer, the P4G
persuadee), a co-training workdir (its simulator is exported first,
cotraining/cotrain.py; `RUN@STEP` for one step) or a population member.
States are the histories before every simulator turn of `--transcripts`
(`evaluate` or `evaluate_env` output; its scenario ids name the scenarios of
--env), up to `--num_states`; the simulator samples `--k` replies at each, at
`--temperature`.
"""

from __future__ import annotations

import json
import tempfile

from cotraining import cotrain, sharpness
from data_pipelines import cli
from domains.airdialogue import environment as airdialogue_env
from domains.airdialogue.parties import CUSTOMER
from domains.persuasion import environment as persuasion_env
from ilql_dialogue import init_from
from ilql_dialogue import restore
from ilql_dialogue.parties import make_party

# --env -> (the environment whose scenarios the transcripts name, the simulator's role).
ENVS = {"airdialogue": (lambda: airdialogue_env.AirDialogueEnv(kb_size=30), CUSTOMER),
        "persuasion": (lambda: persuasion_env.PersuasionEnv.from_corpus("eval"),
                       persuasion_env.PERSUADEE)}


def scenarios_of(transcripts: str, env) -> dict[str, object]:
  """The scenarios a transcript file's ids ("seed:index") name, rebuilt from their seeds."""
  wanted: dict[int, int] = {}
  with open(transcripts) as f:
    for line in f:
      seed, index = sharpness.transcript_turns(json.loads(line))[0].split(":")
      wanted[int(seed)] = max(wanted.get(int(seed), 0), int(index) + 1)
  return {env.scenario_key(s): s for seed, n in wanted.items() for s in env.sample(seed, n)}


def measure(simulator: str, reference: str, transcripts: str, *, temperature: float,
            num_states: int, k: int, seed: int = 0, env_name: str = "airdialogue") -> dict:
  make_env, role = ENVS[env_name]
  env = make_env()
  contexts, histories = sharpness.states_from_transcripts(
      transcripts, role, scenarios_of(transcripts, env), env, num_states)
  with tempfile.TemporaryDirectory() as exported:
    run, step = init_from.split_step(simulator)
    config = restore.read_config(run)
    if cotrain.enabled(config.get("rl")):
      simulator = cotrain.export_simulator(run, exported, step)
    party = make_party(simulator, role, temperature=temperature)
    reference_lm = make_party(reference, role).decoder
    return sharpness.simulator_gamma(party, reference_lm, contexts, histories, k=k, seed=seed)


def run(simulator: str, reference: str, transcripts: str, output: str, *,
        env_name: str = "airdialogue", temperature: float = 1.0, num_states: int = 48,
        k: int = 16, seed: int = 0) -> dict:
  """experiments.simulator_gamma: checks the paths (cli.BadInput), measures, writes the JSON
  to `output`; returns it."""
  for spec, what in ((init_from.split_step(simulator)[0], "--simulator"),
                     (reference, "--reference")):
    cli.existing_dir(spec, what)
  cli.existing_file(transcripts, "--transcripts")
  cli.output_file(output, "--output")
  result = measure(simulator, reference, transcripts, temperature=temperature,
                   num_states=num_states, k=k, seed=seed, env_name=env_name)
  result.update(env=env_name, simulator=simulator, reference=reference, transcripts=transcripts)
  with open(output, "w") as out:
    json.dump(result, out, indent=1)
  print(json.dumps(result))
  return result
