"""`make run`'s pipeline end to end at a test's size: data, tokenizer, task datasets, BC
agent, CALM agent and BC customer from the dialogue LM, ILQL from the BC agent, online
checkpoint selection, evaluation, report."""

import json
import os

import ml_collections
import pytest

from experiments.configs import quickstart
from workflows import quickstart as pipeline_lib


def test_pipeline_runs_every_stage_and_resumes(tmp_path, monkeypatch):
  config = quickstart.get_config()
  config.airdialogue.update(train_dialogues=24, eval_dialogues=6)
  config.tokenizer.vocab_size = 400
  config.training.update(online_dialogues=2)
  config.evaluation.update(num_dialogues=2, batch_size=2, max_turns=4, max_new_tokens=8,
                           agent_temperature=0.0, customer_temperature=0.5)
  # One pair of each kind make run plays (a learned agent against a scripted, a held-out and a
  # people-like customer and the learned customer; the oracle against the people-like and the
  # learned customer), and a simulator along its training: the oracle against the customer's
  # checkpoint at a step.
  kept = {("bc_agent", "scripted:volunteer"), ("ilql_agent", "scripted:volunteer"),
          ("calm_agent", "scripted:volunteer"), ("calm_agent", "scripted:volunteer/held_out"),
          ("calm_agent", "people:partial"), ("scripted_agent:oracle", "people:silent"),
          ("bc_agent", "bc_customer"), ("scripted_agent:oracle", "bc_customer")}
  config.evaluation.pairs = tuple(p for p in config.evaluation.pairs if tuple(p) in kept)
  assert len(config.evaluation.pairs) == len(kept)
  config.evaluation.pairs += (("scripted_agent:oracle", "bc_customer@2"),)
  # The simulator-collapse comparison with one of its three arms (each arm's config has its
  # own tests: test_cotraining_config.py; the mixed arm's population is checked without
  # training below, test_a_runs_own_settings_win_over_the_pipelines).
  config.collapse.update(arms=("single_arm",), num_dialogues=2)
  del config.runs["cotrain_arm"], config.runs["mixed_arm"]
  make_run_config = pipeline_lib.run_config

  def smaller(config, name, workdir):  # The quick configs, shrunk to a test's size.
    c = make_run_config(config, name, workdir)
    c.model.update(num_layers=1, d_model=32, num_heads=2, num_kv_heads=1, head_dim=16,
                   mlp_dim=64)
    c.train.update(steps=2, eval_every=2, checkpoint_every=2, batch_size=4, progress_bar=False)
    c.data.eval_batches = 1
    c.skill_probes.update(num_dialogues=min(c.skill_probes.num_dialogues, 2), batch_size=2,
                          max_new_tokens=8)
    if c.online_eval.num_dialogues:
      c.online_eval.update(num_dialogues=2, batch_size=2, max_turns=4, max_new_tokens=8)
    if c.get("rl") is not None:
      c.rl.update(scenarios=2, group_size=2, max_turns=4, max_new_tokens=8)
      if c.rl.get("population") is not None:
        c.rl.population.add_every = 1
    return c

  monkeypatch.setattr(pipeline_lib, "run_config", smaller)
  workdir = str(tmp_path / "run")
  # A stage SIGTERMed after step 1 (it saved and returned) is not done, and nothing after it
  # starts; the next run resumes it.
  full_run = pipeline_lib.train.run
  monkeypatch.setattr(pipeline_lib.train, "run", lambda c, d: full_run(
      ml_collections.ConfigDict({**c.to_dict(), "train": {**c.train.to_dict(), "steps": 1}}), d))
  with pytest.raises(pipeline_lib.Stopped, match="train dialogue_lm: stopped at step 1 of 2"):
    pipeline_lib.run(config, workdir)
  assert not os.path.exists(os.path.join(workdir, ".dialogue_lm.done"))
  assert not os.path.exists(os.path.join(workdir, "bc_agent"))
  monkeypatch.setattr(pipeline_lib.train, "run", full_run)
  report = pipeline_lib.run(config, workdir)

  assert report["airdialogue/train"]["n"] == 24
  assert set(report["datasets"]) == {"agent_prefix/train", "agent_prefix/eval",
                                     "calm_agent_prefix/train", "calm_agent_prefix/eval",
                                     "customer_text/train", "customer_text/eval",
                                     "lm_prefix/train", "lm_prefix/eval"}
  selected = report["selected_checkpoints"]
  assert selected["bc_customer"] is None  # The simulator keeps its latest checkpoint.
  assert selected["dialogue_lm"] is None  # So does the pretrained trunk.
  # Every party started from the dialogue LM, and ILQL from the BC agent.
  for name, parent in (("bc_agent", "dialogue_lm"), ("bc_customer", "dialogue_lm"),
                       ("ilql_agent", "bc_agent"), ("calm_agent", "dialogue_lm")):
    with open(os.path.join(workdir, name, "config.json")) as f:
      assert json.load(f)["model"]["init_from"] == os.path.join(workdir, parent)
  assert os.path.exists(report["learning_curves"])
  for agent in ("bc_agent", "ilql_agent", "calm_agent"):
    assert selected[agent]["step"] == 2 and selected[agent]["metric"] == "return"
  # CALM trained on this workdir's corpus, relabeled (calm/data.py), with its action head.
  with open(os.path.join(workdir, "calm_agent", "config.json")) as f:
    calm_run = json.load(f)
  assert calm_run["task"]["root"] == os.path.join(workdir, "calm", "relabel=True,seed=0")
  assert calm_run["algorithm"]["action_head_weight"] > 0
  # It acts by its head (planning.action=head), so it is played as that agent, as selected.
  assert calm_run["planning"]["action"] == "head"
  with open(os.path.join(workdir, "eval", "eval_calm_agent_vs_scripted-volunteer.json")) as f:
    assert json.load(f)["agent"] == "calm:n=1:" + os.path.join(workdir, "calm_agent")
  assert selected["ilql_agent"]["eval"]["best_beta"] in (0.0, 1.0, 4.0, 16.0)
  pairs = [(r["agent"], r["customer"]) for r in report["evaluation"]]
  assert pairs == [tuple(p) for p in (*config.evaluation.pairs,
                                      *config.evaluation.greedy_customer_pairs)]
  for r in report["evaluation"]:
    assert r["n"] == 2 and 0 <= r["success_rate"] <= 1
    assert sum(r["end_reasons"].values()) == 2
  ilql_row = report["evaluation"][1]
  assert ilql_row["beta"] == selected["ilql_agent"]["eval"]["best_beta"]
  with open(os.path.join(workdir, "report.json")) as f:
    assert json.load(f)["evaluation"] == report["evaluation"]
  # Agents are selected and evaluated greedily here; the learned customer samples at 0.5.
  for agent in ("bc_agent", "ilql_agent"):
    with open(os.path.join(workdir, agent, "config.json")) as f:
      assert json.load(f)["online_eval"]["temperature"] == 0.0
  with open(os.path.join(workdir, "eval", "eval_bc_agent_vs_bc_customer.json")) as f:
    summary = json.load(f)
  assert summary["lm_options"]["temperature"] == 0.0
  assert summary["customer_lm_options"]["temperature"] == 0.5
  # ... and decodes greedily in the greedy pairs; the learned customer has its copy head.
  with open(os.path.join(workdir, "eval", "eval_scripted_agent:oracle_vs_bc_customer_cT0.json")
            ) as f:
    assert json.load(f)["customer_lm_options"]["temperature"] == 0.0
  assert report["evaluation"][-1]["customer_label"].endswith("(T = 0)")
  with open(os.path.join(workdir, "bc_customer", "config.json")) as f:
    assert json.load(f)["model"]["copy_dim"] > 0

  assert report["evaluation"][-1]["customer_fidelity"]["customer_action_blocks"] >= 0

  # Each arm trained from the BC agent against the BC customer (trained before it), which
  # the panel holds out the other customer from; every agent met every customer.
  for arm in config.collapse.arms:
    with open(os.path.join(workdir, arm, "config.json")) as f:
      arm_run = json.load(f)
    assert arm_run["model"]["init_from"] == os.path.join(workdir, "bc_agent")
    assert arm_run["rl"]["opponent"] == os.path.join(workdir, "bc_customer")
    assert arm_run["rl"]["panel"]["held_out"] == [os.path.join(workdir, "bc_customer_s1"),
                                                  "scripted:*", "people:*"]
  collapse = report["collapse"]
  assert list(collapse["rows"]) == ["bc_agent", "single_arm"]
  for row in collapse["rows"].values():
    assert set(row["success"]) == {"bc_customer", *config.collapse.held_out}
    assert row["held_out_mean"] == pytest.approx(
        sum(row["success"][c][0] for c in config.collapse.held_out)
        / len(config.collapse.held_out))
  assert "| single_arm |" in pipeline_lib.format_collapse_table(collapse)
  # The CALM run is named for what acts: its pooled head's tracked intent, a rule solver.
  calm_label = "CALM + intent tracker (rule solver)"
  assert {r["agent_label"] for r in report["evaluation"] if r["agent"] == "calm_agent"} == {
      calm_label}
  assert f"| {calm_label} | scripted:volunteer |" in pipeline_lib.format_table(
      report["evaluation"])

  # A second run finds every stage done and reports the same numbers.
  again = pipeline_lib.run(config, workdir)
  assert again["evaluation"] == report["evaluation"]
  assert again["collapse"] == collapse


