"""grpo_airdialogue_quick: rollouts of the agent against a scripted customer through the
launcher (workflows/train.py), on tiny generated data."""

import importlib
import math
import os

import pytest

from cotraining.policy import PolicyWithReference
from workflows import quickstart as pipeline_lib
from workflows import train as launcher
from experiments.configs import quickstart
from ilql_dialogue import metrics, policy_io


@pytest.fixture(scope="module")
def root(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("root"))
  config = quickstart.get_config()
  config.airdialogue.update(train_dialogues=16, eval_dialogues=4)
  config.tokenizer.vocab_size = 400
  paths = pipeline_lib.generate_airdialogue(config, root)
  pipeline_lib.train_tokenizer(config, paths["train"], os.path.join(root, "tokenizer"))
  return root


def shrink(config, root):
  config.task.root = root
  config.model.update(num_layers=1, d_model=32, num_heads=2, num_kv_heads=1, head_dim=16,
                      mlp_dim=64)
  config.online_eval.update(num_dialogues=0)
  config.train.update(progress_bar=False, eval_at_start=False, eval_every=0)
  config.selection.metric = ""
  return config


def load(name):
  return importlib.import_module(f"experiments.configs.{name}").get_config()


def test_grpo_config_trains_the_agent_online_through_the_launcher(root, tmp_path):
  full = load("grpo_airdialogue_quick")
  assert full.algorithm.name == "grpo" and full.model.init_from.endswith("bc_agent")
  assert (full.task.role, full.rl.env) == ("agent", "airdialogue")
  rows = full.rl.scenarios * full.rl.group_size
  assert full.train.checkpoint_every % (rows // full.train.batch_size * full.rl.epochs) == 0
  assert full.rl.seq_len == full.model.max_seq_len

  config = shrink(full, root)
  config.model.init_from = ""  # A fresh agent (tests/test_cotraining_learning.py: init_from).
  config.rl.update(scenarios=2, group_size=2, max_turns=4, max_new_tokens=8)
  config.train.update(steps=2, batch_size=2, log_every=1, checkpoint_every=2, eval_every=2)
  config.online_eval.update(num_dialogues=2, batch_size=2, max_turns=4, max_new_tokens=8)
  config.selection.metric = "return"  # Online success against the training style keeps best/.
  workdir = str(tmp_path / "grpo")
  final = launcher.run(config, workdir).model
  assert isinstance(final, PolicyWithReference)
  train = [r for r in metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))
           if r["split"] == "train"]
  assert [r["step"] for r in train] == [1, 2]
  assert all(math.isfinite(r["loss"]) and 0 <= r["reward"] <= 1 for r in train)
  assert train[0]["kl"] == 0.0 and train[0]["dialogue_turns"] == 4
  # Step 1 trains at the behaviour parameters: the trainer re-scores (table prefix and all)
  # exactly what the sampler drew.
  assert abs(train[0]["ratio"] - 1.0) < 1e-5 and train[0]["clip_fraction"] == 0.0
  assert all(r["sampled_tokens"] > 0 and r["dialogues_per_sec"] > 0 for r in train)
  evals = [r for r in metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))
            if r["split"] == "eval"]
  assert [r["step"] for r in evals] == [2] and 0 <= evals[0]["return"] <= 1
  # The trained agent loads as a party like any workdir (its selected checkpoint).
  policy = policy_io.load_policy(workdir)
  assert policy.role == "agent" and policy.prefix_fields is not None and policy.step == 2
