"""CALM planning as a party: N candidate replies, M imagined continuations each, the best one said.

At each agent turn the planner samples N candidate utterances (conditioned on reward 1), rolls
each out M times for up to H utterances (`horizon`), the one model playing both the customer
(the dynamics model) and the agent until the agent writes its action block, scores every
continuation, and says the candidate with the best mean score (ties: the first). N = 1 is
'CALM without planning': the one candidate is said, nothing is imagined.

Candidate 0 is the greedy reply (`greedy=1`, the default), the others are sampled at `temp`:
planning only replaces the plain policy's reply when the model's own rollouts score another one
higher (sampled candidates alone get the customer's name wrong, docs/RESULTS.md). With
`margin=D` a sampled candidate must score more than D above the greedy one, so a score blind to
part of success (the head does not see the name) cannot trade that part away for noise.

Action (`act`): `lm` (default) says the closing turn as the LM wrote it; `head` keeps the LM's
words and the name it copied, and takes the status and flight from the auxiliary head's argmax
at the block's `[action]` marker (calm/model.py): the head reads the whole table at once, where
the LM spells a flight number token by token; it has no name class. A block that does not parse
is said as written. The party's cache keeps what the LM wrote.

Asking (`ask=P`, act=head): before each agent turn the state head reads the dialogue so far
(at the agent's speaker token) and, unless every field the closing action needs (goal,
airports, dates) has a value it believes with probability >= P, the `[action]` marker is
forbidden for that row this turn: the LM has to say something else, which after its training
is a question. The tracker's posterior decides *whether* the agent may close, the LM *what* it
asks. From `ASK_TURNS` agent turns on the gate is open (no endless questions), and once the
agent has offered a flight or gone to search (a held-back LM has nothing left to ask there),
or once the row's context has no room left for a question, its answer and a closing
(ROOM_REPLIES): a row held past that would end without a closing block.
0: no gate.

Reading the intent with a frozen pretrained model (`reader=DIR`, act=head): the closing status
and flight come from the same solver over the posterior of a tracker on SmolLM2's frozen states
(calm/frozen_tracker.py, trained by `experiments.frozen_tracker`) instead of the CALM model's own
head; it reads the dialogue so far as plain text. The LM still writes every word; where the
reader has a name pointer (calm/frozen_tracker.NameHead) the block's name is the span of the
customer's words it points at, else the name the LM wrote.
With `blend=1` the two trackers' posteriors are multiplied field by field and renormalized (a
product of experts: each field believes what both readings allow).
With `gate=reader` (ask=P) the gate reads the frozen reader's posterior instead of the model's
own head: the reader sees the customer's words and no table, so its doubt about a field is
doubt about what the customer said (the model's head reads the dates off the table, where the
generator puts them, before the customer says them).

Choosing the question (`score=ask`, act=head, ask=P, n=N > 1): the LM alone, held back,
does not ask for what is missing; it repeats itself (docs/RESULTS.md). So the tracker also
picks *what* to ask. Each turn the LM writes N candidates (candidate 0 greedy, the others at
`temp`), the `[action]` marker forbidden in all of them where the gate holds; a held row says
the candidate whose questions (read by `customers.understand`, the scripted customers' own
hand-written reading of an agent's questions) cover the most of the tracker's doubt,
sum over the ASK_FIELDS it asks about of 1 - P(the tracker's value); ties and rows the gate
lets through say candidate 0. The LM writes every word; the tracker and a keyword reader choose
among its replies. Nothing is imagined (m and h are unused).
With `once=1` a field the agent has already asked about (its past questions read by
`customers.understand`) no longer holds the gate nor counts as doubt when a question is picked:
asking again gets the same answer, so a reader unsure of a form it never read costs one
question per field, not a question each turn until `ASK_TURNS`.
With `name=1` (gate=reader) the gate also holds while the reader's name pointer doubts that the
customer has said a name (its confidence, calm/frozen_tracker.extract_names, below P): a
customer who gives the name only when asked is asked for it before the block names someone.
With `keep=1` (score=ask) a held row whose candidates ask about none of the doubt says one that
asks something rather than one that searches, offers or closes: a search or an offer ends the
gate (Asking, above), and the next turn's candidates may ask what this turn's did not.
With `start=1` candidate j begins with the LM's (j+1)-th likeliest first token (the forbidden
ones not counted; lp.RankedStart) and goes on at `temp` (with temp=0: greedily), so the N
candidates start N different ways: sampled at T = 1 they mostly repeat the likeliest question
(its first token is peaked) or drift into garble, and none may ask for what is missing.

Score (`score`), both computed by one call (`rollout_scores`):

  reward_token  (default) log p(continuation | reward 1) - log p(continuation | reward 0) over
                the candidate and its imagined tokens: by Bayes, how much the continuation
                moves the log-odds of success. Defined for unfinished continuations too, which
                a horizon shorter than the dialogue needs.
  head          the head's probability that the action the continuation submits is the
                expected one, at its `[action]` marker; 0 when nothing is submitted within the
                horizon (with act=head: the head's largest class probability). It favours
                candidates that close early, so it loses to the greedy reply against customers
                who reveal the intent over several turns (docs/RESULTS.md).

Batching: ONE LMParty of B * R rows (R = N * M replicas of each dialogue, as in
cotraining/k_sample.py). A turn's candidates are one batched generate, replica (n, m) takes
candidate n's cache (`take_rows`), and each imagined utterance of all continuations is one more
batched generate on a copy of that cache; all scores are one jitted call that reads each
history once. Shapes stay fixed between turns (SCORE_BUCKET, FORBID_WIDTH, sampler buckets), so
nothing recompiles per turn. Roles are enforced while imagining as in a real dialogue
(forbidden_token_ids): no speaking for the other side, no customer action markers.

Spec (`make_party`): `calm:[n=N,m=M,h=H,score=S,temp=T,greedy=G,margin=D,act=A,ask=P,
reader=DIR,blend=B,gate=G,once=O,keep=K,name=A,start=S:]PATH`, PATH a
CALM workdir; options it omits come from the workdir's config.planning.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Mapping, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

from calm import actions, frozen_tracker, model as calm_model, state
from data_pipelines.airdialogue import action_grammar, customers, schema
from data_pipelines.dialogue import Turn
from domains.airdialogue.parties import AGENT, CUSTOMER
from ilql_dialogue import bc, restore
from ilql_dialogue.lm_party import LMParty, compact, forbidden_token_ids, take_rows
from ilql_dialogue.parties import make_party
from ilql_dialogue.party_spec import PartySpec
from ilql_dialogue.generation import logits_processors as lp
from ilql_dialogue.generation import sampler
from ilql_dialogue.models import copy_head
from ilql_dialogue.models.kv_cache import KVCache, init_cache
from ilql_dialogue.models.lm_loss import token_cross_entropy

SCORES = ("reward_token", "head", "ask")
ACTS = ("lm", "head")
GATES = ("words", "reader")  # What the ask gate reads: the model's head, or the frozen reader.
DEFAULTS = dict(n=1, m=1, h=6, score="reward_token", temp=1.0, greedy=1, margin=0.0, act="lm",
                ask=0.0, reader="", blend=0, gate="words", once=0, keep=0, name=0, start=0)
CONFIG_KEYS = dict(n="n", m="m", h="horizon", score="score", temp="temperature",
                   greedy="greedy_candidate", margin="margin", act="action", ask="ask",
                   reader="reader", blend="blend", gate="gate", once="ask_once",
                   keep="keep_asking", name="ask_name", start="ranked_start")
# The fields a closing action needs the customer to have said (calm/state.py TRACKED).
ASK_FIELDS = ("goal", "departure_airport", "return_airport", "departure_month", "departure_day",
              "return_month", "return_day")
# The gate's columns: ASK_FIELDS, then whether the customer has said a name (name=1; else 1).
GATE_FIELDS = ASK_FIELDS + ("name",)
ASK_TURNS = 8  # Agent turns after which the gate no longer holds the action back.
# The gate holds a row only while its context has room for this reply, the customer's answer
# and a closing reply (each budgeted max_new_tokens): a row held past that ends unclosed.
ROOM_REPLIES = 3
KEEP_BONUS = 1e-3  # keep=1: below any doubt a question covers, above none.
# What each question the customers understand (customers.understand) asks the tracker about.
ASKED_FIELDS = {customers.GOAL: ("goal",),
                customers.NAME: ("name",),
                customers.AIRPORTS: ("departure_airport", "return_airport"),
                customers.DATES: ("departure_month", "departure_day", "return_month",
                                  "return_day")}
_CANDIDATE_STREAM, _IMAGINE_STREAM = 0, 1  # SeedSequence spawn keys under a row's seed.
# LMParty's per-row records besides its cache and keys (LMParty.reset).
_ROW_FIELDS = ("generated_ids", "token_ids", "sampled", "logprobs",
               "_seen", "_last", "_open", "_ended")
SCORE_BUCKET = 64
FORBID_WIDTH = 16  # Forbidden-id tables padded to whole 16s: both roles share one decode loop.
# (the agent's speaker token id, every speaker token id): what the head may read
# (state.others_reads), traced so one compile serves every tokenizer.
Speakers = tuple[jax.Array, jax.Array]


def _seed(seed: int, stream: int, j: int) -> int:
  ss = np.random.SeedSequence(int(seed), spawn_key=(stream, j))
  return int(ss.generate_state(1, np.uint64)[0])


def _forbid(ids: Sequence[int], width: int) -> lp.ForbidTokens:
  return lp.ForbidTokens.of(list(ids) + [-1] * (width - len(ids)))


@jax.jit
def _copy(state: sampler.DecodeState) -> sampler.DecodeState:
  """A copy the imagination may donate and overwrite; the real dialogue's cache stays."""
  return jax.tree.map(jnp.copy, state)


