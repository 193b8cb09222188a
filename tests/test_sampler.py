"""The KV-cache sampler decodes exactly what a full forward / transformers would, per row."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from ilql_dialogue.generation import logits_processors as lp
from ilql_dialogue.generation import sampler
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.heads import ScalarHead, VocabHead
from ilql_dialogue.models.hf_io import load_hf
from ilql_dialogue.models.transformer import Transformer

VOCAB = 64
MAX_LEN = 40
NEW = 8
PROMPTS = ([5, 9, 17, 33, 2, 41, 7], [11, 3], [60, 12, 19, 8])  # Different lengths on purpose.


@functools.cache
def _model(family):
  # A large init makes next-token distributions peaked, so greedy paths do
  # not hinge on float rounding between batched and single-row runs.
  common = dict(vocab_size=VOCAB, num_layers=2, d_model=32, num_heads=4, max_seq_len=64,
                init_std=0.4)
  cfg = (ModelConfig.gpt2(**common) if family == "gpt2"
         else ModelConfig.llama(num_kv_heads=2, **common))
  return Transformer(cfg, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request):
  return _model(request.param)


@pytest.fixture(scope="module")
def gpt2():
  return _model("gpt2")


def _pad(rows, width, side):
  tokens = np.zeros((len(rows), width), np.int32)
  mask = np.zeros((len(rows), width), bool)
  for b, row in enumerate(rows):
    cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
    tokens[b, cols], mask[b, cols] = row, True
  return tokens, mask


def _greedy(batch, **overrides):
  return sampler.SamplingParams.make(batch, **{"max_new_tokens": NEW, "temperature": 0.0,
                                               **overrides})


def _decode(model, rows, params, *, side="left", width=8, hook=None, seed=0):
  state = sampler.prefill(model, *_pad(rows, width, side), max_len=MAX_LEN)
  return sampler.generate(model, state, params, jax.random.key(seed), max_new_tokens=NEW,
                          hook=hook)


@jax.jit
def _uncached_hidden(model, tokens_BxT, mask_BxT, prefix_BxPxD=None):
  positions_BxT = sampler.positions_from_mask(mask_BxT, jnp.zeros(tokens_BxT.shape[:1], jnp.int32))
  return model(tokens_BxT, positions_BxT, mask_BxT, prefix_BxPxD=prefix_BxPxD)[0]


def _full_logprobs(model, rows):
  """log p(token_t | tokens_<t) of right-padded rows from one uncached forward."""
  tokens, mask = _pad(rows, max(map(len, rows)), "right")
  hidden = _uncached_hidden(model, jnp.asarray(tokens), jnp.asarray(mask))
  return np.asarray(jax.nn.log_softmax(model.logits(hidden), axis=-1))


def test_cached_sampling_logprobs_match_full_forward(model):
  """Temperature-1 sampling through the cache scores every token as a full forward does."""
  params = sampler.SamplingParams.make(3, max_new_tokens=NEW, temperature=1.0)
  state, tokens, logprobs, lengths = _decode(model, PROMPTS, params, seed=3)
  np.testing.assert_array_equal(lengths, [NEW] * 3)
  np.testing.assert_array_equal(state.lengths_B, [len(p) + NEW for p in PROMPTS])
  rows = [list(p) + np.asarray(tokens[b]).tolist() for b, p in enumerate(PROMPTS)]
  full = _full_logprobs(model, rows)
  for b, (prompt, row) in enumerate(zip(PROMPTS, rows)):
    expected = [full[b, len(prompt) - 1 + t, row[len(prompt) + t]] for t in range(NEW)]
    np.testing.assert_allclose(logprobs[b], expected, atol=2e-5)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batch_matches_each_prompt_alone(model, side):
  state, tokens, logprobs, _ = _decode(model, PROMPTS, _greedy(3), side=side)
  for b, prompt in enumerate(PROMPTS):
    _, alone, alone_logprobs, _ = _decode(model, [prompt], _greedy(1), width=len(prompt))
    np.testing.assert_array_equal(tokens[b], alone[0])
    np.testing.assert_allclose(logprobs[b], alone_logprobs[0], atol=2e-5)


def test_greedy_matches_transformers_generate(tmp_path):
  torch.manual_seed(0)
  hf_cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                   n_positions=64, initializer_range=0.4, bos_token_id=None,
                                   eos_token_id=None, pad_token_id=0)
  hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
  hf.save_pretrained(tmp_path)
  _, ours = load_hf(tmp_path)
  tokens, mask = _pad(PROMPTS, 8, "left")
  with torch.no_grad():
    expected = hf.generate(input_ids=torch.tensor(tokens, dtype=torch.long),
                           attention_mask=torch.tensor(mask, dtype=torch.long),
                           do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW,
                           pad_token_id=0, use_cache=True)[:, tokens.shape[1]:].numpy()
  _, got, _, _ = _decode(ours, PROMPTS, _greedy(3))
  np.testing.assert_array_equal(got, expected)


def test_sampling_controls_do_not_recompile(gpt2):
  forbid = lp.compose(lp.ForbidTokens.of([[1, 2], [3, -1], [-1, -1]]))
  _decode(gpt2, PROMPTS, _greedy(3), hook=forbid)
  compiled = sampler._generate._cache_size()
  variants = [
      dict(temperature=[0.7, 0.0, 1.3], top_k=[5, 0, 2], top_p=[1.0, 0.9, 0.5]),
      dict(temperature=2.0, top_k=1, stop_tokens=[[4], [5], [6]], max_new_tokens=[1, 8, 3]),
      dict(temperature=0.0, top_p=0.3, stop_tokens=[[7], [8, 9], [10]]),
      dict(temperature=1.0, min_p=[0.1, 0.0, 0.5]),
  ]
  for i, overrides in enumerate(variants):
    params = sampler.SamplingParams.make(3, **{"max_new_tokens": NEW, **overrides})
    hook = lp.compose(lp.ForbidTokens.of([[i, i + 1], [-1, 3], [9, -1]]))
    _decode(gpt2, PROMPTS, params, hook=hook, seed=i)
  assert sampler._generate._cache_size() == compiled


def test_greedy_matches_uncached_greedy(model):
  """The per-layer cache decodes the tokens that re-running the whole history picks."""
  _, got, _, _ = _decode(model, PROMPTS, _greedy(3))
  rows = [list(p) for p in PROMPTS]
  for _ in range(NEW):
    tokens, mask = _pad(rows, max(map(len, rows)), "right")
    hidden = _uncached_hidden(model, jnp.asarray(tokens), jnp.asarray(mask))
    last = np.asarray(model.logits(hidden))[np.arange(3), [len(r) - 1 for r in rows]]
    for row, token in zip(rows, np.argmax(last, axis=-1)):
      row.append(int(token))
  np.testing.assert_array_equal(got, [row[len(p):] for row, p in zip(rows, PROMPTS)])


def test_decoding_over_a_window_of_a_long_cache_changes_nothing(gpt2):
  """With 160 slots the loop attends over a 64-slot window; tokens and state are the same."""
  assert sampler.attend_window(160, 8 + NEW) == 64
  windows = [sampler.attend_window(10**6, last) for last in (1, 64, 65, 129, 1031)]
  assert windows == [64, 64, 128, 256, 2048]  # 64 * 2^k.
  assert sampler.attend_window(1200, 1100) == 1200  # Never past the cache.
  results = []
  for max_len in (MAX_LEN, 160):
    state = sampler.prefill(gpt2, *_pad(PROMPTS, 8, "left"), max_len=max_len)
    state, first, logprobs, _ = sampler.generate(gpt2, state, _greedy(3), jax.random.key(0),
                                                 max_new_tokens=NEW)
    state = sampler.append(gpt2, state, *_pad([[3, 4], [5], [6, 7, 8]], 3, "right"))
    state, second, _, _ = sampler.generate(gpt2, state, _greedy(3), jax.random.key(0),
                                           max_new_tokens=NEW)
    results.append((first, logprobs, second, state))
  (first, logprobs, second, state), (long_first, long_logprobs, long_second, long_state) = results
  np.testing.assert_array_equal(long_first, first)
  np.testing.assert_allclose(long_logprobs, logprobs, atol=2e-5)
  np.testing.assert_array_equal(long_second, second)
  assert int(long_state.cache.index) == int(state.cache.index) == 8 + NEW + 3 + NEW
  np.testing.assert_array_equal(long_state.cache.valid_BxS[:, :MAX_LEN], state.cache.valid_BxS)
  valid = state.cache.valid_BxS[:, None, :, None]  # Padding slots hold junk nobody reads.
  np.testing.assert_allclose(jnp.where(valid, long_state.cache.k_BxKxSxH[1][:, :, :MAX_LEN], 0),
                             jnp.where(valid, state.cache.k_BxKxSxH[1], 0), atol=2e-5)


def test_appends_compile_once_per_window(gpt2):
  """Appends attend over the filled window: a new compile only when it doubles."""
  state = sampler.prefill(gpt2, *_pad(PROMPTS, 8, "left"), max_len=160)
  block = _pad([[3, 4], [5], [6, 7, 8]], 4, "right")
  state = sampler.append(gpt2, state, *block)  # Slots 8-11: the 64-slot window.
  compiled = sampler._append._cache_size()
  for _ in range(12):  # Up to slot 59.
    state = sampler.append(gpt2, state, *block)
  assert sampler._append._cache_size() == compiled
  for _ in range(2):  # Slots 60-67: the first call needs the 128-slot window.
    state = sampler.append(gpt2, state, *block)
  assert sampler._append._cache_size() == compiled + 1
  assert int(state.cache.index) == 68


def test_prompt_and_row_lengths_within_a_width_do_not_recompile(gpt2):
  _decode(gpt2, PROMPTS, _greedy(3))
  compiled = (sampler._prefill._cache_size(), sampler._generate._cache_size())
  for rows in ([[1, 2, 3]] * 3, [[4] * 8, [5], [6, 7]], [[9] * 7, [8] * 6, [2] * 5]):
    _decode(gpt2, rows, _greedy(3, max_new_tokens=[1, NEW, 3]))
  assert (sampler._prefill._cache_size(), sampler._generate._cache_size()) == compiled


def _expected_stop_lengths(free, stop_sets):
  lengths = []
  for row, stops in zip(free, stop_sets):
    hits = [t for t, token in enumerate(row) if token in stops]
    lengths.append(hits[0] + 1 if hits else NEW)
  return lengths


@pytest.mark.parametrize("shared", [True, False])
def test_stop_tokens_end_only_the_row_that_emits_them(gpt2, shared):
  _, free, free_logprobs, _ = _decode(gpt2, PROMPTS, _greedy(3))
  free = np.asarray(free)
  stop = int(free[1, 2])
  stop_sets = [[stop]] * 3 if shared else [[-1], [stop], [-1]]
  state, tokens, logprobs, lengths = _decode(gpt2, PROMPTS, _greedy(3, stop_tokens=stop_sets))
  expected = _expected_stop_lengths(free, stop_sets)
  assert expected[1] <= 3
  np.testing.assert_array_equal(lengths, expected)
  for b, n in enumerate(expected):
    np.testing.assert_array_equal(tokens[b, :n], free[b, :n])
    np.testing.assert_allclose(logprobs[b, :n], free_logprobs[b, :n], atol=1e-6)
    assert np.all(np.asarray(tokens[b, n:]) == 0) and np.all(np.asarray(logprobs[b, n:]) == 0)
  np.testing.assert_array_equal(state.lengths_B, np.asarray([len(p) for p in PROMPTS]) + lengths)


def test_per_row_length_limits_and_early_exit(gpt2):
  _, free, _, _ = _decode(gpt2, PROMPTS, _greedy(3))
  state, tokens, _, lengths = _decode(gpt2, PROMPTS, _greedy(3, max_new_tokens=[2, 5, 0]))
  np.testing.assert_array_equal(lengths, [2, 5, 0])
  for b, n in enumerate([2, 5, 0]):
    np.testing.assert_array_equal(tokens[b, :n], free[b, :n])
    assert np.all(np.asarray(tokens[b, n:]) == 0)
  # The loop stops once every row is done: 5 slots used after the 8-wide prompt block.
  assert int(state.cache.index) == 8 + 5


def test_append_turn_equals_encoding_whole_history(model):
  """Agent turn, then a ragged user turn appended to the cache, then the next agent turn."""
  state = sampler.prefill(model, *_pad(PROMPTS, 8, "left"), max_len=MAX_LEN)
  state, agent, _, agent_len = sampler.generate(
      model, state, _greedy(3, max_new_tokens=[3, 5, 4]), jax.random.key(0), max_new_tokens=NEW)
  user_turns = ([20, 21, 22], [23], [24, 25, 26, 27, 28])
  turn_tokens, turn_mask = _pad(user_turns, 6, "right")
  turn_mask[1, :] = False  # Padding *inside* the block too: row 1's token sits in the middle.
  turn_mask[1, 2] = True
  turn_tokens[1, 2] = 23
  state = sampler.append(model, state, turn_tokens, turn_mask)
  state, reply, reply_logprobs, _ = sampler.generate(
      model, state, _greedy(3), jax.random.key(1), max_new_tokens=NEW)

  histories = [list(p) + np.asarray(agent[b, :agent_len[b]]).tolist() + list(u)
               for b, (p, u) in enumerate(zip(PROMPTS, user_turns))]
  _, direct, direct_logprobs, _ = _decode(model, histories, _greedy(3), width=20)
  np.testing.assert_array_equal(reply, direct)
  np.testing.assert_allclose(reply_logprobs, direct_logprobs, atol=2e-5)
  np.testing.assert_array_equal(state.lengths_B, [len(h) + NEW for h in histories])


def test_two_model_rollout_appends_each_others_replies():
  """Agent and simulator keep their own caches; each appends the other's reply, never re-encoding."""
  agent, user = _model("gpt2"), _model("llama")
  prompt = _pad(PROMPTS, 8, "left")
  agent_state = sampler.prefill(agent, *prompt, max_len=MAX_LEN)
  user_state = sampler.prefill(user, *prompt, max_len=MAX_LEN)
  histories = [list(p) for p in PROMPTS]
  limits = ([2, 4, 3], [3, 1, 4], [4, 2, 2])
  speakers = ((agent, "agent"), (user, "user"), (agent, "agent"))
  states = {"agent": agent_state, "user": user_state}
  for turn, ((model, name), limit) in enumerate(zip(speakers, limits)):
    listener = "user" if name == "agent" else "agent"
    listener_model = user if name == "agent" else agent
    states[name], reply, _, lengths = sampler.generate(
        model, states[name], _greedy(3, max_new_tokens=limit), jax.random.key(turn),
        max_new_tokens=NEW)
    if turn < 2:
      states[listener] = sampler.append(listener_model, states[listener], reply,
                                        sampler.mask_from_lengths(lengths, reply.shape[1]))
    for b in range(3):
      histories[b] += np.asarray(reply[b, :lengths[b]]).tolist()
  np.testing.assert_array_equal(states["agent"].lengths_B, [len(h) for h in histories])
  direct = sampler.prefill(agent, *_pad(histories, 20, "left"), max_len=MAX_LEN)
  np.testing.assert_allclose(states["agent"].last_hidden_BxD, direct.last_hidden_BxD, atol=2e-5)


