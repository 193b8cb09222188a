"""τ² retail reward: every task's gold calls replayed through our tools, scored against itself.

The gold calls that fail are the same 18 (of 550) that fail under τ²-bench's own tools, with
the same text (checked once against tau2-bench a2c0247's tools.py, whose final states matched
ours for all 114 tasks): the task has the customer give a wrong email, zip or order id first,
reads the example product id of τ²'s tool description (tasks 2-4), or asks for a write the
order no longer allows (64: not delivered) or the gift card cannot pay (105).
"""

from __future__ import annotations

import pytest

from domains.tau2_retail import db as db_lib
from domains.tau2_retail import snapshot as snapshot_lib
from domains.tau2_retail import reward, tasks, tools, turns

NOT_FOUND = {
    "get_product_details": "Error: Product not found",
    "find_user_id_by_email": "Error: User not found",
    "find_user_id_by_name_zip": "Error: User not found",
    "get_order_details": "Error: Order not found",
}
EXPECTED_GOLD_ERRORS = {
    ("2", "2_1"): NOT_FOUND["get_product_details"],
    ("3", "3_1"): NOT_FOUND["get_product_details"],
    ("4", "4_1"): NOT_FOUND["get_product_details"],
    ("35", "35_0"): NOT_FOUND["find_user_id_by_email"],
    ("37", "37_0"): NOT_FOUND["find_user_id_by_email"],
    ("38", "38_0"): NOT_FOUND["find_user_id_by_email"],
    ("39", "39_0"): NOT_FOUND["find_user_id_by_name_zip"],
    ("46", "46_1"): NOT_FOUND["get_order_details"],
    ("46", "46_2"): NOT_FOUND["get_order_details"],
    ("47", "47_1"): NOT_FOUND["get_order_details"],
    ("47", "47_2"): NOT_FOUND["get_order_details"],
    ("54", "54_0"): NOT_FOUND["find_user_id_by_email"],
    ("55", "55_0"): NOT_FOUND["find_user_id_by_email"],
    ("64", "64_6"): "Error: Non-delivered order cannot be exchanged",
    ("67", "67_0"): NOT_FOUND["find_user_id_by_name_zip"],
    ("67", "67_1"): NOT_FOUND["find_user_id_by_name_zip"],
    ("68", "68_0"): NOT_FOUND["find_user_id_by_name_zip"],
    ("105", "106_0"): "Error: Insufficient gift card balance to pay for the price difference",
}


@pytest.fixture(scope="module")
def data_dir(tau2_data_dir) -> str:
  return tau2_data_dir


@pytest.fixture(scope="module")
def snapshot(data_dir) -> snapshot_lib.Snapshot:
  return snapshot_lib.Snapshot(db_lib.load(data_dir))


@pytest.fixture(scope="module")
def all_tasks(data_dir) -> list[tasks.Task]:
  return tasks.load(data_dir)


@pytest.fixture(scope="module")
def golds(all_tasks, snapshot) -> dict[str, reward.Gold]:
  return {t.task_id: reward.replay(t, snapshot) for t in all_tasks}


def test_gold_calls_fail_only_where_tau2s_do(all_tasks, golds):
  found = {}
  for task in all_tasks:
    for error in golds[task.task_id].errors:
      found[(task.task_id, error.action_id)] = error.text
  assert found == EXPECTED_GOLD_ERRORS
  assert sum(len(t.actions) for t in all_tasks) == 550


def test_every_task_replayed_as_an_episode_scores_one(all_tasks, golds, snapshot):
  """An episode making the gold calls through `turns` on its own copy, and saying each
  communicate_info, ends with reward 1 on every task."""
  for task in all_tasks:
    episode = snapshot.fresh()
    for action in task.actions:
      parsed = turns.parse_agent_turn(turns.format_call(action.name, action.arguments))
      assert parsed.call is not None and not parsed.speech
      turns.execute(episode, parsed)
    said = [f"Sure, it is {info}." for info in task.communicate_info]
    result = reward.score(task, episode, said, snapshot, golds[task.task_id])
    assert (result.db, result.communicate, result.reward) == (1.0, 1.0, 1.0), task.task_id
    assert result.unjudged == tuple(b for b in task.reward_basis if b == "NL_ASSERTION")


def test_a_changed_database_scores_zero(all_tasks, golds, snapshot):
  pristine_hash = snapshot.state_hash()
  writes = [t for t in all_tasks if golds[t.task_id].state_hash != pristine_hash]
  assert len(writes) == 103  # The others: reads, a transfer, or (105) a write that fails.
  for task in writes[:5]:
    result = reward.score(task, snapshot.fresh(), list(task.communicate_info), snapshot,
                          golds[task.task_id])
    assert result.db == 0.0 and result.reward == 0.0 and result.communicate == 1.0
  task = writes[0]
  episode = golds[task.task_id].database.copy()
  assert reward.score(task, episode, [], snapshot, golds[task.task_id]).db == 1.0
  episode.users[next(iter(episode.users))].email = "someone@else.com"
  assert reward.score(task, episode, [], snapshot, golds[task.task_id]).db == 0.0
  extra = golds[task.task_id].database.copy()  # One more successful write than gold.
  user = next(u for u in extra.users.values() if u.user_id in extra.users)
  assert tools.call(extra, "modify_user_address", {
      "user_id": user.user_id, "address1": "1 Elm St", "address2": "", "city": "Austin",
      "state": "TX", "country": "USA", "zip": "78701"}).ok
  assert reward.score(task, extra, [], snapshot, golds[task.task_id]).db == 0.0
  read_only = next(t for t in all_tasks if golds[t.task_id].state_hash == pristine_hash)
  assert reward.score(read_only, snapshot.fresh(), list(read_only.communicate_info),
                      snapshot).reward == 1.0  # Without a kept gold: replayed inside.


def test_communicate_info_is_a_case_insensitive_substring_without_commas():
  checks = reward.communicate_checks(
      ["1000", "Tablet", "$54.04"], ["We have 1,000 items.", "The TABLET costs $54.04!"])
  assert [c.met for c in checks] == [True, True, True]
  checks = reward.communicate_checks(["12"], ["The total is 1.2 dollars."])
  assert [c.met for c in checks] == [False]
  dialogue = [turns.Turn(turns.AGENT, turns.format_call("calculate", {"expression": "10"})),
              turns.Turn(turns.TOOL, "10.0"), turns.Turn(turns.CUSTOMER, "ten?"),
              turns.Turn(turns.AGENT, "There are 9 options.")]
  said = turns.agent_speech(dialogue)
  assert said == ["There are 9 options."]
  assert [c.met for c in reward.communicate_checks(["10"], said)] == [False]
