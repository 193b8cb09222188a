r"""How well the scripted parties understand each phrasing family, measured.

  python -m data_pipelines.airdialogue.phrasing_eval --scenarios=500 --out=/tmp/phrasing.json

reports, as JSON:
  slot_accuracy   per customer family and slot: the share of the customer's
                  answers to a question about that slot from which the
                  scripted agent's parser reads exactly the intent's values
                  (answers to the template question, with the family's
                  typing noise; the agent knows what it asked and its table);
                  `_every_constraint`: the same with every constraint stated
  oracle          per style x customer family: oracle success and its
                  standard error (agent families taken in turn)
  dates           the parser's date reader against python-dateutil, on the
                  date strings every family writes and on whole answers
  cities          misspelled city names: exact lookup against difflib
  probe           hand-written turns in the real dataset's style
                  (probe_utterances.jsonl), written apart from the families
Scenarios are drawn with seed 1000 (the reported-evaluation seed).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import json
import os
from typing import Any, Sequence

import numpy as np
from absl import flags

from data_pipelines import cli
from data_pipelines.airdialogue import agent_families
from data_pipelines.airdialogue import agents
from data_pipelines.airdialogue import context
from data_pipelines.airdialogue import customer_families
from data_pipelines.airdialogue import customers
from data_pipelines.airdialogue import gazetteer
from data_pipelines.airdialogue import schema
from data_pipelines.airdialogue import scorer
from data_pipelines.airdialogue import selfplay
from data_pipelines.airdialogue import slot_parser
from data_pipelines.airdialogue import solver

SEED = 1000
_SLOT_OF_FIELD = {
    "goal": customers.GOAL, "name": customers.NAME,
    "departure_airport": customers.AIRPORTS, "return_airport": customers.AIRPORTS,
    "departure_month": customers.DATES, "departure_day": customers.DATES,
    "return_month": customers.DATES, "return_day": customers.DATES,
    **{f: slot for slot, fields in agents.CONSTRAINT_FIELDS.items() for f in fields},
}


def _slot_values(fields: dict[str, Any], slot: str) -> dict[str, Any]:
  out = {k: v for k, v in fields.items() if _SLOT_OF_FIELD.get(k) == slot and v is not None}
  if "name" in out:
    out["name"] = out["name"].lower()
  if out.get("max_connections") == 2:
    del out["max_connections"]
  return out


def _truth(intent) -> dict[str, Any]:
  fields = intent.to_json()
  fields["flight_class"] = fields.pop("class", None)
  return fields


def with_every_constraint(intent: schema.Intent, rng: np.random.Generator) -> schema.Intent:
  """The intent with a value for every constraint (the priors leave most of them out)."""
  times = [str(rng.choice(schema.TIMES_OF_DAY)), str(rng.choice(schema.TIMES_OF_DAY))]
  times[int(rng.integers(2))] = None if rng.random() < 0.5 else times[0]
  return dataclasses.replace(
      intent, departure_time=times[0], return_time=times[1],
      flight_class=str(rng.choice(schema.CLASSES)), max_connections=int(rng.integers(2)),
      airline_preference="normal-cost")


def slot_accuracy(families: Sequence[str], num_scenarios: int, seed: int = SEED,
                  every_constraint: bool = False) -> dict:
  """family -> slot -> {n, accuracy}, over every style's answer to each slot's question.

  With `every_constraint`, each intent states a value for every constraint
  (`with_every_constraint`), so no answer is a "no preference" line.
  """
  scenes = context.sample_contexts(np.random.default_rng(seed), num_scenarios)
  rng = np.random.default_rng(seed + 1)
  out = {}
  for family in families:
    tally = collections.defaultdict(lambda: [0, 0])
    for i, (intent, table) in enumerate(scenes):
      if every_constraint:
        intent = with_every_constraint(intent, rng)
      style = sorted(customers.STYLES)[i % len(customers.STYLES)]
      visible = {a for f in table.flights for a in (f.departure_airport, f.return_airport)}
      for slot in customers.SLOTS:
        question = agent_families.TEMPLATE.parts[f"ask_{slot}"][0]
        answer = customers.Customer(intent, style, rng, family).respond(question)
        heard = slot_parser.parse(answer, {slot}, visible)
        tally[slot][0] += 1
        tally[slot][1] += _slot_values(heard, slot) == _slot_values(_truth(intent), slot)
    out[family] = {slot: {"n": n, "accuracy": ok / n} for slot, (n, ok) in tally.items()}
  return out


def oracle_success(styles: Sequence[str], families: Sequence[str], num_scenarios: int,
                   seed: int = SEED) -> dict:
  """'style/family' -> {n, success_rate, stderr} for the oracle agent."""
  scenes = context.sample_contexts(np.random.default_rng(seed), num_scenarios)
  agent_names = sorted(agent_families.FAMILIES)
  out = {}
  for style in styles:
    for family in families:
      wins = []
      for i, (intent, table) in enumerate(scenes):
        rng = np.random.default_rng([seed, i])
        agent = agents.ScriptedAgent(table, "oracle", rng, agent_names[i % len(agent_names)])
        _, action, _ = selfplay.play(customers.Customer(intent, style, rng, family), agent)
        wins.append(action is not None and scorer.is_success(
            action, solver.expected_action(intent, table)))
      p = float(np.mean(wins))
      out[f"{style}/{family}"] = {"n": len(wins), "success_rate": p,
                                  "stderr": float(np.sqrt(p * (1 - p) / len(wins)))}
  return out


def _date_strings(num: int, seed: int) -> list[tuple[str, str, str]]:
  """(text, month, day) as each family writes a date."""
  rng = np.random.default_rng(seed)
  dates = [(i.departure_month, i.departure_day)
           for i, _ in context.sample_contexts(rng, num)]
  return [(family.date(m, d, rng), m, d) for family in customer_families.FAMILIES.values()
          for m, d in dates]


def _dates_answers(num: int, seed: int) -> list[tuple[str, str, str]]:
  """(answer, month, day): each family's answer to 'what are your dates?', departure date."""
  rng = np.random.default_rng(seed)
  question = agent_families.TEMPLATE.parts["ask_dates"][0]
  return [(customers.Customer(i, "answer_only", rng, family).respond(question),
           i.departure_month, i.departure_day)
          for family in customer_families.FAMILIES for i, _ in context.sample_contexts(rng, num)]


