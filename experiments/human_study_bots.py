"""Bot participants play a running study's invitations through its HTTP API
(workflows/study/bots.py): a load test, a pilot, and a check that the web path scores as
`experiments.evaluate_env` does.

    python -m experiments.human_study_bots --workdir=runs/study_airdialogue \
        --party=people:silent [--concurrency=8 --limit=0]

Reads WORKDIR/links.txt and WORKDIR/admin_token (the server must be running). Each bot plays
one invitation with a party of the person's role (`--party`, any party spec), seeded with the
participant's own seed; a participant already finished is left alone, so running the command
again continues an interrupted run.
"""

import os

from absl import flags

from data_pipelines import cli
from workflows.study import bots

_WORKDIR = flags.DEFINE_string("workdir", None, "A study's folder (links.txt, admin_token).",
                               required=True)
_PARTY = flags.DEFINE_string("party", "scripted:volunteer", "The bots' party spec (the "
                             "person's role), e.g. scripted:volunteer or people:silent.")
_CONCURRENCY = flags.DEFINE_integer("concurrency", 8, "Bots at once.", lower_bound=1)
_LIMIT = flags.DEFINE_integer("limit", 0, "Play only the first N links (0: all).", lower_bound=0)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the bots' survey answers.", lower_bound=0)


def main(argv):
  del argv
  workdir = cli.existing_dir(_WORKDIR.value, "--workdir")
  paths = {name: os.path.join(workdir, name) for name in ("links.txt", "admin_token")}
  for name, path in paths.items():
    if not os.path.isfile(path):
      raise cli.BadInput(f"--workdir={workdir}: no {name}; start the study there first "
                         "(python -m experiments.human_study)")
  with open(paths["links.txt"]) as f:
    links = [line.strip() for line in f if line.strip()]
  with open(paths["admin_token"]) as f:
    admin_token = f.read().strip()
  links = links[:_LIMIT.value] if _LIMIT.value else links
  base_url = links[0].split("/s/")[0]
  results = bots.run_bots(base_url, links, admin_token, _PARTY.value,
                          concurrency=_CONCURRENCY.value, seed=_SEED.value)
  failed = [r for r in results if r.error]
  ended = sum(r.end is not None for r in results)
  print(f"{len(results)} bots: {ended} dialogues ended, {len(failed)} failed")
  for r in failed:
    print(f"  {r.token[:6]}...: {r.error}")
  if failed:
    raise SystemExit(1)


if __name__ == "__main__":
  cli.run(main)