def test_prefill_with_structured_prefix_matches_uncached_forward(gpt2):
  prefix_BxPxD = jax.random.normal(jax.random.key(5), (3, 4, gpt2.cfg.d_model))
  tokens, mask = _pad(PROMPTS, 8, "left")
  state = sampler.prefill(gpt2, tokens, mask, max_len=MAX_LEN, prefix_BxPxD=prefix_BxPxD)
  assert int(state.cache.index) == 4 + 8
  hidden = _uncached_hidden(gpt2, jnp.asarray(tokens), jnp.asarray(mask), prefix_BxPxD)
  np.testing.assert_allclose(state.last_hidden_BxD, hidden[:, -1], atol=1e-5)


def test_cache_and_position_overflow_are_refused(gpt2):
  state = sampler.prefill(gpt2, *_pad(PROMPTS, 8, "left"), max_len=MAX_LEN)
  with pytest.raises(ValueError, match="32 free slots of 40, needs 33"):
    sampler.generate(gpt2, state, _greedy(3), jax.random.key(0), max_new_tokens=33)
  state = sampler.prefill(gpt2, *_pad(PROMPTS, 8, "left"), max_len=80)
  long_turn = np.ones((3, 60), np.int32)
  with pytest.raises(ValueError, match="reach 67 tokens, past the model's max_seq_len=64"):
    sampler.append(gpt2, state, long_turn, long_turn > 0)


