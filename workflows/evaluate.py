"""Online evaluation: an agent against a customer over held-out AirDialogue scenarios.

`evaluate` plays `num_dialogues` scenarios (domains/airdialogue/environment.py:
seed 1000 by default, never a training corpus stream, the same scenarios for every
agent compared), streams one transcript line per dialogue to
`transcripts_<tag>.jsonl`, and writes the summary (success rate +- standard
error, status / flight / name accuracy, mean turns, how dialogues ended) to
`eval_<tag>.json`. `online_eval_fn` is the same measurement as a training-loop
EvalFn, so checkpoints can be chosen by return instead of by loss.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
from flax import nnx

from data_pipelines import files, mdp
from data_pipelines.airdialogue import to_dialogue
from data_pipelines.tokenization import DialogueTokenizer
from domains.airdialogue import environment as airdialogue_env
from domains.airdialogue.parties import AGENT, CUSTOMER
from ilql_dialogue import party_spec, value_guidance
from ilql_dialogue.lm_party import LMParty
from ilql_dialogue.parties import make_party
from ilql_dialogue.value_heads import ILQLModel

_SLUG_RE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(spec: str) -> str:
  """A file-name-safe short name of a party spec (a workdir's base name)."""
  name = os.path.basename(os.path.abspath(spec)) if os.path.isdir(spec) else spec
  return _SLUG_RE.sub("-", name).strip("-") or "party"


def default_tag(agent: str, customer: str, seed: int, num_dialogues: int) -> str:
  return f"{slug(agent)}_vs_{slug(customer)}_seed{seed}_n{num_dialogues}"


def evaluate(agent: str, customer: str, *, num_dialogues: int, workdir: str,
             seed: int = airdialogue_env.DEFAULT_SEED, batch_size: int = 16,
             max_turns: int = airdialogue_env.DEFAULT_MAX_TURNS, kb_size: int = 30,
             lm_options: Mapping[str, Any] | None = None,
             customer_lm_options: Mapping[str, Any] | None = None, tag: str = "",
             progress: bool | None = None,
             devices: Sequence[Any] | None = None) -> dict[str, Any]:
  """Plays and scores the dialogues; returns the summary also written to eval_<tag>.json.

  `agent` / `customer` are party specs (ilql_dialogue/party_spec.py);
  `lm_options` (temperature, top_k, top_p, max_new_tokens; `beta`, value
  guidance) are the agent's if it is a checkpoint; a learned customer decodes
  with `customer_lm_options`, by default the agent's without `beta`: an agent
  is usually measured greedily, a simulator may sample. The progress
  bar shows when there is more than one batch, unless `progress` says
  otherwise. `devices` (two or more): checkpoint parties decode each batch with its rows split
  over them (`split_rows_over`).
  """
  if num_dialogues < 1:
    raise ValueError(f"num_dialogues={num_dialogues} must be >= 1")
  lm_options = dict(lm_options or {})
  customer_lm_options = dict({k: v for k, v in lm_options.items() if k != "beta"}
                             if customer_lm_options is None else customer_lm_options)
  scenarios = airdialogue_env.make_scenarios(seed, num_dialogues, kb_size)
  agent_party = make_party(agent, AGENT, **split_rows_over(agent, lm_options, devices))
  customer_party = make_party(customer, CUSTOMER,
                              **split_rows_over(customer, customer_lm_options, devices))
  tag = tag or default_tag(agent, customer, seed, num_dialogues)
  os.makedirs(workdir, exist_ok=True)
  transcripts_path = os.path.join(workdir, f"transcripts_{tag}.jsonl")
  summary_path = os.path.join(workdir, f"eval_{tag}.json")

  start = time.perf_counter()
  results = []
  with open(transcripts_path, "w", encoding="utf-8") as f:
    for result in airdialogue_env.run_dialogues(
        agent_party, customer_party, scenarios, batch_size=batch_size, max_turns=max_turns,
        seed=seed, progress=num_dialogues > batch_size if progress is None else progress):
      results.append(result)
      f.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
  elapsed = time.perf_counter() - start

  summary = airdialogue_env.summarize(results)
  summary.update(
      agent=agent, customer=customer, seed=seed, batch_size=batch_size, max_turns=max_turns,
      kb_size=kb_size, lm_options=lm_options, customer_lm_options=customer_lm_options,
      devices=len(devices) if devices else 1, elapsed_s=elapsed,
      dialogues_per_s=num_dialogues / elapsed, transcripts=transcripts_path)
  files.write_json(summary_path, summary, indent=2)
  return summary


def cpu_decode_devices(count: str) -> list[Any] | None:
  """A main's `--cpu_devices`: asks jax for `count` CPU devices ("all": one per usable core;
  before any jax computation) and returns them for `devices=`, or None for one."""
  from ilql_dialogue.generation import cpu_devices  # Sets a jax option: only when asked.

  if count == "all" or (count.isdigit() and int(count) > 0):
    return jax.devices() if cpu_devices.use_cpu_devices(count) > 1 else None
  raise ValueError(f"--cpu_devices={count!r}: a positive number of devices, or 'all'")


def split_rows_over(spec: str, options: Mapping[str, Any],
                    devices: Sequence[Any] | None) -> dict[str, Any]:
  """`options` with `devices` for a checkpoint party, whose LMParty then splits each batch's
  rows over them (one XLA:CPU device per core uses every core: generation/cpu_devices.py).
  Other kinds keep one device: the CALM planner and the k-sample picker work on one state."""
  options = dict(options)
  if devices is not None and len(devices) > 1 and (
      party_spec.parse(spec).kind == party_spec.CHECKPOINT):
    options["devices"] = list(devices)
  return options


def best_beta(success_by_beta: dict[float, float]) -> float:
  """The guidance strength with the best success; a tie goes to the smallest beta, so
  guidance that does not help loses to the plain policy (beta = 0)."""
  return min(success_by_beta, key=lambda b: (-success_by_beta[b], b))


def online_eval_fn(tokenizer: DialogueTokenizer, role: str, opponent: str, *,
                   num_dialogues: int = 64, seed: int = airdialogue_env.DEFAULT_SEED, kb_size: int = 30,
                   batch_size: int = 16, max_turns: int = airdialogue_env.DEFAULT_MAX_TURNS,
                   include_context: bool = True,
                   serialize_context: mdp.SerializeContext = to_dialogue.serialize_context,
                   prefix_fields: Any = None, betas: Sequence[float] = (0.0,),
                   opponent_options: Mapping[str, Any] | None = None,
                   wrap_party: Callable[[LMParty], Any] | None = None,
                   **lm_options: Any):
  """An EvalFn (train_loop) that plays the model being trained, as `role`, against `opponent`.

  Plays the same held-out scenarios once per beta (value guidance of an
  ILQLModel; 0 = its BC policy) and returns "return" (the best success rate
  over `betas`), "best_beta", its "success_stderr", "mean_turns" and
  status / flight / name accuracies, and
  "return/beta=B" for every beta. "return" is what checkpoints are selected
  by, so the kept checkpoint comes with the beta it is best at. The layout
  arguments are a Task's (tokenizer, include_context, serialize_context,
  prefix.fields). Pass `seed` different from the reported evaluation's
  (airdialogue_env.DEFAULT_SEED), so selection never sees the test scenarios. `opponent_options`
  (sampling keywords) go to a learned opponent; scripted ones take none. `wrap_party` turns
  the model's LMParty into the party that plays (e.g. a CALM run's `planning.action=head`
  party), so selection measures the agent as it will be evaluated.
  """
  if not betas:
    raise ValueError("online_eval_fn: betas must not be empty")
  scenarios = airdialogue_env.make_scenarios(seed, num_dialogues, kb_size)
  other_role = CUSTOMER if role == AGENT else AGENT
  other = make_party(opponent, other_role, **dict(opponent_options or {}))

  def play(model: nnx.Module, beta: float) -> dict[str, Any]:
    if beta != 0.0 and not isinstance(model, ILQLModel):
      raise ValueError(f"online_eval_fn: beta={beta} needs an ILQLModel, got "
                       f"{type(model).__name__}")
    decoder = value_guidance.decoding_model(model) if isinstance(model, ILQLModel) else model
    hook = (None if beta == 0.0 else
            lambda batch: value_guidance.value_guidance(model, beta, batch))
    party = LMParty(decoder, tokenizer, role, include_context=include_context,
                               serialize_context=serialize_context, prefix_fields=prefix_fields,
                               hook=hook, **lm_options)
    if wrap_party is not None:
      party = wrap_party(party)
    agent, customer = (party, other) if role == AGENT else (other, party)
    return airdialogue_env.summarize(list(airdialogue_env.run_dialogues(
        agent, customer, scenarios, batch_size=batch_size, max_turns=max_turns, seed=seed)))

  def eval_fn(model: nnx.Module, step: int) -> dict[str, float]:
    del step  # The scenarios and seeds stay fixed, so steps are comparable.
    summaries = {float(beta): play(model, float(beta)) for beta in betas}
    chosen = best_beta({b: s["success_rate"] for b, s in summaries.items()})
    best = summaries[chosen]
    return {"return": best["success_rate"],
            "best_beta": chosen,
            "success_stderr": best["success_stderr"], "mean_turns": best["mean_turns"],
            **{k: best[k] for k in ("status_acc", "flight_acc", "name_acc")},
            **({} if best["booking_success"] is None  # No scenario asked for a flight.
               else {"booking_success": best["booking_success"]}),
            **{f"return/beta={b:g}": s["success_rate"] for b, s in summaries.items()}}

  return eval_fn


def play_environment(env: Any, parties: Mapping[str, Any], scenarios: Sequence[Any], *,
                     batch_size: int, max_turns: int, seed: int) -> list[Any]:
  """Every scenario played to its end by `parties` (role -> Party), `batch_size` at a time."""
  from ilql_dialogue import environment  # The engine; AirDialogue's path above predates it.

  episodes = []
  for start in range(0, len(scenarios), batch_size):
    episodes += environment.play(env, parties, scenarios[start:start + batch_size],
                                 max_turns=max_turns, seed=seed)
  return episodes


def summarize_environment(env: Any, episodes: Sequence[Any]) -> dict[str, Any]:
  """Mean reward +- its standard error, mean turns, and the environment's own counts
  (`env.metrics`: P4G's stated, unparsable and missing donations) where it has them."""
  rewards = np.asarray([env.reward(e) for e in episodes], np.float64)
  out = {"return": float(rewards.mean()),
         "return_stderr": float(rewards.std(ddof=1) / np.sqrt(len(rewards)))
         if len(rewards) > 1 else float("nan"),
         "mean_turns": float(np.mean([len(e.turns) for e in episodes]))}
  if hasattr(env, "metrics"):
    out.update({k: v for k, v in env.metrics(episodes).items() if k not in out})
  return out


def environment_eval_fn(env: Any, tokenizer: DialogueTokenizer, role: str, opponent: str, *,
                        num_dialogues: int = 64, seed: int = 2000, batch_size: int = 16,
                        max_turns: int = 24, include_context: bool = True,
                        serialize_context: mdp.SerializeContext = mdp.json_context,
                        opponent_options: Mapping[str, Any] | None = None,
                        **lm_options: Any):
  """An EvalFn that plays the model being trained, as `role`, in any environment
  (ilql_dialogue/environment.py: e.g. Persuasion for Good's held-out personas) against
  `opponent` in every other role: "return" is the mean of env.reward over the dialogues
  (what online RL maximizes, so checkpoints are selected by it), with its standard error,
  and the environment's own counts. The scenarios are env.sample(seed, num_dialogues), fixed
  across steps; keep `seed` apart from the training and test seeds."""
  scenarios = env.sample(seed, num_dialogues)
  others = {r: make_party(opponent, r, **(opponent_options or {}))
            for r in env.turn_order if r != role}

  def eval_fn(model: nnx.Module, step: int) -> dict[str, float]:
    del step  # An ILQL model plays its policy (beta = 0): the engine path sweeps no guidance.
    decoder = value_guidance.decoding_model(model) if isinstance(model, ILQLModel) else model
    party = LMParty(decoder, tokenizer, role, include_context=include_context,
                               serialize_context=serialize_context, **lm_options)
    return summarize_environment(env, play_environment(
        env, {**others, role: party}, scenarios, batch_size=batch_size, max_turns=max_turns,
        seed=seed))

  return eval_fn


def evaluate_environment(env: Any, role: str, party: str, opponent: str, *, num_dialogues: int,
                         workdir: str, seed: int, batch_size: int = 16, max_turns: int = 24,
                         lm_options: Mapping[str, Any] | None = None,
                         opponent_options: Mapping[str, Any] | None = None,
                         tag: str = "", devices: Sequence[Any] | None = None
                         ) -> dict[str, Any]:
  """`evaluate` for any environment: the `party` spec plays `role` against the `opponent`
  spec in every other role on env.sample(seed, num_dialogues); writes one transcript per
  dialogue to transcripts_<tag>.jsonl and the summary (summarize_environment) to
  eval_<tag>.json, and returns the summary. `devices`: as `evaluate`'s."""
  if num_dialogues < 1:
    raise ValueError(f"num_dialogues={num_dialogues} must be >= 1")
  parties = {r: make_party(party if r == role else opponent, r,
                           **split_rows_over(party if r == role else opponent,
                                             (lm_options if r == role else opponent_options)
                                             or {}, devices))
             for r in env.turn_order}
  tag = tag or default_tag(party, opponent, seed, num_dialogues)
  os.makedirs(workdir, exist_ok=True)
  start = time.perf_counter()
  episodes = play_environment(env, parties, env.sample(seed, num_dialogues),
                              batch_size=batch_size, max_turns=max_turns, seed=seed)
  elapsed = time.perf_counter() - start
  transcripts_path = os.path.join(workdir, f"transcripts_{tag}.jsonl")
  with open(transcripts_path, "w", encoding="utf-8") as f:
    for e in episodes:
      f.write(json.dumps({"key": e.key, "turns": [[t.speaker, t.text] for t in e.turns],
                          "end_reason": e.end_reason, "info": dict(e.info),
                          "reward": env.reward(e)}, ensure_ascii=False, default=str) + "\n")
  summary = summarize_environment(env, episodes)
  summary.update(role=role, party=party, opponent=opponent, seed=seed, n=len(episodes),
                 batch_size=batch_size, max_turns=max_turns, lm_options=dict(lm_options or {}),
                 opponent_options=dict(opponent_options or {}), elapsed_s=elapsed,
                 transcripts=transcripts_path)
  files.write_json(os.path.join(workdir, f"eval_{tag}.json"), summary, indent=2)
  return summary
