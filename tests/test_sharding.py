"""Mesh rules, and a sharded train step on 8 fake CPU devices vs one device."""

import textwrap

import jax
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from fake_devices import run_on_eight_devices
from ilql_dialogue import sharding

MESH_222 = AbstractMesh((2, 2, 2), sharding.MESH_AXES)


def test_rules_cover_the_model_vocabulary():
  from ilql_dialogue.models.layers import LOGICAL_AXES
  ruled = dict(sharding.LOGICAL_AXIS_RULES)
  assert set(LOGICAL_AXES) <= set(ruled)
  assert ruled["batch"] == ("data", "fsdp")


def test_logical_to_spec_maps_names_to_mesh_axes():
  spec = sharding.logical_to_spec(("layers", "embed", "kv_heads", None, "head_dim"),
                                  (2, 64, 4, 3, 16), MESH_222)
  assert spec == P(None, "fsdp", "tensor", None, None)
  assert sharding.logical_to_spec(("batch", None), (8, 5), MESH_222) == P(("data", "fsdp"), None)


def test_logical_to_spec_replicates_what_does_not_divide():
  # A 50257-row vocabulary and a single kv head cannot split over tensor=2.
  assert sharding.logical_to_spec(("vocab", "embed"), (50257, 64), MESH_222) == P(None, "fsdp")
  assert sharding.logical_to_spec(("kv_heads", "head_dim"), (1, 16), MESH_222) == P(None, None)
  # batch=6 divides by data=2 but not data*fsdp=4: keep the prefix that divides.
  assert sharding.logical_to_spec(("batch",), (6,), MESH_222) == P("data")


def test_logical_to_spec_uses_a_mesh_axis_once():
  assert sharding.logical_to_spec(("heads", "mlp"), (4, 8), MESH_222) == P("tensor", None)


def test_value_head_kernels_shard_on_fsdp_and_tensor():
  # Hidden layer [embed, head_hidden] as an MLP's; output kernel [head_in, vocab] rows on fsdp.
  assert sharding.logical_to_spec(("embed", "head_hidden"), (32, 64), MESH_222) == P("fsdp",
                                                                                       "tensor")
  assert sharding.logical_to_spec(("head_in", "vocab"), (64, 128), MESH_222) == P("fsdp",
                                                                                   "tensor")
  assert sharding.logical_to_spec(("head_in", None), (64, 1), MESH_222) == P("fsdp", None)


def test_unknown_logical_axis_is_an_error():
  with pytest.raises(ValueError, match="'experts' has no sharding rule"):
    sharding.logical_to_spec(("experts",), (4,), MESH_222)


def test_make_mesh_checks_device_count():
  mesh = sharding.make_mesh()
  assert mesh.axis_names == sharding.MESH_AXES
  assert mesh.shape["data"] == jax.device_count()
  with pytest.raises(ValueError, match="devices"):
    sharding.make_mesh(data=jax.device_count() + 1)


# Runs with 8 fake devices; XLA_FLAGS must be set before jax is imported, hence
# a subprocess. Inits the real Transformer + AdamW state sharded on a
# (data=2, fsdp=2, tensor=2) mesh, copies it to one device, and takes the same
# BC step on both.
_EIGHT_DEVICE_SCRIPT = textwrap.dedent("""
    import jax, numpy as np
    from flax import nnx
    from jax.sharding import PartitionSpec as P
    from experiments.configs import bc_tiny
    from ilql_dialogue import bc, sharding, train_loop
    from workflows import train as launcher

    assert jax.device_count() == 8, jax.devices()
    config = bc_tiny.get_config()
    config.model.vocab_size = 128
    config.model.num_layers = 1
    config.train.batch_size = 8
    batch = next(launcher.synthetic_batches(config)(0))
    mesh8 = sharding.make_mesh(2, 2, 2)
    mesh1 = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    with sharding.mesh_context(mesh8):
      training8 = train_loop.build_training(config, bc.BC(), mesh8)
      state8 = training8.init()
    init = jax.device_get(nnx.to_pure_dict(state8))

    def spec_and_shard(x):
      return x.sharding.spec, x.addressable_shards[0].data.shape
    model = state8["model"]
    embed = model["embed"][...]
    assert spec_and_shard(embed) == (P("tensor", "fsdp"), (64, 32)), spec_and_shard(embed)
    assert len(embed.sharding.device_set) == 8
    qkv = model["blocks"]["attn"]["qkv_kernel"][...]  # [layers, embed, kv_heads, G+2, head_dim]
    assert qkv.shape == (1, 64, 2, 4, 16)
    assert spec_and_shard(qkv) == (P(None, "fsdp", "tensor", None, None), (1, 32, 1, 4, 16))
    out = model["blocks"]["attn"]["out_kernel"][...]  # [layers, heads, head_dim, embed]
    assert spec_and_shard(out) == (P(None, "tensor", None, "fsdp"), (1, 2, 16, 32))
    mu = state8["optimizer"]["opt_state"][1][0]["mu"]["embed"][...]
    assert spec_and_shard(mu) == (P("tensor", "fsdp"), (64, 32)), spec_and_shard(mu)

    with sharding.mesh_context(mesh1):
      training1 = train_loop.build_training(config, bc.BC(), mesh1)
      state1 = jax.device_put(jax.device_get(state8), training1.shardings)
      state1, metrics1 = training1.step(state1, train_loop.place_batch(batch, config, mesh1))
    with sharding.mesh_context(mesh8):
      batch8 = train_loop.place_batch(batch, config, mesh8)
      ids = batch8["input_ids"]
      assert spec_and_shard(ids) == (P(None, ("data", "fsdp")), (1, 2, 32)), spec_and_shard(ids)
      state8, metrics8 = training8.step(state8, batch8)

    final1 = jax.device_get(nnx.to_pure_dict(state1))
    final8 = jax.device_get(nnx.to_pure_dict(state8))
    changed = jax.tree.leaves(jax.tree.map(lambda a, b: bool((a != b).any()), init, final1))
    assert sum(changed) > 10, "the step did not update the parameters"
    assert final8["model"]["embed"].shape == (128, 64)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=0),
                 final1, final8)
    np.testing.assert_allclose(float(metrics1["loss"]), float(metrics8["loss"]), atol=1e-5)
    print("SHARDED_OK")
""")


