"""Fixed persuaders that differ only in how hard they ask: is a persuadee simulator persuadable?

Online RL can only teach a persuader what its simulator rewards. Before
trusting a learned persuadee as the environment, play it against persuaders
whose words are fixed and compare the donations it states:

    silent  says "ok." every turn (no request at all);
    chat    small talk, never mentions the charity;
    ask     introduces Save the Children, explains it, asks for a donation,
            then for the whole $2.

A persuadee that models people should give most to `ask` and least to
`silent`; one that gives as much (or more) to `silent` rewards nothing a
persuader says, and a policy trained against it learns to exploit that
(docs/RESULTS.md, the P4G online RL section). Each is a party spec for
`experiments.evaluate_env`, e.g. `--party=cotraining.persuader_probes:Ask`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from data_pipelines.dialogue import Turn

LINES = {
    "silent": ("ok.",),
    "chat": ("Hi, how are you today?", "I'm doing well. What do you like to do for fun?",
             "That sounds nice. Do you have any pets?", "Cool. What's the weather like there?",
             "Nice. Any plans for the weekend?", "That's great. I like to read.",
             "Have a nice day!", "Take care!", "Bye!"),
    "ask": ("Hi, how are you today? Have you heard of Save the Children?",
            "Save the Children helps children in developing countries get food, health care "
            "and education.",
            "Every dollar makes a huge difference to a child in need.",
            "Would you be willing to donate some of your task payment to Save the Children?",
            "Even $1 would help a lot. How about donating $2, all of your payment?",
            "Thank you so much! How much would you like to donate?",
            "That is very generous of you. Thank you!", "Thank you!"),
}


class FixedPersuader:
  """Says LINES[style] in order, one per turn, repeating the last: the same words to every
  persona and whatever the persuadee answers."""

  style = ""

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    del seeds  # Nothing is sampled.
    self.turns = [0] * len(contexts)

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    lines, replies = LINES[self.style], []
    for b, history in enumerate(histories):
      if history is None:
        replies.append(None)
        continue
      replies.append(lines[min(self.turns[b], len(lines) - 1)])
      self.turns[b] += 1
    return replies


class Silent(FixedPersuader):
  style = "silent"


class Chat(FixedPersuader):
  style = "chat"


class Ask(FixedPersuader):
  style = "ask"
