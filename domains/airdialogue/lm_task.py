"""The AirDialogue dialogue LM: one trunk pretrained for both roles, streamed from the generator.

Every learned AirDialogue party starts from this checkpoint (`config.model.init_from`): the BC
agent, the BC customer, ILQL and CALM. It trains with BC's loss (next-token cross-entropy on the
tokens a row marks in `action_mask`) on rows generated fresh at every step (the dialogues by the
self-play generator), so it never sees a dialogue twice. Rows are of five kinds:

  agent     the flight table as the structured prefix, then the dialogue; targets: the
            agent's tokens only (with every token as a target the model learns a prior over
            customer names instead of copying them, docs/RESULTS.md).
  customer  its intent as text, then the dialogue, no prefix; targets: the customer's tokens.
  scene     task pretraining (CALM): the table prefix and the oracle agent's whole dialogue with
            a customer of a drawn style and training family, up to its expected action block;
            targets: the agent's turns (asking for what it lacks, then the right action).
  repeat    a run of random word tokens, then the same run again; targets: the repetition.
            Material for induction heads, the circuit that copies a two-token name from one
            turn into another (without it a small model copies first names long before last).
  names     NAMES_PER_ROW pairs of (a customer turn that states the name; the closing action
            block for that customer), no prefix; targets: the name and the block's end. The
            drill for *finding* the name in a turn, which induction does not do (without it
            the closing turn writes one fixed name for every customer, docs/RESULTS.md).

Each step is one kind, cycling through `config.task.mixture` (e.g.
"agent,names,repeat,customer,scene,names"), so batches with and without the prefix never mix and
every batch has a static shape (lengths padded up to `LENGTH_STEP`).

Streams stay apart from every evaluation: step s of host h draws from
SeedSequence([STREAM_TAG, seed, s, h]), never from the plain integer seeds of the corpora (0, 1),
checkpoint selection (2000) or the reported evaluation (1000). Step s depends only on
(seed, s, h), so a resumed run reads exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import itertools
from typing import Iterator, Sequence

import jax
import ml_collections
import numpy as np

from data_pipelines import dialogue as dialogue_lib, mdp
from data_pipelines.airdialogue import (action_grammar, agents, customers, family_split, schema,
                                       selfplay, to_dialogue)
from data_pipelines.tokenization import DialogueTokenizer
from ilql_dialogue import bc, tasks
from domains.airdialogue import task as airdialogue

KINDS = ("agent", "customer", "scene", "repeat", "names")
STREAM_TAG = 0x4C4D  # "LM": keeps stream seeds out of the integer seeds used elsewhere.
LENGTH_STEP = 64  # Batch lengths are padded up to a multiple of this: few shapes, few compiles.
REPEAT_LENGTH = 32  # Tokens in a "repeat" row's run (the row is twice as long).
NAMES_PER_ROW = 4  # (name turn, action block) pairs per "names" row.


def parse_mixture(mixture: str) -> tuple[str, ...]:
  kinds = tuple(k.strip() for k in mixture.split(",") if k.strip())
  unknown = sorted(set(kinds) - set(KINDS))
  if not kinds or unknown:
    raise ValueError(f"config.task.mixture={mixture!r}: a comma-separated list of {KINDS}")
  return kinds


def scene(sample: schema.Sample, rng: np.random.Generator, dialogue_id: str
          ) -> dialogue_lib.Dialogue:
  """The oracle agent's whole dialogue with a customer of a drawn style and training phrasing
  family, up to its action block (the expected action, under `sample.table`).

  Scenes once were the volunteer's opening and the block: a model trained on them reads the
  intent from one turn and closes after the customer's first words, so against a customer who
  says only "Hi." its tracker had nothing to read. A whole dialogue shows where the closing
  decision comes: after the agent has asked for what it lacks.
  """
  style = customers.draw_style(rng)
  customer_families_ = family_split.SPLIT.train("customer")
  agent_families_ = family_split.SPLIT.train("agent")
  customer = customers.Customer(sample.intent, style, rng,
                                customer_families_[rng.integers(len(customer_families_))])
  agent = agents.ScriptedAgent(sample.table, "oracle", rng,
                               agent_families_[rng.integers(len(agent_families_))])
  lines, action, error = selfplay.play(customer, agent)
  expected = sample.expected_action
  if action is None or action.status != expected.status or not (
      set(action.flights) <= set(expected.flights)):
    raise RuntimeError(f"scene {dialogue_id}: the oracle did not act as expected "
                       f"({action or error} vs {expected})")
  turns = []
  for line in lines:
    speaker, _, text = line.partition(": ")
    turns.append(dialogue_lib.Turn(speaker, text))
    if speaker == "agent" and action_grammar.contains_action(text):
      break
  return dialogue_lib.Dialogue(
      dialogue_id=dialogue_id, roles=to_dialogue.ROLES, turns=tuple(turns),
      context={"agent": sample.table.to_json(), "customer": sample.intent.to_json()},
      outcome=1.0)


def _row(dialogue: dialogue_lib.Dialogue, kind: str, tokenizer: DialogueTokenizer,
         max_length: int) -> dict[str, np.ndarray]:
  role = "customer" if kind == "customer" else "agent"
  example = mdp.dialogue_to_example(
      dialogue, tokenizer, role, max_length, serialize_context=to_dialogue.serialize_context,
      include_context=kind == "customer")
  row = {"input_ids": example["input_ids"], "action_mask": example["action_mask"]}
  if kind != "customer":
    row[bc.PREFIX_FIELDS] = airdialogue.table_fields(dialogue.context["agent"],
                                                     f"dialogue {dialogue.dialogue_id!r}")
  return row


def collate(rows: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
  """Right-padded [B, L] arrays, L the longest row rounded up to LENGTH_STEP."""
  length = -(-max(len(r["input_ids"]) for r in rows) // LENGTH_STEP) * LENGTH_STEP
  batch = {name: np.zeros((len(rows), length), dtype) for name, dtype in (
      ("input_ids", np.int32), ("attention_mask", np.bool_), ("action_mask", np.bool_))}
  for b, row in enumerate(rows):
    n = len(row["input_ids"])
    batch["input_ids"][b, :n] = row["input_ids"]
    batch["attention_mask"][b, :n] = True
    batch["action_mask"][b, :n] = row["action_mask"]
  if bc.PREFIX_FIELDS in rows[0]:
    batch[bc.PREFIX_FIELDS] = np.stack([r[bc.PREFIX_FIELDS] for r in rows])
  return batch


def repeat_rows(num_rows: int, rng: np.random.Generator, tokenizer: DialogueTokenizer
                ) -> dict[str, np.ndarray]:
  """[B, 2 REPEAT_LENGTH]: random non-special ids, repeated; the repetition is the target."""
  words = np.setdiff1d(np.arange(tokenizer.vocab_size), sorted(tokenizer.special_ids))
  run_BxL = rng.choice(words, (num_rows, REPEAT_LENGTH))
  ids_BxT = np.concatenate([run_BxL, run_BxL], axis=1).astype(np.int32)
  targets_BxT = np.zeros(ids_BxT.shape, bool)
  targets_BxT[:, REPEAT_LENGTH:] = True
  return {"input_ids": ids_BxT, "attention_mask": np.ones(ids_BxT.shape, bool),
          "action_mask": targets_BxT}


def name_turn(dialogue: dialogue_lib.Dialogue) -> str | None:
  """The first customer turn that states the customer's intent name, if any."""
  name = dialogue.context["customer"]["name"].lower()
  return next((t.text for t in dialogue.turns
               if t.speaker == "customer" and name in t.text.lower()), None)