def test_sharded_step_matches_single_device_on_eight_fake_devices():
  run_on_eight_devices(_EIGHT_DEVICE_SCRIPT, "SHARDED_OK")


# ILQL under FSDP: the value and target heads are sharded too (their output kernel's rows on
# fsdp), and the sharded step equals the 1-device step. One init on one device, copied onto
# (data=4, fsdp=2) and (data=2, fsdp=4) meshes of the 8 devices; two steps each (the first is
# at learning rate 0: warmup), so the targets' Polyak update runs on moved weights.
_ILQL_FSDP_SCRIPT = textwrap.dedent("""
    import jax, numpy as np
    from flax import nnx
    from experiments.configs import bc_tiny, ilql_airdialogue_quick
    from ilql_dialogue import registry, sharding, train_loop

    assert jax.device_count() == 8, jax.devices()
    config = bc_tiny.get_config()
    config.algorithm = ilql_airdialogue_quick.ilql_section(polyak_rate=0.5)
    config.model.update(vocab_size=128, num_layers=1, d_model=32, num_heads=2, num_kv_heads=2,
                        head_dim=16, mlp_dim=64)
    config.train.update(batch_size=8, grad_accum_steps=1)
    config.optim.update(warmup_steps=1)
    rng = np.random.default_rng(0)
    rows, length = 8, 16
    t_T = np.arange(length)
    batch = {
        "input_ids": rng.integers(1, 128, (rows, length)).astype(np.int32),
        "attention_mask": np.ones((rows, length), bool),
        "action_mask": np.tile(t_T % 2 == 1, (rows, 1)),
        "utterance_end": np.tile(t_T % 4 == 3, (rows, 1)),
        "rewards": rng.normal(size=(rows, length)).astype(np.float32),
        "terminal": np.zeros((rows, length), bool),
        "next_token_index": np.tile(np.where(t_T < length - 1, t_T, -1), (rows, 1)
                                    ).astype(np.int32),
    }
    batch["terminal"][:, -1] = True

    def run(mesh, init=None):
      with sharding.mesh_context(mesh):
        training = train_loop.build_training(config, registry.make_algorithm(config), mesh)
        state = training.init() if init is None else jax.device_put(init, training.shardings)
        placed = train_loop.place_batch(batch, config, mesh)
        losses = []
        for _ in range(2):
          state, metrics = training.step(state, placed)
          losses.append(float(metrics["loss"]))
      return state, losses

    mesh1 = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    with sharding.mesh_context(mesh1):
      init = jax.device_get(train_loop.build_training(
          config, registry.make_algorithm(config), mesh1).init())
    state1, losses1 = run(mesh1, init)
    final1 = jax.device_get(nnx.to_pure_dict(state1))
    moved = jax.tree.map(lambda a, b: float(np.abs(a - b).max()), nnx.to_pure_dict(init), final1)
    assert max(jax.tree.leaves(moved["model"]["q_heads"])) > 1e-4, moved["model"]["q_heads"]
    for fsdp in (2, 4):
      state, losses = run(sharding.make_mesh(8 // fsdp, fsdp, 1), init)
      model = state["model"]
      # [head_in = 2 x d_model, vocab]: 64 rows split over fsdp, on every head and target.
      for heads in ("q_heads", "target_q_heads"):
        for head in model[heads].values():
          kernel = head["out_kernel"][...]
          assert kernel.addressable_shards[0].data.shape == (64 // fsdp, 128), (heads, fsdp)
      v_kernel = model["v_head"]["out_kernel"][...]
      assert v_kernel.addressable_shards[0].data.shape == (64 // fsdp, 1)
      mu = state["optimizer"]["opt_state"][1][0]["mu"]["q_heads"][0]["out_kernel"][...]
      assert mu.addressable_shards[0].data.shape == (64 // fsdp, 128)
      np.testing.assert_allclose(losses, losses1, atol=1e-5, rtol=0)
      jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=0),
                   final1, jax.device_get(nnx.to_pure_dict(state)))
    print("ILQL_FSDP_OK", losses1)
""")


def test_ilql_step_under_fsdp_2_and_4_matches_one_device():
  run_on_eight_devices(_ILQL_FSDP_SCRIPT, "ILQL_FSDP_OK")
