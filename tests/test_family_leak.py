"""No training stream holds a held-out phrasing family's forms.

The held-out families are how evaluation asks whether an agent generalizes; a
single held-out form in the self-play corpus, the dialogue LM's stream or
CALM's scenes would make that gap meaningless. Each stream is read as the
model reads it (the LM's and CALM's rows decoded back from token ids), and
checked for the held-out value forms and key words (family_forms) and for the
word 4-grams of held-out patterns that no training pattern has. The positive
controls show the same check finds them in held-out families' dialogues.
"""

import json

import ml_collections
import numpy as np
import pytest

from calm import scenes
from data_pipelines.airdialogue import action_grammar
from data_pipelines.airdialogue import agents
from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import customer_families
from data_pipelines.airdialogue import customers
from data_pipelines.airdialogue import family_forms
from data_pipelines.airdialogue import family_split
from data_pipelines.airdialogue import selfplay
from data_pipelines.airdialogue import to_dialogue
from data_pipelines.tokenization import TEXT_PREFIX, train_tokenizer
from domains.airdialogue import lm_task

_SPLIT = family_split.SPLIT
_ROWS = 8  # Rows per stream batch; four kinds of LM rows and one CALM scene batch.


@pytest.fixture(scope="module")
def forms():
  """Held-out customer and agent forms, and the held-out customer patterns' novel 4-grams."""
  return (family_forms.held_out_forms("customer") | family_forms.held_out_forms("agent")
          | family_forms.held_out_ngrams(4, "customer") | family_forms.held_out_ngrams(4, "agent"))


@pytest.fixture(scope="module")
def tokenizer():
  """A tiny byte-level BPE: decode(encode(text)) == text, so decoded rows are the rows' text."""
  texts = [TEXT_PREFIX + line.partition(": ")[2]
           for s in selfplay.generate_samples(0, 40) for line in s.dialogue]
  return train_tokenizer(texts, to_dialogue.ROLES, 512,
                         markers=(action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG))


def _decoded_rows(batch, tokenizer):
  return [tokenizer.decode([int(i) for i in ids[live]])
          for ids, live in zip(batch["input_ids"], batch["attention_mask"].astype(bool))]


def _leaks(texts, forms):
  found = {}
  for text in texts:
    for form in family_forms.find(text, forms):
      found.setdefault(form, text)
  return found


def _held_out_dialogue(family, seed, agent_family="template"):
  (intent, table), = context.sample_contexts(np.random.default_rng(seed), 1)
  rng = np.random.default_rng(seed)
  customer = customers.Customer(intent, customers.STYLES["volunteer"], rng, family)
  lines, _, _ = selfplay.play(customer, agents.ScriptedAgent(table, "oracle", rng, agent_family))
  return lines


def test_held_out_families_share_no_value_or_sentence_form_with_training(forms):
  customer_forms = family_forms.held_out_forms("customer")
  distinctive = customer_forms | family_forms.held_out_ngrams(4, "customer")
  for name in _SPLIT.held_out("customer"):
    family = customer_families.FAMILIES[name]
    for kind in family_forms.VALUES:  # Enumerable, so held_out_forms lists every form.
      assert isinstance(getattr(family, kind), customer_families.Choices), (name, kind)
    for words, fields in family_forms.sentence_forms("customer", name):
      if fields <= {"n"}:  # No held-out value in it: its own words must set it apart.
        assert family_forms.find(" ".join(words), distinctive), (name, words)
  for name in _SPLIT.train("customer"):
    family = customer_families.FAMILIES[name]
    for kind in family_forms.VALUES:
      shared = _leaks(family_forms.renderings(family, kind), customer_forms)
      assert not shared, (name, kind, shared)
  for form in ("march the fifth", "the twenty-third of may", "five hundred", "a grand", "zero",
               "s-e-a", "sea-tac", "hartsfield-jackson", "05jun", "usd 500", "0900 hrs", "9am",
               "the 12th of may", "$500.00", "anxious", "legacy",
               "my company only reimburses the main cabin"):
    assert family_forms.find(form, forms), form


def test_selfplay_corpus_holds_no_held_out_form(forms, tmp_path):
  lines = [line.partition(": ")[2]
           for s in selfplay.generate_samples(seed=0, n=300) for line in s.dialogue]
  assert not _leaks(lines, forms)
  selfplay.write_corpus(str(tmp_path), 60, seed=1)  # What generate.py writes.
  with open(tmp_path / "data.json", encoding="utf-8") as f:
    written = [line for row in f for line in json.loads(row)["dialogue"]]
  assert len(written) > 300 and not _leaks(written, forms)


def test_dialogue_lm_stream_holds_no_held_out_form(forms, tokenizer):
  """Every kind of row but "repeat" (random token runs, no language) as the LM reads it."""
  kinds = [k for k in lm_task.KINDS if k != "repeat"]
  task = ml_collections.ConfigDict(dict(mixture=",".join(kinds), max_length=1024, kb_size=30))
  config = ml_collections.ConfigDict(dict(seed=0, train=dict(batch_size=_ROWS)))
  stream = lm_task.train_stream(task, tokenizer)(config)(0)
  rows = [row for _ in kinds for row in _decoded_rows(next(stream), tokenizer)]
  assert len(rows) == len(kinds) * _ROWS
  assert not _leaks(rows, forms)


def test_calm_scenes_hold_no_held_out_form(forms, tokenizer):
  batch = scenes.scene_batch(_ROWS, (scenes.STREAM_TAG, 0, 0, 0), tokenizer, max_length=1024,
                             kb_size=30, table_swap=0.5)
  rows = _decoded_rows(batch, tokenizer)
  assert all(action_grammar.OPEN_TAG in row for row in rows)
  assert not _leaks(rows, forms)


def test_the_check_finds_every_held_out_family(tokenizer):
  """Positive controls: held-out dialogues, read back through the tokenizer, are full of forms."""
  customer_forms = family_forms.held_out_forms("customer")
  ngrams = family_forms.held_out_ngrams(4, "customer")
  for name in _SPLIT.held_out("customer"):
    dialogues = [_held_out_dialogue(name, seed) for seed in range(6)]
    for lines in dialogues:
      said = [tokenizer.decode(tokenizer.encode(line.partition(": ")[2])) for line in lines
              if line.startswith("customer:")]
      assert len(_leaks(said, customer_forms)) >= 3, (name, said)
    assert _leaks([line for lines in dialogues for line in lines], ngrams), name
  for name in _SPLIT.held_out("agent"):
    lines = _held_out_dialogue("template", 0, agent_family=name)
    agent_said = [line for line in lines if line.startswith("agent:")]
    assert _leaks(agent_said, family_forms.held_out_forms("agent")), (name, agent_said)
