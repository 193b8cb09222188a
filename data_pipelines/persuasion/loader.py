"""Persuasion for Good (Wang et al., ACL 2019) as `Dialogue`s with donation outcome and personas.

Files read under `data_dir` (a config's task.data_dir / rl.data_dir, a main's --data_dir, or else
the folder named by the environment variable P4G_DATA_DIR; see `resolve_data_dir`):
  FullData/full_dialog.csv       one utterance a row: B2 dialogue id, B4 role, Turn, Unit (text).
  FullData/full_info.csv         one participant a row: B2, B3 user, B4 role, B6 donation, traits.
  AnnotatedData/300_dialog.xlsx  one sentence a row of 300 of the dialogues, with strategy labels.

Every choice below is visible in the returned data, so a consumer never has to guess:

* Roles: B4 == 0 is "persuader", B4 == 1 is "persuadee"; any other value is an error.
* Turns: a dialogue's rows are sorted by `Turn` with a stable sort (rows of one Turn keep their
  file order), then each run of rows by the same role becomes one `Turn`, the stripped texts
  joined by one space. full_dialog.csv already holds one utterance a row, the persuader first in
  each Turn; the merge matters for per-sentence files such as 300_dialog.xlsx.
* Donation: the persuadee's B6 is the outcome. The task paid $2, so the 35 recorded donations of
  $3..$700 cannot be what was given (cents or typos). They are CLIPPED into [0, 2] and the dialogue
  is kept, as its text is still good data: meta["donation_raw"] is B6 as recorded,
  meta["donation"] the clipped value, meta["donation_clipped"] whether clipping changed it (filter
  on it to drop them instead). `Dialogue.outcome` = donation / 2, the persuader's reward in [0, 1].
  A missing B6 is an error.
* Persona: the *.x columns of each participant, keyed without the suffix, numbers as floats; an
  empty cell (7 participants lack personality scores, 14 demographics) is None, never imputed.
* Text: strict UTF-8 (a BOM is allowed); undecodable bytes are an error naming the line. About 30
  characters of full_dialog.csv are GBK punctuation mis-decoded as Latin-1 ("takes ¡ª every day");
  `repair_text` maps exactly those sequences back. The xlsx has a few unrecoverable "??Â¸" runs
  (the CSV has "_" there); they are kept as they are.
* Labels: label_1 (and label_2 where present) of the speaker's own scheme, which must be in
  PERSUADER_LABELS or PERSUADEE_LABELS; the one stray "non-personal-Task-related-inquiry" is how
  the scheme defines "task-related-inquiry" and is read as such. Each labelled sentence is attached
  to its dialogue in meta["strategy_labels"] with the index of the merged turn that holds it.
* Donation statement (opt-in: `load_dialogues(donation_statement=True)` or
  `with_donation_statement`): a persuadee simulator must end by saying what it gives in a form a
  program can read, as an AirDialogue agent ends with its action block. The clipped donation is
  appended to the persuadee's LAST turn as `[donate] 0.50 [/donate]` (or is a final persuadee
  turn if it never speaks); meta["donation_statement"] holds the appended text and
  `parse_donation` reads it back. Off by default, so the turns stay the corpus's own words.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import re
import zipfile
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from data_pipelines import dialogue as dialogue_lib

ROLES = ("persuader", "persuadee")  # Indexed by B4.
MAX_DONATION = 2.0  # The task payment: nobody could give more.
DONATION_OPEN = "[donate]"
DONATION_CLOSE = "[/donate]"

FULL_DIALOG = os.path.join("FullData", "full_dialog.csv")
FULL_INFO = os.path.join("FullData", "full_info.csv")
ANNOTATED_DIALOG = os.path.join("AnnotatedData", "300_dialog.xlsx")

PERSUADER_LABELS = frozenset((
    "acknowledgement", "ask-donate-more", "ask-donation-amount", "ask-not-donate-reason",
    "closing", "comment-partner", "confirm-donation", "credibility-appeal", "donation-information",
    "emotion-appeal", "foot-in-the-door", "greeting", "logical-appeal", "negative-to-inquiry",
    "neutral-to-inquiry", "off-task", "other", "personal-related-inquiry", "personal-story",
    "positive-to-inquiry", "praise-user", "proposition-of-donation", "self-modeling",
    "source-related-inquiry", "task-related-inquiry", "thank", "you-are-welcome",
))
PERSUADEE_LABELS = frozenset((
    "acknowledgement", "agree-donation", "ask-donation-procedure", "ask-org-info",
    "ask-persuader-donation-intention", "closing", "confirm-donation", "disagree-donation",
    "disagree-donation-more", "greeting", "negative-reaction-to-donation", "negative-to-inquiry",
    "neutral-reaction-to-donation", "neutral-to-inquiry", "off-task", "other",
    "personal-related-inquiry", "positive-reaction-to-donation", "positive-to-inquiry",
    "provide-donation-amount", "task-related-inquiry", "thank", "you-are-welcome",
))

# Where the corpus is: not in the repository. What a missing corpus's error says to do.
DATA_DIR_ENV = "P4G_DATA_DIR"
CORPUS_URL = "https://gitlab.com/ucdavisnlp/persuasionforgood"
CORPUS_ADVICE = (f"set {DATA_DIR_ENV} (or the config's task.data_dir / rl.data_dir, or "
                 f"--data_dir) to the folder holding FullData/ and AnnotatedData/ of the "
                 f"Persuasion for Good corpus (Wang et al. 2019), from {CORPUS_URL} or ConvoKit")

_LABEL_ALIASES = {"non-personal-Task-related-inquiry": "task-related-inquiry"}
_LABEL_COLUMNS = (("er_label_1", "er_label_2"), ("ee_label_1", "ee_label_2"))  # Indexed by B4.
_SENTIMENT_COLUMNS = ("neg", "neu", "pos")

# GB2312 punctuation bytes that were decoded as Latin-1 before the CSV was written as UTF-8.
_GBK_MOJIBAKE = {
    "¡ª": "—", "¡°": "“", "¡±": "”", "¡®": "‘", "¡¯": "’", "¡ê": "£", "¡é": "¢",
}


_DONATION_RE = re.compile(r"\[donate\](.*?)\[/donate\]", re.IGNORECASE | re.DOTALL)
_AMOUNT_RE = re.compile(r"^\s*\$?(\d+(?:\.\d{1,2})?)\s*$")


class PersuasionFormatError(dialogue_lib.DialogueFormatError):
  """Bad input; the message names the file, the line (CSV) or row (XLSX) and the field."""


class MissingCorpusError(FileNotFoundError):
  """The corpus is not where data_dir / $P4G_DATA_DIR points; one line saying what to set."""


class DonationParseError(ValueError):
  """The text holds no well-formed donation statement; the message says why."""


@dataclasses.dataclass(frozen=True)
class SentenceLabel:
  """One annotated sentence of 300_dialog.xlsx."""

  dialogue_id: str
  turn: int  # The file's Turn index, not the index of the merged turn.
  speaker: str
  text: str
  labels: tuple[str, ...]  # Most salient first: label_1, then label_2 where the annotator gave one.
  sentiment: tuple[float, float, float] | None  # (neg, neu, pos); None where the file has none.
  row: int  # Spreadsheet row (the header is row 1), to trace a label back to the file.


def default_data_dir() -> str:
  """The corpus folder named by $P4G_DATA_DIR, or "" when it is unset (there is no built-in
  location: the corpus is not part of the repository)."""
  return os.environ.get(DATA_DIR_ENV, "").strip()


def resolve_data_dir(data_dir: str | None = None) -> str:
  """`data_dir` if given, else $P4G_DATA_DIR; with neither, MissingCorpusError, one line saying
  what to set and where the corpus comes from. A reader that then misses one of the corpus's
  files raises MissingCorpusError naming that file, with the same advice."""
  path = data_dir or default_data_dir()
  if not path:
    raise MissingCorpusError(f"no Persuasion for Good corpus: {CORPUS_ADVICE}")
  return path


def repair_text(text: str) -> str:
  for broken, fixed in _GBK_MOJIBAKE.items():
    text = text.replace(broken, fixed)
  return text


@dataclasses.dataclass(frozen=True)
class _Table:
  path: str
  rows: pd.DataFrame
  positions: np.ndarray  # File line (CSV) or sheet row (XLSX) of each record, for error messages.
  unit: str  # "line" or "row".

  def error(self, i: int, field: str, why: str) -> PersuasionFormatError:
    where = f"{self.path}: {self.unit} {self.positions[i]}"
    return PersuasionFormatError(f"{where}: field '{field}': {why}")

  def check(self, ok: np.ndarray, column: str, expected: str) -> None:
    bad = np.flatnonzero(~ok)
    if bad.size:
      i = int(bad[0])
      value = self.rows[column].iloc[i]
      if isinstance(value, np.generic):
        value = value.item()
      got = "an empty cell" if pd.isna(value) else repr(value)
      raise self.error(i, column, f"expected {expected}, got {got}")

  def ints(self, column: str, allowed: Sequence[int] | None = None) -> np.ndarray:
    values = pd.to_numeric(self.rows[column], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(values) & (values == np.round(values)) & (values >= 0)
    expected = "a non-negative integer"
    if allowed is not None:
      ok &= np.isin(values, allowed)
      expected = " or ".join(str(a) for a in allowed)
    self.check(ok, column, expected)
    return values.astype(np.int64)

  def floats(self, column: str, missing_ok: bool = False) -> np.ndarray:
    values = pd.to_numeric(self.rows[column], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(values) | (missing_ok & self.rows[column].isna().to_numpy())
    self.check(ok, column, "a number")
    return values

  def strings(self, column: str) -> list[str]:
    values = [None if pd.isna(v) else str(v) for v in self.rows[column]]
    present = np.array([v is not None and v.strip() != "" for v in values], bool)
    self.check(present, column, "non-empty text")
    return values


def _require_file(path: str) -> None:
  if not os.path.isfile(path):
    raise MissingCorpusError(f"{path}: no such file; {CORPUS_ADVICE}")


def _require_columns(path: str, frame: pd.DataFrame, columns: Iterable[str]) -> None:
  missing = [c for c in columns if c not in frame.columns]
  if missing:
    raise PersuasionFormatError(
        f"{path}: line 1: field {missing[0]!r}: missing column (header has {list(frame.columns)})")


def _read_csv(path: str, columns: Sequence[str]) -> _Table:
  """Reads every field as text, so that only an empty field is missing ("NA", "None" stay words)."""
  _require_file(path)
  with open(path, "rb") as f:
    raw = f.read()
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = raw.count(b"\n", 0, e.start) + 1
    raise PersuasionFormatError(f"{path}: line {line}: field '<bytes>': not UTF-8 "
                                f"(byte {raw[e.start]:#04x} at offset {e.start})") from None
  try:
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_values=[""])
  except pd.errors.ParserError as e:
    raise PersuasionFormatError(f"{path}: field '<record>': malformed CSV ({e})") from None
  _require_columns(path, frame, columns)
  # A quoted field may span lines; count them so that errors name the record's first line.
  spans = sum(frame[c].str.count("\n").fillna(0).to_numpy(dtype=np.int64) for c in frame.columns)
  lines = 2 + np.arange(len(frame)) + np.cumsum(spans) - spans
  return _Table(path, frame, lines, "line")


def _read_xlsx(path: str, columns: Sequence[str]) -> _Table:
  _require_file(path)
  try:
    frame = pd.read_excel(path, sheet_name=0, engine="openpyxl", keep_default_na=False,
                          na_values=[""])
  except (zipfile.BadZipFile, KeyError, ValueError) as e:
    raise PersuasionFormatError(
        f"{path}: field '<workbook>': not a readable .xlsx file ({e})") from None
  _require_columns(path, frame, columns)
  return _Table(path, frame, np.arange(len(frame)) + 2, "row")


def load_strategy_labels(data_dir: str | None = None) -> list[SentenceLabel]:
  """Every sentence of 300_dialog.xlsx, in file order, each with its speaker's strategy label(s)."""
  columns = ("B2", "B4", "Turn", "Unit", *sum(_LABEL_COLUMNS, ()), *_SENTIMENT_COLUMNS)
  table = _read_xlsx(os.path.join(resolve_data_dir(data_dir), ANNOTATED_DIALOG), columns)
  ids, roles, turns = table.strings("B2"), table.ints("B4", (0, 1)), table.ints("Turn")
  texts = table.strings("Unit")
  scores = np.stack([table.floats(c, missing_ok=True) for c in _SENTIMENT_COLUMNS], axis=1)
  has_scores = np.isfinite(scores)
  table.check(has_scores.all(axis=1) | ~has_scores.any(axis=1), "neg",
              "all or none of neg, neu, pos")
  known = (PERSUADER_LABELS, PERSUADEE_LABELS)
  cells = {c: table.rows[c].tolist() for c in sum(_LABEL_COLUMNS, ())}
  sentences = []
  for i, role in enumerate(roles.tolist()):
    labels = []
    for column in _LABEL_COLUMNS[role]:
      value = cells[column][i]
      if pd.isna(value) or not str(value).strip():
        if column == _LABEL_COLUMNS[role][0]:
          raise table.error(i, column, f"missing the label of this {ROLES[role]} sentence")
        continue
      label = _LABEL_ALIASES.get(str(value).strip(), str(value).strip())
      if label not in known[role]:
        raise table.error(i, column, f"unknown {ROLES[role]} label {value!r}")
      labels.append(label)
    for column in _LABEL_COLUMNS[1 - role]:
      if not pd.isna(cells[column][i]):
        raise table.error(i, column, f"a {ROLES[1 - role]} label on a {ROLES[role]} sentence")
    sentiment = tuple(float(s) for s in scores[i]) if has_scores[i].all() else None
    sentences.append(SentenceLabel(ids[i], int(turns[i]), ROLES[role], repair_text(texts[i]),
                                   tuple(labels), sentiment, int(table.positions[i])))
  return sentences