def test_forbid_tokens_per_row(gpt2):
  _, free, _, _ = _decode(gpt2, PROMPTS, _greedy(3))
  banned = [int(free[0, 0]), int(free[2, 0])]
  hook = lp.ForbidTokens.of([[banned[0]], [-1], [banned[1]]])
  _, tokens, _, _ = _decode(gpt2, PROMPTS, _greedy(3), hook=hook)
  assert banned[0] not in np.asarray(tokens[0]) and banned[1] not in np.asarray(tokens[2])
  np.testing.assert_array_equal(tokens[1], free[1])


def test_ranked_start_says_each_rows_ranked_first_token_then_decodes_freely(gpt2):
  prompts = (PROMPTS[0],) * 3 + (PROMPTS[1],)
  _, free, _, _ = _decode(gpt2, prompts, _greedy(4))
  hook = lp.RankedStart(rank_B=jnp.asarray([0, 1, 2, -1]))
  tokens = np.asarray(_decode(gpt2, prompts, _greedy(4), hook=hook)[1])
  np.testing.assert_array_equal(tokens[[0, 3]], np.asarray(free)[[0, 3]])  # Rank 0, unranked.
  order = np.argsort(-_full_logprobs(gpt2, [PROMPTS[0]])[0, -1])
  np.testing.assert_array_equal(tokens[:3, 0], order[:3])  # The 1st, 2nd, 3rd likeliest starts.
  for b in (1, 2):  # After its start, a row continues greedily from its own first token.
    cont = _decode(gpt2, [list(prompts[b]) + [int(tokens[b, 0])]], _greedy(1))[1]
    np.testing.assert_array_equal(tokens[b, 1:], np.asarray(cont)[0, :NEW - 1])


