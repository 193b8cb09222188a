r"""Where an agent's retail dialogues fail: a funnel over evaluate_env's transcripts.

    python -m domains.tau2_retail.diagnose [--split=test --seed=1000] \
        RUN/transcripts_TAG.jsonl [...]

For each file prints, as one JSON object, the share of dialogues that reached each step an
oracle dialogue passes through (a parsable tool call, the customer found, the account read,
an order read, a write attempted, a write that succeeded, a proper ending, reward 1), the end
reasons, the first tool call's name, and per dialogue the agent's turns, tool calls and their
errors by kind. A learned agent's score of 0 says little alone; this says at which step it
stops. With --split (the evaluation's split and seed), also how many tasks' gold writes
nothing (declined wishes, a transfer) and the reward earned on them and on the others: an
agent that changes nothing scores 1 on the former.
"""

from __future__ import annotations

import collections
import json
from typing import Any, Mapping, Sequence

from absl import app, flags

from data_pipelines import cli
from domains.tau2_retail import environment, paths, phrases, turns

_SPLIT = flags.DEFINE_string("split", "", "The evaluation's split: also split the reward by "
                             "whether the task's gold writes ('' = not).")
_SEED = flags.DEFINE_integer("seed", 1000, "The evaluation's scenario seed.")

LOOKUPS = ("find_user_id_by_email", "find_user_id_by_name_zip")
WRITES = tuple(sorted(set(phrases.WISH_TOOLS.values()) - {"transfer_to_human_agents"}))
STEPS = ("tool_call", "customer_found", "account_read", "order_read", "write_attempted",
         "write_done", "proper_ending", "reward_1")


def _steps(record: Mapping[str, Any]) -> tuple[set[str], str | None]:
  reached, first = set(), None
  history = record["turns"]
  for k, (speaker, text) in enumerate(history):
    if speaker != turns.AGENT:
      continue
    parsed = turns.parse_agent_turn(text)
    if parsed.call is None:
      continue
    reached.add("tool_call")
    first = first or parsed.call.name
    result = history[k + 1][1] if k + 1 < len(history) and history[k + 1][0] == turns.TOOL else ""
    ok = bool(result) and not result.startswith("Error")
    name = parsed.call.name
    if ok and name in LOOKUPS:
      reached.add("customer_found")
    if ok and name == "get_user_details":
      reached.add("account_read")
    if ok and name == "get_order_details":
      reached.add("order_read")
    if name in WRITES:
      reached.add("write_attempted")
      if ok:
        reached.add("write_done")
  if record["info"].get("proper_ending"):
    reached.add("proper_ending")
  if record["reward"] == 1.0:
    reached.add("reward_1")
  return reached, first


def funnel(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """The module docstring's summary of one transcript file's records."""
  n = len(records)
  reached = collections.Counter()
  firsts, ends = collections.Counter(), collections.Counter()
  agent_turns = tool_calls = 0
  errors = collections.Counter()
  for record in records:
    steps, first = _steps(record)
    reached.update(steps)
    firsts[first or "(none)"] += 1
    ends[record["end_reason"]] += 1
    agent_turns += sum(speaker == turns.AGENT for speaker, _ in record["turns"])
    tool_calls += record["info"].get("tool_calls", 0)
    errors.update({k.split("/", 1)[1]: v for k, v in record["info"].items()
                   if k.startswith("errors/")})
  return {"dialogues": n, "reached": {s: reached[s] / n for s in STEPS},
          "end_reasons": dict(ends), "first_tool_call": dict(firsts.most_common()),
          "agent_turns": agent_turns / n, "tool_calls": tool_calls / n,
          "tool_errors": {k: v / n for k, v in errors.items()}}


def by_gold(records: Sequence[Mapping[str, Any]], split: str, seed: int) -> dict[str, Any]:
  """Reward on the tasks whose gold writes nothing and on the others (module docstring)."""
  env = environment.RetailEnv(split)
  writes = {s.key: any(a.name in WRITES for a in s.task.actions)
            for s in env.sample(seed, len(records))}
  out = {}
  for name, wanted in (("no_write_gold", False), ("write_gold", True)):
    rewards = [r["reward"] for r in records if writes[r["key"]] == wanted]
    out[name] = {"tasks": len(rewards),
                 "reward": sum(rewards) / len(rewards) if rewards else float("nan")}
  return out


def main(argv: Sequence[str]) -> None:
  if len(argv) < 2:
    raise app.UsageError(__doc__)
  for path in argv[1:]:
    records = []
    try:
      with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
          if line.strip():
            try:
              records.append(json.loads(line))
            except json.JSONDecodeError as e:
              cli.fail(f"{path}:{number}: not a JSON record ({e})")
      gold = by_gold(records, _SPLIT.value, _SEED.value) if _SPLIT.value else {}
    except paths.MissingDataError as e:  # --split reads the tasks' data.
      cli.fail(str(e))
    except OSError as e:
      cli.fail(f"{path}: {e}")
    print(json.dumps({"transcripts": path, **funnel(records), **gold}))


if __name__ == "__main__":
  app.run(main)
