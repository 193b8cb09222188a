"""One Dialogue -> the token-level MDP arrays of one role.

Layout of the token sequence (the role sees only its own private context):

    [<|context|> serialize_context(role, context[role])]  <|dialogue|>
    <|speaker|> text <|eot|>   <|speaker|> text <|eot|>   ...

Actions. The trained role acts by emitting the tokens of its turn text and its
<|eot|> (so it decides when to stop talking). Its speaker token is NOT an
action: who speaks next is decided by the environment (turn taking), which
forces the speaker token, exactly as the sampler prepends it before decoding a
turn. Everything the other speaker writes is environment dynamics.

Convention (pinned by tests/test_mdp.py). Every per-token array has length T
and position i describes token i = input_ids[i]:

  * The hidden state h_i is the trunk's output at position i, having read
    tokens 0..i. Action token i is chosen in state h_{i-1}: Q(h_{i-1}, ·) scores
    input_ids[i] (docs/METHODS.md, ILQL: "Q at position t scores token t+1", with t = i-1),
    and the BC loss for token i uses the logits at position i-1. Token 0 is
    never an action.
  * rewards[i], terminal[i] belong to the transition caused by action token i.
  * next_token_index[i] and next_utterance_index[i] are POSITIONS OF HIDDEN
    STATES, so `V_BxT[b, next_index[b, i]]` is the value of the next decision
    state (the state in which the role emits its next action token):
      - token level: inside an utterance the next decision state is h_i (the
        state that emits token i+1, i.e. t+1 in state terms); after the role's
        <|eot|> it is h_{j-1}, where j is the role's next action token, so the
        other speaker's tokens (and the forced speaker token) are skipped;
      - utterance level (the whole utterance is one action): every action token
        of an utterance points at h_{j-1} for the first action token j of the
        role's next utterance.
    Both are -1 where no next state exists in the window.
  * terminal[i] is true only on the role's last action token of a dialogue
    that ended inside the window; there V_next = 0 and the outcome is added to
    its reward. An example whose window cuts off any of the role's actions is
    `truncated`: it has no terminal and its last kept actions bootstrap. A
    transition with next index -1 and terminal false (an <|eot|> whose next
    decision state lies past the window) has nothing to bootstrap from and is
    excluded from TD losses by `td_mask`; it is still a valid BC target.

Rewards: a role's own Turn.reward sits on that turn's <|eot|>; rewards of the
other speaker's turns are that speaker's and appear when building its side.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import numpy as np

from data_pipelines.dialogue import Dialogue
from data_pipelines.tokenization import DialogueTokenizer

CONTEXT_SPEAKER = 0  # speaker_ids of context / separator tokens; role k of the tokenizer gets k + 1.
NO_STATE = -1
INDEX_COLUMNS = ("next_token_index", "next_utterance_index")
TOKEN_DTYPES = {
    "input_ids": np.int32,
    "attention_mask": np.bool_,
    "speaker_ids": np.int32,
    "action_mask": np.bool_,
    "utterance_end": np.bool_,
    "rewards": np.float32,
    "terminal": np.bool_,
    "next_token_index": np.int32,
    "next_utterance_index": np.int32,
}
TOKEN_COLUMNS = tuple(TOKEN_DTYPES)

SerializeContext = Callable[[str, Mapping[str, Any]], str]


class NoActionsError(ValueError):
  """The role has no action token inside the window, so the example teaches nothing."""


def json_context(role: str, context: Mapping[str, Any]) -> str:
  del role  # The same serialization serves every role.
  return json.dumps(context, sort_keys=True, ensure_ascii=False)


def td_mask(action_mask, terminal, next_index):
  """Transitions usable for TD learning: terminal, or with a next state in the window.

  Works on numpy and jax arrays alike.
  """
  return action_mask & (terminal | (next_index >= 0))


def dialogue_to_example(
    dialogue: Dialogue,
    tokenizer: DialogueTokenizer,
    role: str,
    max_length: int,
    *,
    serialize_context: SerializeContext = json_context,
    include_context: bool = True,
) -> dict[str, Any]:
  """Token arrays of `role`'s MDP for one dialogue, cut to `max_length` tokens.

  Raises ValueError naming the dialogue and field for a role the dialogue or
  tokenizer lacks, and NoActionsError when no action of the role fits.
  """
  where = f"dialogue {dialogue.dialogue_id!r}"
  if role not in dialogue.roles:
    raise ValueError(f"{where}: field 'roles': {role!r} is not one of {list(dialogue.roles)}")
  unknown = [r for r in dialogue.roles if r not in tokenizer.speaker_token_ids]
  if unknown:
    raise ValueError(
        f"{where}: field 'roles': no speaker token for {unknown} in tokenizer roles {list(tokenizer.roles)}")
  if max_length < 2:
    raise ValueError(f"max_length={max_length}: need at least 2 tokens")
  context = dict(dialogue.context.get(role, {}))
  texts = [t.text for t in dialogue.turns]
  if include_context:
    texts.append(serialize_context(role, context))
  encoded = tokenizer.encode_batch(texts)

  ids, speakers = [], []
  if include_context:
    ids += [tokenizer.context_id, *encoded[-1]]
    speakers += [CONTEXT_SPEAKER] * (1 + len(encoded[-1]))
  ids.append(tokenizer.dialogue_id)
  speakers.append(CONTEXT_SPEAKER)
  utterances = []  # (first action position, <|eot|> position, turn reward) of the role's turns.
  for k, (turn, text_ids) in enumerate(zip(dialogue.turns, encoded)):
    if turn.speaker not in dialogue.roles:
      raise ValueError(
          f"{where}: field 'turns[{k}].speaker': {turn.speaker!r} is not one of {list(dialogue.roles)}")
    speaker = tokenizer.roles.index(turn.speaker) + 1
    start = len(ids) + 1
    ids += [tokenizer.speaker_token_ids[turn.speaker], *text_ids, tokenizer.eot_id]
    speakers += [speaker] * (2 + len(text_ids))
    if turn.speaker == role:
      utterances.append((start, len(ids) - 1, turn.reward or 0.0))

  untruncated_length = len(ids)
  length = min(untruncated_length, max_length)
  if not utterances or utterances[0][0] >= length:
    raise NoActionsError(f"{where}: role {role!r} has no action token within the first {length} tokens")

  action_mask = np.zeros(untruncated_length, np.bool_)
  utterance_end = np.zeros(untruncated_length, np.bool_)
  rewards = np.zeros(untruncated_length, np.float32)
  terminal = np.zeros(untruncated_length, np.bool_)
  next_token = np.full(untruncated_length, NO_STATE, np.int64)
  next_utterance = np.full(untruncated_length, NO_STATE, np.int64)
  for k, (start, end, reward) in enumerate(utterances):
    next_state = utterances[k + 1][0] - 1 if k + 1 < len(utterances) else NO_STATE
    action_mask[start : end + 1] = True
    utterance_end[end] = True
    rewards[end] = reward
    next_token[start:end] = np.arange(start, end)
    next_token[end] = next_state
    next_utterance[start : end + 1] = next_state
  last_action = utterances[-1][1]
  rewards[last_action] += dialogue.outcome
  terminal[last_action] = True

  cut = slice(0, length)
  next_token, next_utterance = next_token[cut], next_utterance[cut]
  next_token[next_token >= length] = NO_STATE
  next_utterance[next_utterance >= length] = NO_STATE
  return {
      "dialogue_id": dialogue.dialogue_id,
      "role": role,
      "outcome": float(dialogue.outcome),
      "context_json": json.dumps(context, sort_keys=True, ensure_ascii=False),
      "truncated": bool(last_action >= length),
      "length": length,
      "untruncated_length": untruncated_length,
      "input_ids": np.asarray(ids[:length], np.int32),
      "attention_mask": np.ones(length, np.bool_),
      "speaker_ids": np.asarray(speakers[:length], np.int32),
      "action_mask": action_mask[cut],
      "utterance_end": utterance_end[cut],
      "rewards": rewards[cut],
      "terminal": terminal[cut],
      "next_token_index": next_token.astype(np.int32),
      "next_utterance_index": next_utterance.astype(np.int32),
  }