def names_row(samples: Sequence[schema.Sample], tokenizer: DialogueTokenizer
              ) -> dict[str, np.ndarray]:
  """One "names" row: each sample's name turn, then its closing block (expected status and
  flight, the intent's name); only the tokens after `name=` are targets."""
  customer, agent = (tokenizer.speaker_token_ids[r] for r in ("customer", "agent"))
  ids: list[int] = []
  targets: list[bool] = []
  for i, sample in enumerate(samples):
    turn = name_turn(to_dialogue.sample_to_dialogue(sample, f"names:{i}"))
    if turn is None:  # The customer never said it (e.g. an agent that gave up first).
      continue
    expected = sample.expected_action
    block = action_grammar.format_action(
        schema.Action(expected.status, sample.intent.name, tuple(expected.flights[:1])))
    # Split at a word boundary, so the two encodings are the block's own tokens.
    head, _, tail = block.partition("name= ")
    context = ([customer, *tokenizer.encode(turn), tokenizer.eot_id, agent,
                *tokenizer.encode(head + "name=")])
    answer = tokenizer.encode(tail)
    ids += [*context, *answer, tokenizer.eot_id]
    targets += [False] * len(context) + [True] * len(answer) + [False]
  return {"input_ids": np.asarray(ids, np.int32), "action_mask": np.asarray(targets, bool)}


