"""Agents against customers on the same held-out scenarios (workflows/compare.py).

    python -m experiments.compare_agents --workdir=runs/results/eval \
        --agents=oracle=scripted_agent:oracle,bc=runs/results/bc_agent,ilql=runs/ilql_s0+runs/ilql_s1 \
        [--customers=scripted:volunteer,... --num_dialogues=500 --sweep_betas=0,4,16 \
         --sweep_agents=ilql --corpus_stats=DIR/stats.json]

Writes comparison.json and comparison.md into --workdir.
"""

from absl import flags

from data_pipelines import cli
from domains.airdialogue import environment as airdialogue_env
from workflows import compare

_AGENTS = flags.DEFINE_list("agents", None, "name=SPEC pairs (a training workdir, several seeds' "
                            "workdirs joined by '+', or scripted_agent:NAME).", required=True)
_CUSTOMERS = flags.DEFINE_list("customers", [f"scripted:{s}" for s in (
    "volunteer", "answer_only", "late_reveal", "terse", "chatty")], "Customer specs.")
_NUM = flags.DEFINE_integer("num_dialogues", 500, "Held-out scenarios per pair.", lower_bound=1)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where evaluations and the tables go.",
                               required=True)
_SEED = flags.DEFINE_integer("seed", airdialogue_env.DEFAULT_SEED, "Scenario seed (held out).")
_BATCH = flags.DEFINE_integer("batch_size", 100, "Dialogues played at once.", lower_bound=1)
_SWEEP_BETAS = flags.DEFINE_list("sweep_betas", [], "Extra betas for value-guided agents.")
_SWEEP_AGENTS = flags.DEFINE_list("sweep_agents", [], "Names of the agents to sweep (default: "
                                  "every value-guided one).")
_TEMPERATURE = flags.DEFINE_float("temperature", 0.0, "Learned agents' sampling temperature; "
                                  "0 = greedy.", lower_bound=0.0)
_CUSTOMER_TEMPERATURE = flags.DEFINE_float("customer_temperature", 1.0,
                                           "Learned customers' temperature.", lower_bound=0.0)
_CORPUS_STATS = flags.DEFINE_string("corpus_stats", "", "stats.json of the training corpus: a "
                                    "'dataset' row.")


def main(argv):
  del argv
  compare.run(_AGENTS.value, _CUSTOMERS.value, workdir=_WORKDIR.value, num_dialogues=_NUM.value,
              seed=_SEED.value, batch_size=_BATCH.value, sweep_betas=_SWEEP_BETAS.value,
              sweep_agents=_SWEEP_AGENTS.value, temperature=_TEMPERATURE.value,
              customer_temperature=_CUSTOMER_TEMPERATURE.value, corpus_stats=_CORPUS_STATS.value)


if __name__ == "__main__":
  cli.run(main)
