"""CALM's state head: the customer's intent tracked from the dialogue, the expected action solved
under it.

The 63-way action head (calm/model.py) has to learn from a state vector the
rule that picks "the cheapest flight meeting every constraint the customer
stated" out of 30 rows, which neither a linear head nor an MLP learns at the
quick model's size (docs/RESULTS.md). The state head splits the decision where
AirDialogue's systems with a knowledge base split it (e.g. AirConcierge's SQL
state tracking):

  tracking  one distribution per intent field (goal, airports, dates, price
            limit, connections, times of day, class, airline cost): what the
            dialogue has told the agent, read from the state at the
            `[action]` marker or, pooled, from every state up to it
            (`StateHead`). The only learned part; trained by the action's
            cross-entropy through the solver below and, with
            `state_weight`, by each field's own cross-entropy on rows that
            carry the intent (scenes, and the corpus: calm/data.py).
  solving   the official rules (data_pipelines/airdialogue/solver.py) applied
            to the whole posterior at once: a row is valid with probability
            prod_f P(field f accepts the row) (fields independent), the
            expected flight is the valid row with no cheaper valid row,
            no_flight has prod_r P(row r invalid), and the goal and the
            table's reservation row give book / change / cancel /
            no_reservation. With a one-hot posterior the argmax is the
            solver's expected action (tested on generated scenes); its log
            probabilities are the head's 63 logits.

So what the head cannot get wrong is the search; what it can get wrong is
what the customer said, which is the dialogue's half of the task.

The solver weighs the airports among the table's (`on_table`): the generator
(and the official one) draws a scenario's airports and every flight's from
the same three candidates, so an airport no flight serves cannot be the
customer's. The tracker is still trained on all airports: trained on the
three alone, it stayed at chance for 400 updates (docs/RESULTS.md).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from calm import actions
from data_pipelines.airdialogue import context as context_lib, schema
from ilql_dialogue.models.layers import dense, normal, param, zeros
from domains.airdialogue import task as airdialogue

FIELD = airdialogue.FIELD
NEG = -1e4  # log(0) that keeps sums and gradients finite.
# Tracked fields and their number of values. Codes follow the table's (domains/airdialogue/task.py:
# value index + 1) where the table has the field; 0 is "no constraint" for the optional ones.
TRACKED = (
    ("goal", len(schema.GOALS)),  # Index into GOALS.
    ("departure_airport", len(context_lib.AIRPORTS) + 1),
    ("return_airport", len(context_lib.AIRPORTS) + 1),
    ("departure_month", len(schema.MONTHS) + 1),
    ("departure_day", airdialogue.DAYS + 1),
    ("return_month", len(schema.MONTHS) + 1),
    ("return_day", airdialogue.DAYS + 1),
    ("max_price", len(schema.MAX_PRICES)),  # Index into MAX_PRICES.
    ("max_connections", len(schema.CONNECTION_LIMITS) + 1),
    ("departure_time", len(schema.TIMES_OF_DAY) + 1),
    ("return_time", len(schema.TIMES_OF_DAY) + 1),
    ("flight_class", len(schema.CLASSES) + 1),
    ("airline_preference", 3),  # 0 none, 1 normal-cost, 2 low-cost.
)
TRACKED_NAMES = tuple(name for name, _ in TRACKED)
# The pooled head's per-position readings a return field shares with its departure field: "LGA"
# or "18" says the same value on either leg; which mention is which leg is the attention's job.
SHARED_READINGS = {"return_airport": "departure_airport", "return_month": "departure_month",
                   "return_day": "departure_day", "return_time": "departure_time"}
COST_CLASSES = ("normal-cost", "low-cost")
READS = ("all", "others")  # What a pooled head reads: every position, or not the agent's own turns.


def _code(value, vocabulary: Sequence) -> int:
  return 0 if value is None else list(vocabulary).index(value) + 1


def intent_codes(intent: schema.Intent) -> np.ndarray:
  """int32 [len(TRACKED)]: the codes of `intent` the tracking heads are trained to read."""
  return np.asarray([
      schema.GOALS.index(intent.goal),
      _code(intent.departure_airport, context_lib.AIRPORTS),
      _code(intent.return_airport, context_lib.AIRPORTS),
      _code(intent.departure_month, schema.MONTHS),
      int(intent.departure_day),
      _code(intent.return_month, schema.MONTHS),
      int(intent.return_day),
      schema.MAX_PRICES.index(intent.max_price),
      _code(intent.max_connections, schema.CONNECTION_LIMITS),
      _code(intent.departure_time, schema.TIMES_OF_DAY),
      _code(intent.return_time, schema.TIMES_OF_DAY),
      _code(intent.flight_class, schema.CLASSES),
      _code(intent.airline_preference, COST_CLASSES),
  ], np.int32)


INTENT_COLUMNS = tuple(f"intent_{name}" for name in TRACKED_NAMES)  # One [B] int column each.


def intent_columns(intents: Sequence[schema.Intent]) -> dict[str, np.ndarray]:
  """The intents' codes as the batch columns the tracking loss reads (scalar per-example
  columns, which the loop's batching carries from a dataset as [B] arrays)."""
  codes_BxK = np.stack([intent_codes(intent) for intent in intents])
  return {name: codes_BxK[:, k] for k, name in enumerate(INTENT_COLUMNS)}


