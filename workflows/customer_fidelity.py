"""Does a simulated customer say what its intent says? Per intent field, from transcripts.

A learned customer is a simulator only if it states its own name, goal and
constraints. Each customer utterance of an evaluation's transcripts is read
with the scripted agent's slot extraction (`agents.extract_slots`, the same
"hearing" the oracle uses); per field of the intent, over the dialogues whose
intent has that field:

  stated_correctly  some utterance states the intent's value (and none states another)
  stated_wrong      some utterance states another value
  never_stated      neither

plus the role violations (customer turns holding an action block) and how varied its words
are (`diversity`): a simulator that states its intent by saying the same few sentences is
what sampling it is meant to avoid (distinct-n as `ilql_dialogue.text_metrics` counts it).

    python -m experiments.customer_fidelity --transcripts=runs/quickstart/eval/transcripts_X.jsonl
"""

from __future__ import annotations

import json
from typing import Any

from data_pipelines.airdialogue import action_grammar, agents, schema
from domains.airdialogue import environment as airdialogue_env
from ilql_dialogue import text_metrics

FIELDS = ("name", "goal", "departure_airport", "return_airport", "departure_month",
          "departure_day", "return_month", "return_day", "max_price", "max_connections",
          "departure_time", "return_time", "flight_class", "airline_preference")


def intents_of(transcripts: list[dict[str, Any]], kb_size: int = 30) -> dict[str, schema.Intent]:
  """The intent of every scenario id (`seed:i`), regenerated as make_scenarios does."""
  by_seed: dict[int, int] = {}
  for t in transcripts:
    seed, index = map(int, t["scenario_id"].split(":"))
    by_seed[seed] = max(by_seed.get(seed, 0), index + 1)
  return {s.scenario_id: s.intent for seed, n in by_seed.items()
          for s in airdialogue_env.make_scenarios(seed, n, kb_size)}


def fidelity(transcripts: list[dict[str, Any]], kb_size: int = 30) -> dict[str, Any]:
  intents = intents_of(transcripts, kb_size)
  counts = {f: {"n": 0, "stated_correctly": 0, "stated_wrong": 0, "never_stated": 0}
            for f in FIELDS}
  for t in transcripts:
    intent = intents[t["scenario_id"]]
    heard: dict[str, set[Any]] = {}
    for turn in t["turns"]:
      if turn["speaker"] == "customer":
        for key, value in agents.extract_slots(turn["text"]).items():
          heard.setdefault(key, set()).add(value)
    for field in FIELDS:
      want = getattr(intent, field)
      if want is None:
        continue
      said = heard.get(field, set())
      normal = (lambda v: str(v).lower()) if field == "name" else (lambda v: v)
      bucket = ("never_stated" if not said else
                "stated_correctly" if {normal(v) for v in said} == {normal(want)} else
                "stated_wrong")
      counts[field]["n"] += 1
      counts[field][bucket] += 1
  rates = {f: {k: (v / c["n"] if k != "n" else v) for k, v in c.items()} for f, c in counts.items()
           if c["n"]}
  return {"dialogues": len(transcripts), "fields": rates,
          "customer_action_blocks": sum(t["customer_action_blocks"] for t in transcripts),
          "diversity": diversity(transcripts)}


def diversity(transcripts: list[dict[str, Any]]) -> dict[str, float]:
  """The customer's utterances: how many, the share of them that are unique, distinct-1 and
  distinct-2, and the mean number of words."""
  said = [turn["text"] for t in transcripts for turn in t["turns"]
          if turn["speaker"] == "customer"]
  return {"utterances": len(said), "unique_share": len(set(said)) / max(len(said), 1),
          "distinct_1": text_metrics.distinct_n(said, 1),
          "distinct_2": text_metrics.distinct_n(said, 2),
          "mean_words": sum(len(text_metrics.word_tokens(t)) for t in said) / max(len(said), 1)}


def read_transcripts(path: str) -> list[dict[str, Any]]:
  """The transcripts of `experiments.evaluate` or of `experiments.evaluate_env` (whose records
  name the scenario `key` and hold turns as [speaker, text] pairs), in the first's form."""
  records = []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      if not line.strip():
        continue
      record = json.loads(line)
      if "scenario_id" not in record:
        if "key" not in record:
          raise ValueError(f"{path}:{number}: field 'scenario_id' (or 'key') missing")
        turns = [{"speaker": s, "text": t} for s, t in record["turns"]]
        record = {**record, "scenario_id": record["key"], "turns": turns,
                  "customer_action_blocks": sum(
                      t["speaker"] == "customer" and action_grammar.contains_action(t["text"])
                      for t in turns)}
      records.append(record)
  return records