@dataclasses.dataclass(frozen=True)
class _Participant:
  user_id: str
  donation_raw: float
  traits: dict[str, Any]


def _read_participants(path: str,
                       dialogue_ids: Sequence[str]) -> dict[tuple[str, int], _Participant]:
  """Both participants of every dialogue, keyed by (dialogue id, B4)."""
  table = _read_csv(path, ("B2", "B3", "B4", "B6"))
  ids, users, roles = table.strings("B2"), table.strings("B3"), table.ints("B4", (0, 1))
  donations = table.floats("B6")
  trait_columns = [c for c in table.rows.columns if c.endswith(".x")]
  trait_values = {}
  for column in trait_columns:
    text = table.rows[column]
    numbers = pd.to_numeric(text, errors="coerce")
    numeric = bool((numbers.notna() | text.isna()).all())
    trait_values[column] = [None if pd.isna(t) else (float(n) if numeric else t)
                            for t, n in zip(text, numbers)]
  wanted, seen = set(dialogue_ids), {}
  for i, key in enumerate(zip(ids, roles.tolist())):
    if key[0] not in wanted:
      raise table.error(i, "B2", f"dialogue {key[0]!r} has no utterances in {FULL_DIALOG}")
    if key in seen:
      raise table.error(i, "B4", f"second {ROLES[key[1]]} of dialogue {key[0]!r} "
                                 f"(first on line {seen[key][0]})")
    traits = {c.removesuffix(".x"): trait_values[c][i] for c in trait_columns}
    seen[key] = (int(table.positions[i]), _Participant(users[i], float(donations[i]), traits))
  for dialogue_id in dialogue_ids:
    for role, name in enumerate(ROLES):
      if (dialogue_id, role) not in seen:
        raise PersuasionFormatError(
            f"{path}: field 'B4': dialogue {dialogue_id!r} has no {name} row")
  return {key: participant for key, (_, participant) in seen.items()}