def _repeat_rows(cache: KVCache, replicas: int) -> KVCache:
  """Each row of the cache `replicas` times in a row (every array's batch axis is its first)."""
  repeat = lambda a: jnp.repeat(a, replicas, axis=0)
  return cache.replace(k_BxKxSxH=tuple(map(repeat, cache.k_BxKxSxH)),
                       v_BxKxSxH=tuple(map(repeat, cache.v_BxKxSxH)),
                       valid_BxS=repeat(cache.valid_BxS))


@functools.partial(jax.jit, static_argnames=("replicas", "head_acts"))
def rollout_scores(model: calm_model.CALMModel, caches: tuple[KVCache, KVCache],
                   fields_BxPxF: jax.Array, history_BxT: jax.Array, history_mask_BxT: jax.Array,
                   suffix_RxS: jax.Array, suffix_mask_RxS: jax.Array,
                   action_position_R: jax.Array, action_class_R: jax.Array, speakers: Speakers,
                   *, replicas: int, head_acts: bool = False) -> tuple[jax.Array, jax.Array]:
  """(log_odds_R, head_R) of R = B * replicas rollouts (module docstring).

  Row b's history (right-padded, at least one real token) is shared by its
  `replicas` rollouts r = b * replicas + j, whose own tokens are suffix_RxS
  (the candidate, then its imagined continuation). The history is read once
  per row and reward into `caches` (two empty caches of B rows, passed in: made
  inside jit they would be constants XLA spends seconds folding), then
  every rollout's suffix is read on a copy of its row's cache: the shared
  history costs B rows, not R. log_odds_R sums log p(token | reward 1) -
  log p(token | reward 0) over the suffix; head_R is the head's probability of
  action_class_R at the suffix position action_position_R (0 where either is -1).
  """
  batch = history_BxT.shape[0]
  history_length_B = jnp.sum(history_mask_BxT, axis=1, dtype=jnp.int32)
  chex.assert_shape(suffix_RxS, (batch * replicas, None))

  def read(reward: int, cache: KVCache) -> tuple[jax.Array, jax.Array]:
    prefix_BxPxD = model.embed_prefix(fields_BxPxF, jnp.full((batch,), reward, jnp.int32))
    hidden_BxTxD, cache = model(history_BxT, bc.positions_from_mask(history_mask_BxT),
                                history_mask_BxT, cache=cache, prefix_BxPxD=prefix_BxPxD)
    last_BxD = jnp.take_along_axis(hidden_BxTxD, (history_length_B - 1)[:, None, None],
                                   axis=1)[:, 0]
    start_R = jnp.repeat(history_length_B, replicas)
    hidden_RxSxD, _ = model(suffix_RxS, sampler.positions_from_mask(suffix_mask_RxS, start_R),
                            suffix_mask_RxS, cache=_repeat_rows(cache, replicas))
    # Suffix token j is predicted from the hidden state before it: the history's last for j = 0.
    inputs_RxSxD = jnp.concatenate(
        [jnp.repeat(last_BxD, replicas, axis=0)[:, None].astype(hidden_RxSxD.dtype),
         hidden_RxSxD[:, :-1]], axis=1)
    ce_RxS, _ = token_cross_entropy(model.logits, inputs_RxSxD, suffix_RxS)
    # The head reads the whole dialogue: the history's states, then the rollout's.
    return -ce_RxS, jnp.concatenate([jnp.repeat(hidden_BxTxD, replicas, axis=0)
                                     .astype(hidden_RxSxD.dtype), hidden_RxSxD], axis=1)

  logp1_RxS, hidden_RxLxD = read(1, caches[0])
  logp0_RxS, _ = read(0, caches[1])
  log_odds_R = jnp.sum(jnp.where(suffix_mask_RxS, logp1_RxS - logp0_RxS, 0.0), axis=1)
  has_block_R = action_position_R >= 0
  mask_RxL = jnp.concatenate([jnp.repeat(history_mask_BxT, replicas, axis=0), suffix_mask_RxS],
                             axis=1)
  tokens_RxL = jnp.concatenate([jnp.repeat(history_BxT, replicas, axis=0), suffix_RxS], axis=1)
  probs_RxA = jax.nn.softmax(model.action_logits(
      hidden_RxLxD, mask_RxL, jnp.where(has_block_R, history_BxT.shape[1] + action_position_R, -1),
      jnp.repeat(fields_BxPxF, replicas, axis=0),
      state.others_reads(tokens_RxL, mask_RxL, *speakers)), axis=-1)
  chosen_R = (jnp.max(probs_RxA, axis=1) if head_acts else
              jnp.take_along_axis(probs_RxA, jnp.maximum(action_class_R, 0)[:, None], axis=1)[:, 0])
  head_R = jnp.where(has_block_R & (action_class_R >= 0), chosen_R, 0.0)
  return log_odds_R, head_R


