"""Customer x agent self-play: the synthetic AirDialogue corpus, in the official schema.

Each sample pairs a sampled context with a customer style and an agent skill
drawn from configurable mixes, and a phrasing family for each side drawn
from the *training* families of `family_split` (a held-out family is refused),
plays the conversation out, and records what the agent submitted next to the
solver's expected action. The default agent mix is tuned so that roughly two
dialogues in three succeed: offline RL needs failures to learn from, as the
human corpus has them.
"""

from __future__ import annotations

import collections
import json
import os
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np
import tqdm

from data_pipelines.airdialogue import action_grammar
from data_pipelines.airdialogue import agent_families
from data_pipelines.airdialogue import agents
from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import customer_families
from data_pipelines.airdialogue import customers
from data_pipelines.airdialogue import family_split
from data_pipelines.airdialogue import official_io
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import scorer
from data_pipelines.airdialogue import solver

DEFAULT_CUSTOMER_MIX = {
    "volunteer": 0.2, "answer_only": 0.2, "late_reveal": 0.2, "terse": 0.2, "chatty": 0.2}
# Measured per-agent success: oracle and redundant 1.0, forget_constraint ~0.92,
# not_cheapest ~0.73, give_up ~0.42, wrong_status and misspell_name 0; this mix
# gives ~0.65 overall.
DEFAULT_AGENT_MIX = {
    "oracle": 0.3, "redundant": 0.1, "forget_constraint": 0.1, "not_cheapest": 0.15,
    "wrong_status": 0.12, "misspell_name": 0.12, "give_up": 0.11,
}
DEFAULT_CUSTOMER_FAMILY_MIX = {f: 1.0 for f in family_split.SPLIT.train("customer")}
DEFAULT_AGENT_FAMILY_MIX = {f: 1.0 for f in family_split.SPLIT.train("agent")}
DEFAULT_MAX_TURNS = 40
SELFPLAY_KEY = "selfplay"  # data.json key recording who played.
_CONTEXT_CHUNK = 1000
_FIRST_TIMESTAMP = 1_500_000_000  # Mid-2017, as the release's epoch-second timestamps.


def parse_family_mix(spec: Mapping[str, float] | str, role: str,
                     split: family_split.FamilySplit = family_split.SPLIT) -> dict[str, float]:
  """Like `parse_mix` over `role`'s phrasing families; a held-out family raises."""
  registry = {"customer": customer_families.FAMILIES, "agent": agent_families.FAMILIES}[role]
  mix = parse_mix(spec, registry, f"{role} family")
  held_out = sorted(set(mix) & set(split.held_out(role)))
  if held_out:
    raise ValueError(f"{role} family mix: {held_out} are held out (family_split.json); a "
                     f"training corpus only uses {list(split.train(role))}")
  return mix


class Agent(Protocol):
  def respond(self, customer_utterance: str) -> str:
    ...


def parse_mix(spec: Mapping[str, float] | str, known: Mapping[str, Any],
              what: str) -> dict[str, float]:
  """Normalized weights from {"name": w} or "name:w,name:w"; unknown names raise."""
  if isinstance(spec, str):
    pairs = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
      name, sep, weight = part.partition(":")
      try:
        pairs[name.strip()] = float(weight) if sep else 1.0
      except ValueError:
        raise ValueError(
            f"{what} mix {spec!r}: weight {weight!r} of {name!r} is not a number") from None
    spec = pairs
  unknown = sorted(set(spec) - set(known))
  if unknown:
    raise ValueError(f"{what} mix: unknown names {unknown}; known: {sorted(known)}")
  if not spec or any(w < 0 for w in spec.values()) or sum(spec.values()) <= 0:
    raise ValueError(f"{what} mix {dict(spec)}: weights must be >= 0 with a positive sum")
  total = sum(spec.values())
  return {name: w / total for name, w in spec.items() if w > 0}