def _merge_turns(
    rows: Sequence[tuple[int, int, str]],
) -> tuple[list[dialogue_lib.Turn], dict[tuple[int, int], int]]:
  """Turns from (Turn, role, text) rows in file order, and the merged turn of each (Turn, role)."""
  order = sorted(range(len(rows)), key=lambda k: rows[k][0])  # Stable: ties keep file order.
  roles, texts, turn_of = [], [], {}
  for k in order:
    turn, role, text = rows[k]
    if not roles or roles[-1] != role:
      roles.append(role)
      texts.append([])
    texts[-1].append(text.strip())
    turn_of.setdefault((turn, role), len(roles) - 1)
  turns = [dialogue_lib.Turn(ROLES[r], " ".join(t)) for r, t in zip(roles, texts)]
  return turns, turn_of


def _attach_labels(dialogues: list[dialogue_lib.Dialogue],
                   turn_of: dict[str, dict[tuple[int, int], int]],
                   data_dir: str) -> list[dialogue_lib.Dialogue]:
  path = os.path.join(data_dir, ANNOTATED_DIALOG)
  by_dialogue: dict[str, list[dict[str, Any]]] = {}
  for s in load_strategy_labels(data_dir):
    where = f"{path}: row {s.row}"
    if s.dialogue_id not in turn_of:
      raise PersuasionFormatError(
          f"{where}: field 'B2': dialogue {s.dialogue_id!r} is not in {FULL_DIALOG}")
    key = (s.turn, ROLES.index(s.speaker))
    if key not in turn_of[s.dialogue_id]:
      raise PersuasionFormatError(f"{where}: field 'Turn': dialogue {s.dialogue_id!r} has no "
                                  f"{s.speaker} utterance in Turn {s.turn}")
    by_dialogue.setdefault(s.dialogue_id, []).append({
        "turn_index": turn_of[s.dialogue_id][key], "speaker": s.speaker, "text": s.text,
        "labels": list(s.labels)})
  return [dataclasses.replace(d, meta={**d.meta, "annotated": d.dialogue_id in by_dialogue,
                                       "strategy_labels": by_dialogue.get(d.dialogue_id, [])})
          for d in dialogues]


