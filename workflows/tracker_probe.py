"""How well a fresh intent tracker reads each kind of customer from a frozen trunk's states.

CALM's tracker learns from dialogues in the training phrasing families and then meets customers
who speak otherwise. This probe holds the tracker fixed (calm/state.StateHead: pooled, return
fields sharing their departure readings, reading the customer's words only) and swaps the frozen
states it reads, so a pretrained model's knowledge is measured where the agent needs it:

  ours      a workdir's trunk (the dialogue LM every AirDialogue party starts from) in the
            agent's layout: the table as its structured prefix, `<|dialogue|>`, then
            `<|speaker|> text <|eot|>` per turn; the tracker reads the customer's text and
            <|eot|> tokens.
  smollm2   SmolLM2-135M-Instruct's first K layers, frozen, over the turns as plain text
            ("Customer: ...\\nAgent: ...\\n"); the tracker reads the customer's text tokens.
  calm      a CALM agent's workdir as it plays: its trunk (the table conditioned on reward 1)
            and the tracker it was trained with, read as is, not fitted: the baseline a fresh
            tracker on frozen states has to beat to be worth playing.

The scripted oracle plays every customer spec (no learned party decides what is asked), so
the groups differ only in how the customer speaks. The tracker trains on one group's states
and is read on the others': per field, and joint (every field right: dialogue-state
tracking's joint goal accuracy). States are standardized per dimension with the training
group's statistics, so one learning rate suits trunks of any scale.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterator, Sequence

import jax.numpy as jnp
import numpy as np

from calm import frozen_tracker, state
from data_pipelines.tokenization import load_tokenizer
from domains.airdialogue import environment as airdialogue_env, task as airdialogue_task
from domains.airdialogue.parties import AGENT, CUSTOMER
from ilql_dialogue import restore
from ilql_dialogue.parties import make_party

ORACLE = "scripted_agent:oracle"


@dataclasses.dataclass(frozen=True)
class Played:
  """One dialogue the oracle played: what was said and the customer's true intent codes."""

  turns: tuple[tuple[str, str], ...]  # (speaker, text)
  agent_context: dict[str, Any]
  codes_K: np.ndarray
  name: str = ""  # The customer's name in their intent.


def play(customer: str, seed: int, num: int, kb_size: int = 30) -> list[Played]:
  """The oracle against `customer` (a party spec) on scenarios seed:0 .. seed:num-1."""
  scenarios = airdialogue_env.make_scenarios(seed, num, kb_size)
  results = airdialogue_env.run_dialogues(make_party(ORACLE, AGENT),
                                          make_party(customer, CUSTOMER), scenarios,
                                          batch_size=min(num, 256), seed=seed)
  return [Played(tuple((t.speaker, t.text) for t in r.turns), s.context(AGENT),
                 state.intent_codes(s.intent), s.intent.name)
          for r, s in zip(results, scenarios)]


def dialogue_rows(tok: Any, played: Played) -> tuple[list[int], list[bool]]:
  """Our layout after the prefix: `<|dialogue|>`, then `<|speaker|> text <|eot|>` per turn;
  the tracker reads the customer's text and <|eot|> tokens."""
  ids, reads = [tok.dialogue_id], [False]
  for (speaker, _), text_ids in zip(played.turns, tok.encode_batch(
      [text for _, text in played.turns])):
    turn = [tok.speaker_token_ids[speaker], *text_ids, tok.eot_id]
    ids += turn
    reads += [False] + [speaker == CUSTOMER] * (len(turn) - 1)
  return ids, reads


def others_rows(tok: Any, played: Played) -> tuple[list[int], list[bool]]:
  """dialogue_rows' ids, read where a CALM agent's tracker reads them when it plays: every
  position outside the agent's own text and <|eot|> (state.others_reads)."""
  ids, _ = dialogue_rows(tok, played)
  tokens_1xT = jnp.asarray([ids])
  reads = state.others_reads(tokens_1xT, jnp.ones_like(tokens_1xT, bool),
                             tok.speaker_token_ids[AGENT],
                             jnp.asarray(list(tok.speaker_token_ids.values())))
  return ids, np.asarray(reads[0]).tolist()


class OurTrunk(frozen_tracker.Trunk):
  """A workdir's trunk (its selected checkpoint) in the agent's layout."""

  def __init__(self, workdir: str):
    config = restore.read_config(workdir)
    model, step = restore.restore_model(workdir, config)
    self.model = getattr(model, "lm", model)
    self.cfg = self.model.cfg
    self.name = f"ours:{workdir}@{step}"
    self.tokenizer = load_tokenizer(f"{workdir}/tokenizer")
    self.has_prefix = hasattr(self.model, "embed_prefix")
    self._run = frozen_tracker.jit_trunk(self.model)

  def rows(self, played: Played) -> tuple[list[int], list[bool]]:
    return dialogue_rows(self.tokenizer, played)

  def forward(self, tokens_BxT, mask_BxT, batch):
    fields = (np.stack([airdialogue_task.table_fields(p.agent_context) for p in batch])
              if self.has_prefix else None)
    return self._run(jnp.asarray(tokens_BxT), jnp.asarray(mask_BxT),
                     None if fields is None else jnp.asarray(fields))