def make_batch(kind: str, num_rows: int, entropy: Sequence[int], tokenizer: DialogueTokenizer,
               max_length: int, kb_size: int) -> dict[str, np.ndarray]:
  """`num_rows` fresh rows of one kind, a pure function of `entropy`."""
  if kind == "repeat":
    return repeat_rows(num_rows, np.random.default_rng([*entropy, 2]), tokenizer)
  if kind == "names":
    samples = list(selfplay.generate_samples([*entropy, 3], num_rows * NAMES_PER_ROW, kb_size))
    return collate([names_row(samples[i:i + NAMES_PER_ROW], tokenizer)
                    for i in range(0, len(samples), NAMES_PER_ROW)])
  samples = selfplay.generate_samples([*entropy, 0], num_rows, kb_size)
  scene_rng = np.random.default_rng([*entropy, 1])
  rows = []
  for i, sample in enumerate(samples):
    dialogue_id = f"stream:{'.'.join(map(str, entropy))}:{i}"
    dialogue = (scene(sample, scene_rng, dialogue_id) if kind == "scene" else
                to_dialogue.sample_to_dialogue(sample, dialogue_id))
    rows.append(_row(dialogue, kind, tokenizer, max_length))
  return collate(rows)


def train_stream(task_config: ml_collections.ConfigDict, tokenizer: DialogueTokenizer):
  """config -> the loop's TrainData (train_loop.TrainData) for this task."""
  kinds = parse_mixture(task_config.mixture)

  def for_config(config: ml_collections.ConfigDict):
    rows = config.train.batch_size // jax.process_count()

    def from_step(start: int) -> Iterator[dict[str, np.ndarray]]:
      for step in itertools.count(start):
        yield make_batch(kinds[step % len(kinds)], rows,
                         (STREAM_TAG, config.seed, step, jax.process_index()), tokenizer,
                         task_config.max_length, task_config.kb_size)

    return from_step

  return for_config


def make_task(task_config: ml_collections.ConfigDict) -> tasks.Task:
  """The agent's prefix task (its held-out split gives the logged loss), streaming its training
  rows instead of reading the corpus."""
  parse_mixture(task_config.mixture)
  agent_config = ml_collections.ConfigDict({**task_config.to_dict(), "role": "agent"})
  agent = airdialogue.make_task(agent_config)
  return tasks.Task(
      name=agent.name, role="lm", context="prefix", tokenizer=agent.tokenizer,
      datasets=agent.datasets, dialogue_paths=agent.dialogue_paths,
      serialize_context=agent.serialize_context, include_context=False, prefix=agent.prefix,
      train_stream=train_stream(task_config, agent.tokenizer))
