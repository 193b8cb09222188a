"""`python -m experiments.evaluate`, policy_io on a real training workdir, the online EvalFn."""

import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from data_pipelines import mdp, mdp_dataset, tokenization
from data_pipelines.airdialogue import action_grammar, selfplay, to_dialogue
from data_pipelines.dialogue import write_jsonl
from domains.airdialogue import environment as airdialogue_env
from ilql_dialogue import bc, checkpointing, policy_io, sharding, train_loop
from workflows import evaluate as evaluate_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_cli_scores_the_oracle_and_writes_summary_and_transcripts(tmp_path):
  out = subprocess.run(
      [sys.executable, "-m", "experiments.evaluate", "--agent=scripted_agent:oracle",
       "--customer=scripted:late_reveal", "--num_dialogues=12", f"--workdir={tmp_path}",
       "--batch_size=5", "--seed=1001"],
      cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
  summary = json.loads(out.stdout.strip().splitlines()[-1])
  assert summary["n"] == 12 and summary["success_rate"] == 1.0 and summary["success_stderr"] == 0.0
  assert summary["status_acc"] == summary["flight_acc"] == summary["name_acc"] == 1.0
  assert summary["seed"] == 1001 and summary["mean_turns"] > 2
  tag = "scripted_agent-oracle_vs_scripted-late_reveal_seed1001_n12"
  with open(tmp_path / f"eval_{tag}.json") as f:
    assert json.load(f) == summary
  with open(tmp_path / f"transcripts_{tag}.jsonl") as f:
    lines = [json.loads(line) for line in f]
  assert [line["scenario_id"] for line in lines] == [f"1001:{i}" for i in range(12)]
  first = lines[0]
  assert first["success"] and first["end_reason"] == "action"
  assert first["turns"][0]["speaker"] == "customer" and first["turns"][-1]["speaker"] == "agent"
  assert action_grammar.parse_action(first["action_text"]).to_json() == first["action"]
  assert first["expected_action"]["status"] == first["action"]["status"]


def test_cli_rejects_a_bad_spec(tmp_path):
  out = subprocess.run(
      [sys.executable, "-m", "experiments.evaluate", "--agent=scripted:terse",
       "--customer=scripted:terse", "--num_dialogues=2", f"--workdir={tmp_path}"],
      cwd=REPO, capture_output=True, text=True, timeout=120)
  assert out.returncode != 0 and "is a scripted customer, asked to play 'agent'" in out.stderr


def _corpus(root, n=12, kb_size=2):
  """The pipeline's layout under `root`: both splits' dialogues and a tokenizer with markers."""
  dialogues = {}
  for split, seed in (("train", 0), ("eval", 1)):
    dialogues[split] = [to_dialogue.sample_to_dialogue(s, f"{split}{i}")
                        for i, s in enumerate(selfplay.generate_samples(seed, n, kb_size=kb_size))]
    os.makedirs(os.path.join(root, "airdialogue", split))
    write_jsonl(os.path.join(root, "airdialogue", split, "dialogues.jsonl"), dialogues[split])
  texts = [to_dialogue.serialize_context(role, d.context[role]) for d in dialogues["train"]
           for role in d.roles] + [t.text for d in dialogues["train"] for t in d.turns]
  tokenizer = tokenization.train_tokenizer(
      texts, to_dialogue.ROLES, vocab_size=500,
      markers=(action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG))
  tokenizer.save(os.path.join(root, "tokenizer"))
  return dialogues, tokenizer


def _checkpoint(config, workdir, step=3, algorithm=None, steps=()):
  """Writes config.json and a checkpoint exactly as train_loop does, holding random weights
  (one draw per saved step: `step`, then each of `steps`); returns the model of the first.

  The structure is train_loop's own TrainState; drawing the weights instead
  of taking optimizer steps only saves compile time.
  """
  os.makedirs(workdir)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json_best_effort(indent=2))
  mesh = sharding.make_mesh(**config.mesh)
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, algorithm or bc.BC(bc.lm_from_config), mesh)
  rng = np.random.default_rng(0)

  def draw(path, leaf):
    if not jnp.issubdtype(leaf.dtype, jnp.floating):
      return jnp.zeros(leaf.shape, leaf.dtype)
    return jnp.asarray(rng.normal(1.0 if path[-1].key == "scale" else 0.0, 0.3, leaf.shape),
                       leaf.dtype)

  checkpointer = checkpointing.Checkpointer(workdir, keep=1 + len(steps), async_save=False)
  models = []
  for saved_step in (step, *steps):
    state = jax.tree.map(lambda x: x, training.abstract_state)
    nnx.replace_by_pure_dict(state, jax.tree_util.tree_map_with_path(
        draw, nnx.to_pure_dict(training.abstract_state)))
    checkpointer.save(saved_step, state, {"step": saved_step, "data_position": saved_step})
    models.append(nnx.merge(training.graphdef, state).model)
  checkpointer.close()
  return models[0]


