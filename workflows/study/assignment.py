"""Invitations: who meets which arm on which scenario, drawn once when the study is created.

Arm a's j-th participant plays scenario j mod S, so every scenario meets every arm equally
often (exactly, per scenario) and arms differ only in their agent. Invitations are handed out
in blocks of one participant per arm, the arms' order in each block shuffled by config.seed:
a study stopped early is still balanced to within one block. Each invitation's token
(`secrets.token_urlsafe(24)`) is written once to WORKDIR/links.txt (0600) and kept only as its
sha256; a restart reopens the database (no new tokens) and refuses a changed config.
"""

from __future__ import annotations

import json
import os
import secrets
import time

import numpy as np

from data_pipelines import cli
from ilql_dialogue import environment
from workflows.study import config as study_config
from workflows.study import store as store_lib

DATABASE = "study.sqlite"
LINKS = "links.txt"
ADMIN_TOKEN = "admin_token"
OPENAI_KEY = "openai_key"


def slots(arms: list[str], num_scenarios: int, per_arm: int, seed: int
          ) -> list[tuple[str, int]]:
  """(arm, scenario index) of every invitation, in the order they are handed out."""
  rng = np.random.default_rng([seed, 0x5354])
  out = []
  for j in range(per_arm):
    out += [(arms[a], j % num_scenarios) for a in rng.permutation(len(arms))]
  return out


def _write_private(path: str, text: str) -> None:
  """A file only its owner may read (0600 from its creation)."""
  fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
  with os.fdopen(fd, "w", encoding="utf-8") as f:
    f.write(text)
  os.chmod(path, 0o600)


def _invite(store: store_lib.Store, study: study_config.Study, link_base: str,
            workdir: str) -> None:
  """Draws the invitations and writes them: the files first, so a crash before the database
  commits leaves nothing the next start would not overwrite."""
  env, config, now = study.env, study.config, time.time()
  admin_token, rows = secrets.token_urlsafe(24), []
  for arm, index in slots(list(config.arms), len(study.scenarios), config.participants_per_arm,
                          config.seed):
    key = env.scenario_key(study.scenarios[index])
    rows.append((secrets.token_urlsafe(24), dict(
        arm=arm, scenario_key=key, scenario_index=index, phase="invited", created_at=now,
        kind="person",
        agent_seed=environment.row_seeds(config.seed, [key],
                                         env.seed_streams[study.agent_role])[0],
        human_seed=environment.row_seeds(config.seed, [key],
                                         env.seed_streams[study.human_role])[0])))
  _write_private(os.path.join(workdir, LINKS),
                 "".join(f"{link_base.rstrip('/')}/s/{token}\n" for token, _ in rows))
  _write_private(os.path.join(workdir, ADMIN_TOKEN), admin_token + "\n")
  with store.transaction() as db:
    store.set_meta(db, "config", json.dumps(study_config.to_plain(config), sort_keys=True))
    store.set_meta(db, "created_at", repr(now))
    store.set_meta(db, "admin_token_sha256", store_lib.token_hash(admin_token))
    for token, row in rows:
      store.insert_participant(db, token_sha256=store_lib.token_hash(token), **row)


def openai_key(workdir: str) -> str:
  """The key the study's own OpenAI-compatible routes need (WORKDIR/openai_key, 0600, made on
  first use): a bearer token apart from the admin token, which clients of the model get."""
  path = os.path.join(workdir, OPENAI_KEY)
  if not os.path.isfile(path):
    os.makedirs(workdir, mode=0o700, exist_ok=True)
    _write_private(path, secrets.token_urlsafe(24) + "\n")
  with open(path, encoding="utf-8") as f:
    return f.read().strip()


def check_workdir(study: study_config.Study, workdir: str) -> bool:
  """Whether `workdir` holds this study already (False: none yet); BadInput naming the first
  changed field when it holds a study of another config."""
  path = os.path.join(workdir, DATABASE)
  if not os.path.exists(path):
    return False
  store = store_lib.Store(path)
  try:
    saved = store.meta().get("config")
  finally:
    store.close()
  if saved is None:
    return False
  changed = study_config.changed_field(json.loads(saved), study_config.to_plain(study.config))
  if changed:
    raise cli.BadInput(f"{changed}: differs from the study in {workdir} (its config is fixed "
                       "when it is created; use another --workdir for another study)")
  return True


def open_study(study: study_config.Study, workdir: str, link_base: str) -> store_lib.Store:
  """The study's database in `workdir`: created with its invitations, or reopened when its
  config is the same (BadInput naming the first changed field otherwise)."""
  os.makedirs(workdir, mode=0o700, exist_ok=True)
  exists = check_workdir(study, workdir)
  path = os.path.join(workdir, DATABASE)
  if not os.path.exists(path):  # People's words: only the owner reads them (SQLite's -wal
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))  # and -shm files follow).
  store = store_lib.Store(path)
  if not exists:
    _invite(store, study, link_base, workdir)
  return store
