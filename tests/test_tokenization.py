"""Dialogue tokenizers: training, saving, loading HF directories, byte-level round trip."""

import functools
import json
import os

import pytest
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipelines import tokenization

ROLES = ("agent", "customer")
CORPUS = [
    "Hello, I would like to book a flight from JFK to LAX.",
    "Sure, may I know your travel dates?",
    "I want to leave on Jan 12 and come back on Jan 14.",
    "There is a flight with Delta for 300 dollars, one connection.",
    "Great, please book it. My name is Maria Lopez.",
    "Your ticket has been booked. Thank you!",
    "Grüße aus Köln — 東京 → 🙂 prices: $200, €180.",
] * 20
DIALOGUE_SPECIALS = ("<|eot|>", "<|context|>", "<|dialogue|>", "<|agent|>", "<|customer|>")


@functools.cache
def trained() -> tokenization.DialogueTokenizer:
  return tokenization.train_tokenizer(CORPUS, ROLES, vocab_size=400)


def special_strings(tok):
  return [tok.hf.pad_token, tok.hf.bos_token, tok.hf.eos_token, *DIALOGUE_SPECIALS]


def test_trained_tokenizer_has_single_id_special_tokens():
  tok = trained()
  assert 256 + len(special_strings(tok)) < tok.vocab_size <= 400
  ids = [tok.pad_id, tok.bos_id, tok.eos_id, tok.eot_id, tok.context_id, tok.dialogue_id,
         *tok.speaker_token_ids.values()]
  assert len(set(ids)) == len(ids) == 8
  assert set(ids) == set(tok.special_ids)
  for string in special_strings(tok):
    (token_id,) = tok.hf.encode(string, add_special_tokens=False)  # HF matches specials...
    assert token_id in tok.special_ids
    assert tok.decode([token_id]) == string
    assert not set(tok.encode(string)) & tok.special_ids  # ...our plain-text path never does.


def test_save_and_reload_with_auto_tokenizer(tmp_path):
  tok = trained()
  tok.save(str(tmp_path))
  hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path), local_files_only=True)
  assert len(hf) == tok.vocab_size
  for string in special_strings(tok):
    assert hf.convert_tokens_to_ids(string) == tok.hf.convert_tokens_to_ids(string)
  text = "Please book the Delta flight for Maria."
  # Our encoding prepends the one space every text gets (tokenization.TEXT_PREFIX).
  assert hf.encode(tokenization.TEXT_PREFIX + text, add_special_tokens=False) == tok.encode(text)
  again = tokenization.load_tokenizer(str(tmp_path))
  assert again.roles == ROLES
  assert again.speaker_token_ids == tok.speaker_token_ids
  assert again.vocab_size == tok.vocab_size


text_with_specials = st.lists(
    st.one_of(st.text(max_size=30), st.sampled_from(DIALOGUE_SPECIALS + ("<|pad|>", "<|bos|>", "<|eos|>"))),
    max_size=6,
).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=80), text_with_specials))
def test_byte_level_round_trip_and_no_special_from_plain_text(text):
  tok = trained()
  ids = tok.encode(text)
  assert not set(ids) & tok.special_ids
  assert tok.decode(ids) == text
  assert [tok.decode(b) for b in tok.encode_batch([text, text])] == [text, text]


def gpt2_style_directory(path: str) -> dict[str, int]:
  """A classic GPT-2 tokenizer directory (vocab.json + merges.txt, no specials but <|endoftext|>)."""
  model = json.loads(trained().hf.backend_tokenizer.to_str())["model"]
  plain = sorted((i, t) for t, i in model["vocab"].items() if not t.startswith("<|"))
  vocab = {t: n for n, (_, t) in enumerate(plain)}
  vocab["<|endoftext|>"] = len(vocab)
  os.makedirs(path)
  with open(os.path.join(path, "vocab.json"), "w", encoding="utf-8") as f:
    json.dump(vocab, f, ensure_ascii=False)
  with open(os.path.join(path, "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in model["merges"]))
  with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
    json.dump({"tokenizer_class": "GPT2Tokenizer"}, f)
  return vocab


def test_load_gpt2_directory_adds_missing_tokens_and_keeps_ids(tmp_path):
  base_dir = str(tmp_path / "gpt2")
  vocab = gpt2_style_directory(base_dir)
  base = transformers.AutoTokenizer.from_pretrained(base_dir, local_files_only=True)
  tok = tokenization.load_tokenizer(base_dir, roles=ROLES)
  endoftext = vocab["<|endoftext|>"]
  assert tok.bos_id == tok.eos_id == endoftext  # GPT-2's own bos/eos are kept,
  assert tok.pad_id >= len(vocab)  # pad and the dialogue tokens are appended.
  assert tok.vocab_size == len(vocab) + 1 + len(DIALOGUE_SPECIALS)
  assert min(tok.eot_id, tok.context_id, tok.dialogue_id, *tok.speaker_token_ids.values()) >= len(vocab)
  text = "Hello, I would like to book a flight from JFK to LAX."
  assert tok.encode(text) == base.encode(tokenization.TEXT_PREFIX + text, add_special_tokens=False)
  assert not set(tok.encode("<|endoftext|><|eot|>")) & tok.special_ids

  tok.save(str(tmp_path / "completed"))
  hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "completed"), local_files_only=True)
  assert hf.convert_tokens_to_ids("<|customer|>") == tok.speaker_token_ids["customer"]
  assert hf.pad_token_id == tok.pad_id


def test_new_roles_are_appended_without_moving_ids(tmp_path):
  tok = trained()
  tok.save(str(tmp_path))
  more = tokenization.load_tokenizer(str(tmp_path), roles=("persuader", "agent", "persuadee"))
  assert more.roles == ("agent", "customer", "persuader", "persuadee")
  assert more.speaker_token_ids["agent"] == tok.speaker_token_ids["agent"]
  assert more.vocab_size == tok.vocab_size + 2
  assert more.speaker_token_ids["persuadee"] == tok.vocab_size + 1


@pytest.mark.parametrize("roles", [(), ("agent", "agent"), ("eot", "agent"), ("bad role",), ("a|b",)])
def test_bad_roles_are_rejected(roles):
  with pytest.raises(ValueError, match="roles"):
    tokenization.train_tokenizer(CORPUS, roles, vocab_size=300)


def test_directory_without_roles_needs_roles(tmp_path):
  gpt2_style_directory(str(tmp_path / "gpt2"))
  with pytest.raises(ValueError, match="roles"):
    tokenization.load_tokenizer(str(tmp_path / "gpt2"))
