"""PersuasionEnv: scenarios from real personas, the persuadee's stated donation as the reward,
replay from seeds, the launcher's "persuasion" environment, and GRPO steps on a tiny persuader."""

import math
import os

import ml_collections
import numpy as np
import pytest

from cotraining import launch
from data_pipelines.dialogue import Dialogue, Turn, read_jsonl, write_jsonl
from data_pipelines.persuasion import loader
from domains.persuasion import environment as persuasion_env
from domains.persuasion import task as persuasion_task
from domains.persuasion.environment import PERSUADEE, PERSUADER
from experiments.configs import grpo_persuasion_quick
from ilql_dialogue import environment, metrics
from workflows import train as launcher
from test_tasks import write_tiny_p4g


# What the scripted persuadee says it gives, and the amount that reading must yield (None:
# unparsable, "never": it never states one, so the dialogue hits the turn limit).
STATEMENTS = (("0.50", 0.5), ("one dollar", 1.0), ("all of it", 2.0), ("nothing", 0.0),
              ("lots", None), (None, "never"))
PERSUADER_LINES = ("hi, have you heard of save the children", "they help kids in need",
                   "even a little helps", "would you donate some of your payment")


class ScriptedPersuadee:
  """Chats, then at a turn drawn from its row seed states a donation drawn from the seed."""

  def reset(self, contexts, seeds):
    self.contexts = list(contexts)
    rngs = [np.random.default_rng(s) for s in seeds]
    self.plans = [(int(rng.integers(1, 4)), STATEMENTS[rng.integers(len(STATEMENTS))])
                  for rng in rngs]
    self.turns = [0] * len(seeds)

  def respond(self, histories):
    replies = []
    for b, history in enumerate(histories):
      if history is None:
        replies.append(None)
        continue
      assert history[-1].speaker == PERSUADER
      self.turns[b] += 1
      speak_at, (phrase, _) = self.plans[b]
      if phrase is not None and self.turns[b] == speak_at:
        replies.append(f"ok, thank you. [donate] {phrase} [/donate]")
      else:
        replies.append(f"i see. tell me more ({self.turns[b]})")
    return replies


class GenerousPersuadee:
  """Gives everything at its first turn: a held-out simulator unlike ScriptedPersuadee."""

  def reset(self, contexts, seeds):
    del contexts, seeds

  def respond(self, histories):
    return [None if h is None else "sure! [donate] 2 [/donate]" for h in histories]


class ScriptedPersuader:
  """Says one of PERSUADER_LINES a turn, drawn from its row seed."""

  def reset(self, contexts, seeds):
    self.contexts = list(contexts)
    self.rngs = [np.random.default_rng(s) for s in seeds]

  def respond(self, histories):
    return [None if h is None else PERSUADER_LINES[rng.integers(len(PERSUADER_LINES))]
            for rng, h in zip(self.rngs, histories)]


def persona(i):
  return {"extrovert": 3.0 + i / 10, "age": 20.0 + i, "sex": "Female" if i % 2 else "Male"}


def hand_made_dialogues(n=5):
  return [Dialogue(dialogue_id=f"d{i}", roles=loader.ROLES,
                   turns=(Turn(PERSUADER, "hello"), Turn(PERSUADEE, "hi")),
                   context={PERSUADER: persona(100 + i), PERSUADEE: persona(i)},
                   outcome=i / 10, meta={"donation": i / 5}) for i in range(n)]


def play(env, scenarios, max_turns=10, keys=None):
  persuadee, persuader = ScriptedPersuadee(), ScriptedPersuader()
  episodes = environment.play(env, {PERSUADER: persuader, PERSUADEE: persuadee}, scenarios,
                              max_turns=max_turns, seed=7, keys=keys)
  return episodes, persuader, persuadee


