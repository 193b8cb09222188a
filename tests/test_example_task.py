"""The guess-my-city example (examples/guess_city): a task added as a new package only.

It is named by `module:attr` and its parties by class specs, so the run below goes
through the public entry points alone: workflows.train.run with online evaluation,
then workflows.evaluate on the trained checkpoint, against the scripted answerer.
"""

import os
import re
import subprocess

import ml_collections

from examples.guess_city import corpus, world
from examples.guess_city.configs import bc_asker
from ilql_dialogue import metrics, registry
from workflows import evaluate, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK = "examples.guess_city.task:TASK"
ASKER = "examples.guess_city.parties:Asker"
ANSWERER = "examples.guess_city.parties:Answerer"
CHANCE = 1 / len(world.CITIES)
TEST_SEED = 1000  # Neither a corpus seed (corpus.SPLIT_SEEDS) nor the selection seed (2000).


def env():
  return registry.task(TASK).make_env(ml_collections.ConfigDict())


def test_no_existing_file_imports_or_declares_the_example():
  files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
  mine = ("examples/", "tests/test_example_task.py")
  uses = re.compile(r"^\s*(from|import)\s+examples\b|guess_city\s*=", re.M)
  others = [f for f in files if f.endswith((".py", ".toml", ".cfg")) and not f.startswith(mine)]
  assert [f for f in others if os.path.isfile(os.path.join(REPO, f))
          and uses.search(open(os.path.join(REPO, f), encoding="utf-8").read())] == []


def test_every_city_is_singled_out_and_the_scripted_pair_always_finds_it(tmp_path):
  assert len({c[1:] for c in world.CITIES}) == len(world.CITIES)
  assert {d.outcome for d in corpus.self_play(corpus.SPLIT_SEEDS["eval"], 40)} == {1.0}
  summary = evaluate.evaluate_environment(env(), world.ASKER, ASKER, ANSWERER, num_dialogues=40,
                                          workdir=str(tmp_path), seed=TEST_SEED, max_turns=20)
  assert summary["return"] == 1.0 and summary["guess_rate"] == 1.0
  assert summary["questions"] <= 5  # log2(20) ~ 4.3: the splits are near even.


def test_bc_asker_trains_through_the_registry_and_beats_chance(tmp_path):
  config = bc_asker.get_config()
  config.task.root = str(tmp_path / "data")
  config.online_eval.update(num_dialogues=20, batch_size=20)  # One game per city.
  config.data.bucket_boundaries = (config.task.max_length,)  # One compiled train step.
  # 150 updates, most of this test's time: online return 0.4 (3 x chance is 0.15) and 0.475
  # +- 0.08 below (200 updates: 0.9 and 0.925); guess rate 1.0 at both.
  config.train.update(steps=150, eval_every=150, checkpoint_every=150, progress_bar=False,
                      async_checkpoints=False)
  workdir = str(tmp_path / "run")
  train.run(config, workdir)
  evals = [r for r in metrics.read_metrics(os.path.join(workdir, metrics.METRICS_FILE))
           if r["split"] == "eval"]
  untrained, trained = evals[0], evals[-1]
  assert (untrained["step"], trained["step"]) == (0, 150)
  assert untrained["return"] <= CHANCE and untrained["guess_rate"] < 0.5
  assert trained["guess_rate"] == 1.0 and trained["return"] > 3 * CHANCE

  summary = evaluate.evaluate_environment(
      env(), world.ASKER, workdir, ANSWERER, num_dialogues=40, workdir=str(tmp_path / "eval"),
      seed=TEST_SEED, max_turns=20, batch_size=20,  # The decoder online_eval compiled.
      lm_options=dict(temperature=0.0, max_new_tokens=16))
  print(f"trained asker: {summary['return']:.3f} +- {summary['return_stderr']:.3f} success, "
        f"{summary['guess_rate']:.2f} guess rate ({summary['questions']:.2f} questions)")
  assert summary["guess_rate"] >= 0.9
  assert summary["return"] - 2 * summary["return_stderr"] > CHANCE