def batch_codes(batch) -> jax.Array | None:
  """codes_BxK of a batch that carries every intent column, else None."""
  if not all(name in batch for name in INTENT_COLUMNS):
    return None
  return jnp.stack([jnp.asarray(batch[name], jnp.int32) for name in INTENT_COLUMNS], axis=1)


def _log_any(log_p_BxV: jax.Array, accepts_BxPxV: jax.Array) -> jax.Array:
  """log P(the tracked value accepts the row): logsumexp of the accepting values, per row."""
  return jnp.maximum(jax.nn.logsumexp(jnp.where(accepts_BxPxV, log_p_BxV[:, None], -jnp.inf),
                                      axis=-1), NEG)


def _gather(log_p_BxV: jax.Array, code_BxP: jax.Array) -> jax.Array:
  return jnp.take_along_axis(log_p_BxV, code_BxP, axis=1)


def solve(log_p: Sequence[jax.Array], fields_BxPxF: jax.Array) -> jax.Array:
  """logits_BxA (log probabilities of the 63 actions) of the official rules under independent
  tracked posteriors `log_p` (one [B, V] per TRACKED field, log-normalized); the airports
  weighed among the table's (`on_table`)."""
  p = dict(zip(TRACKED_NAMES, on_table(log_p, fields_BxPxF)))
  f = lambda name: fields_BxPxF[..., FIELD[name]]
  is_flight_BxP = f("row_type") == airdialogue.ROW_FLIGHT
  ok = [_gather(p[name], f(name)) for name in (
      "departure_airport", "return_airport", "departure_month", "departure_day",
      "return_month", "return_day")]
  price_BxP = (f("price_bucket") - 1) * airdialogue.PRICE_STEP
  ok.append(_log_any(p["max_price"], price_BxP[..., None] <= jnp.asarray(schema.MAX_PRICES)))
  limits_V = jnp.asarray((10**9,) + schema.CONNECTION_LIMITS)  # Code 0: any number.
  ok.append(_log_any(p["max_connections"], (f("connections") - 1)[..., None] <= limits_V))
  for leg in ("departure", "return"):  # Code 0 (no preference) or the row's own time of day.
    ok.append(jnp.logaddexp(p[f"{leg}_time"][:, :1], _gather(p[f"{leg}_time"],
                                                              f(f"{leg}_time_of_day"))))
  ok.append(jnp.logaddexp(p["flight_class"][:, :1], _gather(p["flight_class"], f("class"))))
  cost_BxP = jnp.where(f("airline") <= len(schema.NORMAL_COST_AIRLINES), 1, 2)
  ok.append(jnp.logaddexp(p["airline_preference"][:, :1], _gather(p["airline_preference"],
                                                                  cost_BxP)))
  log_valid_BxP = jnp.where(is_flight_BxP, jnp.maximum(sum(ok), NEG), NEG)
  log_invalid_BxP = jnp.log(-jnp.expm1(jnp.minimum(log_valid_BxP, -1e-6)))
  # Row r is the pick when valid and no strictly cheaper flight row is.
  cheaper_BxPxP = (price_BxP[:, None, :] < price_BxP[:, :, None]) & is_flight_BxP[:, None, :]
  log_pick_BxP = log_valid_BxP + jnp.einsum("bqr,br->bq", cheaper_BxPxP.astype(jnp.float32),
                                            log_invalid_BxP)
  log_none_B = jnp.sum(jnp.where(is_flight_BxP, log_invalid_BxP, 0.0), axis=1)
  slot_BxP = jnp.where(is_flight_BxP, f("flight_slot"), 0)
  holds_BxPxN = slot_BxP[..., None] == jnp.arange(1, actions.NUM_FLIGHTS + 1)
  log_flight_BxN = jnp.max(jnp.where(holds_BxPxN, log_pick_BxP[..., None], NEG), axis=1)
  has_reservation_B = fields_BxPxF[:, -1, FIELD["flight_slot"]] > 0
  reserved_B = jnp.where(has_reservation_B, 0.0, NEG)
  unreserved_B = jnp.where(has_reservation_B, NEG, 0.0)
  book_B, change_B, cancel_B = (p["goal"][:, schema.GOALS.index(g)] for g in schema.GOALS)
  searching_B = jnp.logaddexp(book_B, change_B + reserved_B)  # Goals that look for a flight.
  return jnp.concatenate([
      book_B[:, None] + log_flight_BxN,
      (change_B + reserved_B)[:, None] + log_flight_BxN,
      (cancel_B + reserved_B)[:, None],
      (searching_B + log_none_B)[:, None],
      (jnp.logaddexp(change_B, cancel_B) + unreserved_B)[:, None],
  ], axis=1)


