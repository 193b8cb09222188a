"""Dialogue tokenizers: a byte-level BPE trained here, or any local HF tokenizer.

Whatever the base vocabulary, a dialogue is always laid out with the same
special tokens (pad, bos, eos, one speaker token per role, end-of-turn and the
context / dialogue separators), so the MDP builder, the models and the sampler
never care where the tokenizer came from. Directories are written with
`save_pretrained`, so `transformers.AutoTokenizer.from_pretrained(dir)` loads
them offline; the role and marker lists, which transformers has no slot for,
travel in a small side file next to them.

Plain text is encoded with special-token matching switched off: a user who
types "<|eot|>" gets the bytes of that string, never the end-of-turn id, so no
utterance can forge a turn boundary or a speaker change.

Every text (a turn, a serialized context) is encoded as " " + text, and
decoding drops that one space again. Byte-level BPE glues a word's leading
space into its token, so without it "Helen" opening a turn and " Helen"
inside a sentence or an action block would be two unrelated ids, and copying
a name from one turn into another would need a learned id-to-id mapping per
name instead of plain copying.

Markers are task-level strings that must be ONE token (e.g. the "[action]" /
"[/action]" tags of the AirDialogue action grammar). They are registered as
non-special added tokens: plain text "[action]" always encodes to that one id
and decodes back to the same text, so a decoder can forbid a role from ever
opening an action block by masking a single logit.
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Sequence

import tokenizers
import transformers
from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers

PAD = "<|pad|>"
BOS = "<|bos|>"
EOS = "<|eos|>"
EOT = "<|eot|>"
CONTEXT = "<|context|>"
DIALOGUE = "<|dialogue|>"
ROLES_FILE = "dialogue_roles.json"
TEXT_PREFIX = " "  # Prepended to every encoded text (module docstring).
_STRUCTURAL = (EOT, CONTEXT, DIALOGUE)
_RESERVED_ROLES = frozenset({"pad", "bos", "eos", "eot", "context", "dialogue", "endoftext"})


def speaker_token(role: str) -> str:
  return f"<|{role}|>"


def _check_roles(roles: Sequence[str]) -> tuple[str, ...]:
  roles = tuple(roles)
  if not roles:
    raise ValueError("roles: expected at least one role name")
  for role in roles:
    if not isinstance(role, str) or not role or any(c.isspace() or c in "<|>" for c in role):
      raise ValueError(f"roles: {role!r} is not a usable role name (non-empty, no spaces, no '<', '|', '>')")
    if role.lower() in _RESERVED_ROLES:
      raise ValueError(f"roles: {role!r} collides with a reserved special token name")
  if len(set(roles)) != len(roles):
    raise ValueError(f"roles: duplicate names in {list(roles)}")
  return roles


def _check_markers(markers: Sequence[str], roles: Sequence[str] = ()) -> tuple[str, ...]:
  markers = tuple(markers)
  specials = {PAD, BOS, EOS, *_STRUCTURAL, *map(speaker_token, roles)}
  for marker in markers:
    if not isinstance(marker, str) or not marker or marker != marker.strip():
      raise ValueError(f"markers: {marker!r} is not a usable marker (non-empty, no surrounding "
                       "whitespace)")
    if marker in specials:
      raise ValueError(f"markers: {marker!r} collides with a special token")
  if len(set(markers)) != len(markers):
    raise ValueError(f"markers: duplicate strings in {list(markers)}")
  return markers


def _marker_tokens(markers: Sequence[str]) -> list[AddedToken]:
  # normalized=False: matched against the raw text, whatever the base normalizer does.
  return [AddedToken(m, special=False, normalized=False) for m in markers]


class DialogueTokenizer:
  """A transformers tokenizer plus the ids the dialogue layout needs.

  `hf` is the underlying transformers tokenizer (what `save_pretrained` writes
  and what a model's embedding size must match: `vocab_size == len(hf)`).
  `marker_ids[marker]` is the single id of each marker string (see module
  docstring); markers are plain text, so they are not in `special_ids`.
  """

  def __init__(self, hf: transformers.PreTrainedTokenizerBase, roles: Sequence[str],
               markers: Sequence[str] = ()):
    self.hf = hf
    self.roles = _check_roles(roles)
    self.markers = _check_markers(markers, self.roles)
    vocab = hf.get_vocab()
    missing = [t for t in (*_STRUCTURAL, *map(speaker_token, self.roles)) if t not in vocab]
    for name in ("pad_token", "bos_token", "eos_token"):
      if getattr(hf, name) is None:
        missing.append(name)
    if missing:
      raise ValueError(
          f"tokenizer {hf.name_or_path!r} lacks special tokens {missing}; load it with load_tokenizer")
    self.pad_id = hf.pad_token_id
    self.bos_id = hf.bos_token_id
    self.eos_id = hf.eos_token_id
    self.eot_id = vocab[EOT]
    self.context_id = vocab[CONTEXT]
    self.dialogue_id = vocab[DIALOGUE]
    self.speaker_token_ids = {role: vocab[speaker_token(role)] for role in self.roles}
    self.special_ids = frozenset(hf.all_special_ids) | frozenset(
        (self.eot_id, self.context_id, self.dialogue_id, *self.speaker_token_ids.values()))
    # A private copy of the backend with special-token matching off (see module docstring).
    self._plain = tokenizers.Tokenizer.from_str(hf.backend_tokenizer.to_str())
    self._plain.encode_special_tokens = True
    self._plain.no_padding()
    self._plain.no_truncation()
    self.marker_ids = {}
    for marker in self.markers:
      ids = self._plain.encode(marker, add_special_tokens=False).ids
      if len(ids) != 1 or ids[0] in self.special_ids:
        raise ValueError(
            f"tokenizer {hf.name_or_path!r}: marker {marker!r} encodes to {ids}, not one "
            "non-special id; load it with load_tokenizer(..., markers=...)")
      self.marker_ids[marker] = ids[0]

  @property
  def vocab_size(self) -> int:
    return len(self.hf)

  def encode(self, text: str) -> list[int]:
    """Token ids of " " + text (module docstring; "" stays empty), never adding or matching
    special tokens."""
    return self.encode_batch([text])[0]

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    return [e.ids for e in self._plain.encode_batch([TEXT_PREFIX + t if t else t for t in texts],
                                                    add_special_tokens=False)]

  def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
    """The text of `ids` without the leading space `encode` added: decode(encode(s)) == s."""
    text = self._plain.decode(list(ids), skip_special_tokens=skip_special_tokens)
    return text[len(TEXT_PREFIX):] if text.startswith(TEXT_PREFIX) else text

  def save(self, directory: str) -> None:
    self.hf.save_pretrained(directory)
    with open(os.path.join(directory, ROLES_FILE), "w", encoding="utf-8") as f:
      json.dump({"roles": list(self.roles), "markers": list(self.markers)}, f, indent=2)


def _dialogue_special_tokens(roles: Sequence[str]) -> list[str]:
  return [*_STRUCTURAL, *map(speaker_token, roles)]


def train_tokenizer(
    texts: Iterable[str], roles: Sequence[str], vocab_size: int = 2048, min_frequency: int = 2,
    markers: Sequence[str] = (),
) -> DialogueTokenizer:
  """Trains a byte-level BPE (GPT-2 style, no normalizer) on `texts`.

  Byte-level with no normalization so that decode(encode(s)) == s for every
  string: generated utterances and the text they were trained on agree byte for
  byte. `vocab_size` counts the 256 byte symbols, the special tokens and the
  `markers` (single-id task strings, see module docstring).
  """
  roles = _check_roles(roles)
  markers = _check_markers(markers, roles)
  specials = [PAD, BOS, EOS, *_dialogue_special_tokens(roles)]
  if vocab_size < 256 + len(specials) + len(markers):
    raise ValueError(
        f"vocab_size={vocab_size} is below the 256 byte symbols + {len(specials)} special tokens"
        f" + {len(markers)} markers")
  backend = tokenizers.Tokenizer(models.BPE())
  backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  backend.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=vocab_size - len(markers),
      min_frequency=min_frequency,
      special_tokens=specials,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
      show_progress=False,
  )
  backend.train_from_iterator(texts, trainer)
  backend.add_tokens(_marker_tokens(markers))
  hf = transformers.PreTrainedTokenizerFast(
      tokenizer_object=backend,
      pad_token=PAD,
      bos_token=BOS,
      eos_token=EOS,
      extra_special_tokens=_dialogue_special_tokens(roles),
  )
  return DialogueTokenizer(hf, roles, markers)


def _stored_lists(directory: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
  """(roles, markers) from the side file; files written before markers existed have none."""
  path = os.path.join(directory, ROLES_FILE)
  if not os.path.exists(path):
    return (), ()
  with open(path, encoding="utf-8") as f:
    try:
      obj = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}:{e.lineno}: field '<record>': malformed JSON ({e.msg})") from None
  if not isinstance(obj, dict) or not isinstance(obj.get("roles"), list):
    raise ValueError(f"{path}: field 'roles': expected a list of role names")
  markers = obj.get("markers", [])
  if not isinstance(markers, list):
    raise ValueError(f"{path}: field 'markers': expected a list of strings")
  return tuple(obj["roles"]), tuple(markers)


def load_tokenizer(directory: str, roles: Sequence[str] | None = None,
                   markers: Sequence[str] | None = None) -> DialogueTokenizer:
  """Loads any local HF tokenizer directory and adds the missing dialogue tokens.

  Roles (and markers) come from the directory's side file (written by
  `DialogueTokenizer.save`) followed by any new ones in `roles` (`markers`), so
  existing ids never move. Tokens are only appended: a pretrained model's
  embedding table keeps its rows and must grow to `vocab_size` rows. A marker
  appended here was never seen by a model trained with this directory, so
  pass new markers only before training. Round-trip exactness is guaranteed
  for byte-level tokenizers (ours, GPT-2); others (e.g. SentencePiece) may
  normalize.
  """
  stored, stored_markers = _stored_lists(directory)
  all_roles = _check_roles(stored + tuple(r for r in (roles or ()) if r not in stored))
  all_markers = _check_markers(
      stored_markers + tuple(m for m in (markers or ()) if m not in stored_markers), all_roles)
  hf = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
  if not hf.is_fast:
    raise ValueError(f"{directory}: a fast (tokenizer.json / tokenizers-backed) tokenizer is required")
  named = {}
  for name, token in (("pad_token", PAD), ("bos_token", BOS), ("eos_token", EOS)):
    if getattr(hf, name) is None:
      named[name] = token
  if named:
    hf.add_special_tokens(named)
  extras = [t for t in _dialogue_special_tokens(all_roles) if t not in hf.extra_special_tokens]
  if extras:
    hf.add_special_tokens({"extra_special_tokens": extras}, replace_extra_special_tokens=False)
  added = {t.content for t in hf.added_tokens_decoder.values()}
  new_markers = [m for m in all_markers if m not in added]
  if new_markers:
    hf.add_tokens(_marker_tokens(new_markers))
  return DialogueTokenizer(hf, all_roles, all_markers)