def test_a_run_trains_after_the_runs_its_set_values_name():
  config = quickstart.get_config()
  order = pipeline_lib.training_order(config)
  for arm in config.collapse.arms:
    assert order.index(arm) > max(order.index(n) for n in ("bc_agent", "bc_customer",
                                                            "bc_customer_s1"))
  config.runs.bc_customer.set = (("simulator", "single_arm"),)
  with pytest.raises(ValueError, match="cycle"):
    pipeline_lib.training_order(config)


def test_a_runs_own_settings_win_over_the_pipelines(tmp_path):
  """Agents are selected on config.training.online_dialogues validation scenarios; an arm,
  selected at its one evaluation, plays the fewer its `set` names."""
  config = quickstart.get_config()
  workdir = str(tmp_path)
  assert pipeline_lib.run_config(config, "bc_agent", workdir).online_eval.num_dialogues == 128
  arm = pipeline_lib.run_config(config, "cotrain_arm", workdir)
  assert arm.online_eval.num_dialogues == quickstart.ARM_VALIDATION_DIALOGUES
  assert arm.online_eval.temperature == config.evaluation.agent_temperature
  # The mixed arm's fixed population: every scripted style in the training families and the BC
  # customer (a run name, so its workdir), which its panel trains against.
  mixed = pipeline_lib.run_config(config, "mixed_arm", workdir).rl
  assert list(mixed.population.members) == [*quickstart.MIXED_MEMBERS[:-1],
                                            os.path.join(workdir, "bc_customer")]
  assert list(mixed.panel.held_out) == [os.path.join(workdir, "bc_customer_s1"), "people:*"]


