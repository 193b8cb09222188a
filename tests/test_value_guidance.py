"""Value-guided decoding through the sampler hook: the formula, beta = 0, no recompiles."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx, struct

from ilql_dialogue import value_guidance as vg
from ilql_dialogue.bc import positions_from_mask
from ilql_dialogue.generation import sampler
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.value_heads import ILQLModel

VOCAB = 48
PROMPTS = np.array([[3, 9, 17, 30, 2], [11, 4, 7, 40, 5], [6, 6, 21, 8, 1]], np.int32)
NEW = 4


@functools.cache
def _model(separate_policy=False, targets=True, target_trunk=False):
  # A large init gives peaked, distinct Q and logits, so greedy paths are
  # decided by the formula, not by float rounding.
  cfg = ModelConfig.gpt2(vocab_size=VOCAB, num_layers=1, d_model=32, num_heads=2,
                         max_seq_len=16, init_std=0.5)
  if not targets:  # The Monte-Carlo baseline's model: one online Q head.
    return ILQLModel(cfg, rngs=nnx.Rngs(1), num_q_heads=1, target_q=False)
  model = ILQLModel(cfg, rngs=nnx.Rngs(0), separate_policy=separate_policy,
                    target_trunk=target_trunk)
  for head in model.target_q_heads:  # Targets start as copies; make them differ.
    head.out_kernel[...] = head.out_kernel[...] * 1.5
  if target_trunk:
    model.target_trunk.embed[...] = jnp.flip(model.target_trunk.embed[...], axis=0)
  return model


def _generate(model, beta, key, temperature=1.0, hook=True):
  rows = PROMPTS.shape[0]
  lm = vg.decoding_model(model)
  state = sampler.prefill(lm, PROMPTS, np.ones_like(PROMPTS, bool), max_len=12)
  params = sampler.SamplingParams.make(rows, max_new_tokens=NEW, temperature=temperature)
  guidance = vg.value_guidance(model, beta, rows) if hook else None
  _, tokens, logprobs, _ = sampler.generate(lm, state, params, key, max_new_tokens=NEW,
                                            hook=guidance)
  return np.asarray(tokens), np.asarray(logprobs)


@functools.partial(jax.jit, static_argnums=0)
def _guided_scores(graphdef, state, tokens_BxT, last, beta_B):
  """logits + beta (min Q - V) at position `last` by full forwards (no cache); target Q
  heads when the model has them."""
  model = nnx.merge(graphdef, state)
  mask = jnp.arange(tokens_BxT.shape[1])[None, :] <= last
  positions = positions_from_mask(mask)
  hidden = model.trunk(tokens_BxT, positions, mask)[0][:, last]
  policy_hidden = (hidden if model.policy_trunk is None
                   else model.policy_trunk(tokens_BxT, positions, mask)[0][:, last])
  target_hidden = (hidden if model.target_trunk is None
                   else model.target_trunk(tokens_BxT, positions, mask)[0][:, last])
  targets = model.target_q_heads is not None
  q = functools.reduce(jnp.minimum, model.q_values(target_hidden if targets else hidden,
                                                   target=targets))
  return model.policy.logits(policy_hidden) + beta_B[:, None] * (q - model.v_head(hidden)[:, None])


def _reference_greedy(model, beta_B):
  """Greedy decoding step by step, re-reading the whole sequence every token."""
  prompt = PROMPTS.shape[1]
  tokens = np.zeros((PROMPTS.shape[0], prompt + NEW), np.int32)
  tokens[:, :prompt] = PROMPTS
  graphdef, state = nnx.split(model)
  for t in range(prompt, prompt + NEW):
    scores = _guided_scores(graphdef, state, tokens, t - 1, jnp.asarray(beta_B))
    tokens[:, t] = np.asarray(jnp.argmax(scores, -1))
  return tokens[:, prompt:]


def test_beta_zero_reproduces_bc_sampling_exactly():
  key = jax.random.key(7)
  plain_tokens, plain_logprobs = _generate(_model(), 0.0, key, hook=False)
  guided_tokens, guided_logprobs = _generate(_model(), 0.0, key)
  np.testing.assert_array_equal(guided_tokens, plain_tokens)
  np.testing.assert_array_equal(guided_logprobs, plain_logprobs)
  # And a positive beta does change what is sampled.
  assert not np.array_equal(_generate(_model(), 8.0, key)[0], plain_tokens)


def test_hook_applies_min_target_q_minus_v_with_per_row_beta():
  beta_B = np.array([0.0, 2.0, 6.0], np.float32)
  tokens, _ = _generate(_model(), beta_B, jax.random.key(0), temperature=0.0)
  np.testing.assert_array_equal(tokens, _reference_greedy(_model(), beta_B))


def test_models_without_targets_are_guided_by_their_online_heads():
  beta_B = np.array([4.0, 4.0, 8.0], np.float32)
  model = _model(targets=False)
  tokens, _ = _generate(model, beta_B, jax.random.key(0), temperature=0.0)
  np.testing.assert_array_equal(tokens, _reference_greedy(model, beta_B))


@pytest.mark.parametrize("separate_policy", [False, True])
def test_target_q_heads_read_the_target_trunk_while_decoding(separate_policy):
  """Training fits the target heads on the target trunk's features; guidance must too."""
  model = _model(separate_policy=separate_policy, target_trunk=True)
  beta_B = np.array([2.0, 4.0, 8.0], np.float32)
  tokens, _ = _generate(model, beta_B, jax.random.key(0), temperature=0.0)
  np.testing.assert_array_equal(tokens, _reference_greedy(model, beta_B))
  # The online trunk's features would decode differently (the test can fail).
  online_only = _model(separate_policy=separate_policy)
  assert not np.array_equal(tokens, _reference_greedy(online_only, beta_B))


