"""The retail domain as a registered task the engine plays in batches: the environment's tool
turns, reward parts and error counts (tiny shop), the batched scripted parties, the degraded
agents below the oracle and the generator's tasks (real data), the corpus and the datasets."""

from __future__ import annotations

import dataclasses

import ml_collections
import numpy as np
import pytest

from data_pipelines.dialogue import read_jsonl
from domains.tau2_retail import db as db_lib
from domains.tau2_retail import snapshot as snapshot_lib
from domains.tau2_retail import (agents, contexts, corpus, environment, generate, parties,
                                 phrases, reward, selfplay, task, tasks, tools, turns, users)
from ilql_dialogue import environment as engine
from ilql_dialogue import registry
from ilql_dialogue.parties import make_party
from test_tau2_retail_tools import tiny_shop

CANCEL = {"order_id": "#W2", "reason": "no longer needed"}


@pytest.fixture(scope="module")
def data_dir(tau2_data_dir) -> str:
  return tau2_data_dir


@pytest.fixture(scope="module")
def frozen(data_dir) -> snapshot_lib.Snapshot:
  return snapshot_lib.Snapshot(db_lib.load(data_dir))


def _tiny_env() -> environment.RetailEnv:
  actions = (tasks.Action("t_0", "find_user_id_by_email", {"email": "Ann.Lee@example.com"}),
             tasks.Action("t_1", "cancel_pending_order", CANCEL))
  scenario = tasks.Scenario("cancel", "Your email is Ann.Lee@example.com.", None, ".", "retail")
  task = tasks.Task("t", tasks.TRAIN, scenario, actions, ("50.00",), (), ("DB", "COMMUNICATE"))
  return environment.RetailEnv(tasks.TRAIN, frozen=snapshot_lib.Snapshot(
      db_lib.from_json(tiny_shop())), real_tasks=[task])


class Clumsy:
  """An agent that greets, then makes four failing calls and the right write, then asks what
  else: every kind of error observation once."""

  role = turns.AGENT
  SCRIPT = (phrases.GREETING, "[tool] {not json [/tool]", turns.format_call("nope", {}),
            turns.format_call("get_order_details", {}),
            turns.format_call("get_order_details", {"order_id": "#W9"}),
            turns.format_call("cancel_pending_order", CANCEL),
            f"Done; you get $50.00 back. {phrases.ANYTHING_ELSE}")

  def reset(self, contexts_, seeds):
    self.turn = [0] * len(contexts_)

  def respond(self, histories):
    out = []
    for b, history in enumerate(histories):
      if history is None or self.turn[b] >= len(self.SCRIPT):
        out.append(None)
        continue
      out.append(self.SCRIPT[self.turn[b]])
      self.turn[b] += 1
    return out


def test_tool_calls_run_on_each_rows_own_database_and_errors_are_counted():
  env = _tiny_env()
  scenario = env.sample(0, 1)[0]
  episodes = engine.play(env, {turns.AGENT: Clumsy(), turns.CUSTOMER: parties.ScriptedCustomer()},
                         [scenario] * 2, max_turns=40, keys=["a", "b"])
  for episode in episodes:  # Both rows cancel #W2: a shared database would refuse the second.
    assert episode.end_reason == environment.CUSTOMER_STOP
    speakers = [t.speaker for t in episode.turns]
    assert speakers == ["agent", "customer"] + ["agent", "tool"] * 5 + ["agent", "customer"]
    assert episode.info["db"] == episode.info["communicate"] == env.reward(episode) == 1.0
    assert episode.info["tool_calls"] == 5 and episode.info["tool_errors"] == 4
    assert {k: episode.info[f"errors/{k}"] for k in tools.ERROR_KINDS} == {
        tools.MALFORMED_JSON: 1, tools.UNKNOWN_TOOL: 1, tools.BAD_ARGUMENTS: 1,
        tools.TOOL_ERROR: 1}
    assert episode.info["breaches"] > 0  # Calls before any lookup, a write without a yes.
  cut = engine.play(env, {turns.AGENT: Clumsy(), turns.CUSTOMER: parties.ScriptedCustomer()},
                    [scenario], max_turns=12)[0]
  assert cut.end_reason == engine.TURN_LIMIT and cut.info["db"] == 1.0
  assert env.reward(cut) == 0.0  # Not a proper ending: τ²'s reward is 0.
  summary = env.metrics(episodes + [cut])
  assert summary["db"] == 1.0 and summary["proper_ending"] == pytest.approx(2 / 3)