def test_a_batch_ends_on_the_stated_donation_and_earns_it_over_two():
  env = persuasion_env.PersuasionEnv(hand_made_dialogues())
  scenarios = env.sample(seed=3, num=24)
  episodes, persuader, persuadee = play(env, scenarios)
  seen = set()
  for e, plan in zip(episodes, persuadee.plans):
    expected = plan[1][1]
    assert e.turns[0].speaker == PERSUADER
    assert [t.speaker for t in e.turns] == [env.turn_order[k % 2] for k in range(len(e.turns))]
    if expected == "never":
      assert e.end_reason == environment.TURN_LIMIT and len(e.turns) == 10
      assert env.reward(e) == 0.0
    elif expected is None:
      assert e.end_reason == persuasion_env.UNPARSABLE and "not an amount" in e.info["parse_error"]
      assert env.reward(e) == 0.0
    else:
      assert e.end_reason == persuasion_env.DONATION and e.info["donation"] == expected
      assert env.reward(e) == pytest.approx(expected / 2)
      assert e.turns[-1].speaker == PERSUADEE and len(e.turns) == 2 * plan[0]
    seen.add(e.end_reason)
  assert seen == {persuasion_env.DONATION, persuasion_env.UNPARSABLE, environment.TURN_LIMIT}
  # Each party saw its own persona of the scenario's dialogue, never the other's.
  for s, mine, theirs in zip(scenarios, persuader.contexts, persuadee.contexts):
    assert mine == s.personas[PERSUADER] and theirs == s.personas[PERSUADEE]
    assert mine["age"] >= 100 > theirs["age"]
  summary = persuasion_env.summarize(episodes)
  reasons = [e.end_reason for e in episodes]
  assert summary["donation/unparsable"] == reasons.count(persuasion_env.UNPARSABLE) > 0
  assert summary["donation/no_statement"] == reasons.count(environment.TURN_LIMIT) > 0
  stated = [e.info["donation"] for e in episodes if e.end_reason == persuasion_env.DONATION]
  assert summary["donation/stated"] == len(stated)
  assert summary["donation/mean"] == pytest.approx(np.mean(stated))
  assert summary["persuader_donation_blocks"] == 0
  flat = env.metrics(episodes)
  assert flat["donation/unparsable"] == summary["donation/unparsable"]
  assert flat[f"end_reason/{environment.TURN_LIMIT}"] == summary["donation/no_statement"]


def test_no_donation_reward_is_an_option_and_persuader_blocks_do_not_end():
  env = persuasion_env.PersuasionEnv(hand_made_dialogues(), no_donation_reward=-0.5)
  scenario = env.sample(0, 1)[0]
  assert env.ending(scenario, PERSUADER, "[donate] 2 [/donate]") is None
  assert env.ending(scenario, PERSUADEE, "no amount here") is None
  unparsable = env.ending(scenario, PERSUADEE, "[donate] lots [/donate]")
  assert unparsable.reason == persuasion_env.UNPARSABLE
  episode = environment.Episode(scenario, "k", (), unparsable.reason, unparsable.info)
  assert env.reward(episode) == -0.5


def test_dialogues_replay_from_their_seeds_in_any_batch():
  env = persuasion_env.PersuasionEnv(hand_made_dialogues())
  scenarios = env.sample(seed=3, num=12)
  whole, _, _ = play(env, scenarios)
  order = [7, 2, 11, 5]
  part, _, _ = play(env, [scenarios[i] for i in order])
  for e, i in zip(part, order):
    assert e.turns == whole[i].turns and e.end_reason == whole[i].end_reason
  # Rows of one scenario with different keys (a group) are different dialogues' seeds.
  group, _, _ = play(env, [scenarios[0]] * 6, keys=[f"{scenarios[0].scenario_id}/{g}"
                                                    for g in range(6)])
  assert len({e.turns for e in group}) > 1


def test_scenarios_are_seeded_prefixes_that_cover_the_split():
  env = persuasion_env.PersuasionEnv(hand_made_dialogues(5))
  assert env.sample(4, 3) == env.sample(4, 12)[:3]
  first_round = [s.dialogue_id for s in env.sample(4, 5)]
  assert sorted(first_round) == [f"d{i}" for i in range(5)]
  assert first_round != [s.dialogue_id for s in env.sample(5, 5)]
  assert [s.scenario_id for s in env.sample(4, 2)] == ["4:0", "4:1"]
  assert env.sample(4, 1)[0].donation == float(first_round[0][1:]) / 5
  with pytest.raises(ValueError, match="no persona for"):
    persuasion_env.PersuasionEnv([Dialogue("x", loader.ROLES, (), {PERSUADER: {}})])


def test_corpus_splits_match_the_task_and_contexts_serialize_as_it_trained(tmp_path,
                                                                           p4g_data_dir):
  train = persuasion_env.PersuasionEnv.from_corpus("train", p4g_data_dir)
  held_out = persuasion_env.PersuasionEnv.from_corpus("eval", p4g_data_dir)
  assert (len(train.dialogues), len(held_out.dialogues)) == (915, 102)
  assert not {d.dialogue_id for d in train.dialogues} & {d.dialogue_id for d in held_out.dialogues}
  # The BC task reads its dialogues back from JSON lines: the persona text is the same.
  scenario = held_out.sample(1000, 1)[0]
  original = next(d for d in held_out.dialogues if d.dialogue_id == scenario.dialogue_id)
  write_jsonl(str(tmp_path / "d.jsonl"), [original])
  (stored,) = read_jsonl(str(tmp_path / "d.jsonl"))
  for role in loader.ROLES:
    assert (persuasion_task.serialize_persona(role, held_out.context(scenario, role))
            == persuasion_task.serialize_persona(role, stored.context[role]))
  env = launch.make_env(ml_collections.ConfigDict(dict(env="persuasion", split="eval",
                                                       data_dir=p4g_data_dir)))
  assert isinstance(env, persuasion_env.PersuasionEnv) and len(env.dialogues) == 102


