"""Donation parsing: hand-written amounts and statements, unparsable ones explicit, and the real
persuadees' words against their recorded donations (B6)."""

import pytest

from data_pipelines.persuasion import donation, loader



@pytest.mark.parametrize("phrase, amount", [
    ("0.5", 0.5), ("$0.5", 0.5), ("$0.50", 0.5), (".50", 0.5), ("1.00", 1.0), ("$1", 1.0),
    ("50 cents", 0.5), ("50c", 0.5), ("5 cents", 0.05), ("one dollar", 1.0), ("two", 2.0),
    ("two dollars", 2.0), ("a dollar fifty", 1.5), ("twenty-five cents", 0.25),
    ("1 dollar and 50 cents", 1.5), ("a quarter", 0.25), ("half of it", 1.0),
    ("half a dollar", 0.5), ("all of it", 2.0), ("my whole payment", 2.0),
    ("everything", 2.0), ("nothing", 0.0), ("no", 0.0), ("zero", 0.0), ("$700", 2.0),
    ("  $0.20. ", 0.2),
])
def test_amount_phrases(phrase, amount):
  assert donation.read_amount(phrase) == pytest.approx(amount)


@pytest.mark.parametrize("phrase", ["blue", "", "lots", "1 2", "50 cents and 2"])
def test_phrases_that_are_no_amount_raise(phrase):
  with pytest.raises(donation.DonationParseError):
    donation.read_amount(phrase)


@pytest.mark.parametrize("text, amount, source", [
    ("ok bye [donate] 0.50 [/donate]", 0.5, "statement"),
    ("sure [DONATE] $1 [/DONATE]", 1.0, "statement"),
    ("[donate $1]", 1.0, "statement"),
    ("[donate] all of it [/donate]", 2.0, "statement"),
    ("[donate] 0.5", 0.5, "statement"),  # An unclosed block at the end of the turn.
    ("I would like to dotate $0.20. Would that help?", 0.2, "text"),
    ("OK.  I'll donate $1.50", 1.5, "text"),
    ("I would like to donate ten cents.", 0.1, "text"),
    ("I will donate all of it.", 2.0, "text"),
    ("No I won't be contributing today .", 0.0, "text"),
    ("I was going to give $1 but I will not donate after all", 0.0, "text"),
    ("I will not donate $2, but I will donate $0.30", 0.3, "text"),
])
def test_statements_and_free_text(text, amount, source):
  reading = donation.parse_donation(text)
  assert reading.parsed and reading.amount == pytest.approx(amount) and reading.source == source


@pytest.mark.parametrize("text, why", [
    ("[donate] lots [/donate]", "not an amount"),
    ("[donate] 1 [/donate] and [donate] 2 [/donate]", "2 donation statements"),
    ("thanks, sure I will donate", "no donation amount"),
    ("Have a great day!", "no donation amount"),
])
def test_unparsable_is_an_explicit_outcome_never_zero(text, why):
  reading = donation.parse_donation(text)
  assert not reading.parsed and reading.amount is None and why in reading.error


def test_the_loaders_statement_form_reads_back_for_every_cent():
  for cents in range(0, 201):
    text = f"thank you! {loader.format_donation(cents / 100)}"
    assert donation.parse_donation(text).amount == pytest.approx(cents / 100)


def real_final_turn_agreement(dialogues):
  """(final persuadee turns read, of those equal to B6, last stated amount read, equal to B6)."""
  final_read = final_equal = last_read = last_equal = 0
  for d in dialogues:
    said = [t.text for t in d.turns if t.speaker == "persuadee"]
    final = donation.parse_donation(said[-1])
    final_read += final.parsed
    final_equal += final.parsed and abs(final.amount - d.meta["donation"]) < 1e-6
    readings = [r for r in map(donation.parse_donation, said) if r.parsed]
    last_read += bool(readings)
    last_equal += bool(readings) and abs(readings[-1].amount - d.meta["donation"]) < 1e-6
  return final_read, final_equal, last_read, last_equal


def test_real_persuadees_words_against_the_recorded_donation(p4g_data_dir):
  dialogues = loader.load_dialogues(p4g_data_dir, with_labels=False)
  final_read, final_equal, last_read, last_equal = real_final_turn_agreement(dialogues)
  # Of the 1,017 dialogues the humans' final turn states an amount in 129 (76 of them = B6);
  # 604 state one somewhere (318 = B6 in the last one stated). Most disagreements are real:
  # "I'll donate $1" with B6 = 0 (what people say is not what they gave), not misreadings.
  assert (final_read, final_equal, last_read, last_equal) == (129, 76, 604, 318)
  # With the trained form appended (tasks/persuasion.py), every final turn reads back exactly.
  stated = loader.load_dialogues(p4g_data_dir, with_labels=False, donation_statement=True)
  assert real_final_turn_agreement(stated)[:2] == (len(stated), len(stated))
