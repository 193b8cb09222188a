"""Offline evaluation of a trained role on held-out dialogues.

    python -m experiments.offline_eval --workdir=RUN_DIR [--split=eval] [--step=N]
        [--max_dialogues=N] [--output_dir=DIR]

Restores the model of a run made by experiments/train.py (its config.json
names the task) and reports, on the split's MDP dataset and dialogues:

  * loss, perplexity and token accuracy of the role's tokens, weighted by
    token over the whole split (not a mean of batch means);
  * the task's final-turn metrics: each held-out dialogue's last turn of the
    role decoded greedily from the real history before it (AirDialogue agent:
    the final action; P4G persuadee: the stated donation). Dialogues whose
    prompt plus `max_new_tokens` exceeds the model's positions are counted as
    `final_turn/too_long`, not silently dropped.
  * the field's text metrics of the role's next utterances: every turn of the
    role decoded greedily from the true history before it, against the
    held-out turn: corpus BLEU as the official AirDialogue toolkit reports it,
    and distinct-1/2 of decodings and held-out turns (ilql_dialogue/
    text_metrics.py). Action blocks are left out of both sides: the official
    dialogues carry the action apart from the words.

Writes {output_dir or RUN_DIR}/offline_eval_{split}_step{N}.json. `evaluate_run` is the entry
point for the pipeline; `evaluate` works on any model with the LM contract
(a BC model, or an ILQL model's policy).
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from data_pipelines import batching, mdp
from data_pipelines.airdialogue import action_grammar
from data_pipelines.dialogue import Dialogue, read_jsonl
from ilql_dialogue import bc, sharding, tasks, text_metrics, value_guidance
from ilql_dialogue import restore
from ilql_dialogue.generation import sampler
from ilql_dialogue.value_heads import ILQLModel

NUM_SAMPLES = 5  # Decoded turns written next to the metrics, for a human to read.


def default_config() -> ml_collections.ConfigDict:
  """config.offline_eval when a run's config has none."""
  return ml_collections.ConfigDict(dict(
      batch_size=16,  # Rows per decoding batch.
      max_new_tokens=64,  # Longest final turn decoded.
      max_dialogues=0,  # Held-out dialogues decoded; 0 = all.
      max_batches=0,  # Batches of the split for loss / perplexity; 0 = all.
  ))


@functools.partial(jax.jit, static_argnums=0)
def _token_sums(graphdef, state, batch):
  model = nnx.merge(graphdef, state)
  loss, metrics = bc.BC().loss(model, batch, None)
  count = (batch["action_mask"][:, 1:] & batch["attention_mask"][:, 1:]).sum()
  return jnp.stack([loss * count, metrics["token_accuracy"] * count, count.astype(jnp.float32)])


def token_metrics(model: nnx.Module, task: tasks.Task, config: ml_collections.ConfigDict,
                  split: str) -> dict[str, float]:
  graphdef, state = nnx.split(model)
  sums = [_token_sums(graphdef, state, batch)
          for batch in tasks.eval_batches(task, config, split, config.offline_eval.max_batches)]
  ce_sum, correct, count = np.sum(jax.device_get(sums), axis=0)
  return {"loss": float(ce_sum / count), "perplexity": float(np.exp(ce_sum / count)),
          "token_accuracy": float(correct / count), "tokens": int(count)}


def turn_prompts(dialogue: Dialogue, task: tasks.Task) -> list[np.ndarray]:
  """Token ids of the history before each of the role's turns, in order, each ending
  with the role's speaker token.

  Built with the MDP builder itself (no window), so the prompts are laid out
  exactly like the training sequences. Raises mdp.NoActionsError when the
  role never speaks.
  """
  example = mdp.dialogue_to_example(
      dialogue, task.tokenizer, task.role, 2**31 - 1, serialize_context=task.serialize_context,
      include_context=task.include_context)
  actions = np.flatnonzero(example["action_mask"])
  ends = np.flatnonzero(example["utterance_end"])
  starts = [actions[0]] + [actions[actions > end][0] for end in ends[:-1]]
  return [example["input_ids"][:start] for start in starts]


def final_turn_prompt(dialogue: Dialogue, task: tasks.Task, utterance: int = -1) -> np.ndarray:
  """The prompt of the role's `utterance`-th turn (default: its last); see `turn_prompts`."""
  return turn_prompts(dialogue, task)[utterance]


