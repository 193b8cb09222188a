"""Collapse diagnostics of Persuasion for Good dialogues (workflows/persuasion_diagnostics.py).

    python -m experiments.persuasion_diagnostics --output_dir=runs/p4g/diagnostics \
        --policies='start=runs/p4g/test/transcripts_persuader_bc_vs_persuadee_s1_*.jsonl,...' \
        --simulators='s0=runs/p4g/test/transcripts_persuader_bc_vs_persuadee_s0_seed1000_n102.jsonl,...'

Writes report.md and report.json to --output_dir.
"""

from absl import flags

from data_pipelines import cli
from workflows import persuasion_diagnostics

_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where report.md and report.json go.",
                                  required=True)
_POLICIES = flags.DEFINE_string("policies", "", "NAME=GLOB[+GLOB],...: transcripts by persuader.")
_SIMULATORS = flags.DEFINE_string("simulators", "", "NAME=GLOB[+GLOB],...: transcripts by "
                                  "persuadee.")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "The corpus; '' = $P4G_DATA_DIR.")
_SEED = flags.DEFINE_integer("seed", 1000, "The transcripts' scenario seed; also the sampling "
                             "and k-means seed.")
_PER_SIMULATOR = flags.DEFINE_integer("per_simulator", 400, "Utterances embedded per simulator "
                                      "(and of the humans).", lower_bound=10)
_CLUSTERS = flags.DEFINE_integer("clusters", 24, "k-means clusters.", lower_bound=2)
_CHECK_SENTENCES = flags.DEFINE_integer("check_sentences", 800, "Annotated persuadee sentences "
                                        "the embedding is checked on.", lower_bound=2)
_MIN_COUNT = flags.DEFINE_integer("min_count", 3, "Utterances a cluster needs to count as "
                                  "reached.", lower_bound=1)


def main(argv):
  del argv
  persuasion_diagnostics.run(
      _OUTPUT_DIR.value, _POLICIES.value, _SIMULATORS.value, data_dir=_DATA_DIR.value,
      seed=_SEED.value, per_simulator=_PER_SIMULATOR.value, clusters=_CLUSTERS.value,
      check_sentences=_CHECK_SENTENCES.value, min_count=_MIN_COUNT.value)


if __name__ == "__main__":
  cli.run(main)