@jax.jit
def decision_logits(model: calm_model.CALMModel, fields_BxPxF: jax.Array, tokens_BxT: jax.Array,
                    mask_BxT: jax.Array, position_B: jax.Array, speakers: Speakers) -> jax.Array:
  """logits_BxA of the action head at each row's `[action]` marker, the table conditioned on
  reward 1 as in decoding (rows without a marker, position -1, give the first token's)."""
  prefix_BxPxD = model.embed_prefix(fields_BxPxF)
  hidden_BxTxD, _ = model(tokens_BxT, bc.positions_from_mask(mask_BxT), mask_BxT,
                          prefix_BxPxD=prefix_BxPxD)
  return model.action_logits(hidden_BxTxD, mask_BxT, position_B, fields_BxPxF,
                             state.others_reads(tokens_BxT, mask_BxT, *speakers))


@jax.jit
def tracked_log_p(model: calm_model.CALMModel, fields_BxPxF: jax.Array, tokens_BxT: jax.Array,
                  mask_BxT: jax.Array, position_B: jax.Array, speakers: Speakers
                  ) -> list[jax.Array]:
  """The state head's per-field log posteriors at each row's `[action]` marker, as
  decision_logits reads them before solving."""
  hidden_BxTxD, _ = model(tokens_BxT, bc.positions_from_mask(mask_BxT), mask_BxT,
                          prefix_BxPxD=model.embed_prefix(fields_BxPxF))
  return model.action_head.tracked(hidden_BxTxD, mask_BxT, position_B,
                                   state.others_reads(tokens_BxT, mask_BxT, *speakers))