def _left_pad(prompts: Sequence[np.ndarray], length: int, pad_id: int):
  tokens_BxT = np.full((len(prompts), length), pad_id, np.int32)
  mask_BxT = np.zeros((len(prompts), length), bool)
  for b, ids in enumerate(prompts):
    tokens_BxT[b, length - len(ids):] = ids
    mask_BxT[b, length - len(ids):] = True
  return tokens_BxT, mask_BxT


def decode_final_turns(model: nnx.Module, task: tasks.Task, dialogues: Sequence[Dialogue],
                       prompts: Sequence[np.ndarray], batch_size: int,
                       max_new_tokens: int) -> list[str]:
  """Greedy decodings of each prompt's next turn, up to and without its <|eot|>.

  Prompts are sorted by length and left-padded to a power-of-two bucket, so
  the decoder compiles once per bucket; the last batch is filled with rows
  that generate nothing.
  """
  tok = task.tokenizer
  order = np.argsort([len(p) for p in prompts], kind="stable")
  bounds = batching.bucket_boundaries(max(len(p) for p in prompts))
  num_rows = 0 if task.prefix is None else task.prefix.num_rows
  out: list[str] = [""] * len(prompts)
  for first in range(0, len(order), batch_size):
    rows = order[first:first + batch_size]
    length = bounds[np.searchsorted(bounds, len(prompts[rows[-1]]))]
    fill = [rows[0]] * (batch_size - len(rows))
    tokens_BxT, mask_BxT = _left_pad([prompts[i] for i in [*rows, *fill]], length, tok.pad_id)
    prefix = {}
    if task.prefix is not None:
      fields_BxPxF = np.stack([task.prefix.fields(dialogues[i].context.get(task.role, {}),
                                                  f"dialogue {dialogues[i].dialogue_id!r}")
                               for i in [*rows, *fill]])
      prefix = {"prefix_BxPxD": model.embed_prefix(jnp.asarray(fields_BxPxF))}
    state = sampler.prefill(model, tokens_BxT, mask_BxT,
                            max_len=num_rows + length + max_new_tokens, **prefix)
    params = sampler.SamplingParams.make(
        batch_size, max_new_tokens=[max_new_tokens] * len(rows) + [0] * len(fill),
        temperature=0.0, stop_tokens=[tok.eot_id])
    _, new_BxN, _, lengths_B = sampler.generate(
        model, state, params, jax.random.key(0), max_new_tokens=max_new_tokens, pad_id=tok.pad_id)
    new_BxN, lengths_B = jax.device_get((new_BxN, lengths_B))
    for b, i in enumerate(rows):
      ids = new_BxN[b, :lengths_B[b]].tolist()
      out[i] = tok.decode(ids[:-1] if ids and ids[-1] == tok.eot_id else ids)
  return out


def final_turn_metrics(model: nnx.Module, task: tasks.Task, config: ml_collections.ConfigDict,
                       split: str) -> dict[str, Any]:
  """The task's metrics on greedy decodings of the role's last turn of held-out dialogues."""
  settings = config.offline_eval
  dialogues, prompts = [], []
  no_turn = too_long = 0
  for dialogue in read_jsonl(task.dialogue_paths[split]):
    if settings.max_dialogues and len(dialogues) + no_turn + too_long >= settings.max_dialogues:
      break
    try:
      prompt = final_turn_prompt(dialogue, task)
    except mdp.NoActionsError:
      no_turn += 1
      continue
    if len(prompt) + settings.max_new_tokens > model.cfg.max_seq_len:
      too_long += 1
      continue
    dialogues.append(dialogue)
    prompts.append(prompt)
  counts = {"final_turn/evaluated": len(dialogues), "final_turn/no_turn": no_turn,
            "final_turn/too_long": too_long}
  if not dialogues:
    return counts
  decoded = decode_final_turns(model, task, dialogues, prompts, settings.batch_size,
                               settings.max_new_tokens)
  samples = [{"dialogue_id": d.dialogue_id, "decoded": text,
              "reference": [t.text for t in d.turns if t.speaker == task.role][-1]}
             for d, text in zip(dialogues[:NUM_SAMPLES], decoded)]
  return {**counts, **task.final_turn_metrics(dialogues, decoded), "samples": samples}


def spoken_text(utterance: str) -> str:
  """What an utterance says in words: without its action block (AirDialogue's agent),
  which the official dialogues keep apart from the text."""
  return action_grammar.strip_action(utterance)


