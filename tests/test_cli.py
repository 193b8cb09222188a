"""Every command-line main answers bad input with one line that names it, exit status 1 and no
traceback (data_pipelines/cli.py, workflows/config_checks.py). The mains run as `python -m`
would, each forked from one process that imported JAX once (tests/forked_mains.py)."""

import json
import os
import subprocess
import sys
import types

import ml_collections
import pytest

from data_pipelines import cli, mdp_dataset
from data_pipelines.dialogue import Dialogue, Turn
from data_pipelines.tokenization import train_tokenizer
from experiments.configs import bc_tiny
from workflows import config_checks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROLES = ("agent", "customer")
TURNS = ("Hi, I need a flight to Boston next week.", "Sure. What dates work for you?",
         "Leaving on the 12th, back on the 14th.", "Done, your flight is booked.")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
  """MDP datasets of both roles with one tokenizer, an agent dataset with another, and a
  training workdir of the customer (its config and an empty checkpoint: enough to be checked)."""
  root = tmp_path_factory.mktemp("cli")
  dialogues = [Dialogue(f"d{i}", ROLES, tuple(Turn(ROLES[(j + 1) % 2], text)
                                              for j, text in enumerate(TURNS)), {}, 1.0)
               for i in range(4)]
  texts = list(TURNS) * 10
  tokenizers = {"a": train_tokenizer(texts, ROLES, vocab_size=300),
                "b": train_tokenizer(texts[::-1], ROLES, vocab_size=280)}
  out = {"root": str(root), "data_json": str(root / "data.json")}
  open(out["data_json"], "w").close()
  for name, role, tok in (("agent", "agent", "a"), ("customer", "customer", "a"),
                          ("agent_b", "agent", "b")):
    out[name] = str(root / name)
    mdp_dataset.build_dataset(dialogues, tokenizers[tok], role, 64,
                              cache_dir=str(root / f"{name}.cache")).save_to_disk(out[name])
    tokenizers[tok].save(os.path.join(out[name], "tokenizer"))
  config = bc_tiny.get_config()
  config.data.dataset_dir = out["customer"]
  out["customer_run"] = str(root / "customer_run")
  os.makedirs(os.path.join(out["customer_run"], "checkpoints", "3"))
  with open(os.path.join(out["customer_run"], "config.json"), "w") as f:
    json.dump(config.to_dict(), f)
  return out


def train(p, *overrides):
  return ("experiments.train", "--config=experiments/configs/bc_tiny.py",
          f"--workdir={p['root']}/run", *overrides)