def test_a_collapse_arm_that_is_no_run_fails_at_start_up(tmp_path):
  from data_pipelines import cli

  config = quickstart.get_config()
  config.collapse.arms = ("single_arm", "no_such_arm")
  with pytest.raises(cli.BadInput, match="'no_such_arm' is not a run"):
    pipeline_lib.validate(config, str(tmp_path / "run"))
  config.collapse.arms = ("single_arm",)
  config.collapse.held_out = ()
  with pytest.raises(cli.BadInput, match="config.collapse.held_out: empty"):
    pipeline_lib.validate(config, str(tmp_path / "run"))
  config.collapse.held_out = ("bc_agent",)
  with pytest.raises(cli.BadInput, match="run 'bc_agent' plays the agent, paired as the customer"):
    pipeline_lib.validate(config, str(tmp_path / "run"))


def test_a_pair_naming_a_step_the_run_does_not_save_fails_at_start_up(tmp_path):
  from data_pipelines import cli

  config = quickstart.get_config()
  config.evaluation.pairs = (("scripted_agent:oracle", "bc_customer@150"),)
  with pytest.raises(cli.BadInput, match="bc_customer@150: run 'bc_customer' saves no "
                     "checkpoint at step 150"):
    pipeline_lib.validate(config, str(tmp_path / "run"))
  config.evaluation.pairs = (("scripted_agent:oracle", "bc_customer@200"),)
  pipeline_lib.validate(config, str(tmp_path / "run"))


@pytest.mark.parametrize("part,every,dialogues", [("all", 2000, 3000), ("customer", 2000, 3000),
                                                   ("customer_data", 1000, 15000),
                                                   ("targets", 1000, 15000)])
def test_the_long_pipeline_config_passes_start_up(tmp_path, part, every, dialogues):
  """quickstart_long: the oracle plays the customer along its training, each step saved."""
  from experiments.configs import quickstart_long

  config = quickstart_long.get_config(part)
  pipeline_lib.validate(config, str(tmp_path / "run"))
  customer = pipeline_lib.run_config(config, "bc_customer", str(tmp_path / "run"))
  assert customer.train.keep_checkpoints == 5  # Four oracle checkpoints and one spare.
  assert [p for p in config.evaluation.pairs
          if p[0] == "scripted_agent:oracle" and "bc_customer" in p[1]] == [
      ("scripted_agent:oracle", f"bc_customer@{every * k}") for k in (1, 2, 3)] + [
      ("scripted_agent:oracle", "bc_customer")]
  assert config.airdialogue.train_dialogues == dialogues
  assert ("bc_agent" in config.runs) == (part in ("all", "targets"))


