"""Multi-process training on localhost: jax.distributed, gloo collectives, fake CPU devices.

A pod in miniature (tests/multiprocess_worker.py is one process of the job):
the same BC, ILQL and GRPO updates, orbax checkpoints, preemption agreement,
online evaluation and online RL rollouts a TPU slice runs, with the processes
really separate. BC and GRPO run on 4 processes x 1 device, ILQL on 2 x 2
(preempted and restarted); a single process on 4 devices is the reference and
restores every run's checkpoints, so resuming on fewer hosts is tested too.

About three minutes of CPU, so outside the suite: `make test` runs it after
the suite through `make test-multiprocess` (MULTIPROCESS_TESTS=1).
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from compile_flags import FAST_COMPILE
from data_pipelines import mdp_dataset, tokenization
from data_pipelines.airdialogue import action_grammar, selfplay, to_dialogue
from ilql_dialogue import metrics as metrics_lib

pytestmark = pytest.mark.skipif(
    os.environ.get("MULTIPROCESS_TESTS") != "1",
    reason="minutes of CPU: `make test-multiprocess` (MULTIPROCESS_TESTS=1) runs it")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(REPO, "tests", "multiprocess_worker.py")
STEPS = 4
TOLERANCE = 1e-5
HEARTBEAT_S = 5
DEATH_MESSAGE = "JAX distributed service detected fatal errors"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """An agent MDP dataset of 16 self-play dialogues and its tokenizer."""
  root = str(tmp_path_factory.mktemp("mp_data"))
  dialogues = [to_dialogue.sample_to_dialogue(s, f"d{i}")
               for i, s in enumerate(selfplay.generate_samples(0, 16, kb_size=2))]
  texts = [to_dialogue.serialize_context(role, d.context[role]) for d in dialogues
           for role in d.roles] + [t.text for d in dialogues for t in d.turns]
  tokenizer = tokenization.train_tokenizer(
      texts, to_dialogue.ROLES, vocab_size=400,
      markers=(action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG))
  tokenizer.save(os.path.join(root, "tokenizer"))
  mdp_dataset.build_dataset(dialogues, tokenizer, "agent", 256,
                            serialize_context=to_dialogue.serialize_context,
                            cache_dir=os.path.join(root, "cache")).save_to_disk(
                                os.path.join(root, "mdp"))
  return root


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _launch(processes: int, devices: int, data: str, workdir: str, *flags: str,
            timeout: float = 240) -> list[tuple[int, str]]:
  """Runs the job's processes to the end: [(exit status, output)] by process id.

  Launches share a compilation cache (next to `data`): a job of the same
  shape compiles nothing the second time.
  """
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO,
         "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices} {FAST_COMPILE}",
         "JAX_COMPILATION_CACHE_DIR": os.path.join(data, "jax_cache"),
         "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
  port = _free_port()
  # Files, not pipes: a process blocked on a full pipe would stall its peers' collectives.
  logs = [tempfile.TemporaryFile("w+") for _ in range(processes)]
  procs = [subprocess.Popen(
      [sys.executable, WORKER, f"--data={data}", f"--workdir={workdir}",
       f"--coordinator=localhost:{port}", f"--num_processes={processes}", f"--process_id={i}",
       f"--steps={STEPS}", f"--heartbeat_s={HEARTBEAT_S}", *flags],
      cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
           for i, log in enumerate(logs)]
  deadline = time.monotonic() + timeout
  try:
    codes = [p.wait(timeout=max(deadline - time.monotonic(), 0)) for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  outputs = []
  for log in logs:
    log.seek(0)
    outputs.append(log.read())
    log.close()
  return list(zip(codes, outputs))


def _rows(workdir: str, name: str, process: int) -> dict[str, list[int]]:
  with open(os.path.join(workdir, name, f"rows-{process}.json")) as f:
    return json.load(f)


def _matches(output: str) -> dict[str, tuple[int, float]]:
  """The reference's `MATCH ALGO STEP DIFF` lines."""
  found = {}
  for line in output.splitlines():
    if line.startswith("MATCH "):
      _, name, step, diff = line.split()
      found[name] = (int(step), float(diff))
  return found


