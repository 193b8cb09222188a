"""The BC config files: each loads, each quick variant trains in-process on tiny generated data
and is evaluated offline, and a BC model can start from a Hugging Face checkpoint."""

import importlib
import math
import os

import numpy as np
import pytest
from flax import nnx

from experiments.configs import quickstart
from ilql_dialogue import bc, init_from, metrics, policy_io, registry, sharding, tasks, train_loop
from ilql_dialogue import restore
from ilql_dialogue.models import hf_io
from workflows import offline_eval, quickstart as pipeline_lib
from workflows import train as launcher

CONFIGS = ("bc_airdialogue", "bc_airdialogue_customer", "bc_persuasion", "bc_persuasion_persuadee")
ROLES = {"bc_airdialogue": ("airdialogue", "agent"),
         "bc_airdialogue_customer": ("airdialogue", "customer"),
         "bc_persuasion": ("persuasion", "persuader"),
         "bc_persuasion_persuadee": ("persuasion", "persuadee")}


def load(name):
  return importlib.import_module(f"experiments.configs.{name}").get_config()


def write_tiny_p4g(data_dir, num_dialogues=20, seed=0):
  """Persuasion for Good CSVs in the real format, small enough for a test."""
  rng = np.random.default_rng(seed)
  os.makedirs(os.path.join(data_dir, "FullData"), exist_ok=True)
  lines, info = [",Unit,Turn,B4,B2"], ["B2,B3,B4,B6,B7,extrovert.x,age.x,sex.x"]
  words = ["children", "donate", "help", "save", "money", "today", "yes", "no", "maybe", "good"]
  for i in range(num_dialogues):
    for turn in range(int(rng.integers(2, 5))):
      for role in (0, 1):
        text = " ".join(rng.choice(words, int(rng.integers(3, 8))))
        lines.append(f"{len(lines) - 1},{text},{turn},{role},dlg{i}")
    info.append(f"dlg{i},u{2 * i},0,0.0,3,3.2,30.0,Male")
    info.append(f"dlg{i},u{2 * i + 1},1,{rng.choice([0.0, 0.5, 2.0])},3,2.5,41.0,Female")
  for name, rows in (("full_dialog.csv", lines), ("full_info.csv", info)):
    with open(os.path.join(data_dir, "FullData", name), "w") as f:
      f.write("\n".join(rows) + "\n")
  return str(data_dir)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """A pipeline workdir with tiny AirDialogue corpora + tokenizer, and tiny P4G files."""
  root = str(tmp_path_factory.mktemp("root"))
  config = quickstart.get_config()
  config.airdialogue.update(train_dialogues=16, eval_dialogues=4)
  config.tokenizer.vocab_size = 400
  paths = pipeline_lib.generate_airdialogue(config, root)
  pipeline_lib.train_tokenizer(config, paths["train"], os.path.join(root, "tokenizer"))
  return {"root": root, "p4g": write_tiny_p4g(tmp_path_factory.mktemp("p4g"))}


def tiny(config, data):
  """Shrinks a quick config further, onto the tiny data, for a 3-step run."""
  config.task.root = data["root"]
  if config.task.name == "persuasion":
    config.task.data_dir = data["p4g"]
    config.task.max_length = 256
  config.model.update(num_layers=1, d_model=32, num_heads=2, num_kv_heads=1, head_dim=16,
                      mlp_dim=64)
  config.data.update(bucket_boundaries=(config.task.max_length,), eval_batches=1)
  config.train.update(steps=3, batch_size=4, log_every=1, eval_every=0, checkpoint_every=3,
                      progress_bar=False)
  if config.get("online_eval") is not None and config.online_eval.num_dialogues:
    config.online_eval.update(num_dialogues=2, batch_size=2, max_turns=4, max_new_tokens=8)
  return config


@pytest.mark.parametrize("name", CONFIGS)
def test_config_and_its_quick_variant_load(name):
  full, quick = load(name), load(f"{name}_quick")
  for config in (full, quick):
    assert config.algorithm.name == "bc"
    assert (config.task.name, config.task.role) == ROLES[name]
    assert config.model.vocab_size == 0 and config.model.init_from == ""
    assert config.task.max_length <= config.model.max_seq_len
  assert full.model.d_model == 768 and full.model.num_layers == 12  # GPT-2 small.
  assert quick.model.d_model <= 128 and quick.model.num_layers <= 2
  assert quick.train.steps <= 500 and quick.task.max_length <= 1024
  if name == "bc_airdialogue":
    assert full.task.context == quick.task.context == "prefix"