def _tiny(config):
  config.model.update(family="llama", vocab_size=0, num_layers=1, d_model=32, num_heads=2,
                      num_kv_heads=2, head_dim=16, mlp_dim=64, max_seq_len=256, qkv_bias=False,
                      attn_out_bias=False, mlp_bias=False, dtype="float32")
  return config


def test_task_checkpoint_agent_plays_through_policy_io_and_evaluate(tmp_path):
  """A CALM-style run (the agent reads its table as a structured prefix) played end to end."""
  from experiments.configs import bc_airdialogue
  from ilql_dialogue import tasks

  root = str(tmp_path / "pipeline")
  _, tokenizer = _corpus(root)
  config = _tiny(bc_airdialogue.get_config())
  config.task.update(root=root, max_length=256)
  tasks.configure_model(config, tasks.make_task(config))
  assert config.model.prefix_num_rows > 0
  workdir = str(tmp_path / "run")
  saved = _checkpoint(config, workdir)

  policy = policy_io.load_policy(workdir)
  assert (policy.role, policy.include_context, policy.step) == ("agent", False, 3)
  assert policy.prefix_fields is not None
  assert policy.tokenizer.marker_ids == tokenizer.marker_ids
  jax.tree.map(np.testing.assert_array_equal, nnx.to_pure_dict(nnx.state(policy.model)),
               nnx.to_pure_dict(nnx.state(saved)))
  with pytest.raises(ValueError, match="trained to play 'agent', asked to play 'customer'"):
    policy_io.lm_party(policy, "customer")

  summary = evaluate_lib.evaluate(
      workdir, "scripted:terse", num_dialogues=4, workdir=str(tmp_path / "eval"), batch_size=4,
      max_turns=6, kb_size=2, lm_options={"max_new_tokens": 8, "temperature": 1.0})
  assert summary["n"] == 4 and summary["mean_turns"] > 1
  assert sum(summary["end_reasons"].values()) == 4
  with open(summary["transcripts"]) as f:
    lines = [json.loads(line) for line in f]
  assert len(lines) == 4
  assert all(t["speaker"] == ("customer", "agent")[i % 2]
             for line in lines for i, t in enumerate(line["turns"]))
  # The main with its rows split over two CPU devices plays the same dialogues.
  split = subprocess.run(
      [sys.executable, "-m", "experiments.evaluate", f"--agent={workdir}",
       "--customer=scripted:terse", "--num_dialogues=4", "--batch_size=4", "--max_turns=6",
       "--kb_size=2", "--max_new_tokens=8", "--temperature=1.0", "--cpu_devices=2",
       f"--workdir={tmp_path / 'eval_split'}"],
      cwd=REPO, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
      timeout=300)
  assert split.returncode == 0, split.stderr[-3000:]
  split_summary = json.loads(split.stdout.strip().splitlines()[-1])
  assert split_summary["devices"] == 2 and summary["devices"] == 1
  with open(split_summary["transcripts"]) as f:
    assert [json.loads(line)["turns"] for line in f] == [line["turns"] for line in lines]

  eval_fn = evaluate_lib.online_eval_fn(
      tokenizer, "agent", "scripted:terse", num_dialogues=4, kb_size=2, batch_size=4,
      max_turns=6, include_context=False, prefix_fields=policy.prefix_fields, max_new_tokens=8)
  metrics = eval_fn(policy.model, 3)
  assert set(metrics) - {"booking_success"} == {
      "return", "best_beta", "success_stderr", "mean_turns", "return/beta=0", "status_acc",
      "flight_acc", "name_acc"}
  assert 0.0 <= metrics["return"] <= 1.0 and 0.0 <= metrics.get("booking_success", 0.0) <= 1.0