def test_the_transfer_ends_at_the_agents_message():
  env = _tiny_env()
  scenario = env.sample(0, 1)[0]

  class Transferring(Clumsy):
    SCRIPT = (phrases.GREETING, turns.format_call("transfer_to_human_agents", {}),
              turns.format_call("transfer_to_human_agents", {"summary": "wants a human"}),
              phrases.TRANSFER_MESSAGE, "never said")

  episode = engine.play(env, {turns.AGENT: Transferring(),
                              turns.CUSTOMER: parties.ScriptedCustomer()}, [scenario],
                        max_turns=40)[0]
  assert episode.end_reason == environment.TRANSFER
  assert [t.text for t in episode.turns][-2:] == [tools.TRANSFER_RESULT, phrases.TRANSFER_MESSAGE]
  assert episode.info["errors/bad_arguments"] == 1  # The first call had no summary.
  assert episode.info["db"] == 0.0 and env.reward(episode) == 0.0  # #W2 was not cancelled.


def test_the_task_and_its_parties_are_registered():
  spec = registry.task("tau2_retail")
  assert spec.roles == (turns.AGENT, turns.CUSTOMER)
  assert spec.block_markers == {turns.AGENT: (turns.OPEN_TAG, turns.CLOSE_TAG)}
  assert isinstance(make_party("tau2_agent:no_auth", turns.AGENT), parties.ScriptedAgent)
  assert isinstance(make_party("tau2_customer:scripted", turns.CUSTOMER),
                    parties.ScriptedCustomer)
  with pytest.raises(ValueError, match="unknown retail agent skill 'nope'"):
    make_party("tau2_agent:nope", turns.AGENT)
  with pytest.raises(ValueError, match="asked to play 'customer'"):
    make_party("tau2_agent:oracle", turns.CUSTOMER)
  with pytest.raises(ValueError, match="split 'eval' is not one of"):
    environment.RetailEnv("eval")


def test_contexts_give_the_customer_its_profile_and_the_agent_the_policy():
  env = _tiny_env()
  scenario = env.sample(0, 1)[0]
  customer = env.context(scenario, turns.CUSTOMER)
  assert users.Profile.from_json(customer["profile"]) == scenario.profile
  text = contexts.serialize_context(turns.CUSTOMER, customer)
  assert text.splitlines() == [
      "Identity: My email is Ann.Lee@example.com.",
      "Wish 1: I want to cancel my pending order with the T-Shirt.; order #W2; reason: no "
      "longer needed", "Style: answer_only; phrasing: template"]
  agent = env.context(scenario, turns.AGENT)
  assert contexts.serialize_context(turns.AGENT, agent) == contexts.POLICY_SUMMARY


def _mean_rewards(env, scenarios) -> dict[str, float]:
  out = {}
  for skill in agents.AGENTS:
    episodes = engine.play(env, {turns.AGENT: parties.ScriptedAgent(skill),
                                 turns.CUSTOMER: parties.ScriptedCustomer()}, scenarios,
                           max_turns=environment.DEFAULT_MAX_TURNS)
    out[skill] = float(np.mean([env.reward(e) for e in episodes]))
  return out