def test_grpo_steps_through_the_launcher_with_the_persuasion_env(tmp_path):
  """grpo_persuasion_quick, shrunk: a fresh tiny persuader against the scripted persuadee
  (a user class spec) on the personas of a tiny corpus in the real format."""
  full = grpo_persuasion_quick.get_config()
  assert (full.rl.env, full.task.role, full.algorithm.name) == ("persuasion", "persuader", "grpo")
  assert full.model.init_from.endswith("bc_persuasion_quick")
  rows = full.rl.scenarios * full.rl.group_size
  assert full.train.checkpoint_every % (rows // full.train.batch_size * full.rl.epochs) == 0
  assert full.rl.seq_len == full.model.max_seq_len

  data_dir = write_tiny_p4g(tmp_path / "p4g")
  config = full
  config.task.update(root=str(tmp_path / "root"), data_dir=data_dir, max_length=96)
  config.model.update(init_from="", num_layers=1, d_model=32, num_heads=2, num_kv_heads=1,
                      head_dim=16, mlp_dim=64, max_seq_len=128)
  config.rl.update(data_dir=data_dir, opponent="test_persuasion_env:ScriptedPersuadee",
                   scenarios=2, group_size=4, max_turns=6, max_new_tokens=8, seq_len=128)
  config.train.update(steps=2, batch_size=8, log_every=1, checkpoint_every=2, eval_every=2,
                      eval_at_start=False, progress_bar=False)
  config.online_eval.update(num_dialogues=4, batch_size=4, max_turns=6, max_new_tokens=8,
                            held_out=("test_persuasion_env:GenerousPersuadee",))
  workdir = str(tmp_path / "grpo")
  launcher.run(config, workdir)
  records = metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))
  train = [r for r in records if r["split"] == "train"]
  # The held-out persuadee is played on the same scenarios and logged apart; "return" (what
  # selection reads) stays the training opponent's.
  (evaluation,) = [r for r in records if "return" in r]
  held_out = "held_out/test_persuasion_env-GenerousPersuadee/"
  assert evaluation[held_out + "return"] == 1.0 and evaluation[held_out + "donation/stated"] == 4
  assert evaluation["return"] < 1.0
  assert [r["step"] for r in train] == [1, 2]
  assert all(math.isfinite(r["loss"]) and 0 <= r["reward"] <= 1 for r in train)
  # Step 1 trains at the behaviour parameters: the trainer re-scores what the sampler drew.
  assert abs(train[0]["ratio"] - 1.0) < 1e-5 and train[0]["kl"] == 0.0


def test_only_the_persuadee_may_write_the_donation_block():
  """The persuader is forbidden the donation markers (a statement is the persuadee's to make);
  the persuadee is not; an AirDialogue block is nobody's here, and no warning is due."""
  from data_pipelines import tokenization
  from data_pipelines.persuasion import loader
  from ilql_dialogue.lm_party import forbidden_token_ids
  from ilql_dialogue.parties import make_party

  tok = tokenization.train_tokenizer(
      ["I will donate [donate] 0.50 [/donate]", "Would you donate?"], loader.ROLES,
      vocab_size=300, markers=[loader.DONATION_OPEN, loader.DONATION_CLOSE])
  donate = {tok.marker_ids[loader.DONATION_OPEN], tok.marker_ids[loader.DONATION_CLOSE]}
  assert donate <= set(forbidden_token_ids(tok, "persuader"))
  assert not donate & set(forbidden_token_ids(tok, "persuadee"))


def test_the_training_opponent_cannot_be_held_out(tmp_path):
  config = grpo_persuasion_quick.get_config()
  config.online_eval.held_out = ("scripted:volunteer", "pick:k=5:" + config.rl.opponent)
  with pytest.raises(ValueError, match="the simulator .* trains or selects against"):
    launcher.online_eval(None, config)