@jax.jit
def tracker_confidence(model: calm_model.CALMModel, fields_BxPxF: jax.Array, tokens_BxT: jax.Array,
                       mask_BxT: jax.Array, position_B: jax.Array, speakers: Speakers
                       ) -> jax.Array:
  """(confidence_BxK, value_BxK): for each of ASK_FIELDS, the state head's argmax value and the
  probability it gives it, reading each row's dialogue up to position_B (calm/state.py)."""
  hidden_BxTxD, _ = model(tokens_BxT, bc.positions_from_mask(mask_BxT), mask_BxT,
                          prefix_BxPxD=model.embed_prefix(fields_BxPxF))
  log_p = state.on_table(model.action_head.tracked(
      hidden_BxTxD, mask_BxT, position_B, state.others_reads(tokens_BxT, mask_BxT, *speakers)),
                         fields_BxPxF)
  asked = [log_p[state.TRACKED_NAMES.index(f)] for f in ASK_FIELDS]
  return (jnp.exp(jnp.stack([jnp.max(x, axis=-1) for x in asked], axis=1)),
          jnp.stack([jnp.argmax(x, axis=-1) for x in asked], axis=1))


def words_confidence(model: calm_model.CALMModel, fields_BxPxF: np.ndarray, tokens_BxT: jax.Array,
                     mask_BxT: jax.Array, position_B: jax.Array, speakers: Speakers) -> np.ndarray:
  """confidence_BxK over ASK_FIELDS of what the customer's words say: the tracker read twice,
  with the table and with its dates and airports blanked (state.blank_table); a field whose two
  readings differ is one the words have not pinned down (the tracker took it from the table,
  where the generator puts the intent's dates): confidence 0. Otherwise the lower of the two."""
  confidence, value = (np.asarray(x) for x in tracker_confidence(
      model, jnp.asarray(fields_BxPxF), tokens_BxT, mask_BxT, position_B, speakers))
  blank_confidence, blank_value = (np.asarray(x) for x in tracker_confidence(
      model, jnp.asarray(state.blank_table(fields_BxPxF)), tokens_BxT, mask_BxT, position_B,
      speakers))
  return np.where(value == blank_value, np.minimum(confidence, blank_confidence), 0.0)


def question_scores(candidates: Sequence[str | None], confidence_K: np.ndarray) -> np.ndarray:
  """score_N: how much of the tracker's doubt (1 - confidence, per ASK_FIELDS) the questions of
  each candidate reply cover (module docstring, Choosing the question)."""
  doubt = dict(zip(GATE_FIELDS, 1.0 - np.asarray(confidence_K, np.float64)))
  scores = np.zeros(len(candidates))
  for j, text in enumerate(candidates):
    move = customers.understand(text or "")
    if move.kind == "questions":
      scores[j] = sum(doubt.get(f, 0.0) for slot in move.slots for f in ASKED_FIELDS.get(slot, ()))
  return scores