def next_utterance_metrics(model: nnx.Module, task: tasks.Task,
                           config: ml_collections.ConfigDict, split: str) -> dict[str, Any]:
  """BLEU and distinct-1/2 of greedy decodings of every role turn of held-out dialogues.

  This is the official toolkit's inference task restricted to one role (its
  per-role `bleu:all` score): each turn predicted from the true history
  before it, all turns scored as one corpus. Turns whose prompt plus
  `max_new_tokens` exceeds the model's positions are counted as
  `next_utterance/too_long`; dialogues where the role does not speak are
  skipped, so a task of no speaking role (the dialogue LM) reports counts only.
  """
  settings = config.offline_eval
  turn_dialogues: list[Dialogue] = []
  prompts: list[np.ndarray] = []
  references: list[str] = []
  read = too_long = 0
  for dialogue in read_jsonl(task.dialogue_paths[split]):
    if settings.max_dialogues and read >= settings.max_dialogues:
      break
    read += 1
    if task.role not in dialogue.roles:
      continue
    try:
      dialogue_prompts = turn_prompts(dialogue, task)
    except mdp.NoActionsError:
      continue
    texts = [t.text for t in dialogue.turns if t.speaker == task.role]
    if len(texts) != len(dialogue_prompts):
      raise ValueError(f"dialogue {dialogue.dialogue_id!r}: {len(texts)} {task.role} turns but "
                       f"{len(dialogue_prompts)} {task.role} utterances in its MDP example")
    for prompt, text in zip(dialogue_prompts, texts):
      if len(prompt) + settings.max_new_tokens > model.cfg.max_seq_len:
        too_long += 1
        continue
      turn_dialogues.append(dialogue)
      prompts.append(prompt)
      references.append(spoken_text(text))
  counts = {"next_utterance/dialogues": read, "next_utterance/evaluated": len(prompts),
            "next_utterance/too_long": too_long}
  if not prompts:
    return counts
  decoded = [spoken_text(text) for text in decode_final_turns(
      model, task, turn_dialogues, prompts, settings.batch_size, settings.max_new_tokens)]
  return {**counts,
          "next_utterance/bleu": text_metrics.corpus_bleu(decoded, references),
          **{f"next_utterance/distinct_{n}": text_metrics.distinct_n(decoded, n) for n in (1, 2)},
          **{f"next_utterance/reference_distinct_{n}": text_metrics.distinct_n(references, n)
             for n in (1, 2)}}


def evaluate(model: nnx.Module, task: tasks.Task, config: ml_collections.ConfigDict,
             split: str = "eval") -> dict[str, Any]:
  """All offline metrics of `model` (the LM contract; a PrefixLM for a prefix task)."""
  if "offline_eval" not in config:
    with config.unlocked():
      config.offline_eval = default_config()
  metrics = {"task": task.name, "role": task.role, "context": task.context, "split": split,
             **token_metrics(model, task, config, split)}
  if task.final_turn_metrics is not None:
    metrics.update(final_turn_metrics(model, task, config, split))
  metrics.update(next_utterance_metrics(model, task, config, split))
  return metrics


def restore_model(workdir: str, step: int | None = None):
  """(config, task, model, step) of a run of experiments/train.py: checkpoint `step`,
  by default the run's selected best (else its latest). The model is the
  policy LM (an ILQL or MC run's decoding trunk)."""
  config = restore.read_config(workdir)
  if "task" not in config:
    raise ValueError(f"{workdir}/config.json: field 'task': missing; offline evaluation needs a "
                     "task config (experiments/configs/bc_*.py)")
  task = tasks.make_task(config)
  model, step = restore.restore_model(workdir, config, step)
  if isinstance(model, ILQLModel):
    model = value_guidance.decoding_model(model)
  return config, task, model, step


def evaluate_run(workdir: str, split: str = "eval", step: int | None = None,
                 overrides: dict[str, Any] | None = None,
                 output_dir: str | None = None) -> dict[str, Any]:
  """Evaluates a run's checkpoint (default: the selected, else the latest); writes JSON
  into `output_dir` (default: the run's workdir)."""
  config, task, model, step = restore_model(workdir, step)
  if "offline_eval" not in config:
    with config.unlocked():
      config.offline_eval = default_config()
  config.offline_eval.update(overrides or {})
  mesh = sharding.make_mesh(**config.mesh)
  with sharding.mesh_context(mesh):
    metrics = {"step": step, **evaluate(model, task, config, split)}
  output_dir = output_dir or workdir
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, f"offline_eval_{split}_step{step}.json"), "w") as f:
    json.dump(metrics, f, indent=2)
  return metrics
