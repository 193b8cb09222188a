"""Persuasion for Good: checkpoint selection never plays a persona of the reported test.

The reported evaluation plays the test split "eval" (experiments/evaluate_env.py). Splitting by
dialogue id does not split people: in the corpus one person takes part in up to 16 dialogues,
in either role, so selection's scenarios must also leave out the held-in dialogues of every
person (and every persona) of the test split. Each persuasion config with an online
evaluation is built the way training builds it (workflows/train.py online_eval), on a small
corpus in which people recur as in the real one, and on the real corpus when it is there.
"""

import functools
import os
import types

import pytest

from domains.persuasion import environment as persuasion_env
from experiments.configs import collapse_persuasion_quick, grpo_persuasion_quick
from workflows import evaluate as evaluate_lib
from workflows import train as train_lib

REPORT_SPLIT = "eval"  # What experiments/evaluate_env.py reports on (any seed: the whole split).
CONFIGS = {"grpo_persuasion_quick": grpo_persuasion_quick.get_config,
           **{f"collapse_persuasion_quick:{arm}": functools.partial(
               collapse_persuasion_quick.get_config, arm)
              for arm in collapse_persuasion_quick.ARMS}}


def write_recurring_people_p4g(data_dir, num_dialogues=60):
  """Corpus files in the real format where, as in the real corpus, people take part in several
  dialogues and some in both roles; a person's traits are the same in each."""
  os.makedirs(os.path.join(data_dir, "FullData"), exist_ok=True)
  lines, info = [",Unit,Turn,B4,B2"], ["B2,B3,B4,B6,B7,extrovert.x,age.x,sex.x"]
  for i in range(num_dialogues):
    people = (f"u{i % 11}", f"u{10 + i % 17}")  # u10 is a persuader and a persuadee.
    for turn in range(2):
      for role in (0, 1):
        lines.append(f"{len(lines) - 1},turn {turn} of {people[role]},{turn},{role},dlg{i:03d}")
    for role, person in enumerate(people):
      number = int(person[1:])
      info.append(f"dlg{i:03d},{person},{role},{(i % 3) / 2},3,{1 + number / 10},{20 + number},"
                  f"{'Female' if number % 2 else 'Male'}")
  for name, rows in (("full_dialog.csv", lines), ("full_info.csv", info)):
    with open(os.path.join(data_dir, "FullData", name), "w") as f:
      f.write("\n".join(rows) + "\n")
  return str(data_dir)


def selection_scenarios(config, monkeypatch):
  """(env, scenarios) of every opponent online_eval plays, as training builds them."""
  seen = []

  def environment_eval_fn(env, tokenizer, role, opponent, **options):
    seen.append((env, env.sample(options["seed"], options["num_dialogues"])))
    return lambda model: {}

  monkeypatch.setattr(evaluate_lib, "environment_eval_fn", environment_eval_fn)
  task = types.SimpleNamespace(tokenizer=None, role="persuader", include_context=False,
                               serialize_context=None, prefix=None)
  train_lib.online_eval(task, config)
  return seen


def overlap(selection_env, scenarios, report_env):
  """What the selection scenarios share with the whole report split: dialogues, people (either
  role), the opponent's persona, or the pair of personas the parties read."""
  selected = [next(d for d in selection_env.dialogues if d.dialogue_id == s.dialogue_id)
              for s in scenarios]
  def facts(d):
    persona = {role: repr(sorted(d.context[role].items())) for role in d.roles}
    return ({("dialogue", d.dialogue_id), ("persuadee persona", persona[persuasion_env.PERSUADEE]),
             ("personas", tuple(persona[role] for role in d.roles))}
            | {("person", user) for user in d.meta["user_ids"].values()})

  reported = set().union(*(facts(d) for d in report_env.dialogues))
  return set().union(*(facts(d) for d in selected)) & reported


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_selection_plays_no_person_or_persona_of_the_test_split(name, tmp_path, monkeypatch):
  data_dir = write_recurring_people_p4g(tmp_path / "p4g")
  config = CONFIGS[name]()
  assert config.online_eval.num_dialogues > 0 and config.selection.metric == "return"
  config.rl.data_dir = data_dir
  played = selection_scenarios(config, monkeypatch)
  assert len(played) == 1 + len(config.online_eval.held_out)
  report = persuasion_env.PersuasionEnv.from_corpus(REPORT_SPLIT, data_dir)
  assert report.dialogues
  for env, scenarios in played:
    assert len(scenarios) == config.online_eval.num_dialogues
    assert not overlap(env, scenarios, report)
  # The check has teeth: by dialogue id alone ("train") the same people are on both sides.
  train = persuasion_env.PersuasionEnv.from_corpus("train", data_dir)
  assert overlap(train, train.sample(0, len(train.dialogues)), report)


def test_on_the_real_corpus_selection_and_report_share_no_persona(p4g_data_dir, monkeypatch):
  config = grpo_persuasion_quick.get_config()
  config.rl.data_dir = p4g_data_dir
  (env, scenarios), = selection_scenarios(config, monkeypatch)
  report = persuasion_env.PersuasionEnv.from_corpus(REPORT_SPLIT, p4g_data_dir)
  assert (len(env.dialogues), len(report.dialogues)) == (577, 102)
  assert not overlap(env, env.sample(0, len(env.dialogues)), report)
  assert not overlap(env, scenarios, report)
  train = persuasion_env.PersuasionEnv.from_corpus("train", p4g_data_dir)
  assert {f for f, _ in overlap(train, train.sample(0, 915), report)} >= {"person"}
