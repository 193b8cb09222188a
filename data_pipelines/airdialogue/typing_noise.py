"""The noise of real typing: lower-cased turns, dropped punctuation, common misspellings.

Crowd workers type fast. Each of the three kinds is applied to a whole
utterance with its own probability, so the rates stay small and readable.
Misspellings only touch everyday words (please, flight, thanks, ...), never
a name, a code, a date or a number: a typo in a value changes what the
customer wants, which is another experiment than noisy typing.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

MISSPELLINGS = {
    "please": ("pls", "plz", "plese"), "flight": ("flght", "filght"), "thanks": ("thx", "thanx"),
    "you": ("u",), "want to": ("wanna",), "going to": ("gonna",), "would": ("woud",),
    "the": ("teh",), "really": ("realy",), "because": ("cuz", "becuase"),
    "think": ("thnk",), "okay": ("okey",), "great": ("grate",),
}
_WORD_RE = re.compile(r"\b(" + "|".join(sorted(MISSPELLINGS, key=len, reverse=True)) + r")\b",
                      re.IGNORECASE)
_PUNCTUATION_RE = re.compile(r"[.,!?;](?=\s|$)")


@dataclasses.dataclass(frozen=True)
class TypingNoise:
  """Per-utterance probabilities of each kind of noise."""

  lowercase: float = 0.0
  no_punctuation: float = 0.0
  typo: float = 0.0

  def __post_init__(self):
    for field in dataclasses.fields(self):
      rate = getattr(self, field.name)
      if not 0.0 <= rate <= 1.0:
        raise ValueError(f"typing noise: {field.name}={rate} not in [0, 1]")

  def scaled(self, factor: float) -> TypingNoise:
    """The same mix with every rate multiplied by `factor` (capped at 1)."""
    if factor < 0:
      raise ValueError(f"typing noise: scale {factor} must be >= 0")
    return TypingNoise(*(min(1.0, getattr(self, f.name) * factor)
                         for f in dataclasses.fields(self)))

  def apply(self, text: str, rng: np.random.Generator) -> str:
    """`text` as a hurried typist might send it; one draw per kind, always in this order.

    Noise-free typing draws nothing, so it leaves the caller's random stream untouched.
    """
    if self == NONE:
      return text
    draws = rng.random(3)
    if draws[0] < self.typo:
      hits = list(_WORD_RE.finditer(text))
      if hits:
        m = hits[rng.integers(len(hits))]
        options = MISSPELLINGS[m[1].lower()]
        text = text[:m.start()] + options[rng.integers(len(options))] + text[m.end():]
    if draws[1] < self.no_punctuation:
      text = _PUNCTUATION_RE.sub("", text)
    if draws[2] < self.lowercase:
      text = text.lower()
    return text


NONE = TypingNoise()
