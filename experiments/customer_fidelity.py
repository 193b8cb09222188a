"""Does a simulated customer say what its intent says? (workflows/customer_fidelity.py)

    python -m experiments.customer_fidelity --transcripts=runs/quickstart/eval/transcripts_X.jsonl

Prints, per intent field, how often the customer stated it correctly, wrongly or never.
"""

import json

from absl import flags

from data_pipelines import cli
from workflows import customer_fidelity

_TRANSCRIPTS = flags.DEFINE_string("transcripts", None, "transcripts_*.jsonl of an evaluation.",
                                   required=True)


def main(argv):
  del argv
  path = cli.existing_file(_TRANSCRIPTS.value, "--transcripts")
  print(json.dumps(customer_fidelity.fidelity(customer_fidelity.read_transcripts(path)),
                   indent=2))


if __name__ == "__main__":
  cli.run(main)
