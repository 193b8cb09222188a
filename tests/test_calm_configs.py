"""The CALM configs: each loads and passes the launcher's field checks, `task.root` follows
`calm_data` (so `--config.calm_data.relabel=False` is 'CALM without relabeling'), `python -m
calm.data` prepares what a config reads, and the quick config trains a few steps in-process
from the dialogue LM (task pretraining on scenes), logs the head's held-out accuracy, and the
run plays as a `calm:` party."""

import importlib
import json
import os
import shutil
import subprocess
import sys

import datasets
import pytest

from calm import data, model as calm_model, planning, state
from data_pipelines import dialogue as dialogue_lib
from domains.airdialogue import environment as airdialogue_env
from domains.airdialogue.parties import AGENT, CUSTOMER, intent_from_json
from experiments.configs import quickstart
from ilql_dialogue.parties import make_party
from workflows import config_checks
from workflows import quickstart as pipeline_lib, state_probe, train as train_lib

CONFIGS = ("calm_airdialogue", "calm_airdialogue_quick", "calm_airdialogue_accel")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name):
  return importlib.import_module(f"experiments.configs.{name}").get_config()


@pytest.mark.parametrize("name", CONFIGS)
def test_configs_load_and_their_data_root_follows_calm_data(name):
  config = load(name)
  config_checks.check_train_fields(config, name)
  assert config.algorithm.name == "calm" and config.task.context == "prefix"
  assert config.task.root == data.prepared_root("runs/quickstart", True, 0)
  config.calm_data.update(source_root="/data/run", relabel=False, seed=3)
  assert config.task.root == data.prepared_root("/data/run", False, 3)
  assert set(config.planning) == set(planning.CONFIG_KEYS.values())


def tiny(config, root):
  """A quick config on the tiny corpora, small enough for a 3-step run."""
  config.calm_data.source_root = root
  config.model.update(num_layers=1, d_model=32, num_heads=2, num_kv_heads=1, head_dim=16,
                      mlp_dim=64)
  config.data.update(bucket_boundaries=(config.task.max_length,), eval_batches=1)
  config.train.update(steps=3, batch_size=4, log_every=1, eval_every=0, checkpoint_every=3,
                      progress_bar=False)
  config.online_eval.update(num_dialogues=2, batch_size=2, max_turns=4, max_new_tokens=8)
  return config


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  """A pipeline workdir with tiny AirDialogue corpora and tokenizer."""
  root = str(tmp_path_factory.mktemp("root"))
  config = quickstart.get_config()
  config.airdialogue.update(train_dialogues=12, eval_dialogues=4)
  config.tokenizer.vocab_size = 400
  paths = pipeline_lib.generate_airdialogue(config, root)
  pipeline_lib.train_tokenizer(config, paths["train"], os.path.join(root, "tokenizer"))
  return root