def format_donation(amount: float) -> str:
  """The statement for `amount` dollars, e.g. `[donate] 0.50 [/donate]`."""
  if not 0.0 <= amount <= MAX_DONATION:
    raise ValueError(f"donation {amount} is outside [0, {MAX_DONATION}]")
  return f"{DONATION_OPEN} {amount:.2f} {DONATION_CLOSE}"


def parse_donation(text: str) -> float:
  """The amount in the single donation statement of `text`; DonationParseError otherwise."""
  blocks = _DONATION_RE.findall(text)
  if not blocks:
    if DONATION_OPEN in text.lower():
      raise DonationParseError(f"'{DONATION_OPEN}' is never closed by '{DONATION_CLOSE}'")
    raise DonationParseError(f"no '{DONATION_OPEN} ... {DONATION_CLOSE}' statement")
  if len(blocks) > 1:
    raise DonationParseError(f"{len(blocks)} donation statements; exactly one is allowed")
  m = _AMOUNT_RE.match(blocks[0])
  if m is None:
    raise DonationParseError(f"statement body {blocks[0].strip()!r} is not an amount like 0.50")
  amount = float(m[1])
  if amount > MAX_DONATION:
    raise DonationParseError(f"amount {amount} exceeds the ${MAX_DONATION:.2f} task payment")
  return amount