def test_separate_policy_trunk_decodes_with_both_trunks():
  model = _model(separate_policy=True)
  beta_B = np.array([1.0, 3.0, 6.0], np.float32)
  tokens, _ = _generate(model, beta_B, jax.random.key(0), temperature=0.0)
  np.testing.assert_array_equal(tokens, _reference_greedy(model, beta_B))
  # beta = 0 is exactly the policy trunk sampled on its own.
  key = jax.random.key(3)
  policy_only = sampler.prefill(model.policy_trunk, PROMPTS, np.ones_like(PROMPTS, bool),
                                max_len=12)
  params = sampler.SamplingParams.make(PROMPTS.shape[0], max_new_tokens=NEW)
  _, expected, _, _ = sampler.generate(model.policy_trunk, policy_only, params, key,
                                       max_new_tokens=NEW)
  np.testing.assert_array_equal(_generate(model, 0.0, key)[0], np.asarray(expected))


class _Counter:
  """Static (hashed by identity) so that it is part of the compiled program's key."""

  def __init__(self):
    self.traces = 0


@struct.dataclass
class _CountTraces:
  """Wraps a hook and counts how often the decode loop is traced."""

  inner: object
  counter: _Counter = struct.field(pytree_node=False)

  def __call__(self, logits_BxV, step):
    self.counter.traces += 1
    return self.inner(logits_BxV, step)


def test_sweeping_beta_does_not_recompile():
  model = _model()
  lm = vg.decoding_model(model)
  rows = PROMPTS.shape[0]
  counter = _Counter()
  params = sampler.SamplingParams.make(rows, max_new_tokens=NEW)
  outputs = []
  for beta in (0.0, 1.0, [2.0, 4.0, 16.0]):
    state = sampler.prefill(lm, PROMPTS, np.ones_like(PROMPTS, bool), max_len=12)
    hook = _CountTraces(vg.value_guidance(model, beta, rows), counter)
    outputs.append(sampler.generate(lm, state, params, jax.random.key(0), max_new_tokens=NEW,
                                    hook=hook)[1])
  assert counter.traces == 1
  assert not np.array_equal(np.asarray(outputs[0]), np.asarray(outputs[2]))