def test_value_guidance_hook_uses_decoder_hidden_state(gpt2):
  cfg = gpt2.cfg
  q_heads = (VocabHead(cfg, rngs=nnx.Rngs(1)), VocabHead(cfg, rngs=nnx.Rngs(2)))
  v_head = ScalarHead(cfg, rngs=nnx.Rngs(3))
  for head in q_heads:  # Both Q heads strongly prefer token 42.
    head.out_bias[...] = head.out_bias[...].at[42].set(10.0)
  _, free, _, _ = _decode(gpt2, PROMPTS, _greedy(3))
  guided = lambda beta: _decode(gpt2, PROMPTS, _greedy(3),
                                hook=lp.ValueGuidance(q_heads, v_head, jnp.asarray(beta)))[1]
  np.testing.assert_array_equal(guided([0.0, 0.0, 0.0]), free)
  compiled = sampler._generate._cache_size()
  tokens = np.asarray(guided([100.0, 0.0, 100.0]))
  assert sampler._generate._cache_size() == compiled
  assert np.all(tokens[[0, 2]] == 42)
  np.testing.assert_array_equal(tokens[1], free[1])


def test_filter_top_k_top_p_matches_reference():
  logits = np.random.default_rng(0).normal(size=(4, 10)).astype(np.float32) * 2
  top_k, top_p = np.array([3, 0, 10, 2]), np.array([1.0, 0.6, 0.2, 0.99])
  got = np.asarray(lp.filter_top_k_top_p(jnp.asarray(logits), top_k, top_p))
  for b in range(4):
    order = np.argsort(-logits[b])
    k = top_k[b] if 0 < top_k[b] < 10 else 10
    probs = np.exp(logits[b, order[:k]] - logits[b, order[0]])
    probs /= probs.sum()
    keep = max(1, int(np.sum(np.cumsum(probs) - probs < top_p[b])))
    np.testing.assert_array_equal(np.isfinite(got[b]), np.isin(np.arange(10), order[:keep]))
    np.testing.assert_array_equal(got[b][np.isfinite(got[b])], logits[b][np.isfinite(got[b])])