def _ok(results):
  for rc, output in results:
    assert rc == 0, output[-6000:]


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
  """BC on 4 processes x 1 device; ILQL on 2 processes x 2 devices, SIGTERMed at step 2
  and restarted; then the 1-process reference on 4 devices restores both."""
  root = str(tmp_path_factory.mktemp("mp_runs"))
  bc = _launch(4, 1, data, root, "--algorithms=bc,grpo")
  _ok(bc)
  preempted = _launch(2, 2, data, root, "--algorithms=ilql", "--fault=sigterm:2")
  _ok(preempted)
  saved = sorted(int(d) for d in os.listdir(os.path.join(root, "ilql", "checkpoints"))
                 if d.isdigit())
  _ok(_launch(2, 2, data, root, "--algorithms=ilql"))
  # The job of test_a_dead_peer_stops_the_others_with_a_clear_error, beside the reference:
  # one process, it leaves a core idle. After the ILQL runs, so the ILQL step of this
  # 2-process shape comes from the compilation cache.
  dead_peer = {"start": time.monotonic()}

  def play_dead_peer():  # Its own time, whenever the reference ends.
    dead_peer["results"] = _launch(2, 2, data, os.path.join(root, "dead_peer"),
                                   "--algorithms=ilql", "--fault=die:2", timeout=120)
    dead_peer["seconds"] = time.monotonic() - dead_peer["start"]

  waiter = threading.Thread(target=play_dead_peer)
  waiter.start()
  try:
    reference = os.path.join(root, "reference")
    [(rc, output)] = _launch(1, 4, data, reference, f"--compare={root}")
  finally:
    waiter.join()
  assert rc == 0, output[-6000:]
  return {"root": root, "reference": reference, "matches": _matches(output),
          "preempted": preempted, "saved_at_preemption": saved, "dead_peer": dead_peer}


def test_bc_on_four_processes_matches_one_process(runs):
  step, diff = runs["matches"]["bc"]
  assert step == STEPS and diff <= TOLERANCE, (step, diff)


def test_each_process_reads_only_its_rows(runs):
  whole = _rows(runs["reference"], "bc", 0)
  parts = [_rows(runs["root"], "bc", i) for i in range(4)]
  assert len(whole) == STEPS
  for step, rows in whole.items():
    # Process i loaded the i-th contiguous quarter of the global batch, nothing else.
    assert [part[step] for part in parts] == [rows[2 * i:2 * i + 2] for i in range(4)], step


def test_grpo_on_four_processes_matches_one_process(runs):
  # Each process played its quarter of every rollout batch; the updates are one process's.
  step, diff = runs["matches"]["grpo"]
  assert step == STEPS and diff <= TOLERANCE, (step, diff)


def test_each_process_plays_only_its_scenarios(runs):
  def played(workdir, process):
    with open(os.path.join(workdir, "grpo", f"played-{process}.json")) as f:
      return json.load(f)
  # STEPS updates of 8 rows = 2 rollout batches (seeds 100000, 100001) of 4 scenarios x 4.
  batches = ("100000", "100001")
  assert played(runs["reference"], 0) == sorted(f"{b}:{i}" for b in batches for i in range(4))
  for i in range(4):
    assert played(runs["root"], i) == [f"{b}:{i}" for b in batches]


def test_online_evaluation_agrees_with_one_process_and_keeps_the_best(runs):
  # BC played its scenarios at the end on each process's replica: the metrics are the
  # single process's, and as the best so far that state was saved by all four processes.
  def evals(workdir):
    return [r for r in metrics_lib.read_metrics(os.path.join(workdir, "bc", "metrics.jsonl"))
            if r["split"] == "eval"]
  [ours], [theirs] = evals(runs["root"]), evals(runs["reference"])
  assert (ours["step"], ours["return"], ours["mean_turns"]) == \
      (theirs["step"], theirs["return"], theirs["mean_turns"])
  assert os.path.isdir(os.path.join(runs["root"], "bc", "best", str(STEPS)))


def test_sigterm_to_one_process_saves_on_all_and_stops(runs):
  saved = runs["saved_at_preemption"]
  assert saved and 2 <= saved[-1] < STEPS, saved  # Stopped early, at a step they agreed on.
  for _, output in runs["preempted"]:
    assert "Preemption requested: saved step" in output, output[-3000:]


def test_resume_after_preemption_is_exact(runs):
  # The restarted 2-process ILQL run ends where an uninterrupted single process does.
  step, diff = runs["matches"]["ilql"]
  assert step == STEPS and diff <= TOLERANCE, (step, diff)


def test_a_dead_peer_stops_the_others_with_a_clear_error(runs):
  # Process 1 exits at step 2 (`runs` played the job beside the reference run).
  (rc0, output0), (rc1, _) = runs["dead_peer"]["results"]
  assert runs["dead_peer"]["seconds"] < 120
  assert rc1 == 3
  assert rc0 != 0 and DEATH_MESSAGE in output0, output0[-3000:]