# name -> (paths -> (module and flags, what stderr must name)).
CASES = {
    "train: missing dataset dir": lambda p: (
        train(p, "--config.data.dataset_dir=/nonexistent/mdp"),
        ["config.data.dataset_dir=/nonexistent/mdp: no such directory"]),
    "train: eval dataset of the other role": lambda p: (
        train(p, f"--config.data.dataset_dir={p['agent']}",
              f"--config.data.eval_dataset_dir={p['customer']}"),
        [f"config.data.eval_dataset_dir={p['customer']}: built for role 'customer'"]),
    "train: eval dataset of another tokenizer": lambda p: (
        train(p, f"--config.data.dataset_dir={p['agent']}",
              f"--config.data.eval_dataset_dir={p['agent_b']}"),
        [f"config.data.eval_dataset_dir={p['agent_b']}: tokenizer differs"]),
    "train: unknown config field": lambda p: (
        train(p, "--config.data.datset_dir=x"),
        ["--config.data.datset_dir=x: config.data has no field 'datset_dir'"]),
    "train: unknown algorithm": lambda p: (
        train(p, f"--config.data.dataset_dir={p['agent']}", "--config.algorithm.name=dqn"),
        ["config.algorithm.name='dqn': unknown algorithm"]),
    "train: missing config file": lambda p: (
        ("experiments.train", "--config=experiments/configs/nope.py", f"--workdir={p['root']}"),
        ["--config=experiments/configs/nope.py: no such config file"]),
    "pipeline: unknown config field": lambda p: (
        ("experiments.pipeline", f"--workdir={p['root']}/pipe", "--config.training.stpes=3"),
        ["config.training has no field 'stpes'"]),
    "evaluate: agent trained as the customer": lambda p: (
        ("experiments.evaluate", f"--agent={p['customer_run']}", "--customer=scripted:terse",
         f"--workdir={p['root']}/eval"),
        [f"--agent={p['customer_run']}: trained to play 'customer'"]),
    "offline_eval: missing workdir": lambda p: (
        ("experiments.offline_eval", "--workdir=/nonexistent/run"),
        ["--workdir=/nonexistent/run: no such directory"]),
    "value_calibration: not a training workdir": lambda p: (
        ("experiments.value_calibration", f"--workdir={p['agent']}"),
        [f"--workdir={p['agent']}: no config.json"]),
    "compare_agents: missing agent workdir": lambda p: (
        ("experiments.compare_agents", "--agents=bc=/nonexistent/run",
         f"--workdir={p['root']}/compare"),
        ["--agents bc=/nonexistent/run: no such directory"]),
    "lm_speed: missing output directory": lambda p: (
        ("benchmarks.lm_speed", "--quick", "--output=/nonexistent/dir/BENCHMARKS.md"),
        ["--output=/nonexistent/dir/BENCHMARKS.md: no directory /nonexistent/dir"]),
    "ilql_speed: missing output directory": lambda p: (
        ("benchmarks.ilql_speed", "--quick", "--output=/nonexistent/dir/BENCHMARKS.md"),
        ["--output=/nonexistent/dir/BENCHMARKS.md: no directory /nonexistent/dir"]),
    "smollm2: missing output directory": lambda p: (
        ("benchmarks.smollm2", "--output=/nonexistent/dir/BENCHMARKS.md"),
        ["--output=/nonexistent/dir/BENCHMARKS.md: no directory /nonexistent/dir"]),
    "build_dataset: missing dialogues": lambda p: (
        ("data_pipelines.build_dataset", "--dialogues=/nonexistent/d.jsonl",
         f"--tokenizer={p['agent']}/tokenizer", "--role=agent", "--max_length=64",
         f"--out={p['root']}/built"),
        ["--dialogues=/nonexistent/d.jsonl: no such file"]),
    "generate: unknown customer style": lambda p: (
        ("data_pipelines.airdialogue.generate", f"--out_dir={p['root']}/gen",
         "--customer_mix=grumpy:1"),
        ["--customer_mix", "unknown names ['grumpy']"]),
    "score: missing data file": lambda p: (
        ("data_pipelines.airdialogue.score", "--data=/nonexistent/data.json"),
        ["--data=/nonexistent/data.json: no such file"]),
    "arrow: missing kb file": lambda p: (
        ("data_pipelines.airdialogue.arrow", f"--data={p['data_json']}",
         "--kb=/nonexistent/kb.json", f"--out={p['root']}/corpus.arrow"),
        ["--kb=/nonexistent/kb.json: no such file"]),
    "train: a data part that is not K/N": lambda p: (
        ("experiments.train", "--config=experiments/configs/bc_persuasion_quick.py",
         f"--workdir={p['root']}/p4g", "--config.data.train_part=2/2"),
        ["config.data.train_part: data part '2/2': expected K/N"]),
    "evaluate_env: party trained as the persuadee's opponent": lambda p: (
        ("experiments.evaluate_env", "--role=persuader", f"--party={p['customer_run']}",
         "--opponent=test_persuasion_env:GenerousPersuadee", f"--workdir={p['root']}/ev"),
        [f"--party={p['customer_run']}: trained to play 'customer'"]),
    "persuasion stats: missing data dir": lambda p: (
        ("data_pipelines.persuasion.stats", "--data_dir=/nonexistent/p4g"),
        ["--data_dir=/nonexistent/p4g: no such directory"]),
}