def test_a_party_spec_names_a_checkpoint_by_step(tmp_path):
  """`WORKDIR@STEP` plays the checkpoint saved at STEP (a simulator along its training); a step
  that was not saved fails the start-up check, naming the saved ones."""
  from data_pipelines import cli
  from domains.airdialogue.parties import CUSTOMER
  from experiments.configs import bc_airdialogue_customer
  from ilql_dialogue import tasks
  from ilql_dialogue.parties import make_party
  from workflows import config_checks

  root = str(tmp_path / "pipeline")
  _corpus(root)
  config = _tiny(bc_airdialogue_customer.get_config())
  config.task.update(root=root, max_length=256)
  tasks.configure_model(config, tasks.make_task(config))
  workdir = str(tmp_path / "customer")
  at_3 = _checkpoint(config, workdir, step=3, steps=(5,))

  def weights(model):
    return nnx.to_pure_dict(nnx.state(model, nnx.Param))

  latest = make_party(workdir, CUSTOMER)
  early = make_party(f"{workdir}@3", CUSTOMER)
  jax.tree.map(np.testing.assert_array_equal, weights(early.decoder), weights(at_3))
  assert not np.array_equal(jax.tree.leaves(weights(latest.decoder))[0],
                            jax.tree.leaves(weights(at_3))[0])
  assert config_checks.check_party(f"{workdir}@5", "customer", "--customer").task.role == "customer"
  with pytest.raises(cli.BadInput, match=r"no checkpoint at step 4; saved: \[3, 5\]"):
    config_checks.check_party(f"{workdir}@4", "customer", "--customer")


@pytest.mark.parametrize("serialize", [to_dialogue.serialize_context, mdp.json_context])
def test_dataset_layout_is_read_off_the_training_examples(tmp_path, serialize):
  dialogues, tokenizer = _corpus(str(tmp_path), n=3)
  dataset_dir = str(tmp_path / "mdp")
  mdp_dataset.build_dataset(dialogues["train"], tokenizer, "customer", 1024,
                            serialize_context=serialize,
                            cache_dir=str(tmp_path / "cache")).save_to_disk(dataset_dir)
  assert policy_io.training_layout(dataset_dir, tokenizer) == ("customer", True, serialize)
  mdp_dataset.build_dataset(dialogues["train"], tokenizer, "agent", 1024, include_context=False,
                            cache_dir=str(tmp_path / "cache2")).save_to_disk(dataset_dir + "2")
  assert policy_io.training_layout(dataset_dir + "2", tokenizer)[:2] == ("agent", False)


def test_ilql_checkpoint_decodes_with_value_guidance(tmp_path):
  """A plain-dataset ILQL run: layout read off the dataset, beta turns on Q - V guidance."""
  from experiments.configs import bc_tiny, ilql_airdialogue_quick
  from ilql_dialogue import ilql
  from ilql_dialogue.generation import logits_processors as lp

  dialogues, tokenizer = _corpus(str(tmp_path), n=3)
  dataset_dir = str(tmp_path / "mdp")
  mdp_dataset.build_dataset(dialogues["train"], tokenizer, "agent", 512,
                            serialize_context=to_dialogue.serialize_context,
                            cache_dir=str(tmp_path / "cache")).save_to_disk(dataset_dir)
  tokenizer.save(os.path.join(dataset_dir, "tokenizer"))
  config = _tiny(bc_tiny.get_config())
  config.algorithm = ilql_airdialogue_quick.ilql_section()
  config.model.vocab_size = 512
  config.data.dataset_dir = dataset_dir
  saved = _checkpoint(config, str(tmp_path / "run"), algorithm=ilql.ILQL.from_config(config))

  policy = policy_io.load_policy(str(tmp_path / "run"))
  assert (policy.role, policy.include_context) == ("agent", True)
  assert policy.decoder is policy.model.trunk
  jax.tree.map(np.testing.assert_array_equal, nnx.to_pure_dict(nnx.state(policy.model)),
               nnx.to_pure_dict(nnx.state(saved)))
  assert policy.hook(4) is None
  assert isinstance(policy.hook(4, beta=2.0), lp.ValueGuidance)
  party = policy_io.lm_party(policy, "agent", beta=2.0)
  assert isinstance(party._hook(4), lp.Compose)


def test_policy_io_names_what_is_missing(tmp_path):
  with pytest.raises(ValueError, match="no config.json"):
    policy_io.load_policy(str(tmp_path))
  (tmp_path / "config.json").write_text('{"algorithm": {"name": "bc"}, "model": {}}\n{')
  with pytest.raises(ValueError, match=r"config.json:2: field '<record>': malformed JSON"):
    policy_io.load_policy(str(tmp_path))
  (tmp_path / "config.json").write_text(json.dumps({"algorithm": {"name": "sft"}, "model": {}}))
  with pytest.raises(ValueError, match="field 'algorithm.name': 'sft'"):
    policy_io.load_policy(str(tmp_path))


