"""Serves a human study: people play one role of a task against blinded agent arms
(workflows/study/).

    python -m experiments.human_study --config=experiments/configs/study_airdialogue.py \
        --workdir=runs/study_airdialogue [--host=127.0.0.1 --port=8000]

The first start creates WORKDIR/study.sqlite with the invitations (arms x
participants_per_arm, balanced per scenario), WORKDIR/links.txt (one link per
invitation) and WORKDIR/admin_token; a later start reopens the same study and refuses a
changed config. Listens on 127.0.0.1 unless --host names another address.
`python -m experiments.human_study_report --workdir=WORKDIR` reports it.
"""

from absl import flags

from data_pipelines import cli
from workflows.study import app

_CONFIG = cli.define_config_file("config", help_string="A study config "
                                 "(experiments/configs/study_*.py).")
_WORKDIR = flags.DEFINE_string("workdir", None, "The study's folder (database, links, admin "
                               "token); reopened when it holds the study.", required=True)
_HOST = flags.DEFINE_string("host", "127.0.0.1", "Address to listen on (loopback by default).")
_PORT = flags.DEFINE_integer("port", 8000, "Port.", lower_bound=1, upper_bound=65535)


def main(argv):
  del argv
  cli.output_dir(_WORKDIR.value, "--workdir")
  app.serve(_CONFIG.value, _WORKDIR.value, _HOST.value, _PORT.value)


if __name__ == "__main__":
  cli.run(main)
