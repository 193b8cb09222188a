"""How much a scripted retail customer says and when: its style, an axis apart from its phrasing
family (customer_families.py decides the words; the style decides what is said and how long):

  volunteer    opens with its identity and its first wish, then answers what it is asked
  answer_only  says only what it is asked (the original scripted customer)
  terse        says only what it is asked, in its family's shortest forms
  chatty       says only what it is asked, with small talk around the answer (SMALL_TALK,
               LEAD_INS: no value, no number, nothing the agent reads as an answer)

A generated task's customer draws its style (`draw`) from the task's seed; a party spec may name
one for evaluation (parties.py).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

VERBOSITIES = ("plain", "terse")


@dataclasses.dataclass(frozen=True)
class CustomerStyle:
  name: str
  volunteers: bool  # Opens with its identity and first wish.
  verbosity: str  # Which of its family's forms it uses.
  small_talk_p: float = 0.0  # Chance of small talk after an answer, and of a lead-in before.

  def __post_init__(self):
    if self.verbosity not in VERBOSITIES:
      raise ValueError(f"style {self.name!r}: verbosity {self.verbosity!r} not in {VERBOSITIES}")
    if not 0.0 <= self.small_talk_p <= 1.0:
      raise ValueError(f"style {self.name!r}: small_talk_p {self.small_talk_p} not in [0, 1]")


STYLES: Mapping[str, CustomerStyle] = {s.name: s for s in (
    CustomerStyle("volunteer", True, "plain"),
    CustomerStyle("answer_only", False, "plain"),
    CustomerStyle("terse", False, "terse"),
    CustomerStyle("chatty", False, "plain", 0.6),
)}
DEFAULT_STYLE = "answer_only"

# Phrase-grammar patterns (data_pipelines.airdialogue.phrase_grammar) of small talk.
SMALL_TALK = (
    "[Sorry|Apologies], it has been a [hectic|busy] week.",
    "Thanks for [your patience|bearing with me].",
    "[I hope|Hope] your day is going [well|smoothly].",
    "The weather here has been [lovely|dreadful] lately.",
    "My cat keeps interrupting me, [sorry|apologies].",
)
LEAD_INS = ("Hmm, let me see.", "Let me think for a second.", "Give me a moment.")


def draw(rng: np.random.Generator) -> str:
  """A style's name, uniformly: how generated tasks and `tau2_customer:any` mix them."""
  return list(STYLES)[rng.integers(len(STYLES))]