def test_default_seed_is_held_out_from_the_training_corpora():
  from experiments.configs import quickstart

  config = quickstart.get_config()
  corpus_seeds = {config.airdialogue.train_seed, config.airdialogue.eval_seed}
  assert airdialogue_env.DEFAULT_SEED not in corpus_seeds
  # Scenario i of a seed comes from default_rng([seed, i]); the corpora from SeedSequence(seed).
  key = lambda intent: json.dumps(intent.to_json(), sort_keys=True)
  corpus = {key(s.intent) for seed in corpus_seeds
            for s in selfplay.generate_samples(seed, 50, agent_mix="oracle")}
  assert not corpus & {key(s.intent) for s in airdialogue_env.make_scenarios(airdialogue_env.DEFAULT_SEED, 50)}


def test_compare_agents_pools_resumes_and_tabulates(tmp_path):
  from workflows import compare as compare_agents

  customers = ["scripted:terse", "scripted:chatty"]
  agents = {"oracle": "scripted_agent:oracle", "give_up": "scripted_agent:give_up"}
  rows = compare_agents.compare(agents, customers, num_dialogues=6, workdir=str(tmp_path),
                                batch_size=3, sweep_betas=[4.0])
  assert [(r["agent"], r["beta"]) for r in rows] == [("oracle", 0.0), ("give_up", 0.0)]
  oracle, give_up = rows
  assert {k: oracle["pooled"][k] for k in ("n", "success_rate", "success_stderr", "name_acc")} \
      == {"n": 12, "success_rate": 1.0, "success_stderr": 0.0, "name_acc": 1.0}
  per = give_up["per_customer"]
  p = (per["scripted:terse"]["success_rate"] + per["scripted:chatty"]["success_rate"]) / 2
  assert give_up["pooled"]["success_rate"] == pytest.approx(p)
  assert give_up["pooled"]["success_stderr"] == pytest.approx(math.sqrt(p * (1 - p) / 12))
  # Summaries on disk are reused: a second comparison plays nothing.
  before = sorted(os.listdir(tmp_path))
  assert compare_agents.compare(agents, customers, num_dialogues=6, workdir=str(tmp_path),
                                batch_size=3) == rows
  assert sorted(os.listdir(tmp_path)) == before
  table = compare_agents.to_markdown(rows, customers)
  assert "| agent | beta | terse | chatty | pooled |" in table
  assert "| oracle | 0 | 1.000 ± 0.000 | 1.000 ± 0.000 | 1.000 ± 0.000 |" in table
  assert "| oracle | 0 | 1.000 | 1.000 | 1.000 | 0.000 |" in table


def test_compare_agents_pools_seeds(tmp_path):
  """An agent named as several seeds plays each and pools them; the seed s.e. is that of
  the seeds' means (here two very different 'seeds': the oracle and an agent that gives up)."""
  from workflows import compare as compare_agents

  customers = ["scripted:terse"]
  rows = compare_agents.compare(
      {"mixed": "scripted_agent:oracle+scripted_agent:give_up"}, customers, num_dialogues=6,
      workdir=str(tmp_path), batch_size=6)
  (row,) = rows
  assert sorted(os.listdir(tmp_path)) == sorted(
      f"{kind}_mixed_seed{i}_beta0_vs_scripted-terse.{ext}"
      for i in (0, 1) for kind, ext in (("eval", "json"), ("transcripts", "jsonl")))
  seeds = row["pooled"]["seed_success"]
  assert seeds[0] == 1.0 and seeds[1] < 1.0 and row["pooled"]["n"] == 12
  assert row["pooled"]["success_rate"] == pytest.approx(sum(seeds) / 2)
  assert row["pooled"]["seed_stderr"] == pytest.approx(abs(seeds[0] - seeds[1]) / 2)
  assert "(2 seeds; ±" in compare_agents.to_markdown(rows, customers)


def test_compare_agents_sweeps_a_value_guided_run_named_by_step(tmp_path):
  """WORKDIR@STEP of an ILQL run is swept like its workdir (it was skipped silently), and plays
  beta 0 unless swept: no selection chose a beta for that checkpoint."""
  from workflows import compare as compare_agents

  for name, algorithm in (("ilql_run", "ilql"), ("bc_run", "bc")):
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(
        json.dumps({"algorithm": {"name": algorithm}, "model": {}}))
  ilql_run, bc_run = str(tmp_path / "ilql_run"), str(tmp_path / "bc_run")
  assert compare_agents.value_guided(ilql_run) and compare_agents.value_guided(f"{ilql_run}@200")
  assert not compare_agents.value_guided(f"{bc_run}@200")
  assert not compare_agents.value_guided("scripted_agent:oracle")
  assert compare_agents.selected_beta(f"{ilql_run}@200") == 0.0