def play(customer: customers.Customer, agent: Agent,
         max_turns: int = DEFAULT_MAX_TURNS) -> tuple[list[str], schema.Action | None, str | None]:
  """Plays until the agent writes an action block (or `max_turns` utterances pass).

  Returns the "customer: ..." / "agent: ..." lines, the parsed action (None if
  the agent never acted or wrote an unparsable block) and the parse error.
  The customer gets one closing reply after the action, as in human dialogues.
  """
  lines = [f"customer: {customer.opening()}"]
  while len(lines) < max_turns:
    said = agent.respond(lines[-1].partition(": ")[2])
    lines.append(f"agent: {said}")
    if action_grammar.contains_action(said):
      lines.append(f"customer: {customer.respond(said)}")
      try:
        return lines, action_grammar.parse_action(said), None
      except action_grammar.ActionParseError as e:
        return lines, None, str(e)
    lines.append(f"customer: {customer.respond(said)}")
  return lines, None, f"no action within {max_turns} utterances"


def _timestamps(lines: list[str], rng: np.random.Generator) -> list[int]:
  """Epoch seconds per utterance: a reading pause plus typing time for its words."""
  t = _FIRST_TIMESTAMP + int(rng.integers(0, 3 * 365 * 24 * 3600))
  out = []
  for line in lines:
    t += int(2 + 0.6 * len(line.split()) + rng.exponential(3.0))
    out.append(t)
  return out


def generate_samples(
    seed: int | Sequence[int],
    n: int,
    kb_size: int = 30,
    customer_mix: Mapping[str, float] | str = DEFAULT_CUSTOMER_MIX,
    agent_mix: Mapping[str, float] | str = DEFAULT_AGENT_MIX,
    max_turns: int = DEFAULT_MAX_TURNS,
    progress: bool = False,
    customer_family_mix: Mapping[str, float] | str = DEFAULT_CUSTOMER_FAMILY_MIX,
    agent_family_mix: Mapping[str, float] | str = DEFAULT_AGENT_FAMILY_MIX,
    typing_noise_scale: float = 1.0,
) -> Iterator[schema.Sample]:
  """`n` self-play samples, lazily; the same arguments always give the same samples.

  `seed` is numpy SeedSequence entropy: an int, or a list of ints for streams
  that must stay apart from the integer seeds (domains/airdialogue/lm_task.py).

  The family mixes name training phrasing families only (`family_split`);
  `typing_noise_scale` multiplies every customer family's typing-noise rates
  (0 for clean text). The mixes are checked here, before anything is
  generated or written.
  """
  c_mix = parse_mix(customer_mix, customers.STYLES, "customer")
  a_mix = parse_mix(agent_mix, agents.AGENTS, "agent")
  families = (parse_family_mix(customer_family_mix, "customer"),
              parse_family_mix(agent_family_mix, "agent"))
  if n < 0:
    raise ValueError(f"n must be >= 0, got {n}")
  if typing_noise_scale < 0:
    raise ValueError(f"typing_noise_scale must be >= 0, got {typing_noise_scale}")
  return _generate(seed, n, kb_size, c_mix, a_mix, max_turns, progress, families,
                   typing_noise_scale)


def _draw(rng: np.random.Generator, mix: Mapping[str, float], n: int) -> list[str]:
  names = list(mix)
  return [names[i] for i in rng.choice(len(names), n, p=np.asarray(list(mix.values())))]


def _generate(seed, n, kb_size, c_mix, a_mix, max_turns, progress, family_mixes,
              noise_scale) -> Iterator[schema.Sample]:
  context_rng, play_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
  styles, skills = _draw(play_rng, c_mix, n), _draw(play_rng, a_mix, n)
  c_families, a_families = (_draw(play_rng, mix, n) for mix in family_mixes)
  with tqdm.tqdm(total=n, disable=not progress, desc="self-play", unit="dialogue") as bar:
    for start in range(0, n, _CONTEXT_CHUNK):
      # Contexts come in chunks so memory stays flat however large n is.
      chunk = context.sample_contexts(context_rng, min(_CONTEXT_CHUNK, n - start), kb_size)
      for i, (intent, table) in enumerate(chunk, start):
        style, skill, c_family, a_family = styles[i], skills[i], c_families[i], a_families[i]
        agent = agents.ScriptedAgent(table, skill, play_rng, a_family)
        noise = customer_families.FAMILIES[c_family].noise.scaled(noise_scale)
        customer = customers.Customer(intent, style, play_rng, c_family, noise)
        lines, action, error = play(customer, agent, max_turns)
        expected = solver.expected_action(intent, table)
        record: dict[str, Any] = {"customer_style": style, "agent": skill, "flaw_shown": agent.flaw,
                                  "customer_family": c_family, "agent_family": a_family}
        if error is not None:
          record["error"] = error
        bar.update()
        yield schema.Sample(
            intent=intent,
            table=table,
            dialogue=tuple(lines),
            action=action,
            expected_action=expected,
            correct_sample=action is not None and scorer.is_success(action, expected),
            extra={"timestamps": _timestamps(lines, play_rng), SELFPLAY_KEY: record},
        )


