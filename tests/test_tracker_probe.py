"""The tracker probe: what it reads, and that its tracker learns from a trunk's states."""

import jax.numpy as jnp
import numpy as np
import pytest

from calm import frozen_tracker, state
from data_pipelines.airdialogue import action_grammar, to_dialogue
from data_pipelines.tokenization import train_tokenizer
from domains.airdialogue.parties import CUSTOMER
from ilql_dialogue.models.config import ModelConfig
from workflows import tracker_probe


@pytest.fixture(scope="module")
def played():
  # The template family: airports as codes, so a trunk without knowledge can read them.
  return {"train": tracker_probe.play("scripted:volunteer", 3000, 128),
          "test": tracker_probe.play("scripted:volunteer", 1000, 64)}


@pytest.fixture(scope="module")
def tokenizer(played):
  return train_tokenizer([text for d in played["train"] for _, text in d.turns],
                         to_dialogue.ROLES, 600,
                         markers=(action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG))


class WindowTrunk(frozen_tracker.Trunk):
  """Each token's state is a sum of fixed random vectors of it and the `window` tokens before
  it: a trunk that knows which words it is among and nothing else."""

  name = "window"

  def __init__(self, tokenizer, width: int = 48, window: int = 4):
    self.tokenizer = tokenizer
    self.cfg = ModelConfig(d_model=width)
    rng = np.random.default_rng(0)
    self.tables_WxVxD = rng.normal(size=(window + 1, tokenizer.vocab_size, width))

  def rows(self, played):
    return tracker_probe.dialogue_rows(self.tokenizer, played)

  def forward(self, tokens_BxT, mask_BxT, batch):
    out_BxTxD = 0.0
    for k, table_VxD in enumerate(self.tables_WxVxD):
      shifted_BxT = np.pad(tokens_BxT, ((0, 0), (k, 0)))[:, :tokens_BxT.shape[1]]
      out_BxTxD = out_BxTxD + table_VxD[shifted_BxT]
    return jnp.asarray(out_BxTxD, jnp.float32)


def test_the_tracker_reads_the_customers_tokens_only(played, tokenizer):
  dialogue = played["train"][0]
  ids, reads = tracker_probe.dialogue_rows(tokenizer, dialogue)
  customer = [text for speaker, text in dialogue.turns if speaker == CUSTOMER]
  assert sum(reads) == sum(len(tokenizer.encode(t)) + 1 for t in customer)  # Text + <|eot|>.
  assert len(ids) == len(reads)
  encoded = WindowTrunk(tokenizer).encode(played["train"][:3])
  assert encoded.mask_NxT.sum() == sum(sum(tracker_probe.dialogue_rows(tokenizer, d)[1])
                                      for d in played["train"][:3])
  picked = WindowTrunk(tokenizer).forward(np.asarray(ids)[None], None, None)[0][np.asarray(reads)]
  np.testing.assert_allclose(encoded.hidden_NxTxD[0, :len(picked)], picked, rtol=1e-6)


def test_a_calm_agents_tracker_reads_everything_but_the_agents_words(played, tokenizer):
  dialogue = played["train"][0]
  ids, reads = tracker_probe.others_rows(tokenizer, dialogue)
  customer_ids, customer_reads = tracker_probe.dialogue_rows(tokenizer, dialogue)
  assert ids == customer_ids
  assert all(r for r, c in zip(reads, customer_reads) if c)  # The customer's words, and
  agent_text = [text for speaker, text in dialogue.turns if speaker != CUSTOMER]
  unread = sum(len(tokenizer.encode(t)) + 1 for t in agent_text)  # not the agent's text + eot:
  assert len(ids) - sum(reads) == unread
  speakers = set(tokenizer.speaker_token_ids.values()) | {tokenizer.dialogue_id}
  assert all(r for i, r in zip(ids, reads) if i in speakers)  # every speaker token is read.


def test_the_tracker_learns_to_read_the_intent_from_a_trunks_states(played, tokenizer):
  trunk = WindowTrunk(tokenizer)
  train, test = trunk.encode(played["train"]), trunk.encode(played["test"])
  scores = {}
  for steps in (1, 300):
    head, standardize = frozen_tracker.train_head(
        train, tracker_probe.codes(played["train"]), trunk.cfg, steps=steps, batch_size=32,
        learning_rate=3e-3, seed=0)
    scores[steps] = tracker_probe.accuracies(head, standardize, test,
                                             tracker_probe.codes(played["test"]))
  for name in ("departure_airport", "return_airport", "departure_month"):  # Chance < 0.1.
    assert scores[1][name] < 0.2, (name, scores[1][name])
    assert scores[300][name] > 0.4, (name, scores[300][name])
  assert set(scores[300]) == {*state.TRACKED_NAMES, "joint", "joint_stderr"}