def test_evaluation_opponents_sample_at_one_temperature_whatever_the_training_one(
    tmp_path, monkeypatch):
  """The single-simulator arm trains against its simulator at T = 0.3; selection and the
  held-out simulators must still be played at online_eval.opponent_temperature, the same
  for every arm, or the arms' curves would measure different simulators."""
  import types

  from workflows import evaluate as evaluate_lib

  seen = []
  monkeypatch.setattr(evaluate_lib, "environment_eval_fn",
                      lambda env, tok, role, opponent, **kw: seen.append(
                          (opponent, kw["opponent_options"]["temperature"])) or (lambda m: {}))
  config = grpo_persuasion_quick.get_config()
  config.rl.update(data_dir=write_tiny_p4g(tmp_path / "p4g"), opponent_temperature=0.3)
  config.online_eval.held_out = ("scripted:volunteer",)
  task = types.SimpleNamespace(tokenizer=None, role="persuader", include_context=True,
                               serialize_context=None, prefix=None)
  launcher.online_eval(task, config)
  assert seen == [(config.rl.opponent, 1.0), ("scripted:volunteer", 1.0)]
  config.online_eval.opponent_temperature = 0.5
  seen.clear()
  launcher.online_eval(task, config)
  assert [t for _, t in seen] == [0.5, 0.5]


def test_evaluate_environment_writes_every_dialogue_and_its_reward(tmp_path):
  """The scripted persuader against the generous persuadee: every dialogue states 2 dollars
  at the persuadee's first turn, so the mean reward is exactly 1 over the n transcripts."""
  import json

  from workflows import evaluate as evaluate_lib

  env = persuasion_env.PersuasionEnv.from_corpus("eval", write_tiny_p4g(tmp_path / "p4g"))
  summary = evaluate_lib.evaluate_environment(
      env, PERSUADER, "test_persuasion_env:ScriptedPersuader",
      "test_persuasion_env:GenerousPersuadee", num_dialogues=5, workdir=str(tmp_path / "eval"),
      seed=1000, batch_size=2, tag="t")
  assert (summary["return"], summary["n"], summary["donation/stated"]) == (1.0, 5, 5)
  assert summary["mean_turns"] == 2.0
  lines = [json.loads(l) for l in open(tmp_path / "eval" / "transcripts_t.jsonl")]
  assert [l["key"] for l in lines] == [f"1000:{i}" for i in range(5)]
  assert all(l["reward"] == 1.0 and l["turns"][-1][0] == PERSUADEE for l in lines)
  with open(tmp_path / "eval" / "eval_t.json") as f:
    assert json.load(f)["return"] == 1.0


def test_fixed_persuaders_say_their_lines_in_order_to_every_row(tmp_path):
  from cotraining import persuader_probes
  from ilql_dialogue.parties import make_party

  env = persuasion_env.PersuasionEnv.from_corpus("eval", write_tiny_p4g(tmp_path / "p4g"))
  ask = make_party("cotraining.persuader_probes:Ask", PERSUADER)
  episodes = environment.play(env, {PERSUADER: ask, PERSUADEE: ScriptedPersuadee()},
                              env.sample(7, 3), max_turns=12, seed=7)
  lines = persuader_probes.LINES["ask"]
  for e in episodes:
    said = [t.text for t in e.turns if t.speaker == PERSUADER]
    assert said == [lines[min(i, len(lines) - 1)] for i in range(len(said))]


def test_simulator_gamma_finds_the_persuadee_states_of_an_environment_transcript(tmp_path):
  """experiments.simulator_gamma on P4G: the persuadee turns of an evaluate_env transcript
  become states whose context is the scenario's own persuadee persona."""
  import json

  from cotraining import sharpness
  from workflows import simulator_gamma

  env = persuasion_env.PersuasionEnv.from_corpus("eval", write_tiny_p4g(tmp_path / "p4g"))
  path = tmp_path / "t.jsonl"
  path.write_text("".join(json.dumps({"key": f"1000:{i}", "turns": [
      [PERSUADER, "hi"], [PERSUADEE, "hello"], [PERSUADER, "give?"], [PERSUADEE, "no"]]}) + "\n"
      for i in (0, 2)))
  scenarios = simulator_gamma.scenarios_of(str(path), env)
  assert {"1000:0", "1000:2"} <= set(scenarios)  # Rebuilt from the seed: 0 to the highest.
  assert scenarios["1000:2"] == env.sample(1000, 3)[2]
  contexts, histories = sharpness.states_from_transcripts(str(path), PERSUADEE, scenarios, env, 3)
  assert [[t.text for t in h] for h in histories] == [["hi"], ["hi", "hello", "give?"], ["hi"]]
  assert contexts[2] == env.context(scenarios["1000:2"], PERSUADEE)