class CorpusStats:
  """Success overall, by customer style and by agent, and the status mixes, from a stream."""

  def __init__(self):
    self._groups: dict[tuple[str, str], list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    self._expected = collections.Counter()
    self._submitted = collections.Counter()

  def add(self, sample: schema.Sample) -> schema.Sample:
    record = sample.extra.get(SELFPLAY_KEY, {})
    for key in ("all", "agent", "customer_style", "customer_family", "agent_family"):
      group = self._groups[key, "all" if key == "all" else record.get(key, "unknown")]
      group[0] += 1
      group[1] += bool(sample.correct_sample)
      group[2] += len(sample.dialogue)
    self._expected[sample.expected_action.status if sample.expected_action else "none"] += 1
    self._submitted[sample.action.status if sample.action else "none"] += 1
    return sample

  def summary(self) -> dict[str, Any]:
    n = self._groups["all", "all"][0]
    if n == 0:
      raise ValueError("no samples to summarize")

    def rate(key: tuple[str, str]) -> dict[str, float]:
      count, successes, utterances = self._groups[key]
      return {"n": count, "success_rate": successes / count, "mean_utterances": utterances / count}

    def by(kind: str) -> dict[str, dict[str, float]]:
      return {name: rate((k, name)) for k, name in sorted(self._groups) if k == kind}

    return {
        **rate(("all", "all")),
        "expected_status": {k: v / n for k, v in sorted(self._expected.items())},
        "action_status": {k: v / n for k, v in sorted(self._submitted.items())},
        "no_action": self._submitted["none"],
        "per_agent": by("agent"),
        "per_customer_style": by("customer_style"),
        "per_customer_family": by("customer_family"),
        "per_agent_family": by("agent_family"),
    }


def corpus_stats(samples: Iterable[schema.Sample]) -> dict[str, Any]:
  stats = CorpusStats()
  for s in samples:
    stats.add(s)
  return stats.summary()


_PROGRESS_FROM = 1000  # Dialogues; smaller runs finish before a bar is useful.


def write_corpus(out_dir: str, num_dialogues: int, seed: int, kb_size: int = 30,
                 customer_mix=DEFAULT_CUSTOMER_MIX, agent_mix=DEFAULT_AGENT_MIX,
                 max_turns: int = DEFAULT_MAX_TURNS,
                 customer_family_mix=DEFAULT_CUSTOMER_FAMILY_MIX,
                 agent_family_mix=DEFAULT_AGENT_FAMILY_MIX,
                 typing_noise_scale: float = 1.0) -> dict:
  """Streams the corpus to disk; returns the stats also written to stats.json."""
  samples = generate_samples(
      seed, num_dialogues, kb_size, customer_mix, agent_mix, max_turns,
      progress=num_dialogues >= _PROGRESS_FROM, customer_family_mix=customer_family_mix,
      agent_family_mix=agent_family_mix, typing_noise_scale=typing_noise_scale)
  os.makedirs(out_dir, exist_ok=True)
  tally = CorpusStats()
  official_io.write_samples(
      map(tally.add, samples), os.path.join(out_dir, "data.json"), os.path.join(out_dir, "kb.json"))
  stats = tally.summary()
  stats["config"] = {
      "num_dialogues": num_dialogues, "seed": seed, "kb_size": kb_size, "max_turns": max_turns,
      "customer_mix": parse_mix(customer_mix, customers.STYLES, "customer"),
      "agent_mix": parse_mix(agent_mix, agents.AGENTS, "agent"),
      "customer_family_mix": parse_family_mix(customer_family_mix, "customer"),
      "agent_family_mix": parse_family_mix(agent_family_mix, "agent"),
      "typing_noise_scale": typing_noise_scale,
  }
  with open(os.path.join(out_dir, "stats.json"), "w", encoding="utf-8") as f:
    json.dump(stats, f, indent=2, sort_keys=True)
    f.write("\n")
  return stats
