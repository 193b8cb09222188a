"""gamma of a learned simulator against its reference (workflows/simulator_gamma.py).

    python -m experiments.simulator_gamma --simulator=runs/collapse/cotrain_s0 \
        --reference=runs/panel_airdialogue/customer_seed0 --temperature=0.7 \
        --transcripts=runs/collapse/compare/transcripts_start_beta0_T0_vs_customer_seed0.jsonl \
        --output=runs/collapse/gamma_cotrain_s0.json
    python -m experiments.simulator_gamma --env=persuasion --simulator=runs/p4g/cotrain_s0@100 \
        --reference=runs/p4g/persuadee_s0 --temperature=0.7 \
        --transcripts=runs/p4g/test/transcripts_persuader_bc_vs_persuadee_s0_seed1000_n102.jsonl \
        --output=runs/p4g/gamma_cotrain_s0.json
"""

from absl import flags

from data_pipelines import cli
from workflows import simulator_gamma

_ENV = flags.DEFINE_enum("env", "airdialogue", list(simulator_gamma.ENVS),
                         "The task whose simulator is measured.")
_SIMULATOR = flags.DEFINE_string("simulator", None, "Simulator, co-training (RUN[@STEP]) or "
                                 "population-member workdir.", required=True)
_REFERENCE = flags.DEFINE_string("reference", None, "The reference simulator workdir.",
                                 required=True)
_TRANSCRIPTS = flags.DEFINE_string("transcripts", None, "transcripts_*.jsonl whose simulator "
                                   "turns are the states.", required=True)
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "The simulator's sampling temperature.",
                                  lower_bound=1e-3)
_NUM_STATES = flags.DEFINE_integer("num_states", 48, "States (customer turns) measured.",
                                   lower_bound=2)
_K = flags.DEFINE_integer("k", 16, "Replies sampled per state.", lower_bound=2)
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed.")
_OUTPUT = flags.DEFINE_string("output", None, "JSON written here.", required=True)


def main(argv):
  del argv
  simulator_gamma.run(_SIMULATOR.value, _REFERENCE.value, _TRANSCRIPTS.value, _OUTPUT.value,
                      env_name=_ENV.value, temperature=_TEMPERATURE.value,
                      num_states=_NUM_STATES.value, k=_K.value, seed=_SEED.value)


if __name__ == "__main__":
  cli.run(main)