class CALMTrunk(OurTrunk):
  """A CALM workdir's whole model, as its agent reads the intent at the closing marker."""

  def __init__(self, workdir: str):
    config = restore.read_config(workdir)
    model, step = restore.restore_model(workdir, config)
    if not isinstance(getattr(model, "action_head", None), state.StateHead):
      raise ValueError(f"calm:{workdir}: its model has no state head (algorithm.head)")
    self.model, self.cfg = model, model.cfg
    self.trained_head = model.action_head
    self.name = f"calm:{workdir}@{step}"
    self.tokenizer = load_tokenizer(f"{workdir}/tokenizer")
    self.has_prefix = True
    self._run = frozen_tracker.jit_trunk(model)

  def rows(self, played: Played) -> tuple[list[int], list[bool]]:
    return others_rows(self.tokenizer, played)


def make_trunk(spec: str) -> frozen_tracker.Trunk:
  """'ours:WORKDIR', 'calm:WORKDIR' or 'smollm2:LAYERS'."""
  kind, _, value = spec.partition(":")
  if kind == "ours" and value:
    return OurTrunk(value)
  if kind == "calm" and value:
    return CALMTrunk(value)
  if kind == "smollm2" and value.isdigit():
    return frozen_tracker.SmolLM2Trunk(int(value))
  raise ValueError(f"trunk {spec!r}: expected ours:WORKDIR, calm:WORKDIR or smollm2:LAYERS")


def accuracies(head: state.StateHead, standardize: Callable[[np.ndarray], np.ndarray],
               group: frozen_tracker.Encoded, codes_NxK: np.ndarray) -> dict[str, float]:
  """Each field's accuracy and the joint accuracy (every field right) over `group`."""
  return field_accuracies(frozen_tracker.read(head, standardize, group), codes_NxK)


def field_accuracies(log_p: Sequence[np.ndarray], codes_NxK: np.ndarray) -> dict[str, float]:
  right = np.stack([p.argmax(-1) for p in log_p], 1) == codes_NxK
  out = {name: float(right[:, k].mean()) for k, name in enumerate(state.TRACKED_NAMES)}
  out["joint"] = float(right.all(1).mean())
  out["joint_stderr"] = float(right.all(1).std(ddof=1) / np.sqrt(len(right)))
  return out


def codes(dialogues: Sequence[Played]) -> np.ndarray:
  return np.stack([d.codes_K for d in dialogues])


def probe(trunks: Sequence[str], *, train_customer: str, train_seed: int, num_train: int,
          test_customers: Sequence[str], test_seed: int, num_test: int, seeds: Sequence[int],
          steps: int, batch_size: int, learning_rate: float
          ) -> Iterator[tuple[str, dict[str, Any]]]:
  """Per trunk, as each is done: the cost of its states and, per tracker seed, each test
  group's accuracies (a `calm:` trunk's own tracker: one run, read as is)."""
  train_dialogues = None
  tests = {c: play(c, test_seed, num_test) for c in test_customers}
  for spec in trunks:
    trunk = make_trunk(spec)
    groups = {c: trunk.encode(d) for c, d in tests.items()}
    truth = {c: codes(d) for c, d in tests.items()}
    tokens = sum(g.tokens for g in groups.values())
    seconds = sum(g.seconds for g in groups.values())
    runs = []
    if getattr(trunk, "trained_head", None) is not None:
      runs.append({"seed": "trained", "train_seconds": 0.0,
                   **{c: accuracies(trunk.trained_head, lambda h: h, g, truth[c])
                      for c, g in groups.items()}})
      yield spec, {"trunk": trunk.name, "d_model": trunk.cfg.d_model,
                   "encode_ms_per_1k_tokens": 1e6 * seconds / max(tokens, 1),
                   "runs": runs, "summary": summarize(runs, test_customers)}
      continue
    if train_dialogues is None:
      train_dialogues = play(train_customer, train_seed, num_train)
    train = trunk.encode(train_dialogues)
    tokens, seconds = tokens + train.tokens, seconds + train.seconds
    for seed in seeds:
      began = time.perf_counter()
      head, standardize = frozen_tracker.train_head(
          train, codes(train_dialogues), trunk.cfg, steps=steps, batch_size=batch_size,
          learning_rate=learning_rate, seed=seed)
      runs.append({"seed": seed, "train_seconds": time.perf_counter() - began,
                   **{c: accuracies(head, standardize, g, truth[c])
                      for c, g in groups.items()}})
    yield spec, {"trunk": trunk.name, "d_model": trunk.cfg.d_model,
                 "encode_ms_per_1k_tokens": 1e6 * seconds / max(tokens, 1),
                 "runs": runs, "summary": summarize(runs, test_customers)}