def test_cli_prepares_the_data_a_config_with_overrides_reads(root):
  out = subprocess.run(
      [sys.executable, "-m", "calm.data", "--config=experiments/configs/calm_airdialogue_quick.py",
       f"--config.calm_data.source_root={root}", "--config.calm_data.relabel=False"],
      cwd=REPO, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  built = os.path.join(data.prepared_root(root, False, 0), "datasets",
                       "airdialogue_agent_prefix_L384")
  with open(os.path.join(built, "calm.json")) as f:
    assert json.load(f)["relabel"] is False
  train = datasets.load_from_disk(os.path.join(built, "train"))
  for column in (calm_model.ACTION_POSITION, calm_model.EXPECTED_LO, calm_model.EXPECTED_HI):
    assert column in train.column_names
  assert not os.path.exists(os.path.join(data.prepared_root(root, False, 0), "airdialogue",
                                         "train", "official"))  # Not relabeled.
  intents = {d.dialogue_id: d.context["customer"] for d in dialogue_lib.read_jsonl(
      os.path.join(data.prepared_root(root, False, 0), "airdialogue", "train", "dialogues.jsonl"))}
  for row in train.select(range(min(6, len(train)))):  # The tracking targets: the row's intent.
    codes = state.intent_codes(intent_from_json(intents[row["dialogue_id"]]))
    assert [row[name] for name in state.INTENT_COLUMNS] == codes.tolist()


def test_a_build_of_an_older_format_is_redone(root, tmp_path):
  out_root = str(tmp_path / "calm")
  built = data.prepare(root, out_root, relabel=False, max_length=384)
  with open(os.path.join(built, "calm.json")) as f:
    meta = json.load(f)
  del meta["format"]  # As the builds before the intent columns wrote it.
  with open(os.path.join(built, "calm.json"), "w") as f:
    json.dump(meta, f)
  shutil.rmtree(os.path.join(built, "train"))
  assert data.prepare(root, out_root, relabel=False, max_length=384) == built
  assert state.INTENT_COLUMNS[0] in datasets.load_from_disk(os.path.join(built, "train")).column_names


@pytest.fixture(scope="module")
def calm_run(root, tmp_path_factory):
  """A 3-step dialogue LM (its stream has scene rows), then 3 CALM steps started from it."""
  lm = load("lm_airdialogue_quick")
  lm.task.update(root=root, mixture="scene,agent")
  lm.model.update(num_layers=1, d_model=32, num_heads=2, num_kv_heads=1, head_dim=16, mlp_dim=64)
  lm.data.update(eval_batches=1)
  lm.skill_probes.num_dialogues = 0
  lm.train.update(steps=3, batch_size=4, log_every=1, eval_every=0, checkpoint_every=3,
                  progress_bar=False)
  lm_dir = str(tmp_path_factory.mktemp("lm"))
  train_lib.run(lm, lm_dir)
  config = tiny(load("calm_airdialogue_quick"), root)
  config.model.init_from = lm_dir
  data.prepare_for(config)
  workdir = str(tmp_path_factory.mktemp("calm"))
  train_lib.run(config, workdir)
  return workdir


def test_quick_config_trains_from_the_dialogue_lm_and_logs_the_head(calm_run):
  with open(os.path.join(calm_run, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f]
  evals = [r for r in records if r["split"] == "eval"]
  assert evals and "action_head/accuracy" in evals[-1] and "return" in evals[-1]
  assert "dynamics_loss" in records[0] and "agent_loss" in records[0]


def test_a_calm_run_plays_as_a_planning_party(calm_run):
  agent = make_party(f"calm:n=2,h=2:{calm_run}", AGENT, max_new_tokens=8)
  assert (agent.n, agent.m, agent.h) == (2, 1, 2)  # m from the run's config.planning.
  customer = make_party("scripted:volunteer", CUSTOMER)
  results = list(airdialogue_env.run_dialogues(agent, customer, airdialogue_env.make_scenarios(1000, 2, 30),
                                       batch_size=2, max_turns=4, seed=1000))
  assert len(results) == 2 and agent.picked[0] in (0, 1)


def test_a_calm_run_is_an_init_from_source_of_its_lm_only(calm_run):
  """Starting from a CALM workdir loads its table-conditioned LM; the reward embedding and the
  action head are CALM's own and stay behind."""
  from ilql_dialogue import init_from, policy_io
  from ilql_dialogue import restore

  model, _ = restore.restore_model(calm_run, restore.read_config(calm_run))
  _, weights = init_from.load(init_from.parse(calm_run))
  expected = init_from._lm_weights(model.lm)
  assert weights.keys() == expected.keys() and all(k.startswith(("trunk.", "prefix."))
                                                   for k in weights)
  assert all((weights[k] == expected[k]).all() for k in weights)


def test_a_state_head_run_mixes_scenes_into_the_corpus_and_tracks_the_intent(root, tmp_path):
  """`calm_data.scene_every=2`: steps 1 and 3 read generator scenes, steps 0 and 2 the corpus;
  rows of both carry the intent's codes, so every step logs the tracking loss."""
  config = tiny(load("calm_airdialogue_quick"), root)
  config.algorithm.head = "pooled"
  config.calm_data.scene_every = 2
  config.train.update(steps=4, checkpoint_every=4)
  data.prepare_for(config)
  train_lib.run(config, str(tmp_path))
  with open(tmp_path / "metrics.jsonl") as f:
    train = [r for r in map(json.loads, f) if r["split"] == "train"]
  tracked = [r["step"] for r in train if "state/loss" in r]
  assert [r["step"] for r in train] == [1, 2, 3, 4] and tracked == [1, 2, 3, 4]
  assert all(r["action_head/rows"] > 0 for r in train if r["step"] in tracked)
  probed = state_probe.probe(str(tmp_path), rows=4)  # What the tracking heads read, and from where.
  assert probed["step"] == 4
  for key in ("table", "table_blanked"):
    assert set(probed[key]) == set(state.TRACKED_NAMES)
    assert all(0.0 <= v <= 1.0 for v in probed[key].values())
  with pytest.raises(ValueError, match="algorithm.head=state"):
    state_probe.probe(calm_run_dir_of_a_linear_head(root, tmp_path))


def calm_run_dir_of_a_linear_head(root, tmp_path):
  config = tiny(load("calm_airdialogue_quick"), root)
  config.algorithm.head = "linear"
  config.train.update(steps=1, checkpoint_every=1)
  train_lib.run(config, str(tmp_path / "linear"))
  return str(tmp_path / "linear")


def test_selection_plays_a_head_acting_calm_run_as_its_head_agent(calm_run):
  config = load("calm_airdialogue_quick")
  assert config.planning.action == "head"
  planner = train_lib._calm_head_party(config)(
      make_party(calm_run, AGENT))
  assert isinstance(planner, planning.CALMPlanner) and (planner.n, planner.act) == (1, "head")
  config.planning.action = "lm"
  assert train_lib._calm_head_party(config) is None
  at_step = make_party(f"calm:n=1:{calm_run}@3", AGENT)  # RUN@STEP too.
  assert isinstance(at_step, planning.CALMPlanner)
  assert train_lib._calm_head_party(load("bc_airdialogue_quick")) is None