def with_donation_statement(d: dialogue_lib.Dialogue) -> dialogue_lib.Dialogue:
  """`d` with its clipped donation stated at the end of the persuadee's last turn (see above)."""
  statement = format_donation(d.meta["donation"])
  turns = list(d.turns)
  spoken = [i for i, t in enumerate(turns) if t.speaker == "persuadee"]
  for i in spoken:
    if DONATION_OPEN in turns[i].text.lower():
      raise PersuasionFormatError(
          f"dialogue {d.dialogue_id!r}: field 'turns[{i}].text': already holds "
          f"{DONATION_OPEN!r}, which would make the statement ambiguous")
  if spoken:
    turns[spoken[-1]] = dialogue_lib.Turn("persuadee", f"{turns[spoken[-1]].text} {statement}")
  else:
    turns.append(dialogue_lib.Turn("persuadee", statement))
  return dataclasses.replace(d, turns=tuple(turns),
                             meta={**d.meta, "donation_statement": statement})


def load_dialogues(data_dir: str | None = None, *, with_labels: bool = True,
                   donation_statement: bool = False) -> list[dialogue_lib.Dialogue]:
  """All dialogues in the order they first appear in full_dialog.csv.

  With `with_labels` (also reads the xlsx) every dialogue gets meta["annotated"] and
  meta["strategy_labels"] (a list of {"turn_index", "speaker", "text", "labels"}, empty for the
  717 unannotated dialogues); without, neither key exists. With `donation_statement` the
  persuadee's last turn ends with its donation statement (`with_donation_statement`).
  """
  data_dir = resolve_data_dir(data_dir)
  table = _read_csv(os.path.join(data_dir, FULL_DIALOG), ("B2", "B4", "Turn", "Unit"))
  if table.rows.empty:
    raise PersuasionFormatError(f"{table.path}: field '<record>': no utterances")
  ids, roles, turn_index = table.strings("B2"), table.ints("B4", (0, 1)), table.ints("Turn")
  texts = table.strings("Unit")
  rows_of: dict[str, list[tuple[int, int, str]]] = {}
  for dialogue_id, role, turn, text in zip(ids, roles.tolist(), turn_index.tolist(), texts):
    rows_of.setdefault(dialogue_id, []).append((turn, role, repair_text(text)))
  participants = _read_participants(os.path.join(data_dir, FULL_INFO), list(rows_of))
  dialogues, turn_of = [], {}
  for dialogue_id, rows in rows_of.items():
    turns, turn_of[dialogue_id] = _merge_turns(rows)
    persuader, persuadee = participants[(dialogue_id, 0)], participants[(dialogue_id, 1)]
    donation = float(np.clip(persuadee.donation_raw, 0.0, MAX_DONATION))
    dialogues.append(dialogue_lib.Dialogue(
        dialogue_id=dialogue_id,
        roles=ROLES,
        turns=tuple(turns),
        context={"persuader": persuader.traits, "persuadee": persuadee.traits},
        outcome=donation / MAX_DONATION,
        meta={
            "donation": donation,
            "donation_raw": persuadee.donation_raw,
            "donation_clipped": donation != persuadee.donation_raw,
            "persuader_donation_raw": persuader.donation_raw,
            "user_ids": {"persuader": persuader.user_id, "persuadee": persuadee.user_id},
        },
    ))
  if with_labels:
    dialogues = _attach_labels(dialogues, turn_of, data_dir)
  return [with_donation_statement(d) for d in dialogues] if donation_statement else dialogues


