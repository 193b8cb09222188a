"""The TPU path (Pallas splash attention), run in Pallas' interpreter on CPU.

tests/test_attention_kernels.py checks it against the reference on short
blocks (forward, gradients, whole trunks). Here: lengths that span several
kernel blocks, and the shard_map placement under an eight-device mesh.
"""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fake_devices import run_on_eight_devices
from ilql_dialogue.models import attention_kernels as ak
from ilql_dialogue.models import splash_attention


def test_block_is_the_largest_that_divides_the_padded_length():
  assert splash_attention._block_and_length(19) == (128, 128)
  assert splash_attention._block_and_length(300) == (128, 384)
  assert splash_attention._block_and_length(1000) == (512, 1024)


@pytest.mark.parametrize("prefix_len,bidirectional", [(0, False), (140, True)])
def test_splash_over_several_blocks_matches_the_reference(prefix_len, bidirectional):
  """300 slots: three 128-slot blocks after padding, a prefix that crosses a block edge."""
  b, t, k, g, h = 2, 300, 1, 2, 8
  kq, kk, kv = jax.random.split(jax.random.key(0), 3)
  q = jax.random.normal(kq, (b, t, k, g, h))
  keys, values = jax.random.normal(kk, (b, t, k, h)), jax.random.normal(kv, (b, t, k, h))
  valid = jnp.ones((b, t), bool).at[1, :37].set(False).at[0, 200:230].set(False)
  weights = valid[:, :, None, None, None].astype(jnp.float32)

  def loss(impl, q, keys, values):
    out = ak.attend_block(impl, q, keys, values, valid, prefix_len=prefix_len,
                          prefix_bidirectional=bidirectional, block=128)
    return jnp.sum(jnp.sin(out) * weights), out

  (_, got), got_grads = jax.value_and_grad(
      lambda *a: loss("splash", *a), argnums=(0, 1, 2), has_aux=True)(q, keys, values)
  (_, want), want_grads = jax.value_and_grad(
      lambda *a: loss("reference", *a), argnums=(0, 1, 2), has_aux=True)(q, keys, values)
  np.testing.assert_allclose(got * weights, want * weights, atol=1e-5)
  for a, b_ in zip(got_grads, want_grads):
    np.testing.assert_allclose(a, b_, atol=1e-5)


_EIGHT_DEVICE_SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from ilql_dialogue import sharding
    from ilql_dialogue.models import attention_kernels as ak

    assert jax.device_count() == 8, jax.devices()
    b, t, k, g, h = 4, 19, 2, 2, 8
    kq, kk, kv = jax.random.split(jax.random.key(0), 3)
    q = jax.random.normal(kq, (b, t, k, g, h))
    keys, values = jax.random.normal(kk, (b, t, k, h)), jax.random.normal(kv, (b, t, k, h))
    valid = jnp.ones((b, t), bool).at[1, :5].set(False).at[2, 6:9].set(False)
    weights = valid[:, :, None, None, None].astype(jnp.float32)

    def loss(impl, q, keys, values):
      out = ak.attend_block(impl, q, keys, values, valid, prefix_len=4,
                            prefix_bidirectional=True, block=128)
      return jnp.sum(jnp.sin(out) * weights)

    grad = lambda impl: jax.jit(jax.value_and_grad(
        lambda *a: loss(impl, *a), argnums=(0, 1, 2)))
    want = grad("reference")(q, keys, values)
    mesh = sharding.make_mesh(2, 2, 2)
    with sharding.mesh_context(mesh):
      rows_heads = NamedSharding(mesh, P(("data", "fsdp"), None, "tensor"))
      q8, keys8, values8 = (jax.device_put(x, rows_heads) for x in (q, keys, values))
      step = grad("splash")
      assert "shard_map" in str(jax.make_jaxpr(step)(q8, keys8, values8))
      got = step(q8, keys8, values8)
    assert got[1][0].sharding.spec == P(("data", "fsdp"), None, "tensor"), got[1][0].sharding
    # The loss sums 2,432 float32 terms: its rounding grows with its size.
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-5)
    for a, b_ in zip(got[1], want[1]):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b_), atol=1e-5)
    print("SPLASH_SHARDED_OK")
""")


def test_splash_under_a_mesh_runs_per_shard_and_matches_the_reference():
  """A Pallas call is opaque to XLA's partitioner: under a (data, fsdp, tensor) mesh it runs
  under shard_map, rows over the batch axes and kv heads over tensor."""
  run_on_eight_devices(_EIGHT_DEVICE_SCRIPT, "SPLASH_SHARDED_OK")