def test_degraded_agents_score_below_the_oracle(data_dir, frozen):
  generated = environment.RetailEnv(generate.SPLIT, data_dir, frozen=frozen)
  rewards = _mean_rewards(generated, generated.sample(5, 32))
  assert rewards["oracle"] == 1.0
  assert all(rewards[skill] < 0.95 for skill in agents.AGENTS if skill != "oracle"), rewards
  real = environment.RetailEnv(tasks.TEST, data_dir, frozen=frozen)
  rewards = _mean_rewards(real, real.sample(1000, 40))
  assert rewards["no_auth"] < rewards["wrong_item"] < rewards["oracle"] == 0.8
  # No real task's customer declines a change, so forgetting to confirm costs nothing there.
  assert rewards["no_confirm"] == rewards["oracle"]


def test_the_engine_plays_the_real_tasks_as_the_one_dialogue_loop(data_dir, frozen):
  env = environment.RetailEnv(tasks.TEST, data_dir, frozen=frozen)
  scenarios = env.sample(0, 40)
  assert sorted(s.task.task_id for s in scenarios) == sorted(
      t.task_id for t in tasks.load(data_dir, tasks.TEST))
  assert [s.key for s in env.sample(0, 41)[:40]] == [s.key for s in scenarios]
  episodes = engine.play(env, {turns.AGENT: parties.ScriptedAgent(),
                               turns.CUSTOMER: parties.ScriptedCustomer()}, scenarios,
                         max_turns=environment.DEFAULT_MAX_TURNS)
  for scenario, episode in zip(scenarios, episodes):
    alone = selfplay.play_oracle(scenario.task, frozen)
    assert episode.turns == alone.turns[:len(episode.turns)], scenario.task.task_id
    assert (episode.info["db"], episode.info["communicate"]) == (alone.reward.db,
                                                                alone.reward.communicate)
    assert episode.info["breaches"] == 0


def test_generated_tasks_replay_their_gold_without_error(frozen):
  generator = generate.Generator(frozen)
  drawn = generator.tasks(3, 120)
  assert [g.task for g in generator.tasks(3, 20)] == [g.task for g in drawn[:20]]
  kinds = set()
  for g in drawn:
    assert reward.replay(g.task, frozen).errors == (), g.task.task_id
    kinds |= {w.kind for w in g.profile.wishes}
    if not any(w.declines for w in g.profile.wishes):  # Equal but for the drawn voice.
      assert dataclasses.replace(users.profile(g.task, frozen), style=g.profile.style,
                                 family=g.profile.family) == g.profile
  assert kinds == set(generate.KINDS)
  assert 0 < sum(any(w.declines for w in g.profile.wishes) for g in drawn) < len(drawn)


def test_the_corpus_and_the_agent_datasets(data_dir, frozen, tmp_path):
  config = ml_collections.ConfigDict(dict(
      name=task.NAME, role=turns.AGENT, context="none", root=str(tmp_path), max_length=8192,
      train_tasks=3, eval_tasks=2, skills=["oracle", "no_confirm"], vocab_size=600,
      data_dir=data_dir))
  built = task.make_task(config)
  train = list(read_jsonl(task.corpus_paths(str(tmp_path))["train"]))
  assert [d.meta["skill"] for d in train] == ["oracle", "no_confirm"] * 3
  assert all(d.roles == turns.ROLES and d.meta["db"] in (0.0, 1.0) for d in train)
  assert [d.outcome for d in train][::2] == [1.0] * 3  # The oracle reaches every gold.
  tok = built.tokenizer
  assert tok.roles == turns.ROLES and set(tok.marker_ids) == {turns.OPEN_TAG, turns.CLOSE_TAG}
  example = built.datasets["train"][0]
  ids, action = np.asarray(example["input_ids"]), np.asarray(example["action_mask"], bool)
  tool_id, marker = tok.speaker_token_ids[turns.TOOL], tok.marker_ids[turns.OPEN_TAG]
  assert (ids == tool_id).sum() > 0 and not action[ids == tool_id].any()
  assert action[ids == marker].all() and action[ids == marker].any()  # The agent's calls.
  with pytest.raises(ValueError, match="real tasks are for evaluation only"):
    corpus.self_play(environment.RetailEnv(tasks.TEST, data_dir, frozen=frozen), 0, 1)
