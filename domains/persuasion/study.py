"""Persuasion for Good in a human study: a person plays the persuadee against a persuader party.

The person reads a held-out persuadee's persona as a card (the survey's
traits, grouped and labelled, numbers to one decimal as the models read them)
and the task payment, and ends the dialogue by stating a donation in [0, 2]
dollars: the closing turn is the statement the environment's ending reads
(`[donate] 1.50 [/donate]`), and the outcome is that donation, as
`environment.summarize` averages it.
"""

from __future__ import annotations

from typing import Any, Mapping

from data_pipelines.persuasion import loader
from domains.persuasion import environment
from ilql_dialogue import registry
from ilql_dialogue.environment import Episode

PAYMENT = ("You have been paid $2 for this task. You may donate any part of it to Save the "
           "Children.")

INSTRUCTIONS = """\
You will chat with someone about the charity Save the Children, which helps children in \
need around the world. They write first.

The card beside the chat describes the person whose place you take: their background and \
their scores on a personality survey. Answer as that person would, as far as you can.

You have been paid $2 for this task. When you want to end the conversation, choose how much \
of it, from $0.00 to $2.00, to donate to Save the Children, and press "End and donate". Any \
amount, nothing included, is fine. A few questions about the conversation follow.

Please do not share anything about yourself that is not on the card."""

# The survey's single traits: key -> label.
SINGLE = {"age": "Age", "sex": "Sex", "race": "Race", "edu": "Education",
          "marital": "Marital status", "employment": "Employment",
          "income": "Income (survey category)", "religion": "Religion",
          "ideology": "Political ideology"}
# The survey's scored scales, one line each: label -> (key, name) per score.
GROUPS = {
    "Personality": (("extrovert", "extraversion"), ("agreeable", "agreeableness"),
                    ("conscientious", "conscientiousness"), ("neurotic", "neuroticism"),
                    ("open", "openness")),
    "Moral foundations": (("care", "care"), ("fairness", "fairness"), ("loyalty", "loyalty"),
                          ("authority", "authority"), ("purity", "purity"),
                          ("freedom", "freedom")),
    "Values": (("conform", "conformity"), ("tradition", "tradition"),
               ("benevolence", "benevolence"), ("universalism", "universalism"),
               ("self_direction", "self-direction"), ("stimulation", "stimulation"),
               ("hedonism", "hedonism"), ("achievement", "achievement"), ("power", "power"),
               ("security", "security")),
    "Decision style": (("rational", "rational"), ("intuitive", "intuitive")),
}


def value_text(value: Any) -> str:
  """A trait as the persona's serialization writes it: numbers to one decimal (37, 3.7)."""
  return f"{round(value, 1):g}" if isinstance(value, float) else str(value)


def card(context: Mapping[str, Any]) -> list[tuple[str, str]]:
  """The persuadee's persona (its `context`) as labelled lines, then the payment. Traits
  the survey left empty are left out; traits of no known group get a line of their own."""
  lines = [(label, value_text(context[key])) for key, label in SINGLE.items()
           if context.get(key) is not None]
  grouped = set(SINGLE)
  for label, scores in GROUPS.items():
    grouped |= {key for key, _ in scores}
    parts = [f"{name} {value_text(context[key])}" for key, name in scores
             if context.get(key) is not None]
    if parts:
      lines.append((label, ", ".join(parts)))
  lines += [(key.replace("_", " ").capitalize(), value_text(value))
            for key, value in context.items() if key not in grouped and value is not None]
  return lines + [("Payment", PAYMENT)]


def closing_turn(donation: float) -> str:
  """The person's closing turn stating `donation` dollars, rounded to cents."""
  return loader.format_donation(round(float(donation), 2))


def outcome(env: Any, episode: Episode) -> dict[str, float | None]:
  """The stated donation in dollars; None without a readable statement (turn limit, a party
  ending), which `environment.summarize` leaves out of its mean as well."""
  del env  # The statement alone is the outcome.
  stated = episode.end_reason == environment.DONATION
  return {"donation": float(episode.info["donation"]) if stated else None}


STUDY = registry.StudySpec(
    human_role=environment.PERSUADEE, instructions=INSTRUCTIONS, card=card, outcome=outcome,
    closing_field="donation", closing_turn=closing_turn,
    closing_range=(0.0, loader.MAX_DONATION), env_options={"split": "eval"})