@pytest.mark.parametrize("name", CONFIGS)
def test_quick_config_trains_and_evaluates_offline(name, data, tmp_path):
  config = tiny(load(f"{name}_quick"), data)
  workdir = str(tmp_path / "run")
  final = launcher.run(config, workdir)
  assert isinstance(final.model, bc.PrefixLM) == (name == "bc_airdialogue")
  train = [r for r in metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))
           if r["split"] == "train"]
  assert [r["step"] for r in train] == [1, 2, 3] and all(math.isfinite(r["loss"]) for r in train)

  out = str(tmp_path / "offline_eval")
  got = offline_eval.evaluate_run(workdir, overrides=dict(max_dialogues=2, batch_size=2,
                                                          max_new_tokens=4), output_dir=out)
  assert got["step"] == 3 and got["tokens"] > 0 and math.isfinite(got["perplexity"])
  assert os.listdir(out) == ["offline_eval_eval_step3.json"]
  assert not any(f.startswith("offline_eval") for f in os.listdir(workdir))
  # Every turn of the role in the two held-out dialogues, decoded from its true history.
  assert got["next_utterance/dialogues"] == 2 and got["next_utterance/evaluated"] >= 2
  assert 0 <= got["next_utterance/bleu"] <= 100
  assert 0 < got["next_utterance/reference_distinct_1"] <= 1
  key = {"bc_airdialogue": "final_action/n", "bc_persuasion_persuadee": "donation/n"}.get(name)
  if key is None:
    assert "final_turn/evaluated" not in got
  else:
    assert got[key] == got["final_turn/evaluated"] == 2 and len(got["samples"]) == 2
  # The agent plays validation scenarios at its evaluation, which keeps its best checkpoint.
  selection = restore.selected(workdir)
  if name == "bc_airdialogue":
    evals = [r for r in metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))
             if r["split"] == "eval"]
    assert selection["step"] == 3 and selection["metric"] == "return"
    assert selection["value"] == evals[-1]["return"] and 0 <= selection["value"] <= 1
  else:
    assert selection is None


def test_bc_starts_from_a_hugging_face_checkpoint(data, tmp_path):
  """The trunk takes the checkpoint's weights; embedding rows for added tokens stay fresh."""
  import torch
  import transformers

  torch.manual_seed(0)
  hf_dir = str(tmp_path / "gpt2")
  transformers.GPT2LMHeadModel(transformers.GPT2Config(
      vocab_size=300, n_positions=512, n_embd=32, n_layer=1, n_head=2)).save_pretrained(hf_dir)
  config = tiny(load("bc_airdialogue_quick"), data)
  config.model.init_from = hf_dir
  task = tasks.make_task(config)
  with pytest.raises(ValueError, match="set config.task.tokenizer"):
    tasks.configure_model(config, task)
  config.task.tokenizer = os.path.join(data["root"], "tokenizer")  # An HF tokenizer directory.
  task = tasks.make_task(config)
  tasks.configure_model(config, task)
  assert config.model.family == "gpt2" and config.model.vocab_size == 512  # 400+ ids, in 128s.

  mesh = sharding.make_mesh()
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, registry.make_algorithm(config), mesh)
    model = nnx.merge(training.graphdef, init_from.into_state(
        training.init(), training.graphdef, hf_dir)).model
  _, reference = hf_io.load_hf(hf_dir)
  ours = nnx.to_pure_dict(nnx.state(model.trunk, nnx.Param))
  theirs = nnx.to_pure_dict(nnx.state(reference, nnx.Param))
  np.testing.assert_allclose(ours["embed"][:300], theirs["embed"])
  assert ours["embed"].shape == (512, 32) and np.abs(ours["embed"][300:]).max() > 0
  np.testing.assert_allclose(ours["blocks"]["attn"]["qkv_kernel"],
                             theirs["blocks"]["attn"]["qkv_kernel"])
  assert isinstance(model, bc.PrefixLM)


def test_value_calibration_reads_v_before_the_first_action(data, tmp_path):
  """ILQL on tiny P4G data, then value_calibration: one row per held-out dialogue, V taken
  at the state before the persuader's first token, bins covering every dialogue."""
  import jax.numpy as jnp
  from ilql_dialogue import ilql
  from workflows import value_calibration

  config = tiny(load("ilql_persuasion_quick"), data)
  workdir = str(tmp_path / "run")
  launcher.run(config, workdir)
  got = value_calibration.calibrate(workdir, bins=3)
  task = tasks.make_task(config)
  assert got["n"] == len(task.datasets["eval"])
  assert sum(b["n"] for b in got["start"]["bins"]) == sum(b["n"] for b in got["last"]["bins"]) \
      == got["n"]
  assert math.isfinite(got["heldout_losses"]["q_loss"])
  assert got["last"]["pearson_v_return"] is None or -1 <= got["last"]["pearson_v_return"] <= 1
  assert value_calibration.pearson(np.arange(5.0), 2 * np.arange(5.0) + 1) == pytest.approx(1.0)
  assert value_calibration.spearman(np.arange(5.0), np.exp(np.arange(5.0))) == pytest.approx(1.0)
  assert value_calibration.pearson(np.arange(3.0), np.ones(3)) is None
  assert os.path.exists(os.path.join(workdir, "value_calibration_eval.png"))

  model, _ = restore.restore_model(workdir, restore.read_config(workdir))
  batch = {k: jnp.asarray(v) for k, v in tasks.eval_batches(task, config, limit=1)[0].items()}
  v_start_B, _, v_last_B, _, _ = value_calibration.start_values(model, batch, 0.99, "utterance")
  hidden = ilql.trunk_hidden(model.trunk, batch)
  for b in range(len(v_start_B)):
    if not batch["row_mask"][b]:
      continue
    actions = np.flatnonzero(np.asarray(batch["action_mask"][b]) &
                             np.asarray(batch["attention_mask"][b]))
    starts = actions[np.diff(actions, prepend=-2) > 1]  # First token of each utterance.
    for v, position in ((v_start_B[b], starts[0]), (v_last_B[b], starts[-1])):
      np.testing.assert_allclose(v, model.v_head(hidden[b:b + 1, position - 1:position])[0, 0],
                                 rtol=1e-5, atol=1e-6)
    assert len(starts) >= 2  # The two states differ.
  bins = got["last"]["bins"]
  assert bins[0]["predicted"] <= bins[-1]["predicted"]