@pytest.fixture(scope="module")
def results(paths):
  """Every case's main, forked from one process that imported JAX once (forked_mains.py)."""
  commands = [list(case(paths)[0]) for case in CASES.values()]
  done = subprocess.run([sys.executable, os.path.join(REPO, "tests", "forked_mains.py")],
                        input=json.dumps(commands), cwd=REPO, capture_output=True, text=True,
                        timeout=600, check=True)
  return {name: types.SimpleNamespace(**result)
          for name, result in zip(CASES, json.loads(done.stdout))}


# Cases whose main reads the Persuasion for Good corpus before the input the case gets wrong.
NEEDS_P4G = {"evaluate_env: party trained as the persuadee's opponent"}


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line_naming_it(name, paths, results, request):
  if name in NEEDS_P4G:
    request.getfixturevalue("p4g_data_dir")  # Skips, saying what to set, without the corpus.
  out = results[name]
  assert out.returncode == 1, out.stderr[-3000:]
  assert "Traceback" not in out.stderr, out.stderr[-3000:]
  errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1, out.stderr[-3000:]
  for expected in CASES[name](paths)[1]:
    assert expected in errors[0]


def test_good_input_and_every_shipped_config_pass(paths):
  """The checks reject nothing that trains: matching datasets, and every config file's fields."""
  config = bc_tiny.get_config()
  config.data.update(dataset_dir=paths["agent"], eval_dataset_dir=paths["agent"])
  config_checks.validate_train_config(config)
  for entry in sorted(os.listdir(os.path.join(REPO, "experiments", "configs"))):
    name = entry.removesuffix(".py")
    # quickstart* are the pipeline's (tests/test_pipeline.py); panel_* are simulator panels
    # (tests/test_cotraining_panels.py); study_* are studies (tests/test_study_api.py).
    if (entry.endswith(".py") and name not in ("__init__", "bc_tiny")
        and not name.startswith(("panel_", "quickstart", "study_"))):
      module = __import__(f"experiments.configs.{name}", fromlist=["get_config"])
      config_checks.check_train_fields(module.get_config(), name)


@pytest.mark.parametrize("name", ["bc", "filtered_bc"])
def test_algorithm_fields_it_would_ignore_are_refused(name):
  config = bc_tiny.get_config()
  config.data.synthetic = True
  config.algorithm = ml_collections.ConfigDict(
      {"name": name, "top_fraction": 0.5, "top_fration": 0.5})
  with pytest.raises(cli.BadInput, match="unknown fields.*'top_fration'"):
    config_checks.check_train_fields(config)


@pytest.mark.parametrize("spec,message", [
    ("calm:n=2:/no/such/run", "no such directory"),
    ("calm:bogus=1:/no/such/run", "unknown calm option"),
    ("pick:k=3:/no/such/run", "no such directory"),
    ("vs_llm:k=5,model=m", "base_url"),
])
def test_wrapped_party_specs_are_checked_down_to_their_workdir(spec, message):
  """`calm:` and `pick:` wrap a workdir: their options and the workdir are checked at start-up;
  an LLM endpoint's options are."""
  with pytest.raises(cli.BadInput, match=message):
    config_checks.check_party(spec, "agent" if spec.startswith("calm") else "customer", "--party")


def test_an_endpoint_party_passes_the_start_up_check():
  assert config_checks.check_party("vs_llm:k=5,base_url=http://127.0.0.1:1/v1,model=m",
                                   "customer", "--customer") is None


def test_named_seeds_keep_a_wrappers_option_commas():
  """A list flag splits "calm_full=calm:n=4,m=2:A+calm:n=4,m=2:B" at every comma; the names
  and the wrappers' options come back whole."""
  items = "calm_full=calm:n=4,m=2,score=head:runs/a+calm:n=4,m=2:runs/b,bc=runs/c,vs=pick:k=3:d"
  assert config_checks.named_seeds(items.split(","), "--agents") == {
      "calm_full": ["calm:n=4,m=2,score=head:runs/a", "calm:n=4,m=2:runs/b"],
      "bc": ["runs/c"], "vs": ["pick:k=3:d"]}
  with pytest.raises(cli.BadInput, match="'runs/c' is not NAME=SPEC"):
    config_checks.named_seeds(["calm_full=calm:n=4:runs/a", "runs/c"], "--agents")