def test_filter_min_p_matches_transformers():
  """The same kept tokens as transformers' MinPLogitsWarper, row by row; min_p 0 keeps all."""
  from transformers.generation.logits_process import MinPLogitsWarper

  logits = np.random.default_rng(1).normal(size=(3, 50)).astype(np.float32) * 3
  for min_p in (0.05, 0.2, 0.9):
    got = np.asarray(lp.filter_min_p(jnp.asarray(logits), np.full(3, min_p)))
    expected = MinPLogitsWarper(min_p)(None, torch.tensor(logits)).numpy()
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(expected))
    assert 1 <= np.isfinite(got).sum(axis=1).min() < 50
  per_row = np.asarray(lp.filter_min_p(jnp.asarray(logits), np.array([0.0, 0.2, 0.0])))
  assert np.isfinite(per_row[[0, 2]]).all() and not np.isfinite(per_row[1]).all()


def _nucleus_0_9(probs):
  """softmax(logits / T)'s kept tokens under top-p 0.9 (logits sorted in descending order)."""
  return np.arange(6) < np.sum(np.cumsum(probs) - probs < 0.9)


def _min_p_0_2(probs):
  return probs >= 0.2 * probs.max()


@pytest.mark.parametrize("filters,kept,count", [(dict(top_p=0.9), _nucleus_0_9, None),
                                                (dict(min_p=0.2), _min_p_0_2, 3)])