def summarize(runs: Sequence[dict[str, Any]], customers: Sequence[str]) -> dict[str, Any]:
  """Mean +- s.e. over tracker seeds of each group's joint and mean field accuracy."""
  out = {}
  for c in customers:
    for key in ("joint", "fields"):
      values = np.asarray([
          r[c]["joint"] if key == "joint"
          else np.mean([r[c][n] for n in state.TRACKED_NAMES]) for r in runs])
      stderr = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
      out[f"{c}/{key}"] = (float(values.mean()), float(stderr))
  return out


def format_table(report: dict[str, Any]) -> str:
  """One markdown row per trunk: its cost, then each group's joint accuracy."""
  specs = list(report)
  customers = [key[:-len("/joint")] for key in report[specs[0]]["summary"]
               if key.endswith("/joint")]
  lines = ["| trunk | ms per 1k tokens | " + " | ".join(customers) + " |",
           "|---|---|" + "---|" * len(customers)]
  for spec in specs:
    summary = report[spec]["summary"]
    cells = [f"{summary[f'{c}/joint'][0]:.3f} ± {summary[f'{c}/joint'][1]:.3f} "
             f"(fields {summary[f'{c}/fields'][0]:.3f})" for c in customers]
    lines.append(f"| {spec} | {report[spec]['encode_ms_per_1k_tokens']:.0f} | "
                 + " | ".join(cells) + " |")
  return "\n".join(lines)


def fit_reader(out: str, *, num_layers: int, train_customer: str, train_seed: int,
               num_train: int, check_customers: Sequence[str], check_seed: int, num_check: int,
               steps: int, batch_size: int, learning_rate: float, seed: int
               ) -> dict[str, Any]:
  """Trains a tracker and a name pointer on SmolLM2's first `num_layers` frozen layers over
  oracle dialogues and saves them to `out` for a CALM agent's closing (`calm:reader=OUT`);
  returns their accuracies on the `check_customers`' dialogues of `check_seed` (validation:
  keep test scenarios out)."""
  trunk = frozen_tracker.SmolLM2Trunk(num_layers)
  began = time.perf_counter()
  train_dialogues = play(train_customer, train_seed, num_train)
  tokenized = [trunk.tokenize(d) for d in train_dialogues]
  train = trunk.encode(train_dialogues, [(ids, reads) for ids, reads, _ in tokenized])
  head, standardize = frozen_tracker.train_head(
      train, codes(train_dialogues), trunk.cfg, steps=steps, batch_size=batch_size,
      learning_rate=learning_rate, seed=seed)
  starts, ends = name_targets(train_dialogues, [spans for _, _, spans in tokenized],
                              train.mask_NxT.shape[1])
  name_head = frozen_tracker.train_name_head(
      train, standardize, starts, ends, steps=steps, batch_size=batch_size,
      learning_rate=learning_rate, seed=seed)
  tracker = frozen_tracker.FrozenTracker(trunk, head, standardize, name_head)
  tracker.save(out)
  report = {"trunk": trunk.name, "train_customer": train_customer, "train_seed": train_seed,
            "num_train": num_train, "steps": steps, "seconds": time.perf_counter() - began,
            "encode_ms_per_1k_tokens": 1e6 * train.seconds / max(train.tokens, 1),
            "train_name_mentioned": float((starts.any(1) & ends.any(1)).mean())}
  for customer in check_customers:
    dialogues = play(customer, check_seed, num_check)
    log_p, names = tracker.read([d.turns for d in dialogues])
    report[customer] = field_accuracies(log_p, codes(dialogues))
    report[customer]["name"] = float(np.mean([
        (n or "").lower() == d.name.lower() for n, d in zip(names, dialogues)]))
  return report


def name_targets(dialogues: Sequence[Played], spans: Sequence[Sequence[tuple[int, int, int]]],
                 width: int) -> tuple[np.ndarray, np.ndarray]:
  """starts_NxT, ends_NxT: where each dialogue's customer mentions their name (`spans`: each
  dialogue's read positions, SmolLM2Trunk.tokenize)."""
  pairs = [frozen_tracker.name_targets(s, d.turns, d.name, width)
           for d, s in zip(dialogues, spans)]
  return np.stack([a for a, _ in pairs]), np.stack([b for _, b in pairs])
