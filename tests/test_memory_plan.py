"""The memory planner: mesh strings, and its per-device numbers against measured peaks on CPU."""

import os
import subprocess
import sys
import textwrap

import ml_collections
import pytest

from domains.airdialogue import task as airdialogue
from experiments.configs import (baselines_airdialogue, bc_airdialogue, calm_airdialogue,
                                 grpo_airdialogue_quick, ilql_airdialogue)
from ilql_dialogue import memory_plan, registry

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 0.15


def test_parse_mesh_fills_axes_left_out_and_names_a_bad_part():
  assert memory_plan.parse_mesh("fsdp:8") == {"data": 1, "fsdp": 8, "tensor": 1}
  assert memory_plan.parse_mesh("data:2, fsdp:4,tensor:2") == {"data": 2, "fsdp": 4,
                                                               "tensor": 2}
  for bad in ("fsdp:x", "pipeline:2", "data:0", "data"):
    with pytest.raises(ValueError, match="expected AXIS:SIZE"):
      memory_plan.parse_mesh(bad)


def test_cli_reports_a_bad_mesh_in_one_line():
  result = subprocess.run(
      [sys.executable, "-m", "experiments.plan", "--config=experiments/configs/bc_tiny.py",
       "--config.model.vocab_size=128", "--mesh=data:2,fsdp:x"],
      cwd=REPO, env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
      timeout=120)
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      "error: --mesh='data:2,fsdp:x': expected AXIS:SIZE,... with AXIS in ('data', 'fsdp', "
      "'tensor') and SIZE >= 1, got 'fsdp:x'"]


# One train step of a small model in a fresh process: the peak resident memory while it
# runs (VmHWM, reset just before) plus its inputs, which were resident already, is the
# step's measured peak. Large enough (about 1 GiB) that the allocator's slack is noise.
_MEASURE = textwrap.dedent("""
    import re, sys
    import jax, numpy as np
    from experiments.configs import bc_tiny, ilql_airdialogue_quick
    from ilql_dialogue import memory_plan, registry, sharding, train_loop

    def status(key):
      text = open("/proc/self/status").read()
      return int(re.search(key + r":\\s+(\\d+) kB", text).group(1)) * 1024

    config = (ilql_airdialogue_quick if sys.argv[1] == "ilql" else bc_tiny).get_config()
    config.model.update(vocab_size=4096, num_layers=4, d_model=256, num_heads=4,
                        num_kv_heads=4, head_dim=64, mlp_dim=1024)
    config.train.update(batch_size=16, grad_accum_steps=1)
    plan = memory_plan.plan(config, memory_plan.parse_mesh("data:1"), seq_len=256)
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    with sharding.mesh_context(mesh):
      training = train_loop.build_training(config, registry.make_algorithm(config), mesh)
      state = training.init()
      batch = {k: np.zeros((1, *v.shape), v.dtype)
               for k, v in memory_plan.abstract_batch(config, 16, 256).items()}
      batch["input_ids"][:] = np.random.default_rng(0).integers(0, 4096, (1, 16, 256))
      for key in ("attention_mask", "action_mask"):
        batch[key][:] = True
      batch = jax.device_put(batch, sharding.batch_sharding(mesh))
      step = training.step.lower(state, batch).compile()
      inputs = step.memory_analysis().argument_size_in_bytes
      jax.block_until_ready((state, batch))
      open("/proc/self/clear_refs", "w").write("5")
      before = status("VmRSS")
      jax.block_until_ready(step(state, batch))
      measured = status("VmHWM") - before + inputs
    print("PLANNED", plan.training, "MEASURED", measured)
""")


@pytest.mark.parametrize("algorithm", ["bc", "ilql"])
def test_planned_train_step_memory_is_within_15_percent_of_measured(algorithm):
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO}
  result = subprocess.run([sys.executable, "-c", _MEASURE, algorithm], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-5000:]
  words = result.stdout.split()
  planned, measured = int(words[words.index("PLANNED") + 1]), int(words[-1])
  assert abs(planned / measured - 1) <= TOLERANCE, (planned, measured)


def _gpt2_vocabulary(config):
  """`config` on GPT-2's 50,257-token vocabulary, with the AirDialogue table prefix."""
  config.model.update(vocab_size=50257,
                      prefix_field_vocab_sizes=airdialogue.TABLE_PREFIX.field_vocab_sizes,
                      prefix_num_rows=airdialogue.NUM_ROWS)
  return config


def _fsdp(size):
  return memory_plan.parse_mesh(f"fsdp:{size}")


def test_ilql_state_per_device_falls_as_one_over_fsdp():
  """GPT-2 small with ILQL's MLP heads: the two Q heads alone hold more parameters than the
  trunk; were they and their targets whole on every device, fsdp 2 would keep 0.77x."""
  config = _gpt2_vocabulary(ilql_airdialogue.get_config())
  one = memory_plan.state_bytes(config, _fsdp(1))[0]
  assert one["frozen"] > 0.4 * one["parameters"]  # The target Q heads.
  for size in (2, 4, 8):
    sharded = memory_plan.state_bytes(config, _fsdp(size))[0]
    for kind in ("parameters", "frozen", "optimizer", "gradients"):
      assert sharded[kind] * size / one[kind] == pytest.approx(1, rel=0.10), (kind, size)


def _online_rl(name):
  """GRPO's or PPO's config (the reference policy, PPO's value head) on GPT-2 small."""
  config = grpo_airdialogue_quick.get_config()
  config.model = bc_airdialogue.get_config().model
  config.algorithm = ml_collections.ConfigDict(dict(name=name))
  return config


@pytest.mark.parametrize("config", [
    bc_airdialogue.get_config, ilql_airdialogue.get_config, calm_airdialogue.get_config,
    lambda: baselines_airdialogue.get_config("mc_value"), lambda: _online_rl("grpo"),
    lambda: _online_rl("ppo"),
], ids=["bc", "ilql", "calm", "mc_value", "grpo", "ppo"])
def test_no_large_array_stays_whole_under_fsdp(config):
  """Every model array over 1 MiB is split fsdp ways: no logical axis of a large array is left
  without a rule that reaches the mesh (the value heads were, until their rows went on fsdp)."""
  registry.load_plugins()
  whole = [(a.path, a.shape, tuple(a.spec))
           for a in memory_plan.state_bytes(_gpt2_vocabulary(config()), _fsdp(4))[1]
           if a.nbytes > 2 ** 20 and a.device_bytes * 4 > a.nbytes]
  assert not whole


def test_parameter_report_lists_arrays_by_bytes_per_device():
  config = _gpt2_vocabulary(bc_airdialogue.get_config())
  lines = memory_plan.parameter_report(memory_plan.state_bytes(config, _fsdp(2))[1],
                                       top=2).splitlines()
  assert lines[0].split() == ["array", "kind", "shape", "placement", "MiB/device", "share"]
  assert lines[1].split()[:3] == ["trunk.embed", "parameters", "(50257,"]
  assert lines[1].endswith(f"{50257 * 768 * 4 / 2 / 2 ** 20:11.3f}    50%")
  assert lines[-1].startswith("  ... ") and lines[-1].endswith(" MiB")
