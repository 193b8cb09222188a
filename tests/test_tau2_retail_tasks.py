"""τ² retail tasks: the real files' splits and parts, and errors naming file and field."""

from __future__ import annotations

import json

import pytest

from domains.tau2_retail import tasks


@pytest.fixture(scope="module")
def data_dir(tau2_data_dir) -> str:
  return tau2_data_dir


def _task(task_id: str) -> dict:
  return {
      "id": task_id,
      "description": {"purpose": "a test", "relevant_policies": None, "notes": None},
      "user_scenario": {"persona": None, "instructions": {
          "domain": "retail", "reason_for_call": "You want to cancel #W1.",
          "known_info": "You are Ann Lee in zip code 10001.", "unknown_info": None,
          "task_instructions": "Be brief."}},
      "initial_state": None,
      "evaluation_criteria": {
          "actions": [{"action_id": f"{task_id}_0", "name": "cancel_pending_order",
                       "arguments": {"order_id": "#W1", "reason": "no longer needed"},
                       "info": None}],
          "communicate_info": ["70.0"], "nl_assertions": None,
          "reward_basis": ["DB", "COMMUNICATE"]},
  }


def _write(folder, rows, splits=None) -> str:
  (folder / "tasks.json").write_text(json.dumps(rows))
  (folder / "split_tasks.json").write_text(json.dumps(
      splits or {"train": ["a"], "test": ["b"], "base": ["a", "b"]}))
  return str(folder)


def test_a_small_file_reads_into_typed_tasks(tmp_path):
  loaded = tasks.load(_write(tmp_path, [_task("a"), _task("b")]))
  assert [(t.task_id, t.split) for t in loaded] == [("a", "train"), ("b", "test")]
  a = loaded[0]
  assert a.scenario.known_info == "You are Ann Lee in zip code 10001."
  assert a.scenario.unknown_info is None and a.purpose == "a test"
  assert a.actions[0].arguments == {"order_id": "#W1", "reason": "no longer needed"}
  assert a.write_actions == a.actions and a.communicate_info == ("70.0",)
  assert a.nl_assertions == () and a.reward_basis == ("DB", "COMMUNICATE")
  assert [t.task_id for t in tasks.load(str(tmp_path), tasks.TEST)] == ["b"]


@pytest.mark.parametrize("edit, message", [
    (lambda t: t["evaluation_criteria"]["actions"][0].update(name="refund_order"),
     "[1].evaluation_criteria.actions[0].name: 'refund_order' is not one of"),
    (lambda t: t["user_scenario"].update(instructions="Cancel #W1."),
     "[1].user_scenario.instructions: expected the structured form"),
    (lambda t: t["user_scenario"]["instructions"].pop("reason_for_call"),
     "[1].user_scenario.instructions.reason_for_call: missing"),
    (lambda t: t["evaluation_criteria"].update(reward_basis=["DB", "VIBES"]),
     "[1].evaluation_criteria.reward_basis[1]: 'VIBES' is not one of"),
    (lambda t: t.update(initial_state={"initialization_data": {}}),
     "[1].initial_state: not supported"),
    (lambda t: t.update(id="c"), "[1].id: 'c' is in no split of split_tasks.json"),
])
def test_format_errors_name_the_file_and_the_field(tmp_path, edit, message):
  bad = _task("b")
  edit(bad)
  folder = _write(tmp_path, [_task("a"), bad])
  with pytest.raises(tasks.TaskFormatError) as info:
    tasks.load(folder)
  assert str(info.value).startswith(f"{tmp_path}/tasks.json: ")
  assert message in str(info.value)


def test_splits_must_partition_the_tasks(tmp_path):
  folder = _write(tmp_path, [_task("a"), _task("b")],
                  {"train": ["a", "b"], "test": ["b"], "base": ["a", "b"]})
  with pytest.raises(tasks.TaskFormatError, match=r"split_tasks.json: test: ids also in train"):
    tasks.load(folder)
  _write(tmp_path, [_task("a"), _task("b")], {"train": ["a"], "test": ["b"], "base": ["a"]})
  with pytest.raises(tasks.TaskFormatError, match="base: differs from the union"):
    tasks.load(folder)
  _write(tmp_path, [_task("a")])
  with pytest.raises(tasks.TaskFormatError, match=r"without a task: \['b'\]"):
    tasks.load(folder)
  with pytest.raises(ValueError, match="split 'dev'"):
    tasks.load(folder, "dev")


def test_the_real_tasks(data_dir):
  everything = tasks.load(data_dir)
  train, test = tasks.load(data_dir, tasks.TRAIN), tasks.load(data_dir, tasks.TEST)
  assert (len(everything), len(train), len(test)) == (114, 74, 40)
  assert not {t.task_id for t in train} & {t.task_id for t in test}
  assert {t.task_id for t in everything} == {str(i) for i in range(114)}
  for task in everything:
    assert task.scenario.known_info and task.scenario.reason_for_call
    assert task.scenario.domain == "retail" and task.reward_basis[0] == "DB"
    assert all(a.requestor == "assistant" for a in task.actions)
  assert sum(bool(t.write_actions) for t in everything) == 104
  assert sum(bool(t.communicate_info) for t in everything) == 36
  assert {t.task_id for t in everything if t.issues} == {"4", "5", "7"}
