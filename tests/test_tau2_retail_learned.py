"""A learned retail agent: the model reads tool results shortened (lm_view.py) the same way in
its datasets and when it plays, carries no loss on them, and its LMParty plays RetailEnv (tool
turns included) to an ending. Tiny corpus and model, two updates: plumbing, not learning."""

from __future__ import annotations

import json

import numpy as np
import pytest

from data_pipelines.dialogue import Turn, read_jsonl
from domains.tau2_retail import environment, generate, lm_view, parties, task, turns
from experiments.configs import bc_tau2_quick, ilql_tau2_quick
from ilql_dialogue import environment as engine
from ilql_dialogue import metrics
from ilql_dialogue.parties import make_party
from workflows import train


def tiny(config, root):
  """`config` on 3 generated tasks x 2 skills, a one-layer model, two updates."""
  config.task.update(root=str(root / "data"), train_tasks=3, eval_tasks=2, vocab_size=600,
                     skills=("oracle", "no_confirm"))
  config.model.update(num_layers=1, d_model=32, num_heads=2, num_kv_heads=1, head_dim=16,
                      mlp_dim=64)
  config.data.update(eval_batches=1, bucket_boundaries=(config.task.max_length,))
  config.online_eval.num_dialogues = 0
  config.selection.metric = ""  # Nothing is played during training: keep the last step.
  config.train.update(steps=2, batch_size=2, eval_every=2, checkpoint_every=2,
                      progress_bar=False, async_checkpoints=False)
  return config


@pytest.fixture(scope="module")
def run(tau2_data_dir, tmp_path_factory):
  """A BC agent trained for two updates."""
  root = tmp_path_factory.mktemp("tau2")
  config = tiny(bc_tau2_quick.get_config(), root)
  config.task.data_dir = tau2_data_dir
  workdir = str(root / "run")
  train.run(config, workdir)
  return config, workdir


def test_tool_results_are_shortened_and_the_customer_sees_no_tool_turn():
  order = {"order_id": "#W1", "user_id": "u", "address": {"zip": "1"}, "status": "pending",
           "items": [{"name": "Lamp", "product_id": "p1", "item_id": "i1", "price": 10.5,
                      "options": {"color": "red"}}], "fulfillments": [],
           "payment_history": [{"transaction_type": "payment", "amount": 10.5,
                                "payment_method_id": "gift_card_1"}],
           "cancel_reason": None, "exchange_items": None, "return_items": None}
  assert lm_view.observation(json.dumps(order)) == (
      "order #W1 status pending | items: i1 Lamp (color: red) 10.50 product p1 | "
      "payments: payment 10.50 gift_card_1")
  assert lm_view.observation("Error: Order not found") == "Error: Order not found"
  call = Turn(turns.AGENT, turns.format_call("get_order_details", {"order_id": "#W1"}))
  assert lm_view.customer_reads(call) is None
  assert lm_view.customer_reads(Turn(turns.TOOL, json.dumps(order))) is None
  assert lm_view.customer_reads(Turn(turns.AGENT, "Hi!")) == "Hi!"


def test_observation_tokens_carry_no_loss(run):
  config, _ = run
  built = task.make_task(config.task)
  tok = built.tokenizer
  tool_id, eot = tok.speaker_token_ids[turns.TOOL], tok.eot_id
  marker = tok.marker_ids[turns.OPEN_TAG]
  for example in built.datasets["train"]:
    ids = np.asarray(example["input_ids"][:example["length"]])
    action = np.asarray(example["action_mask"][:example["length"]], bool)
    starts = np.flatnonzero(ids == tool_id)
    assert len(starts) > 0 and action[ids == marker].all()
    for start in starts:  # The tool's speaker token through its <|eot|> (or the cut): no
      ends = np.flatnonzero(ids[start:] == eot)  # action, no loss.
      end = start + ends[0] if len(ends) else len(ids) - 1
      assert not action[start:end + 1].any()
  text = tok.decode(built.datasets["train"][0]["input_ids"])
  assert '"fulfillments"' not in text and "payment methods:" in text  # The shortened view.


def test_the_learned_agent_plays_retail_to_an_ending_reading_as_it_was_trained(run):
  config, workdir = run
  env = environment.RetailEnv(generate.SPLIT, config.task.data_dir)
  agent = make_party(workdir, turns.AGENT, temperature=0.0, max_new_tokens=16)
  episodes = engine.play(env, {turns.AGENT: agent, turns.CUSTOMER: parties.ScriptedCustomer()},
                         env.sample(7, 2), max_turns=12, seed=7)
  for episode in episodes:
    assert episode.end_reason is not None and episode.info["reward"] == 0.0
    assert "tool_calls" in episode.info
  # A corpus dialogue's tool turns, loaded into the party, read as the dataset holds them.
  dialogue = next(iter(read_jsonl(task.corpus_paths(config.task.root)["train"])))
  first_tool = next(k for k, t in enumerate(dialogue.turns) if t.speaker == turns.TOOL)
  last = next(k for k, t in enumerate(dialogue.turns) if k > first_tool + 2
              and t.speaker == turns.AGENT and dialogue.turns[k - 1].speaker == turns.TOOL)
  agent.reset([env.context(env.sample(7, 1)[0], turns.AGENT)], [0])
  agent.load_histories([dialogue.turns[:last + 1]])
  built = task.make_task(config.task)
  stored = built.datasets["train"][0]["input_ids"]
  assert agent.token_ids[0] == stored[:len(agent.token_ids[0])]


def test_ilql_from_the_bc_agent_is_played_by_its_online_evaluation(run, tmp_path):
  """The environment's online evaluation plays an ILQL model's policy (its decoding model)."""
  config, workdir = run
  ilql = tiny(ilql_tau2_quick.get_config(), tmp_path)
  ilql.task = config.task
  ilql.model.init_from = workdir
  ilql.online_eval.update(num_dialogues=2, batch_size=2, max_turns=6, max_new_tokens=8)
  ilql.selection.metric = "return"
  train.run(ilql, str(tmp_path / "ilql"))
  evals = [r for r in metrics.read_metrics(str(tmp_path / "ilql" / metrics.METRICS_FILE))
           if r["split"] == "eval"]
  assert evals[-1]["step"] == 2 and 0.0 <= evals[-1]["return"] <= 1.0 and "db" in evals[-1]