def split_ids(dialogue_ids: Iterable[str], test_fraction: float = 0.1,
              seed: int = 0) -> tuple[list[str], list[str]]:
  """(train, test) ids, each sorted. The round(test_fraction * n) ids with the smallest
  sha256(f"{seed}:{id}") are test: exact in size, blind to input order, and unlike a numpy
  permutation it cannot change with a library version."""
  if not 0.0 <= test_fraction <= 1.0:
    raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
  ids = sorted(dialogue_ids)
  if len(set(ids)) != len(ids):
    raise ValueError("dialogue ids are not unique")
  ranked = sorted(ids, key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).digest())
  test = set(ranked[:int(round(test_fraction * len(ids)))])
  return [i for i in ids if i not in test], [i for i in ids if i in test]


def train_test_split(
    dialogues: Sequence[dialogue_lib.Dialogue], test_fraction: float = 0.1, seed: int = 0,
) -> tuple[list[dialogue_lib.Dialogue], list[dialogue_lib.Dialogue]]:
  """Splits by dialogue id (see `split_ids`), keeping the input order within each side."""
  _, test_ids = split_ids((d.dialogue_id for d in dialogues), test_fraction, seed)
  test = set(test_ids)
  return ([d for d in dialogues if d.dialogue_id not in test],
          [d for d in dialogues if d.dialogue_id in test])


def to_jsonl(path: str, dialogues: Iterable[dialogue_lib.Dialogue] | None = None, *,
             data_dir: str | None = None) -> int:
  """Writes `dialogues` (default: all, with labels) as Dialogue JSON lines; returns the count."""
  if dialogues is None:
    dialogues = load_dialogues(data_dir)
  return dialogue_lib.write_jsonl(path, dialogues)