def test_bc_with_the_tracker_differs_from_calm_only_in_relabeling_and_scenes(tmp_path):
  """quickstart_bc_tracker: BC given CALM's tracker is calm_agent's run without relabeling and
  without scene batches, same updates and start; each seed trains and plays both."""
  from experiments.configs import quickstart_bc_tracker

  config = quickstart_bc_tracker.get_config("2")
  pipeline_lib.validate(config, str(tmp_path / "run"))
  workdir = str(tmp_path / "run")
  calm = pipeline_lib.run_config(config, "calm_agent", workdir)
  tracker = pipeline_lib.run_config(config, "bc_tracker_agent", workdir)
  assert (calm.calm_data.relabel, calm.calm_data.scene_every) == (True, 2)
  assert (tracker.calm_data.relabel, tracker.calm_data.scene_every) == (False, 0)
  assert tracker.task.root != calm.task.root  # Its own corpus: not relabeled.
  for field in ("algorithm", "model", "train", "planning", "optim"):
    assert tracker[field].to_dict() == calm[field].to_dict(), field
  assert pipeline_lib.run_config(config, "calm_agent_s1", workdir).seed == 1
  assert {p for p in config.evaluation.pairs if p[0].startswith(("bc_tracker", "calm_agent_s"))} == {
      (run, customer) for run in ("bc_tracker_agent", "bc_tracker_agent_s1", "calm_agent_s1")
      for customer in ("scripted:volunteer", "scripted:volunteer/held_out")}


def test_an_evaluation_is_played_again_when_a_partys_checkpoint_changed(tmp_path, monkeypatch):
  """The pipeline keeps each pair's summary with the checkpoints it played: a run retrained to
  the same step (other files) is evaluated again, never reported from the older summary."""
  config = quickstart.get_config()
  config.evaluation.update(customer_temperature=1.0, customer_min_p=0.2)
  workdir = str(tmp_path)
  customer_dir = tmp_path / "bc_customer"
  customer_dir.mkdir()
  (customer_dir / "config.json").write_text(json.dumps({"algorithm": {"name": "bc"},
                                                        "model": {}}))

  def save_checkpoint(commit: int) -> None:  # What a training run leaves at step 200.
    step = customer_dir / "checkpoints" / "200"
    step.mkdir(parents=True, exist_ok=True)
    (step / "_CHECKPOINT_METADATA").write_text(json.dumps({"commit_timestamp_nsecs": commit}))

  played = []

  decodings = []

  def fake_evaluate(agent, customer, *, num_dialogues, workdir, tag, lm_options,
                    customer_lm_options, **unused):
    played.append(customer)
    decodings.append({"agent": lm_options, "customer": customer_lm_options})
    os.makedirs(workdir, exist_ok=True)
    transcripts = os.path.join(workdir, f"transcripts_{tag}.jsonl")
    open(transcripts, "w").close()
    summary = {"n": num_dialogues, "success_rate": len(played) / 10, "success_stderr": 0.1,
               "mean_turns": 4.0, "end_reasons": {"action": num_dialogues},
               "transcripts": transcripts}
    with open(os.path.join(workdir, f"eval_{tag}.json"), "w") as f:
      json.dump(summary, f)
    return summary

  monkeypatch.setattr(pipeline_lib.evaluate, "evaluate", fake_evaluate)
  pair = lambda: pipeline_lib.evaluate_pair(config, workdir, "scripted_agent:oracle",
                                            "bc_customer", 2)
  save_checkpoint(1)
  first = pair()
  assert len(played) == 1 and first["success_rate"] == 0.1
  assert pair() == first and len(played) == 1  # The same checkpoint: the summary is reused.
  save_checkpoint(2)  # Retrained: the same step, another checkpoint.
  again = pair()
  assert len(played) == 2 and again["success_rate"] == 0.2
  assert again["customer"] == "bc_customer"
  assert again["customer_label"] == "bc_customer (T = 1, min-p 0.2)"
  assert decodings[-1]["customer"] == {"max_new_tokens": 64, "temperature": 1.0, "min_p": 0.2}
  config.evaluation.customer_min_p = 0.0  # Another decoding: played again, labelled as played.
  plain = pair()
  assert len(played) == 3 and plain["customer_label"] == "bc_customer (T = 1)"
  assert decodings[-1]["customer"]["min_p"] == 0.0
  assert pair() == plain and len(played) == 3