AIRPORT_FIELDS = ("departure_airport", "return_airport")
OFF_TABLE = -30.0  # Log-weight of an airport the table does not serve.


def on_table(log_p: Sequence[jax.Array], fields_BxPxF: jax.Array) -> list[jax.Array]:
  """The tracked posteriors with each airport field renormalized over "none" and the airports
  the table's flights serve (module docstring)."""
  is_flight_BxP = fields_BxPxF[..., FIELD["row_type"]] == airdialogue.ROW_FLIGHT
  size = len(context_lib.AIRPORTS) + 1
  served_BxV = jnp.zeros((fields_BxPxF.shape[0], size), bool).at[:, 0].set(True)
  for name in AIRPORT_FIELDS:
    codes_BxP = jnp.where(is_flight_BxP, fields_BxPxF[..., FIELD[name]], 0)
    served_BxV |= jnp.any(codes_BxP[..., None] == jnp.arange(size), axis=1)
  weight_BxV = jnp.where(served_BxV, 0.0, OFF_TABLE)
  return [jax.nn.log_softmax(x + weight_BxV, axis=-1) if name in AIRPORT_FIELDS else x
          for name, x in zip(TRACKED_NAMES, log_p)]


BLANKED = ("departure_airport", "return_airport", "departure_month", "departure_day",
           "return_month", "return_day")


