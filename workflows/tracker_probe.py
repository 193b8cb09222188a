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

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from flax.nnx import traversals

from calm import state
from data_pipelines.tokenization import load_tokenizer
from domains.airdialogue import environment as airdialogue_env, task as airdialogue_task
from domains.airdialogue.parties import AGENT, CUSTOMER
from ilql_dialogue import bc, restore
from ilql_dialogue.models import borrow
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.transformer import Transformer
from ilql_dialogue.parties import make_party

ORACLE = "scripted_agent:oracle"
LENGTH_STEP = 64  # Encoded lengths are padded up to a multiple of this: few compiles.
ENCODE_BATCH = 16


@dataclasses.dataclass(frozen=True)
class Played:
  """One dialogue the oracle played: what was said and the customer's true intent codes."""

  turns: tuple[tuple[str, str], ...]  # (speaker, text)
  agent_context: dict[str, Any]
  codes_K: np.ndarray


@dataclasses.dataclass(frozen=True)
class Encoded:
  """A trunk's frozen states at the positions the tracker reads, packed to the left."""

  hidden_NxTxD: np.ndarray
  mask_NxT: np.ndarray
  codes_NxK: np.ndarray
  seconds: float  # Wall time of the trunk's forward passes.
  tokens: int  # Tokens the trunk read.


def play(customer: str, seed: int, num: int, kb_size: int = 30) -> list[Played]:
  """The oracle against `customer` (a party spec) on scenarios seed:0 .. seed:num-1."""
  scenarios = airdialogue_env.make_scenarios(seed, num, kb_size)
  results = airdialogue_env.run_dialogues(make_party(ORACLE, AGENT),
                                          make_party(customer, CUSTOMER), scenarios,
                                          batch_size=min(num, 256), seed=seed)
  return [Played(tuple((t.speaker, t.text) for t in r.turns), s.context(AGENT),
                 state.intent_codes(s.intent)) for r, s in zip(results, scenarios)]


def _pad(rows: Sequence[Sequence[Any]], width: int, fill: Any, dtype: Any) -> np.ndarray:
  out = np.full((len(rows), width), fill, dtype)
  for b, row in enumerate(rows):
    out[b, :len(row)] = row
  return out


