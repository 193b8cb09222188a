"""Text metrics the dialogue literature reports, as pure functions of strings.

  corpus_bleu        BLEU of generated utterances against held-out ones, as the
                     official AirDialogue toolkit reports it (its `--infer_metrics
                     bleu`): one corpus-level score, 4-grams, no smoothing, one
                     reference per utterance, on NLTK word tokens, times 100.
                     Computed by sacrebleu on those tokens (`tokenize="none"`).
  distinct_n         distinct-1 / distinct-2 (Li et al., 2016): distinct n-grams
                     over all n-grams of a set of utterances.
  self_bleu          Self-BLEU (Zhu et al., 2018): each utterance's sentence BLEU
                     (sacrebleu) against all the others, averaged; high = the set
                     repeats itself (a collapsed simulator).
  pairwise_rouge_l   mean ROUGE-L F1 (`rouge-score`) over all pairs of a set; the
                     same question asked through the longest common subsequence.

Scales are each library's own: BLEU and Self-BLEU 0-100, distinct and ROUGE-L
0-1. A metric with nothing to measure (no utterances, no n-grams, fewer than
two utterances to compare) is NaN, never a made-up 0 or 1, so that an empty
evaluation cannot read as a perfect or a hopeless one.

Self-BLEU and pairwise ROUGE-L cost O(N^2) in the number of utterances: pass
them a sample of a few hundred.
"""

from __future__ import annotations

import collections
import itertools
import math
from typing import Sequence

from nltk.tokenize import NLTKWordTokenizer
from nltk.tokenize.punkt import PunktSentenceTokenizer
from rouge_score import rouge_scorer
from sacrebleu.metrics import BLEU

# The toolkit's tokenizer is nltk.word_tokenize: Punkt sentences, then the
# Treebank word tokenizer on each. Its trained English Punkt model is NLTK
# data fetched from outside the package registries, so sentences are split by
# the untrained Punkt tokenizer, which differs only on abbreviations ("Mr.
# Smith" becomes two sentences, so "Mr." loses its period to a token of its own).
_SENTENCES = PunktSentenceTokenizer()
_WORDS = NLTKWordTokenizer()

_CORPUS_BLEU = BLEU(tokenize="none", smooth_method="none")  # airdialogue/evaluator/infer_utils.py
_SENTENCE_BLEU = BLEU(tokenize="none", effective_order=True)  # sacrebleu's sentence BLEU.
_ROUGE_L = rouge_scorer.RougeScorer(["rougeL"])


def word_tokens(text: str) -> list[str]:
  """NLTK word tokens of `text` as AirDialogue's preprocessing writes them (case kept;
  the Treebank `` and '' quotes turned back into ")."""
  return [token.replace("''", '"').replace("``", '"')
          for sentence in _SENTENCES.tokenize(text) for token in _WORDS.tokenize(sentence)]


def sentences(text: str) -> list[str]:
  """Punkt's sentences of `text` (the unit Persuasion for Good's strategies are annotated on)."""
  return _SENTENCES.tokenize(text)


def _joined_tokens(text: str) -> str:
  return " ".join(word_tokens(text))


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """Corpus BLEU (0-100) of `hypotheses[i]` against `references[i]`; NaN for none."""
  if len(hypotheses) != len(references):
    raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
  if not hypotheses:
    return math.nan
  return _CORPUS_BLEU.corpus_score([_joined_tokens(h) for h in hypotheses],
                                   [[_joined_tokens(r) for r in references]]).score


def distinct_n(utterances: Sequence[str], n: int) -> float:
  """Distinct n-grams / all n-grams of the utterances' word tokens (n-grams never
  cross utterances); NaN when they hold no n-gram."""
  counts: collections.Counter[tuple[str, ...]] = collections.Counter()
  for text in utterances:
    tokens = word_tokens(text)
    counts.update(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
  total = sum(counts.values())
  return len(counts) / total if total else math.nan


def self_bleu(utterances: Sequence[str]) -> float:
  """Mean sentence BLEU (0-100) of each utterance against all the others as its references
  (duplicates included: repeating oneself is what it measures); NaN for fewer than two."""
  if len(utterances) < 2:
    return math.nan
  joined = [_joined_tokens(text) for text in utterances]
  scores = [_SENTENCE_BLEU.sentence_score(hypothesis, joined[:i] + joined[i + 1:]).score
            for i, hypothesis in enumerate(joined)]
  return sum(scores) / len(scores)


def pairwise_rouge_l(utterances: Sequence[str]) -> float:
  """Mean ROUGE-L F1 (0-1, rouge-score's own lower-cased tokens) over all unordered pairs
  (F1 is symmetric); NaN for fewer than two utterances."""
  if len(utterances) < 2:
    return math.nan
  scores = [_ROUGE_L.score(a, b)["rougeL"].fmeasure
            for a, b in itertools.combinations(utterances, 2)]
  return sum(scores) / len(scores)
