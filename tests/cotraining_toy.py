"""A tiny two-party task for the cotraining tests: a user who talks, a bot that answers.

The user says one of a few short lines per turn, drawn from its row seed;
the bot is a tiny LM. `one_shot` ends the dialogue at the bot's first reply.
The reward is 1 when the bot's last reply is `target`, so exactly one
reply earns it.
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from data_pipelines import tokenization
from ilql_dialogue import bc, environment
from ilql_dialogue.lm_party import LMParty, forbidden_token_ids
from workflows.base_config import base_config

ROLES = ("user", "bot")
WORDS = ("yes", "no", "maybe", "later")
LINES = ("hi there", "can you help me", "yes or no", "what about later", "maybe not")


class ToyEnv:
  turn_order = ("user", "bot")
  seed_streams = {"bot": 0, "user": 1}

  def __init__(self, target: str = "yes", one_shot: bool = True):
    self.target, self.one_shot = target, one_shot

  def sample(self, seed, num):
    return [f"{seed}:{i}" for i in range(num)]

  def scenario_key(self, scenario):
    return scenario

  def context(self, scenario, role):
    return {}

  def ending(self, scenario, role, text):
    return environment.Ending("replied") if role == "bot" and self.one_shot else None

  def reward(self, episode):
    bot = [t.text for t in episode.turns if t.speaker == "bot"]
    return float(bool(bot) and bot[-1] == self.target)


class Talker:
  """The user: each turn one of LINES, drawn from the row's own generator."""

  def reset(self, contexts, seeds):
    self.rngs = [np.random.default_rng(s) for s in seeds]

  def respond(self, histories):
    return [None if h is None else LINES[rng.integers(len(LINES))]
            for rng, h in zip(self.rngs, histories)]


@functools.cache
def tokenizer():
  texts = list(LINES) * 20 + [" ".join(("ok", *WORDS))] * 50
  return tokenization.train_tokenizer(texts, ROLES, vocab_size=320)


def word_ids():
  tok = tokenizer()
  ids = [tok.encode(w) for w in WORDS]
  assert all(len(i) == 1 for i in ids), ids
  return [i[0] for i in ids]


def config(**rl) -> ml_collections.ConfigDict:
  c = base_config()
  c.algorithm = ml_collections.ConfigDict(dict(name="grpo"))
  c.model = ml_collections.ConfigDict(dict(
      family="llama", vocab_size=-(-tokenizer().vocab_size // 64) * 64, num_layers=1,
      d_model=32, num_heads=2, num_kv_heads=2, head_dim=16, mlp_dim=64, max_seq_len=64,
      init_from=""))
  c.rl = ml_collections.ConfigDict(dict(scenarios=4, group_size=8, epochs=2, max_turns=2,
                                        scenario_seed=100_000, seq_len=64))
  c.rl.update(rl)
  c.train.update(steps=20, batch_size=32, log_every=5, checkpoint_every=10,
                 async_checkpoints=False, progress_bar=False, eval_at_start=False)
  c.optim.update(learning_rate=3e-2, warmup_steps=0, weight_decay=0.0)
  return c


def make_model(config, seed=0, std=0.4):
  """A tiny LM with numpy-drawn weights (module-by-module init compiles slowly on CPU)."""
  graphdef, state = nnx.split(nnx.eval_shape(lambda: bc.lm_from_config(config, nnx.Rngs(0))))
  rng = np.random.default_rng(seed)

  def draw(path, leaf):
    if path[-1].key == "scale":
      return jnp.ones(leaf.shape, leaf.dtype)
    return jnp.asarray(rng.normal(0.0, std, leaf.shape), leaf.dtype)

  nnx.replace_by_pure_dict(state, jax.tree_util.tree_map_with_path(draw, nnx.to_pure_dict(state)))
  return nnx.merge(graphdef, state)


def bot(decoder, *, max_new_tokens=4, temperature=1.0, only_words=False, **kwargs):
  tok = tokenizer()
  forbidden = forbidden_token_ids(tok, "bot")
  if only_words:
    allowed = set(word_ids())
    forbidden = [i for i in range(decoder.cfg.vocab_size) if i not in allowed]
  return LMParty(decoder, tok, "bot", max_new_tokens=max_new_tokens,
                            temperature=temperature, include_context=False,
                            forbidden_ids=forbidden, **kwargs)
