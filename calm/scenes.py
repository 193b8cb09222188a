"""CALM's task pretraining inside its own run: generator scenes with the action head's targets.

A scene (domains/airdialogue/lm_task.scene) is the table prefix and the oracle
agent's whole dialogue with a customer of a drawn style and training phrasing
family, up to its closing block holding the expected action: the decision
the agent has to make, read from a dialogue like those it will meet. The dialogue LM's stream already
holds scenes for the LM; here they also carry the action head's columns
(calm/model.py: `action_position`, the expected classes, reward 1), so the
head learns the decision from as many tables as the run asks for and not
only from the corpus's few thousand.

`config.calm_data.scene_every = K`: every K-th training batch is a batch of
fresh scenes (step s with s % K == K - 1), the others the corpus's; K = 1
trains on scenes alone, 0 never.

`config.calm_data.scene_table_swap = p`: that share of a scene batch's rows
take the next row's table, their expected action solved again under it. The
generator builds each table around its intent (many flights on the intent's
dates), so a model can read the dates off the table instead of the
customer's words, and does (docs/RESULTS.md); under a swapped table only the
words say what the customer wants. Scene batches are a pure function of
(seed, step, host) under their own stream tag, like the LM's stream, so a
resumed run reads exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Iterator, Sequence

import jax
import ml_collections
import numpy as np

from calm import actions, model as calm_model, state
from data_pipelines import mdp
from data_pipelines.airdialogue import action_grammar, selfplay, solver, to_dialogue
from data_pipelines.tokenization import DialogueTokenizer
from ilql_dialogue import bc
from domains.airdialogue import task as airdialogue
from domains.airdialogue import lm_task as airdialogue_lm

STREAM_TAG = 0x5343  # "SC": scene seeds never meet the corpora's, selection's or evaluation's.
COLUMNS = ("input_ids", "attention_mask", "speaker_ids", "action_mask")


def scene_batch(num_rows: int, entropy: Sequence[int], tokenizer: DialogueTokenizer,
                max_length: int, kb_size: int, table_swap: float = 0.0) -> dict[str, np.ndarray]:
  """`num_rows` fresh scenes as a CALM batch (module docstring), a pure function of `entropy`;
  a `table_swap` share of them under the next row's table."""
  samples = list(selfplay.generate_samples([*entropy, 0], num_rows, kb_size))
  rng = np.random.default_rng([*entropy, 1])
  swapped_B = np.random.default_rng([*entropy, 2]).random(num_rows) < table_swap
  tables = [s.table for s in samples]
  for b in np.flatnonzero(swapped_B):
    table = tables[(b + 1) % num_rows]
    samples[b] = dataclasses.replace(samples[b], table=table,
                                     expected_action=solver.expected_action(samples[b].intent,
                                                                            table))
  marker = tokenizer.marker_ids[action_grammar.OPEN_TAG]
  rows = []
  for i, sample in enumerate(samples):
    dialogue = airdialogue_lm.scene(sample, rng, f"scene:{'.'.join(map(str, entropy))}:{i}")
    example = mdp.dialogue_to_example(dialogue, tokenizer, "agent", max_length,
                                      serialize_context=to_dialogue.serialize_context,
                                      include_context=False)
    hits = np.flatnonzero(example["input_ids"] == marker)
    rows.append((example, hits[0] if hits.size else -1,
                 calm_model.class_bits(actions.action_classes(sample.expected_action)),
                 airdialogue.table_fields(dialogue.context["agent"], dialogue.dialogue_id)))
  length = -(-max(len(e["input_ids"]) for e, *_ in rows) // airdialogue_lm.LENGTH_STEP
             ) * airdialogue_lm.LENGTH_STEP
  batch = {name: np.zeros((num_rows, length), mdp.TOKEN_DTYPES[name]) for name in COLUMNS}
  for b, (example, *_rest) in enumerate(rows):
    n = len(example["input_ids"])
    for name in COLUMNS:
      batch[name][b, :n] = example[name][:n]
  batch[bc.PREFIX_FIELDS] = np.stack([fields for *_, fields in rows])
  batch[calm_model.REWARD] = np.ones(num_rows, np.float32)  # Every scene acts as expected.
  batch[calm_model.ACTION_POSITION] = np.asarray([p for _, p, _, _ in rows], np.int32)
  batch[calm_model.EXPECTED_LO] = np.asarray([lo for _, _, (lo, _), _ in rows], np.uint32)
  batch[calm_model.EXPECTED_HI] = np.asarray([hi for _, _, (_, hi), _ in rows], np.uint32)
  batch.update(state.intent_columns([s.intent for s in samples]))
  return batch


def with_scenes(corpus: Callable[[int], Iterator[dict[str, np.ndarray]]],
                config: ml_collections.ConfigDict, tokenizer: DialogueTokenizer
                ) -> Callable[[int], Iterator[dict[str, np.ndarray]]]:
  """The loop's TrainData with every `scene_every`-th batch a scene batch (module docstring)."""
  every = int(config.calm_data.get("scene_every", 0))
  if every < 0:
    raise ValueError(f"config.calm_data.scene_every={every} must be >= 0")
  if every == 0:
    return corpus
  rows = config.train.batch_size // jax.process_count()

  def from_step(start: int) -> Iterator[dict[str, np.ndarray]]:
    # The corpus stream resumes at its own count of batches: those before `start`.
    batches = corpus(start - start // every) if every > 1 else iter(())
    for step in itertools.count(start):
      if step % every == every - 1:
        yield scene_batch(rows, (STREAM_TAG, config.seed, step, jax.process_index()), tokenizer,
                          config.task.max_length, config.calm_data.get("kb_size", 30),
                          config.calm_data.get("scene_table_swap", 0.0))
      else:
        yield next(batches)

  return from_step
