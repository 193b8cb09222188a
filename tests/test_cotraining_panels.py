"""Simulator panels: held-out simulators are refused for training, at start-up."""

import types

import ml_collections
import pytest

from cotraining import launch, panels
from experiments.configs import (collapse_airdialogue_quick, collapse_persuasion_quick,
                                 panel_airdialogue, panel_persuasion)


def rl_config(opponent, panel):
  return ml_collections.ConfigDict(dict(env="airdialogue", opponent=opponent, panel=panel,
                                        max_new_tokens=8, opponent_temperature=1.0))


@pytest.mark.parametrize("config", [panel_airdialogue, panel_persuasion])
def test_panel_configs_split_their_simulators(config):
  panel = panels.from_config(config.get_config())
  assert panel.training and panel.held_out
  for member in panel.training:
    assert panel.held_out_pattern(member.spec) is None


def test_every_scripted_airdialogue_style_is_held_out():
  panel = panels.from_config(panel_airdialogue.get_config())
  for spec in ("scripted:volunteer", "scripted:terse/held_out", "scripted:chatty/casual"):
    assert panel.held_out_pattern(spec) == "scripted:*"
  assert panel.held_out_pattern(f"{panel_airdialogue.ROOT}/customer_seed1") is None


@pytest.mark.parametrize("opponent", [
    "scripted:terse",
    "scripted:terse/train",  # Another phrasing family of the same held-out style.
    f"{panel_airdialogue.ROOT}/customer_seed2/",  # Another spelling of the same directory.
    f"pick:k=3,pick=tail:{panel_airdialogue.ROOT}/customer_seed2",  # The same, sampled by VS.
    f"pick:k=2:{panel_airdialogue.ROOT}/customer_seed3",
    "vs_llm:model=smollm2-135m-instruct,k=2,base_url=http://127.0.0.1:8000/v1/",
])
def test_training_against_a_held_out_simulator_is_refused(opponent):
  with pytest.raises(ValueError, match="held out by config.rl.panel"):
    panels.refuse_held_out(rl_config(opponent, panel_airdialogue.get_config()))


def test_training_simulators_and_configs_without_a_panel_pass():
  panels.refuse_held_out(rl_config(f"{panel_airdialogue.ROOT}/customer_seed0",
                                   panel_airdialogue.get_config()))
  panels.refuse_held_out(rl_config("scripted:volunteer", None))
  panels.refuse_held_out(ml_collections.ConfigDict(dict(opponent="scripted:volunteer")))


def test_a_panel_with_a_simulator_on_both_sides_is_rejected():
  with pytest.raises(ValueError, match="also held out"):
    panels.from_config(dict(training=["pick:k=5:runs/c0"], held_out=["runs/c0", "scripted:*"]))
  with pytest.raises(ValueError, match="not a party spec"):
    panels.from_config(dict(training=[dict(path="runs/c0")], held_out=[]))
  with pytest.raises(ValueError, match="missing"):
    panels.from_config(dict(training=["runs/c0"]))


def test_the_launcher_refuses_a_held_out_opponent_before_building_it(tmp_path):
  config = ml_collections.ConfigDict(dict(rl=rl_config("scripted:terse",
                                                       panel_airdialogue.get_config())))
  task = types.SimpleNamespace(role="agent")
  with pytest.raises(ValueError, match="held out by config.rl.panel"):
    launch.rollout_source(config, algorithm=None, task=task, workdir=str(tmp_path))


def test_a_single_spec_is_one_member():
  panel = panels.from_config({"training": "runs/c0", "held_out": ("scripted:*",)})
  assert [m.spec for m in panel.training] == ["runs/c0"]


COLLAPSE_CONFIGS = (collapse_airdialogue_quick, collapse_persuasion_quick)


@pytest.mark.parametrize("module,arm", [(m, a) for m in COLLAPSE_CONFIGS for a in m.ARMS])
def test_collapse_arms_share_one_simulator_reference(module, arm):
  c = module.get_config(arm)
  c.simulator = "runs/sim"
  if arm == "mixed":  # Its members name the simulator too (a tuple holds no reference).
    c.rl.population.members = c.rl.panel.training = (
        *collapse_airdialogue_quick.MIXED_SCRIPTED, "runs/sim")
  assert c.online_eval.opponent == "runs/sim"  # Selection plays the frozen training simulator.
  picked = arm == "temperature"  # The k-sample picker at temperature 1.0.
  assert c.rl.opponent == ("pick:k=5,pick=uniform:runs/sim" if picked else "runs/sim")
  assert c.rl.opponent_temperature == (0.3 if arm == "single" else 1.0)
  assert (c.rl.get("cotrain") or {}).get("simulator_init_from") == (
      "runs/sim" if arm in ("cotrain", "population") else None)
  pooled = arm in ("population", "mixed")
  assert c.rl.population.enabled == pooled if "population" in c.rl else not pooled
  panels.refuse_held_out(c.rl)
  panels.refuse_held_out_selection(c)
  training = [m.spec for m in panels.from_config(c.rl.panel).training]
  if arm == "mixed":  # Every scripted style in the training families, and the simulator.
    assert training == [*collapse_airdialogue_quick.MIXED_SCRIPTED, "runs/sim"]
    assert list(c.rl.population.members) == training
  else:
    assert training == ["runs/sim"]


@pytest.mark.parametrize("module", COLLAPSE_CONFIGS)
def test_collapse_refuses_a_held_out_simulator(module):
  c = module.get_config(module.ARMS[1])
  c.simulator = module.HELD_OUT[0]
  with pytest.raises(ValueError, match="held out"):
    panels.refuse_held_out(c.rl)


def test_persuasion_arms_play_the_held_out_panel_and_cotrain_zero_sum():
  for arm in collapse_persuasion_quick.ARMS:
    c = collapse_persuasion_quick.get_config(arm)
    assert tuple(c.online_eval.held_out) == collapse_persuasion_quick.HELD_OUT
    assert (c.rl.env, c.task.role, c.task.root) == ("persuasion", "persuader", "runs/p4g")
    if arm in ("cotrain", "population"):
      assert c.rl.cotrain.simulator_reward == "zero_sum"


def test_airdialogue_selection_plays_the_simulator_at_the_evaluation_temperature(monkeypatch):
  """The single arm trains against its customer at T = 0.3; selection plays it at
  online_eval.opponent_temperature, as the environment path does (test_persuasion_env)."""
  import types

  from workflows import evaluate as evaluate_lib
  from workflows import train as train_lib

  seen = []
  monkeypatch.setattr(evaluate_lib, "online_eval_fn", lambda tok, role, opponent, **kw: seen.append(
      (opponent, kw["opponent_options"]["temperature"])) or (lambda m: {}))
  c = collapse_airdialogue_quick.get_config("single")
  c.simulator = "runs/sim"
  task = types.SimpleNamespace(tokenizer=None, role="agent", include_context=True,
                               serialize_context=None, prefix=None)
  train_lib.online_eval(task, c)
  assert c.rl.opponent_temperature == 0.3 and seen == [("runs/sim", 1.0)]
