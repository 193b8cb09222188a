"""ilql_dialogue/text_metrics.py on inputs whose values were worked out by hand."""

import math

import pytest
import sacrebleu

from ilql_dialogue import text_metrics


def test_word_tokens_follow_the_airdialogue_preprocessing():
  """nltk.word_tokenize per sentence, case kept, Treebank quotes back to '"'."""
  assert text_metrics.word_tokens('Hello. I want a flight to JFK, for $500. He said "ok".') == [
      "Hello", ".", "I", "want", "a", "flight", "to", "JFK", ",", "for", "$", "500", ".",
      "He", "said", '"', "ok", '"', "."]
  assert text_metrics.word_tokens("") == []


def test_corpus_bleu_on_a_hand_computed_corpus():
  # Word tokens: "The flight is booked ." vs "Your flight is booked ." and "Thanks ." vs
  # "Thank you so much .". Clipped matches over the corpus, by order:
  #   1-grams (flight, is, booked, . | .)        5 of 5 + 2 = 7
  #   2-grams (flight is, is booked, booked .)    3 of 4 + 1 = 5
  #   3-grams (flight is booked, is booked .)     2 of 3 + 0 = 3
  #   4-grams (flight is booked .)                1 of 2 + 0 = 2
  # Hypotheses 7 tokens, references 10: BP = exp(1 - 10/7).
  # BLEU = 100 * (5/7 * 3/5 * 2/3 * 1/2) ** (1/4) * exp(-3/7) = 100 * 0.61479 * 0.65143 = 40.050.
  hypotheses = ["The flight is booked.", "Thanks."]
  references = ["Your flight is booked.", "Thank you so much."]
  expected = 100 * (5 / 7 * 3 / 5 * 2 / 3 * 1 / 2) ** 0.25 * math.exp(1 - 10 / 7)
  assert text_metrics.corpus_bleu(hypotheses, references) == pytest.approx(expected, abs=1e-9)
  assert expected == pytest.approx(40.050, abs=1e-3)
  # The first pair alone: BP = 1, (4/5 * 3/4 * 2/3 * 1/2) ** (1/4) = 0.2 ** 0.25.
  assert text_metrics.corpus_bleu(hypotheses[:1], references[:1]) == pytest.approx(
      100 * 0.2 ** 0.25, abs=1e-9)


@pytest.mark.parametrize("hypotheses,references", [
    (["Where are you flying from?", "My name is Nancy Kelly."],
     ["Where would you like to fly from?", "This is Nancy Kelly."]),
    (["I found a flight for you.", "ok", "Please book it."],
     ["I found a flight with Delta for $200.", "Okay.", "Book it, please."]),
])
def test_corpus_bleu_is_sacrebleu_unsmoothed_on_word_tokens(hypotheses, references):
  tokenized = [[" ".join(text_metrics.word_tokens(t)) for t in texts]
               for texts in (hypotheses, references)]
  want = sacrebleu.corpus_bleu(tokenized[0], [tokenized[1]], tokenize="none",
                               smooth_method="none").score
  assert text_metrics.corpus_bleu(hypotheses, references) == pytest.approx(want, abs=1e-9)


def test_corpus_bleu_is_unsmoothed_case_sensitive_and_checks_lengths():
  # No 4-gram anywhere: the official toolkit's unsmoothed BLEU is 0, whatever else matches.
  assert text_metrics.corpus_bleu(["a b c"], ["a b c"]) == 0.0
  assert text_metrics.corpus_bleu(["a b c d"], ["a b c d"]) == pytest.approx(100.0)
  assert text_metrics.corpus_bleu(["A B C D"], ["a b c d"]) == 0.0
  with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
    text_metrics.corpus_bleu(["a", "b"], ["a"])


def test_distinct_n_on_a_hand_example():
  # Unigrams a b a b | a c: 3 distinct of 6. Bigrams (a b)(b a)(a b) | (a c): 3 of 4;
  # none crosses from one utterance into the next.
  utterances = ["a b a b", "a c"]
  assert text_metrics.distinct_n(utterances, 1) == 0.5
  assert text_metrics.distinct_n(utterances, 2) == 0.75
  assert text_metrics.distinct_n(["Book it.", "Book it."], 1) == pytest.approx(3 / 6)


def test_self_bleu_on_hand_examples():
  # "a b c d" against "a b c e": precisions 3/4, 2/3, 1/2 and, for the 4-gram with no match,
  # sacrebleu's exp smoothing 1/(2 * 1). BLEU = 100 * (3/4 * 2/3 * 1/2 * 1/2) ** (1/4) = 59.46;
  # the pair is symmetric, so the mean is the same.
  assert text_metrics.self_bleu(["a b c d", "a b c e"]) == pytest.approx(
      100 * 0.125 ** 0.25, abs=1e-9)
  assert text_metrics.self_bleu(["Book it."] * 3) == pytest.approx(100.0)  # Collapsed.
  assert text_metrics.self_bleu(["a b c d", "w x y z"]) == 0.0  # Nothing shared.


def test_pairwise_rouge_l_on_hand_examples():
  # Pairs: (a b c d, a b c e) LCS 3 of 4 and 4 -> F1 0.75; both against "x y" -> 0.
  assert text_metrics.pairwise_rouge_l(["a b c d", "a b c e", "x y"]) == pytest.approx(0.25)
  assert text_metrics.pairwise_rouge_l(["Book it.", "book it"]) == pytest.approx(1.0)


def test_nothing_to_measure_is_nan():
  assert math.isnan(text_metrics.corpus_bleu([], []))
  assert math.isnan(text_metrics.distinct_n([], 1))
  assert math.isnan(text_metrics.distinct_n(["one"], 2))  # A single word has no bigram.
  assert math.isnan(text_metrics.distinct_n([""], 1))
  for diversity in (text_metrics.self_bleu, text_metrics.pairwise_rouge_l):
    assert math.isnan(diversity([]))
    assert math.isnan(diversity(["a single utterance"]))


def test_a_single_utterance_still_has_bleu_and_distinct():
  assert text_metrics.corpus_bleu(["I can help."], ["I can help."]) == pytest.approx(100.0)
  assert text_metrics.distinct_n(["I can help."], 1) == 1.0
