"""Decoding with rows split over fake CPU devices gives exactly the one-device tokens.

The device count is fixed when jax starts, so the check runs in a subprocess that asks for
four CPU devices through `cpu_devices.use_cpu_devices` before its first computation.
"""

import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = textwrap.dedent("""
    from ilql_dialogue.generation import cpu_devices
    assert cpu_devices.use_cpu_devices(4) == 4

    import jax, jax.numpy as jnp, numpy as np
    from flax import nnx
    from ilql_dialogue.generation import decode_devices, sampler
    from ilql_dialogue.models.config import ModelConfig
    from ilql_dialogue.models.transformer import Transformer

    assert jax.device_count() == 4, jax.devices()
    assert cpu_devices.use_cpu_devices(4) == 4  # Started with that count: accepted.
    try:
      cpu_devices.use_cpu_devices(2)
      raise AssertionError("a different count after start-up must raise")
    except RuntimeError:
      pass

    cfg = ModelConfig.gpt2(vocab_size=128, num_layers=2, d_model=32, num_heads=4, max_seq_len=128)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    B = 8
    prompt = rng.integers(1, 128, (B, 12)).astype(np.int32)
    prompt_mask = np.ones_like(prompt, bool)
    prompt_mask[:3, :5] = False  # Left padding on some rows.
    turn = rng.integers(1, 128, (B, 6)).astype(np.int32)
    turn_mask = np.arange(6)[None, :] < rng.integers(0, 7, B)[:, None]  # Ragged, some empty.
    greedy = sampler.SamplingParams.make(B, max_new_tokens=10, temperature=0.0,
                                         stop_tokens=[7])
    sampled = sampler.SamplingParams.make(B, max_new_tokens=10, temperature=1.0)
    row_keys = jax.random.split(jax.random.key(3), B)

    def decode(model, prompt, prompt_mask, turn, turn_mask, greedy, sampled, row_keys):
      state = sampler.prefill(model, prompt, prompt_mask, max_len=96)
      state, first, _, first_len = sampler.generate(model, state, greedy, jax.random.key(0),
                                                    max_new_tokens=10)
      state = sampler.append(model, state, turn, turn_mask)
      state, second, _, _ = sampler.generate(model, state, greedy, jax.random.key(0),
                                             max_new_tokens=16)
      state, one_key, _, _ = sampler.generate(model, state, sampled, jax.random.key(1),
                                              max_new_tokens=10)
      state, per_row, _, _ = sampler.generate(model, state, sampled, row_keys,
                                              max_new_tokens=10)
      return state, [np.asarray(x) for x in (first, first_len, second, one_key, per_row)]

    mesh = decode_devices.decode_mesh()
    names = ("greedy", "greedy lengths", "greedy after append", "sampled, one key",
             "sampled, per-row keys")
    # A trunk with a copy head too: its copy entries are split with the cache.
    copying = Transformer(cfg.replace(copy_dim=8), rngs=nnx.Rngs(0))
    copying.copy_head.query[...] = copying.copy_head.query[...] * 50
    for m in (copying, model):
      _, expected = decode(m, prompt, prompt_mask, turn, turn_mask, greedy, sampled, row_keys)
      split = decode_devices.split_rows(
          (prompt, prompt_mask, turn, turn_mask, greedy, sampled, row_keys), mesh)
      state, got = decode(decode_devices.replicate(m, mesh), *split)
      for name, want, have in zip(names, expected, got):
        assert np.array_equal(want, have), (name, m.cfg.copy_dim, want, have)
    # Every device holds its own two rows of the cache, not a copy of all eight.
    for k in state.cache.k_BxKxSxH:
      assert {s.data.shape[0] for s in k.addressable_shards} == {2}, k.sharding
    assert len(state.cache.valid_BxS.sharding.device_set) == 4

    try:
      decode_devices.split_rows(np.zeros((6, 3)), mesh)
      raise AssertionError("6 rows over 4 devices must be refused")
    except ValueError:
      pass

    # A party given the devices: its rows' cache kept split across turns, the same sampled
    # tokens and log-probabilities as on one device; a batch they do not divide stays on one.
    from data_pipelines import tokenization
    from data_pipelines.dialogue import Turn
    from ilql_dialogue.lm_party import LMParty

    tok = tokenization.train_tokenizer(["hello there, how are you", "fine thanks, a flight"] * 9,
                                       ("agent", "customer"), vocab_size=300)
    def play(devices, batch, copy_dim=0):
      lm = Transformer(ModelConfig.gpt2(vocab_size=-(-tok.vocab_size // 64) * 64, num_layers=1,
                                        d_model=32, num_heads=4, max_seq_len=128,
                                        copy_dim=copy_dim), rngs=nnx.Rngs(1))
      if copy_dim:
        lm.copy_head.query[...] = lm.copy_head.query[...] * 50
      party = LMParty(lm, tok, "agent", max_new_tokens=6, temperature=1.0,
                      include_context=False, devices=devices)
      party.reset([{}] * batch, list(range(batch)))
      histories = [[Turn("customer", f"hello {b}")] for b in range(batch)]
      for _ in range(3):
        replies = party.respond(histories)
        histories = [h + [Turn("agent", r), Turn("customer", "fine thanks")]
                     for h, r in zip(histories, replies)]
      return party

    for batch, placed_on, copy_dim in ((8, 4, 0), (6, 1, 0), (8, 4, 8)):
      one, split = play(None, batch, copy_dim), play(jax.devices(), batch, copy_dim)
      assert split.token_ids == one.token_ids, batch
      np.testing.assert_allclose(np.concatenate(split.logprobs), np.concatenate(one.logprobs),
                                 atol=1e-5)
      assert len(split.state.cache.valid_BxS.sharding.device_set) == placed_on, batch
    print("SPLIT_DECODE_OK")
""")


def test_split_rows_decode_and_a_party_plays_the_same_tokens_on_four_fake_devices():
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": REPO}
  env.pop("JAX_NUM_CPU_DEVICES", None)
  result = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
  assert "SPLIT_DECODE_OK" in result.stdout