def test_sample_frequencies_follow_processed_distribution(filters, kept, count):
  """20k rows share one logits row: empirical frequencies match softmax(logits / T) on the
  tokens the filter keeps (the nucleus; those at >= min_p of the likeliest)."""
  rows = 20_000
  logits = jnp.tile(jnp.asarray([[2.0, 1.5, 1.0, 0.0, -1.0, -3.0]]), (rows, 1))
  params = sampler.SamplingParams.make(rows, max_new_tokens=1, temperature=0.8, **filters)
  tokens, logprobs = jax.jit(sampler.sample_from_logits)(logits, params, jax.random.key(0))
  scaled = np.asarray(logits[0]) / 0.8
  probs = np.exp(scaled - scaled.max())
  probs /= probs.sum()
  expected = np.where(kept(probs), probs, 0.0)
  expected /= expected.sum()
  assert count is None or np.count_nonzero(expected) == count
  freq = np.bincount(np.asarray(tokens), minlength=6) / rows
  np.testing.assert_allclose(freq, expected, atol=0.015)
  np.testing.assert_allclose(logprobs, np.log(expected[np.asarray(tokens)]), atol=1e-5)


def test_quick_benchmark_writes_only_its_section(tmp_path):
  """`python -m benchmarks.lm_speed --quick` end to end, into a temp file instead of docs/."""
  from benchmarks import lm_speed as benchmark

  output = tmp_path / "BENCHMARKS.md"
  other = "## Another benchmark\n\nkept as is\n"
  output.write_text(f"# Benchmarks\n\n{benchmark.SECTION}\n\n(pending)\n\n{other}")
  # One torch thread: spinning OpenMP threads crawl when other tests share the cores.
  results = benchmark.benchmark_and_report(quick=True, output=str(output), repeats=1, threads=1,
                                           command="python -m benchmarks.lm_speed --quick")
  text = output.read_text()
  assert "(pending)" not in text and text.endswith(other)
  assert text.count(benchmark.SECTION) == 1
  for key in ("train_ours", "train_torch", "decode_ours_4", "decode_torch_4", "peak_flops"):
    assert results[key] > 0, key
  # Same weights and batch on both sides: the first training losses agree.
  assert abs(results["train_loss_ours"] - results["train_loss_torch"]) < 1e-4
  rows = re.findall(r"^\| (training|decoding)[^|]*\| ([\d,]+) \| ([\d,]+) \|", text, re.M)
  assert [r[0] for r in rows] == ["training", "decoding"]