def date_readers(num: int = 400, seed: int = SEED) -> dict:
  """The parser's date reader against dateutil: on date strings, and on whole answers.

  On a whole answer ("out on 06/20, returning 6/22") the departure date is
  scored: the parser's first date, dateutil's one fuzzy parse.
  """
  from dateutil import parser as dateutil_parser  # Measured against; not a dependency.

  report = {}
  for kind, cases in (("date_strings", _date_strings(num, seed)),
                      ("dates_answers", _dates_answers(num, seed))):
    ours = theirs = 0
    for text, month, day in cases:
      mentions = slot_parser.date_mentions(text)
      ours += bool(mentions) and mentions[0][2:] == (month, day)
      try:
        parsed = dateutil_parser.parse(text, default=datetime.datetime(2020, 1, 1), fuzzy=True)
        theirs += (schema.MONTHS[parsed.month - 1], str(parsed.day)) == (month, day)
      except (ValueError, OverflowError):
        pass
    report[kind] = {"n": len(cases), "slot_parser": ours / len(cases),
                    "dateutil": theirs / len(cases)}
  return report


def city_matchers(seed: int = SEED) -> dict:
  """Misspelled place names (one letter dropped): exact lookup vs difflib's close match."""
  rng = np.random.default_rng(seed)
  names = [n for n in gazetteer.names_by_text() if len(n) >= 7 and " " not in n]
  exact = fuzzy = 0
  for name in names:
    i = int(rng.integers(2, len(name) - 1))
    typo = name[:i] + name[i + 1:]
    exact += typo in gazetteer.names_by_text()
    found = slot_parser.airport_mentions(typo, ())
    fuzzy += bool(found) and found[0][2] in gazetteer.names_by_text()[name]
  return {"n": len(names), "exact_lookup": exact / len(names), "difflib": fuzzy / len(names)}


PROBE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe_utterances.jsonl")


def probe_accuracy(path: str = PROBE_PATH) -> dict:
  """Hand-written customer turns in the real dataset's style, written apart from any family.

  Each line: {"text", "want": the fields it states, optional "asked", "airports"}.
  An utterance counts as read when the parser returns exactly `want`.
  """
  rows = []
  with open(path, encoding="utf-8") as f:
    for line_no, line in enumerate(f, 1):
      row = json.loads(line)
      for field in ("text", "want"):
        if field not in row:
          raise ValueError(f"{path}:{line_no}: field {field!r} missing")
      rows.append(row)
  misread = []
  for row in rows:
    heard = slot_parser.parse(row["text"], row.get("asked", ()), row.get("airports", ()))
    if heard != row["want"]:
      misread.append({"text": row["text"], "want": row["want"], "heard": heard})
  return {"n": len(rows), "accuracy": 1 - len(misread) / len(rows), "misread": misread}


def main(argv):
  del argv
  f = flags.FLAGS
  families = sorted(customer_families.FAMILIES)
  report = {
      "slot_accuracy": slot_accuracy(families, f.slot_scenarios),
      "slot_accuracy_every_constraint": slot_accuracy(families, f.slot_scenarios,
                                                      every_constraint=True),
      "oracle": oracle_success(sorted(customers.STYLES), families, f.scenarios),
      "dates": date_readers(),
      "cities": city_matchers(),
      "probe": probe_accuracy(),
  }
  text = json.dumps(report, indent=2, sort_keys=True)
  if f.out:
    with open(f.out, "w", encoding="utf-8") as out:
      out.write(text + "\n")
  print(text)


if __name__ == "__main__":
  # Defined here, not at import: tests import this module next to other mains' flags.
  flags.DEFINE_integer("scenarios", 500, "Scenarios per style x family cell.", lower_bound=1)
  flags.DEFINE_integer("slot_scenarios", 250,
                       "Scenarios per family for slot accuracy (x 9 slots).", lower_bound=1)
  flags.DEFINE_string("out", None, "Write the JSON report here too.")
  cli.run(main)