def blank_table(fields_BxPxF: np.ndarray) -> np.ndarray:
  """The flight rows' BLANKED fields set to value 1: the table no longer says the intent, so
  what the tracker still believes is what the customer's words say (the generator puts many
  flights on the intent's dates, which a tracker reads when the customer has not said them)."""
  fields_BxPxF = np.array(fields_BxPxF)
  is_flight_BxP = fields_BxPxF[..., FIELD["row_type"]] == airdialogue.ROW_FLIGHT
  for name in BLANKED:
    column = fields_BxPxF[..., FIELD[name]]
    fields_BxPxF[..., FIELD[name]] = np.where(is_flight_BxP, 1, column)
  return fields_BxPxF


def marker_hidden(hidden_BxTxD: jax.Array, position_B: jax.Array) -> jax.Array:
  """hidden_BxD at each row's `[action]` marker (the first token's where it has none, -1)."""
  index_B = jnp.clip(position_B, 0, hidden_BxTxD.shape[1] - 1)
  return jnp.take_along_axis(hidden_BxTxD, index_B[:, None, None], axis=1)[:, 0]


class StateHead(nnx.Module):
  """Tracking heads, then `solve` (module docstring).

  `pooled=False` reads every field from the state at the `[action]` marker,
  one vector that in a small trunk hardly carries the airports and price limit
  (docs/RESULTS.md). `pooled=True`
  gives each field its own attention over every position up to the marker,
  each position proposing a value from its own state: P(field = v) =
  sum_t attention_t P_t(v). The pointer-generator / copy mechanism of
  dialogue state trackers (TRADE): the customer's "to MSY" makes the state at
  "MSY" propose the return airport, a local reading a small trunk can do, and
  the field's attention learns which of the dialogue's mentions to trust.
  `shared=True` gives a return field its departure field's readings
  (SHARED_READINGS), as TRADE shares its copy mechanism across slots: the
  readings are learned once, from both legs' labels.
  `reads="others"` lets the pooled fields attend only to positions outside the
  agent's own turns (`reads_BxT`, `others_reads`): the intent is what the
  customer said. Reading everything, a field copied the dates and flight
  numbers of the agent's own offers, right in the oracle's scenes and wrong
  when the learned agent offers a wrong flight (docs/RESULTS.md).
  """

  def __init__(self, cfg, *, rngs: nnx.Rngs, pooled: bool = False, shared: bool = False,
               reads: str = "all"):
    if reads not in READS:
      raise ValueError(f"state head reads={reads!r}: expected one of {READS}")
    if reads != "all" and not pooled:
      raise ValueError(f"state head reads={reads!r} needs a pooled head (head=pooled or shared)")
    self.dtype = cfg.compute_dtype
    self.pooled = pooled
    self.shared = shared and pooled
    self.reads_others = reads == "others"
    self.sizes = tuple(size for _, size in TRACKED)
    self.kernel = param(rngs, normal(cfg.init_std), (cfg.d_model, sum(self.sizes)),
                        ("embed", None), cfg.weight_dtype)
    self.bias = param(rngs, zeros, (sum(self.sizes),), (None,), cfg.weight_dtype)
    if pooled:  # One attention score per field and position; zeros: uniform at first.
      self.attend_kernel = param(rngs, zeros, (cfg.d_model, len(TRACKED)), ("embed", None),
                                 cfg.weight_dtype)
      self.attend_bias = param(rngs, zeros, (len(TRACKED),), (None,), cfg.weight_dtype)

  def _dense(self, hidden: jax.Array, kernel: nnx.Param, bias: nnx.Param) -> jax.Array:
    return dense(hidden.astype(self.dtype), kernel[...].astype(self.dtype),
                 preferred_element_type=jnp.float32) + bias[...].astype(jnp.float32)

  def tracked(self, hidden_BxTxD: jax.Array, mask_BxT: jax.Array, position_B: jax.Array,
              reads_BxT: jax.Array | None = None) -> list[jax.Array]:
    """One log-normalized [B, V] posterior per TRACKED field, read up to each row's marker
    (position_B; rows without one, -1, read their first token); with reads="others", only
    at the positions reads_BxT allows (None: every position)."""
    splits = np.cumsum(self.sizes)[:-1].tolist()
    if not self.pooled:
      hidden_BxD = marker_hidden(hidden_BxTxD, position_B)
      return [jax.nn.log_softmax(x, axis=-1)
              for x in jnp.split(self._dense(hidden_BxD, self.kernel, self.bias), splits, -1)]
    position_B = jnp.clip(position_B, 0, hidden_BxTxD.shape[1] - 1)
    seen_BxT = (jnp.arange(hidden_BxTxD.shape[1]) <= position_B[:, None]) & mask_BxT
    if self.reads_others and reads_BxT is not None:
      seen_BxT = seen_BxT & reads_BxT
    seen_BxT = seen_BxT.at[:, 0].set(True)  # A row without a marker still reads something.
    scores_BxTxK = self._dense(hidden_BxTxD, self.attend_kernel, self.attend_bias)
    log_attend_BxTxK = jax.nn.log_softmax(jnp.where(seen_BxT[..., None], scores_BxTxK, -jnp.inf),
                                          axis=1)
    values = jnp.split(self._dense(hidden_BxTxD, self.kernel, self.bias), splits, -1)
    if self.shared:
      values = [values[TRACKED_NAMES.index(SHARED_READINGS.get(name, name))]
                for name in TRACKED_NAMES]
    return [jax.nn.logsumexp(log_attend_BxTxK[..., k, None] + jax.nn.log_softmax(v_BxTxV, -1),
                             axis=1) for k, v_BxTxV in enumerate(values)]

  def __call__(self, hidden_BxTxD: jax.Array, mask_BxT: jax.Array, position_B: jax.Array,
               fields_BxPxF: jax.Array, reads_BxT: jax.Array | None = None) -> jax.Array:
    return solve(self.tracked(hidden_BxTxD, mask_BxT, position_B, reads_BxT), fields_BxPxF)


