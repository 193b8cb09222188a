"""GRPO of the retail agent through the launcher (grpo_tau2_quick, shrunk): rollouts against the
scripted customer hold the tool's turns, which carry no action, and the steps train and save.
Tiny corpus and model, two updates: plumbing, not learning."""

from __future__ import annotations

import math
import os

import numpy as np

from domains.tau2_retail import turns
from experiments.configs import bc_tau2_quick, grpo_tau2_quick
from cotraining import launch
from ilql_dialogue import lm_party, metrics, tasks
from workflows import train


def test_grpo_steps_through_the_launcher_with_tool_turns_in_its_rollouts(
    tau2_data_dir, tmp_path, monkeypatch):
  full = grpo_tau2_quick.get_config()
  assert (full.rl.env, full.rl.split, full.task.role, full.algorithm.name) == (
      "tau2_retail", "generated", "agent", "grpo")
  assert full.online_eval.split == "generated"  # Selection never plays a real task.
  assert full.model.init_from == f"{bc_tau2_quick.ROOT}/bc_agent"
  rows = full.rl.scenarios * full.rl.group_size
  assert full.train.checkpoint_every % (rows // full.train.batch_size * full.rl.epochs) == 0
  assert full.rl.seq_len == full.model.max_seq_len

  config = full
  config.task.update(root=str(tmp_path / "data"), data_dir=tau2_data_dir, train_tasks=3,
                     eval_tasks=2, vocab_size=600, skills=("oracle",))
  config.task.max_length = 512  # Eight turns of four tokens and the shortened tool results.
  config.data.update(eval_batches=1, bucket_boundaries=(512,))
  config.model.update(init_from="", num_layers=1, d_model=32, num_heads=2, num_kv_heads=1,
                      head_dim=16, mlp_dim=64, max_seq_len=512)
  config.rl.update(data_dir=tau2_data_dir, scenarios=2, group_size=4, max_turns=8,
                   max_new_tokens=4, seq_len=512)
  config.train.update(steps=2, batch_size=8, log_every=1, checkpoint_every=2, eval_every=2,
                      progress_bar=False, async_checkpoints=False)
  # Selection plays at the rollouts' shapes: one compiled decode loop.
  config.online_eval.update(num_dialogues=8, batch_size=8, max_turns=8, max_new_tokens=4)

  # An untrained agent writes no call: it may write only an opening tag or end its turn, so
  # every turn that is not empty is a (malformed) call that the tool answers.
  def only_open_tag(tokenizer, role, block_markers=None):
    keep = {tokenizer.eot_id, tokenizer.marker_ids[turns.OPEN_TAG]}
    padded = -(-tokenizer.vocab_size // tasks.VOCAB_MULTIPLE) * tasks.VOCAB_MULTIPLE  # The model's.
    return sorted(set(range(padded)) - keep)
  monkeypatch.setattr(lm_party, "forbidden_token_ids", only_open_tag)

  workdir = str(tmp_path / "grpo")
  train.run(config, workdir)

  records = metrics.read_metrics(os.path.join(workdir, metrics.METRICS_FILE))
  steps = [r for r in records if r["split"] == "train"]
  assert [r["step"] for r in steps] == [1, 2]
  assert all(math.isfinite(r["loss"]) and 0.0 <= r["reward"] <= 1.0 for r in steps)
  assert abs(steps[0]["ratio"] - 1.0) < 1e-5 and abs(steps[0]["kl"]) < 1e-6
  (evaluation,) = [r for r in records if "return" in r]
  assert evaluation["step"] == 2 and 0.0 <= evaluation["return"] <= 1.0
  assert os.path.isdir(os.path.join(workdir, "checkpoints", "2"))

  tok = tasks.make_task(config).tokenizer
  rollout_dir = os.path.join(workdir, launch.ROLLOUTS_DIR)
  (name, *_) = sorted(os.listdir(rollout_dir))
  with np.load(os.path.join(rollout_dir, name)) as batch:
    ids, action = batch["input_ids"], batch["action_mask"]
  tool_id, customer_id = tok.speaker_token_ids[turns.TOOL], tok.speaker_token_ids[turns.CUSTOMER]
  # Most rollouts called the tool and read its result (a row may only end its turns).
  assert (ids == tool_id).any(axis=1).mean() >= 0.5
  assert (ids == customer_id).any()
  assert action.any() and not action[ids == tool_id].any()
  for b, t in zip(*np.nonzero(ids == tool_id)):  # The tool's turn, through its <|eot|>: no action.
    end = t + np.flatnonzero(ids[b, t:] == tok.eot_id)[0]
    assert not action[b, t:end + 1].any()