def _round_up(n: int) -> int:
  return -(-n // LENGTH_STEP) * LENGTH_STEP


class Trunk:
  """Frozen states for the tracker: `rows` lays a dialogue out as (token ids, the positions the
  tracker reads); `forward` is the jitted trunk over a padded batch."""

  name: str
  cfg: ModelConfig

  def rows(self, played: Played) -> tuple[list[int], list[bool]]:
    raise NotImplementedError

  def forward(self, tokens_BxT: np.ndarray, mask_BxT: np.ndarray,
              batch: Sequence[Played]) -> jax.Array:
    raise NotImplementedError

  def encode(self, dialogues: Sequence[Played]) -> Encoded:
    """Batches of similar length (sorted), each padded to its own multiple of LENGTH_STEP;
    a width's first batch runs twice, so its compilation is not timed."""
    rows = [self.rows(d) for d in dialogues]
    reads_width = _round_up(max(sum(reads) for _, reads in rows))
    hidden = np.zeros((len(rows), reads_width, self.cfg.d_model), np.float32)
    mask = np.zeros((len(rows), reads_width), bool)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    seconds, compiled = 0.0, set()
    for start in range(0, len(order), ENCODE_BATCH):
      picked = order[start:start + ENCODE_BATCH]
      filled = picked + picked[:1] * (ENCODE_BATCH - len(picked))  # One batch size.
      width = _round_up(max(len(rows[i][0]) for i in filled))
      tokens_BxT = _pad([rows[i][0] for i in filled], width, 0, np.int32)
      mask_BxT = _pad([[True] * len(rows[i][0]) for i in filled], width, False, bool)
      played = [dialogues[i] for i in filled]
      if width not in compiled:
        np.asarray(self.forward(tokens_BxT, mask_BxT, played))
        compiled.add(width)
      began = time.perf_counter()
      hidden_BxTxD = np.asarray(self.forward(tokens_BxT, mask_BxT, played))
      seconds += time.perf_counter() - began
      for b, i in enumerate(picked):
        reads = np.asarray(rows[i][1])
        states = hidden_BxTxD[b, :len(reads)][reads]
        hidden[i, :len(states)] = states
        mask[i, :len(states)] = True
    return Encoded(hidden, mask, np.stack([d.codes_K for d in dialogues]), seconds,
                   sum(len(ids) for ids, _ in rows))


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


def _jit_trunk(model: nnx.Module) -> Callable[..., jax.Array]:
  graphdef, params = nnx.split(model)

  @jax.jit
  def run(params, tokens_BxT, mask_BxT, prefix_fields_BxPxF):
    model = nnx.merge(graphdef, params)
    prefix = (None if prefix_fields_BxPxF is None
              else model.embed_prefix(prefix_fields_BxPxF))
    hidden_BxTxD, _ = model(tokens_BxT, bc.positions_from_mask(mask_BxT), mask_BxT,
                            prefix_BxPxD=prefix)
    return hidden_BxTxD

  return lambda *args: run(params, *args)


class OurTrunk(Trunk):
  """A workdir's trunk (its selected checkpoint) in the agent's layout."""

  def __init__(self, workdir: str):
    config = restore.read_config(workdir)
    model, step = restore.restore_model(workdir, config)
    self.model = getattr(model, "lm", model)
    self.cfg = self.model.cfg
    self.name = f"ours:{workdir}@{step}"
    self.tokenizer = load_tokenizer(f"{workdir}/tokenizer")
    self.has_prefix = hasattr(self.model, "embed_prefix")
    self._run = _jit_trunk(self.model)

  def rows(self, played: Played) -> tuple[list[int], list[bool]]:
    return dialogue_rows(self.tokenizer, played)

  def forward(self, tokens_BxT, mask_BxT, batch):
    fields = (np.stack([airdialogue_task.table_fields(p.agent_context) for p in batch])
              if self.has_prefix else None)
    return self._run(jnp.asarray(tokens_BxT), jnp.asarray(mask_BxT),
                     None if fields is None else jnp.asarray(fields))


class SmolLM2Trunk(Trunk):
  """SmolLM2-135M-Instruct's embeddings and first `num_layers` layers, frozen, over plain text."""

  SPEAKERS = {CUSTOMER: "Customer", AGENT: "Agent"}

  def __init__(self, num_layers: int, path: str | None = None):
    source = borrow.load_source(path or borrow.default_path())
    if not 1 <= num_layers <= source.cfg.num_layers:
      raise ValueError(f"smollm2 layers={num_layers}: the source has 1..{source.cfg.num_layers}")
    self.cfg = dataclasses.replace(source.cfg, num_layers=num_layers)
    graphdef, params = nnx.split(nnx.eval_shape(lambda: Transformer(self.cfg,
                                                                    rngs=nnx.Rngs(0))))
    flat = traversals.flatten_mapping(nnx.to_pure_dict(params), sep=".")
    weights = {name: jnp.asarray(source.weights[name][:num_layers]
                                 if name.startswith("blocks.") else source.weights[name])
               for name in flat}
    nnx.replace_by_pure_dict(params, traversals.unflatten_mapping(weights, sep="."))
    self.model = nnx.merge(graphdef, params)
    self.tokenizer = source.tokenizer
    self.heads = {speaker: self.tokenizer(f"{label}:", add_special_tokens=False).input_ids
                  for speaker, label in self.SPEAKERS.items()}  # Each turn's "Customer:" ids.
    self.name = f"smollm2:{num_layers}"
    self._run = _jit_trunk(self.model)

  def rows(self, played: Played) -> tuple[list[int], list[bool]]:
    ids, reads = [], []
    for speaker, text in played.turns:
      head = self.heads[speaker]
      body = self.tokenizer(f" {text}\n", add_special_tokens=False).input_ids
      ids += head + body
      reads += [False] * len(head) + [speaker == CUSTOMER] * len(body)
    return ids, reads

  def forward(self, tokens_BxT, mask_BxT, batch):
    del batch
    return self._run(jnp.asarray(tokens_BxT), jnp.asarray(mask_BxT), None)


def make_trunk(spec: str) -> Trunk:
  """'ours:WORKDIR' or 'smollm2:LAYERS'."""
  kind, _, value = spec.partition(":")
  if kind == "ours" and value:
    return OurTrunk(value)
  if kind == "smollm2" and value.isdigit():
    return SmolLM2Trunk(int(value))
  raise ValueError(f"trunk {spec!r}: expected ours:WORKDIR or smollm2:LAYERS")


def _standardize(train: Encoded) -> Callable[[np.ndarray], np.ndarray]:
  picked_MxD = train.hidden_NxTxD[train.mask_NxT]
  mean_D, std_D = picked_MxD.mean(0), picked_MxD.std(0) + 1e-6
  return lambda hidden: ((hidden - mean_D) / std_D).astype(np.float32)


def train_tracker(train: Encoded, cfg: ModelConfig, *, steps: int, batch_size: int,
                  learning_rate: float, seed: int) -> tuple[state.StateHead, Callable]:
  """A fresh pooled tracker fitted to `train`'s states; returns it and its standardizer."""
  standardize = _standardize(train)
  head_cfg = dataclasses.replace(cfg, dtype="float32", param_dtype="float32")
  head = state.StateHead(head_cfg, rngs=nnx.Rngs(seed), pooled=True, shared=True,
                         reads="all")
  optimizer = nnx.Optimizer(head, optax.adamw(learning_rate, weight_decay=1e-4), wrt=nnx.Param)
  hidden = jnp.asarray(standardize(train.hidden_NxTxD))
  mask, codes = jnp.asarray(train.mask_NxT), jnp.asarray(train.codes_NxK)

  @nnx.jit
  def step(head, optimizer, index_B):
    def loss_fn(head):
      mask_BxT = mask[index_B]
      log_p = head.tracked(hidden[index_B], mask_BxT, jnp.full(index_B.shape, mask.shape[1] - 1),
                           None)
      return state.tracking_loss(log_p, codes[index_B], jnp.ones(index_B.shape, bool))[0]
    loss, grads = nnx.value_and_grad(loss_fn)(head)
    optimizer.update(head, grads)
    return loss

  rng = np.random.default_rng(seed)
  index_SxB = jnp.asarray(np.stack([rng.choice(len(train.codes_NxK), batch_size, replace=False)
                                    for _ in range(steps)]))
  for index_B in index_SxB:  # Nothing read back inside the loop.
    step(head, optimizer, index_B)
  return head, standardize


def accuracies(head: state.StateHead, standardize: Callable, group: Encoded) -> dict[str, float]:
  """Each field's accuracy and the joint accuracy (every field right) over `group`."""
  right_NxK = []
  for start in range(0, len(group.codes_NxK), 64):
    part = slice(start, start + 64)
    mask_BxT = jnp.asarray(group.mask_NxT[part])
    log_p = head.tracked(jnp.asarray(standardize(group.hidden_NxTxD[part])), mask_BxT,
                         jnp.full(mask_BxT.shape[:1], mask_BxT.shape[1] - 1), None)
    right_NxK.append(np.stack([np.asarray(jnp.argmax(p, -1)) for p in log_p], 1)
                     == group.codes_NxK[part])
  right = np.concatenate(right_NxK)
  out = {name: float(right[:, k].mean()) for k, name in enumerate(state.TRACKED_NAMES)}
  out["joint"] = float(right.all(1).mean())
  out["joint_stderr"] = float(right.all(1).std(ddof=1) / np.sqrt(len(right)))
  return out


def probe(trunks: Sequence[str], *, train_customer: str, train_seed: int, num_train: int,
          test_customers: Sequence[str], test_seed: int, num_test: int, seeds: Sequence[int],
          steps: int, batch_size: int, learning_rate: float
          ) -> Iterator[tuple[str, dict[str, Any]]]:
  """Per trunk, as each is done: the cost of its states and, per tracker seed, each test
  group's accuracies."""
  train_dialogues = play(train_customer, train_seed, num_train)
  tests = {c: play(c, test_seed, num_test) for c in test_customers}
  for spec in trunks:
    trunk = make_trunk(spec)
    train = trunk.encode(train_dialogues)
    groups = {c: trunk.encode(d) for c, d in tests.items()}
    tokens = train.tokens + sum(g.tokens for g in groups.values())
    seconds = train.seconds + sum(g.seconds for g in groups.values())
    runs = []
    for seed in seeds:
      began = time.perf_counter()
      head, standardize = train_tracker(train, trunk.cfg, steps=steps, batch_size=batch_size,
                                        learning_rate=learning_rate, seed=seed)
      runs.append({"seed": seed, "train_seconds": time.perf_counter() - began,
                   **{c: accuracies(head, standardize, g) for c, g in groups.items()}})
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