def others_reads(tokens_BxT: jax.Array, mask_BxT: jax.Array, own_id: jax.Array | int,
                 speaker_ids_K: jax.Array) -> jax.Array:
  """bool [B, T]: real positions outside the turns own_id's speaker token opens (their text
  and <|eot|>), the complement of the MDP's action_mask (data_pipelines/mdp.py) computed from
  the tokens alone, so decoding reads what training read. A turn runs to the next speaker
  token; padding carries the last one on (it is masked anyway)."""
  is_speaker_BxT = jnp.any(tokens_BxT[..., None] == jnp.asarray(speaker_ids_K), axis=-1)
  index_BxT = jnp.where(is_speaker_BxT, jnp.arange(tokens_BxT.shape[1]), -1)
  opener_BxT = jax.lax.cummax(index_BxT, axis=1)
  speaker_BxT = jnp.take_along_axis(tokens_BxT, jnp.maximum(opener_BxT, 0), axis=1)
  own_BxT = (opener_BxT >= 0) & (speaker_BxT == own_id) & ~is_speaker_BxT
  return mask_BxT & ~own_BxT


def tracking_loss(log_p: Sequence[jax.Array], codes_BxK: jax.Array, valid_B: jax.Array
                  ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Mean over fields and valid rows of -log P(true code); per-field argmax accuracy."""
  weights_B = valid_B.astype(jnp.float32)
  count = jnp.maximum(weights_B.sum(), 1.0)
  losses, metrics = [], {}
  for k, (name, log_p_BxV) in enumerate(zip(TRACKED_NAMES, log_p)):
    code_B = codes_BxK[:, k]
    losses.append(-(jnp.take_along_axis(log_p_BxV, code_B[:, None], axis=1)[:, 0]
                    * weights_B).sum() / count)
    metrics[f"state/{name}"] = ((jnp.argmax(log_p_BxV, axis=-1) == code_B) * weights_B
                                ).sum() / count
  loss = sum(losses) / len(losses)
  metrics["state/loss"] = loss
  return loss, metrics