def scoring_length(longest: int, max_len: int) -> int:
  """Histories and suffixes are scored padded to a multiple of SCORE_BUCKET: a bounded
  number of compiles (max_len / SCORE_BUCKET per axis), at most SCORE_BUCKET - 1 wasted
  positions per row (scoring is most of a planned turn's cost)."""
  return min(max_len, -(-longest // SCORE_BUCKET) * SCORE_BUCKET)


def padded(rows: Sequence[Sequence[int]], width: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
  tokens_BxT = np.full((len(rows), width), pad_id, np.int32)
  mask_BxT = np.zeros((len(rows), width), bool)
  for b, row in enumerate(rows):
    tokens_BxT[b, :len(row)], mask_BxT[b, :len(row)] = row, True
  return tokens_BxT, mask_BxT


class CALMPlanner:
  """The agent planning with its own CALM model (module docstring).

  `candidates[b]`, `scores[b]` (one per candidate) and `picked[b]` record row
  b's last turn, None where the row gave no reply or did not plan; with
  act="head", `head_actions[b]` is (the LM's action, the one said) where row b's
  last turn closed the dialogue with a block that parses. With n > 1
  the party samples candidates at `temp` (candidate 0 greedily when `greedy`)
  and imagined continuations at `temp`.
  """

  def __init__(self, party: LMParty, n: int = 1, m: int = 1, h: int = 6,
               score: str = "reward_token", temp: float = 1.0, greedy: int = 1,
               margin: float = 0.0, act: str = "lm", ask: float = 0.0,
               reader: str | frozen_tracker.FrozenTracker = "", blend: int = 0,
               gate: str = "words", once: int = 0, keep: int = 0, name: int = 0,
               start: int = 0):
    if not isinstance(party, LMParty) or party.role != AGENT:
      raise ValueError("CALM plans the agent's turns with a learned agent party (LMParty)")
    if not hasattr(party.decoder, "action_logits") or party.prefix_fields is None:
      raise ValueError(f"CALM planning needs a CALM model (calm/model.py) reading the table "
                       f"prefix, got {type(party.decoder).__name__}")
    if n < 1 or m < 1 or h < 1:
      raise ValueError(f"CALM planning: n={n}, m={m}, h={h} must be >= 1")
    if score not in SCORES:
      raise ValueError(f"CALM planning score {score!r}: expected one of {SCORES}")
    if score == "reward_token" and n > 1 and copy_head.of(party.decoder) is not None:
      raise ValueError("CALM planning score=reward_token reads the vocabulary logits alone; "
                       "a model with a copy head (config.model.copy_dim) needs score=head")
    if margin < 0 or (margin > 0 and not greedy):
      raise ValueError(f"CALM planning: margin={margin} must be >= 0, and is measured from the "
                       "greedy candidate (greedy=1)")
    if act not in ACTS:
      raise ValueError(f"CALM action {act!r}: expected one of {ACTS}")
    if not 0.0 <= ask < 1.0 or (ask and (act != "head" or (n > 1) != (score == "ask"))):
      raise ValueError(f"CALM ask={ask}: a probability in [0, 1), used with act=head, and with "
                       "n=1 (the gate alone) or score=ask and n > 1 (the tracker picks the "
                       "question)")
    if score == "ask" and not (ask and n > 1):
      raise ValueError(f"CALM score=ask picks among n > 1 candidates where the gate ask=P > 0 "
                       f"holds; got n={n}, ask={ask}")
    if reader and act != "head":
      raise ValueError("CALM reader=DIR gives the closing action's status and flight: it needs "
                       "act=head")
    if blend and (not reader or not isinstance(party.decoder.action_head, state.StateHead)):
      raise ValueError("CALM blend=1 multiplies a frozen reader's posterior (reader=DIR) with "
                       "the model's own state head's")
    if ask and not isinstance(party.decoder.action_head, state.StateHead):
      raise ValueError("CALM ask needs a state head (algorithm.head=state or pooled)")
    if gate not in GATES or (gate == "reader" and not (reader and ask)):
      raise ValueError(f"CALM gate={gate!r}: one of {GATES}; 'reader' reads the frozen reader "
                       "(reader=DIR) for the ask gate (ask=P > 0)")
    if once and not ask:
      raise ValueError("CALM once=1 releases the ask gate's fields the agent has asked about: "
                       "it needs the gate (ask=P > 0)")
    if keep and score != "ask":
      raise ValueError("CALM keep=1 prefers a question among the candidates of a held row: it "
                       "needs score=ask")
    if start and score != "ask":
      raise ValueError("CALM start=1 begins candidate j with the LM's j-th likeliest first token "
                       "for the ask gate's pick: it needs score=ask")
    # score=ask imagines nothing: one replica per candidate.
    self.m = 1 if score == "ask" else m
    self.party, self.n, self.h, self.score, self.act = party, n, h, score, act
    self.greedy, self.margin, self.ask = bool(greedy), float(margin), float(ask)
    self.reader = (frozen_tracker.FrozenTracker.load(reader) if isinstance(reader, str) and reader
                   else reader or None)
    if name and (gate != "reader" or getattr(self.reader, "name_head", True) is None):
      raise ValueError("CALM name=1 holds the gate while the reader's name pointer doubts that a "
                       "name was said: it needs gate=reader and a reader with a name pointer")
    self.blend, self.gate, self.once, self.keep = bool(blend), gate, bool(once), bool(keep)
    self.name, self.start = bool(name), bool(start)
    self.role = party.role
    self.replicas = n * self.m if n > 1 else 1
    tok = party.tokenizer
    if n > 1:
      party.sampling["temperature"] = temp
    self.sampling = dict(party.sampling)
    forbidden = {role: forbidden_token_ids(tok, role) for role in tok.roles}
    width = -(-max(map(len, forbidden.values())) // FORBID_WIDTH) * FORBID_WIDTH
    self._forbid = {role: _forbid(ids, width) for role, ids in forbidden.items()}
    # The agent's speaker token and every speaker token: the head's reads (state.others_reads).
    self._speakers = (jnp.int32(tok.speaker_token_ids[self.role]),
                      jnp.asarray(list(tok.speaker_token_ids.values()), jnp.int32))
    self._open_marker = tok.marker_ids[action_grammar.OPEN_TAG]
    self._close_marker = tok.marker_ids[action_grammar.CLOSE_TAG]
    self._batch = 0
    self.held_back = 0  # Agent turns whose action the gate held back since reset.

  def reset(self, contexts: Sequence[Mapping[str, Any]], seeds: Sequence[int]) -> None:
    if len(contexts) != len(seeds):
      raise ValueError(f"CALMPlanner.reset: {len(contexts)} contexts and {len(seeds)} seeds")
    r = self.replicas
    if self.n > 1:  # Per replica: candidate 0 (replicas 0..m-1) greedy, the others sampled.
      temp = self.sampling["temperature"]
      candidate_R = np.tile(np.arange(r) // self.m, len(seeds))
      self.party.sampling["temperature"] = np.where(
          (candidate_R == 0) & self.greedy, 0.0, temp).astype(np.float32)
    self.party.reset([c for c in contexts for _ in range(r)],
                     [_seed(s, _CANDIDATE_STREAM, j) for s in seeds for j in range(r)])
    self._keys = jax.vmap(jax.random.key)(jnp.asarray(
        [_seed(s, _IMAGINE_STREAM, j) % 2**32 for s in seeds for j in range(r)], jnp.uint32))
    self._batch = len(seeds)
    # start=1: replica j of every row starts with its j-th likeliest token (built once).
    self._ranked_start = lp.RankedStart(
        rank_B=jnp.tile(jnp.arange(r, dtype=jnp.int32), len(seeds)), width=max(FORBID_WIDTH, r))
    self._turns = np.zeros(len(seeds), np.int64)  # Agent turns each row has said.
    self.held_back = 0
    self._base_hook = self.party._batch_hook
    self.candidates: list[list[str] | None] = [None] * len(seeds)
    self.scores: list[list[float] | None] = [None] * len(seeds)
    self.picked: list[int | None] = [None] * len(seeds)
    self.head_actions: list[tuple[schema.Action, schema.Action] | None] = [None] * len(seeds)

  def load_histories(self, histories: Sequence[Sequence[Turn]]) -> None:
    """After `reset`: every row (each of its replicas) takes in its history as if it had
    played it (LMParty.load_histories), with its own turn count, so the next `respond` plans
    as lockstep play would there (party.resume). A closing turn that act=head rewrote ends
    its dialogue, so no history continues past one."""
    if len(histories) != self._batch:
      raise ValueError(f"CALMPlanner.load_histories: {len(histories)} histories for "
                       f"{self._batch} rows (reset)")
    self.party.load_histories([h for h in histories for _ in range(self.replicas)])
    self._turns = np.asarray([sum(t.speaker == self.role for t in h) for h in histories],
                             np.int64)

  def respond(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    if len(histories) != self._batch:
      raise ValueError(f"CALMPlanner.respond: {len(histories)} histories for {self._batch} rows "
                       "(reset)")
    replies = self._plan(histories)
    return self._act_from_head(replies, histories) if self.act == "head" else replies

  def _plan(self, histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    batch, r = self._batch, self.replicas
    hold_B = confidence_BxK = None
    if self.ask:
      hold_B, confidence_BxK = self._gate(histories)
    replies_R = self.party.respond([h for h in histories for _ in range(r)])
    self._turns[[h is not None for h in histories]] += 1
    self.candidates, self.scores, self.picked = [None] * batch, [None] * batch, [None] * batch
    if self.n == 1:
      return replies_R
    if self.score == "ask":
      return self._pick_question(replies_R, hold_B, confidence_BxK)
    m = self.m
    leaders_R = np.arange(batch * r) // m * m  # Replica (n, m) continues candidate n's reply.
    self._sync(leaders_R)
    live_B = np.asarray([replies_R[b * r] is not None for b in range(batch)])
    replies: list[str | None] = [None] * batch
    if not live_B.any():
      return replies
    scores_R = self._imagine(np.repeat(live_B, r))
    picks = np.arange(batch * r)
    for b in np.flatnonzero(live_B):
      by_candidate_N = scores_R[b * r:(b + 1) * r].reshape(self.n, m).mean(axis=1)
      j = int(np.argmax(by_candidate_N))
      if by_candidate_N[j] - by_candidate_N[0] <= self.margin:
        j = 0  # Not enough better than the greedy reply (ties: the first, as before).
      picks[b * r:(b + 1) * r] = b * r + j * m
      self.candidates[b] = [replies_R[b * r + i * m] for i in range(self.n)]
      self.scores[b], self.picked[b] = by_candidate_N.tolist(), j
      replies[b] = replies_R[b * r + j * m]
    self._sync(picks)
    return replies

  def _gate(self, histories: Sequence[Sequence[Turn] | None]
            ) -> tuple[np.ndarray, np.ndarray]:
    """Forbids `[action]` this turn in every live row whose tracker is not yet confident
    (module docstring, Asking), in each of its replicas; returns (hold_B, confidence_BxK)."""
    party, tok, r = self.party, self.party.tokenizer, self.replicas
    live = [b for b, h in enumerate(histories) if h is not None and not party._ended[b * r]]
    hold_B = np.zeros(self._batch, bool)
    confidence_BxK = np.ones((self._batch, len(GATE_FIELDS)))
    k = len(ASK_FIELDS)
    lengths_B = np.asarray(party._state.lengths_B)[::r]
    blocks = {b: party._new_tokens(b * r, histories[b]) for b in live}  # Tokenized once.
    gated = [b for b in live if self._turns[b] < ASK_TURNS and not self._offered(histories[b])
             and lengths_B[b] + len(blocks[b]) + ROOM_REPLIES * party.max_new_tokens
             <= party.row_limit]
    if gated and self.gate == "reader":
      read = self.reader.read([[(t.speaker, t.text) for t in histories[b]] for b in gated],
                              **({"name_confidence": True} if self.name else {}))
      read_p = read[0]
      if self.name:
        confidence_BxK[gated, k] = read[2]
      confidence_BxK[gated, :k] = np.stack(
          [np.exp(np.max(read_p[state.TRACKED_NAMES.index(f)], axis=-1)) for f in ASK_FIELDS],
          axis=1)
    elif gated:
      rows = [party.token_ids[b * r] + blocks.get(b, []) for b in range(self._batch)]
      tokens_BxT, mask_BxT = padded(
          rows, scoring_length(max(map(len, rows)), party.decoder.cfg.max_seq_len), tok.pad_id)
      position_B = np.asarray([len(row) - 1 for row in rows], np.int32)
      confidence_BxK[:, :k] = words_confidence(party.decoder, party.prefix_fields_BxPxF[::r],
                                               tokens_BxT, mask_BxT, position_B, self._speakers)
    if gated and self.once:  # A field the agent has asked about no longer holds the gate.
      confidence_BxK[gated] = np.maximum(confidence_BxK[gated],
                                         [self._asked(histories[b]) for b in gated])
    hold_B[gated] = confidence_BxK[gated].min(axis=1) < self.ask
    rows = self._batch * r
    base = np.atleast_1d(np.asarray(self._base_hook.token_ids_BxK))
    markers_Rx2 = np.where(np.repeat(hold_B, r)[:, None],
                           [[self._open_marker, self._close_marker]], -1)
    party._batch_hook = lp.ForbidTokens.of(np.concatenate(
        [np.broadcast_to(base, (rows, base.shape[-1])), markers_Rx2,
         np.full((rows, FORBID_WIDTH - 2), -1)], axis=1))
    if self.start:  # After the forbidding: ranks count the tokens this row may say.
      party._batch_hook = lp.compose(party._batch_hook, self._ranked_start)
    self.held_back += int(hold_B.sum())
    return hold_B, confidence_BxK

  def _offered(self, history: Sequence[Turn]) -> bool:
    """Whether the agent has already offered a flight or gone to search: past that point a
    held-back LM has nothing left to ask (module docstring, Asking)."""
    return any(t.speaker == self.role and customers.understand(t.text).kind in ("proposal", "wait")
               for t in history)

  def _asked(self, history: Sequence[Turn]) -> np.ndarray:
    """asked_K: 1 for each GATE_FIELDS field the agent's questions so far have asked about (read
    by `customers.understand`, as the customers read them), else 0 (module docstring, once)."""
    asked = {f for t in history if t.speaker == self.role
             for move in [customers.understand(t.text)] if move.kind == "questions"
             for slot in move.slots for f in ASKED_FIELDS.get(slot, ())}
    return np.asarray([f in asked for f in GATE_FIELDS], np.float64)

  def _pick_question(self, replies_R: list[str | None], hold_B: np.ndarray,
                     confidence_BxK: np.ndarray) -> list[str | None]:
    """score=ask: each held row says its candidate that asks about most of the tracker's
    doubt, every other row its greedy candidate 0 (module docstring)."""
    batch, r = self._batch, self.replicas
    replies: list[str | None] = [None] * batch
    picks = np.arange(batch * r) // r * r
    for b in range(batch):
      if replies_R[b * r] is None:
        continue
      self.candidates[b] = replies_R[b * r:(b + 1) * r]
      scores_N = (question_scores(self.candidates[b], confidence_BxK[b]) if hold_B[b]
                  else np.zeros(r))
      if hold_B[b] and self.keep:  # Ties: a question before a search, an offer or a close.
        scores_N += KEEP_BONUS * np.asarray(
            [customers.understand(c or "").kind == "questions" for c in self.candidates[b]])
      j = int(np.argmax(scores_N))  # Ties: the first, the greedy candidate.
      self.scores[b], self.picked[b] = scores_N.tolist(), j
      picks[b * r:(b + 1) * r] = b * r + j
      replies[b] = replies_R[b * r + j]
    self._sync(picks)
    return replies

  def _act_from_head(self, replies: list[str | None],
                     histories: Sequence[Sequence[Turn] | None]) -> list[str | None]:
    """`replies` with each parsed action block's status and flight the head's, or with
    `reader` the frozen tracker's (module docstring). The model's head reads every row, acting
    or not, so the shapes are the batch's; the frozen tracker reads the acting rows."""
    party, tok, r = self.party, self.party.tokenizer, self.replicas
    self.head_actions = [None] * self._batch
    said: dict[int, schema.Action] = {}
    position_B = np.full(self._batch, -1, np.int32)
    for b, text in enumerate(replies):
      ids = party.generated_ids[b * r][-1] if text is not None else []
      if self._open_marker not in ids:
        continue
      try:
        said[b] = action_grammar.parse_action(text)
      except action_grammar.ActionParseError:
        continue
      position_B[b] = len(party.token_ids[b * r]) - len(ids) + ids.index(self._open_marker)
    if not said:
      return replies
    rows = [party.token_ids[b * r] for b in range(self._batch)]
    tokens_BxT, mask_BxT = padded(
        rows, scoring_length(max(map(len, rows)), party.decoder.cfg.max_seq_len), tok.pad_id)
    fields_BxPxF = jnp.asarray(party.prefix_fields_BxPxF[::r])
    names: dict[int, str | None] = {}
    if self.reader is None:
      logits_BxA = decision_logits(party.decoder, fields_BxPxF, tokens_BxT, mask_BxT, position_B,
                                   self._speakers)
      class_B = np.asarray(jnp.argmax(logits_BxA, axis=-1))
    else:
      acting = np.asarray(sorted(said))
      read_p, read_names = self.reader.read(
          [[(t.speaker, t.text) for t in histories[b] or ()] for b in acting])
      names = dict(zip(acting.tolist(), read_names))
      log_p = [jnp.asarray(x) for x in read_p]
      if self.blend:  # The model reads every row, as decision_logits does: the batch's shapes.
        own = tracked_log_p(party.decoder, fields_BxPxF, tokens_BxT, mask_BxT, position_B,
                            self._speakers)
        log_p = [jax.nn.log_softmax(x + y[acting], axis=-1) for x, y in zip(log_p, own)]
      class_B = np.zeros(self._batch, np.int64)
      class_B[acting] = np.asarray(jnp.argmax(state.solve(log_p, fields_BxPxF[acting]), axis=-1))
    replies = list(replies)
    for b, action in said.items():
      chosen = actions.class_action(int(class_B[b]), name=names.get(b) or action.name)
      replies[b] = action_grammar.replace_action(replies[b], chosen)
      self.head_actions[b] = (action, chosen)
      for i in range(b * r, (b + 1) * r):  # The party checks the next history against it.
        party._last[i] = replies[b]
    return replies

  def _sync(self, src_R: np.ndarray) -> None:
    """Replica i takes over replica src_R[i]: cache, positions and records."""
    party = self.party
    if (src_R == np.arange(len(src_R))).all():
      return
    party._state = take_rows(party._state, jnp.asarray(src_R, jnp.int32))
    for name in _ROW_FIELDS:
      rows = getattr(party, name)
      setattr(party, name, [copy.deepcopy(rows[s]) for s in src_R])

  def _imagine(self, live_R: np.ndarray) -> np.ndarray:
    """Every replica's continuation of its candidate, played to the end or the horizon by the
    model on both sides; returns each one's score."""
    party, tok = self.party, self.party.tokenizer
    model, max_new = party.decoder, party.max_new_tokens
    rows = len(live_R)
    state = _copy(party._state)
    imagined = [[] for _ in range(rows)]
    is_open = np.asarray(party._open, bool)
    done_R = ~live_R | np.asarray(
        [self._open_marker in ids[-1] if ids else False for ids in party.generated_ids])
    speakers = (CUSTOMER, AGENT)
    for step in range(self.h):
      speaker = speakers[step % 2]
      lengths_R = np.asarray(state.lengths_B)
      done_R |= lengths_R + 2 + max_new > party.row_limit
      active_R = ~done_R
      if not active_R.any():
        break
      block_Rx2 = np.stack([np.where(is_open, tok.eot_id, tok.pad_id),
                            np.full(rows, tok.speaker_token_ids[speaker])], axis=1)
      mask_Rx2 = np.stack([is_open & active_R, active_R], axis=1)
      if int(state.cache.index) + 2 + max_new > state.cache.max_len:
        state = compact(state)
      state = sampler.append(model, state, block_Rx2.astype(np.int32), mask_Rx2)
      params = sampler.SamplingParams.make(
          rows, max_new_tokens=np.where(active_R, max_new, 0), stop_tokens=[tok.eot_id],
          **self.sampling)
      key = sampler.fold_in(sampler.fold_in(self._keys, np.repeat(self._turns, self.replicas)),
                            step)
      state, tokens_RxN, _, num_R = sampler.generate(
          model, state, params, key, max_new_tokens=max_new, pad_id=tok.pad_id,
          hook=self._forbid[speaker])
      tokens_RxN, num_R = jax.device_get((tokens_RxN, num_R))
      for i in np.flatnonzero(active_R):
        ids = tokens_RxN[i, :num_R[i]].tolist()
        imagined[i] += block_Rx2[i][mask_Rx2[i]].tolist() + ids
        is_open[i] = not (ids and ids[-1] == tok.eot_id)
        if speaker == AGENT and self._open_marker in ids:
          done_R[i] = True  # The agent acted: the imagined dialogue is over.
    log_odds_R, head_R = self._score(imagined)
    return np.where(live_R, head_R if self.score == "head" else log_odds_R, -np.inf)

  def _score(self, imagined: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(log_odds_R, head_R) of every replica: its candidate and imagined tokens after the
    history its row's replicas share."""
    party, tok, r = self.party, self.party.tokenizer, self.replicas
    cfg = party.decoder.cfg
    candidates = [ids[-1] if ids else [] for ids in party.generated_ids]
    leaders = range(0, len(imagined), r)
    histories = [party.token_ids[i][:len(party.token_ids[i]) - len(candidates[i])]
                 for i in leaders]
    suffixes = [candidates[i] + imagined[i] for i in range(len(imagined))]
    history_BxT, history_mask_BxT = padded(
        histories, scoring_length(max(map(len, histories)), cfg.max_seq_len), tok.pad_id)
    suffix_RxS, suffix_mask_RxS = padded(
        suffixes, scoring_length(max(map(len, suffixes)), cfg.max_seq_len), tok.pad_id)
    position_R, class_R = np.asarray([self._submitted(x) for x in suffixes], np.int32).T
    slots = cfg.prefix_num_rows + history_BxT.shape[1] + suffix_RxS.shape[1]
    caches = tuple(init_cache(cfg, len(histories), slots) for _ in range(2))
    log_odds_R, head_R = rollout_scores(
        party.decoder, caches, jnp.asarray(party.prefix_fields_BxPxF[::r]), history_BxT,
        history_mask_BxT, suffix_RxS, suffix_mask_RxS, position_R, class_R, self._speakers,
        replicas=r, head_acts=self.act == "head")
    return np.asarray(log_odds_R, np.float64), np.asarray(head_R, np.float64)

  def _submitted(self, seq: list[int]) -> tuple[int, int]:
    """(position of the first `[action]` marker in `seq`, the class of the action it opens);
    -1 for what is missing or does not parse."""
    tok = self.party.tokenizer
    hits = [i for i, t in enumerate(seq) if t == self._open_marker]
    if not hits:
      return -1, -1
    end = next((i for i in range(hits[0], len(seq)) if seq[i] == tok.eot_id), len(seq))
    try:
      action = action_grammar.parse_action(tok.decode(seq[hits[0]:end]))
      return hits[0], actions.action_class(action)
    except (action_grammar.ActionParseError, ValueError):
      return hits[0], -1


OPTIONS = {"n": int, "m": int, "h": int, "score": str, "temp": float, "greedy": int,
           "margin": float, "act": str, "ask": float, "reader": str, "blend": int,
           "gate": str, "once": int, "keep": int, "name": int, "start": int}


def from_spec(spec: PartySpec, role: str, **lm_options: Any) -> CALMPlanner:
  """The CALMPlanner a `calm:` spec names; options it omits come from the workdir's
  config.planning, then DEFAULTS; `lm_options` go to the inner LMParty."""
  party = make_party(spec.inner, role, **lm_options)
  checkpoint = spec.inner.checkpoint
  if not isinstance(party, LMParty) or checkpoint is None:
    raise ValueError(f"party spec {spec}: CALM planning needs a checkpoint workdir, "
                     f"{spec.inner} is a {type(party).__name__}")
  planning = restore.read_config(checkpoint.target).get("planning") or {}
  merged = {k: spec.options.get(k, planning.get(CONFIG_KEYS[k], default))
            for k, default in DEFAULTS.items()}
  return CALMPlanner(party, **merged)
