"""CALM planning: the reward-token score ranks a successful continuation above a failed one, the
planner says the candidate its continuations score best, plays whole dialogues with N x M
rollouts in batched calls without recompiling per turn, and its spec parses."""

import os
import types

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import test_calm_model as toy
from calm import actions, model as calm_model, planning, state
from data_pipelines.airdialogue import action_grammar, schema
from data_pipelines.dialogue import Turn
from data_pipelines.tokenization import load_tokenizer
from domains.airdialogue import environment as airdialogue_env
from domains.airdialogue import task as airdialogue
from domains.airdialogue.parties import AGENT, CUSTOMER
from experiments.configs import quickstart
from ilql_dialogue import party_spec
from ilql_dialogue.generation import sampler
from ilql_dialogue.lm_party import LMParty
from ilql_dialogue.models.kv_cache import init_cache
from ilql_dialogue.parties import make_party
from workflows import quickstart as pipeline_lib

# The toy model's agent speaker token and both speaker tokens (planning.Speakers).
TOY_SPEAKERS = (jnp.int32(toy.AGENT), jnp.asarray([toy.CUSTOMER, toy.AGENT], jnp.int32))
reward_model = toy.reward_model  # The toy model trained once for this file's tests (read only).


def test_reward_token_score_ranks_the_successful_continuation_first(reward_model):
  model = reward_model
  batch = toy.reward_batch(np.random.default_rng(2), rows=1)
  history_BxT = batch["input_ids"][:, :5]  # ... AGENT; then two continuations of it.
  suffix_RxS = np.asarray([[toy.GOOD, toy.EOT], [toy.BAD, toy.EOT]], np.int32)
  slots = model.cfg.prefix_num_rows + history_BxT.shape[1] + suffix_RxS.shape[1]
  caches = tuple(init_cache(model.cfg, 1, slots) for _ in range(2))
  log_odds_R, head_R = planning.rollout_scores(
      model, caches, jnp.asarray(batch["prefix_fields"]), history_BxT,
      np.ones_like(history_BxT, bool), suffix_RxS, np.ones_like(suffix_RxS, bool),
      np.full(2, -1, np.int32), np.full(2, -1, np.int32), TOY_SPEAKERS, replicas=2)
  assert log_odds_R[0] > 1.0 > -1.0 > log_odds_R[1], log_odds_R
  np.testing.assert_array_equal(head_R, 0.0)  # No action block: the head scores nothing.


def test_head_score_of_a_head_acting_agent_is_the_head_probability_of_its_own_action(
    reward_model):
  """Scored under every class in turn, one continuation's head scores are the head's
  distribution (they sum to 1); a head-acting agent submits the argmax, so each scores its max."""
  model = reward_model
  batch = toy.reward_batch(np.random.default_rng(2), rows=1)
  history_BxT = batch["input_ids"][:, :5]
  n = actions.NUM_ACTIONS + 1  # Every class, then a block that does not parse (class -1).
  suffix_RxS = np.tile(np.asarray([[toy.GOOD, toy.EOT]], np.int32), (n, 1))
  slots = model.cfg.prefix_num_rows + history_BxT.shape[1] + suffix_RxS.shape[1]
  scores = {}
  for head_acts in (False, True):
    caches = tuple(init_cache(model.cfg, 1, slots) for _ in range(2))
    class_R = np.arange(n, dtype=np.int32)
    class_R[-1] = -1
    _, scores[head_acts] = planning.rollout_scores(
        model, caches, jnp.asarray(batch["prefix_fields"]), history_BxT,
        np.ones_like(history_BxT, bool), suffix_RxS, np.ones_like(suffix_RxS, bool),
        np.zeros(n, np.int32), class_R, TOY_SPEAKERS, replicas=n, head_acts=head_acts)
  by_class, own = np.asarray(scores[False]), np.asarray(scores[True])
  assert by_class[-1] == own[-1] == 0.0  # A block that does not parse scores 0 either way.
  np.testing.assert_allclose(by_class.sum(), 1.0, rtol=1e-5)
  np.testing.assert_allclose(own[:-1], by_class.max(), rtol=1e-5)
  assert by_class.max() > 1.0 / actions.NUM_ACTIONS


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("root"))
  config = quickstart.get_config()
  config.airdialogue.update(train_dialogues=8, eval_dialogues=2)
  config.tokenizer.vocab_size = 400
  paths = pipeline_lib.generate_airdialogue(config, root)
  pipeline_lib.train_tokenizer(config, paths["train"], os.path.join(root, "tokenizer"))
  return load_tokenizer(os.path.join(root, "tokenizer"))


def untrained_party(tokenizer, max_new_tokens=6, copy_dim=0):
  c = toy._tiny_config(vocab=-(-tokenizer.vocab_size // 128) * 128)
  c.model.update(max_seq_len=256, copy_dim=copy_dim)
  model = calm_model.CALM.from_config(c).init(c, nnx.Rngs(0))
  return LMParty(model, tokenizer, AGENT, include_context=False,
                            prefix_fields=airdialogue.table_fields, max_new_tokens=max_new_tokens,
                            max_positions=256, temperature=1.0)


def state_head_party(tokenizer):
  """An untrained CALM agent party with a state head (the gate reads one)."""
  c = toy._tiny_config(vocab=-(-tokenizer.vocab_size // 128) * 128)
  c.model.max_seq_len = 256
  c.algorithm.head = "shared"
  model = calm_model.CALM.from_config(c).init(c, nnx.Rngs(0))
  return LMParty(model, tokenizer, AGENT, include_context=False,
                 prefix_fields=airdialogue.table_fields, max_new_tokens=6, max_positions=256)


def _play(agent, num_dialogues=2, max_turns=6):
  scenarios = airdialogue_env.make_scenarios(1000, num_dialogues, 30)
  customer = make_party("scripted:volunteer", CUSTOMER)
  return list(airdialogue_env.run_dialogues(agent, customer, scenarios, batch_size=num_dialogues,
                                    max_turns=max_turns, seed=1000))


def _assert_said(planner, results, picked):
  """Every row picked candidate `picked` and said it as its last agent turn."""
  assert planner.picked == [picked] * len(results)
  for b, result in enumerate(results):
    agent_turns = [t.text for t in result.turns if t.speaker == AGENT]
    assert agent_turns[-1] == planner.candidates[b][picked]


def test_planner_says_the_candidate_with_the_best_mean_score(tokenizer, monkeypatch):
  planner = planning.CALMPlanner(untrained_party(tokenizer), n=3, m=2, h=2)
  preferred = 1
  seen = []

  def score(self, imagined):  # Candidate n's continuations score n == preferred, others less.
    candidate_R = np.arange(len(imagined)) % self.replicas // self.m
    seen.append([len(x) > 0 for x in imagined])
    value_R = np.where(candidate_R == preferred, 1.0, -1.0) + 0.1 * (np.arange(len(imagined)) % 2)
    return value_R, np.zeros(len(imagined))

  monkeypatch.setattr(planning.CALMPlanner, "_score", score)
  results = _play(planner, max_turns=2)
  _assert_said(planner, results, preferred)
  for b in range(len(results)):
    r = planner.replicas
    ids = planner.party.token_ids[b * r:(b + 1) * r]
    assert all(x == ids[0] for x in ids)  # Every replica continues the dialogue that was played.
  assert any(any(row) for row in seen)  # The continuations were imagined.


@pytest.mark.parametrize("margin,picked", [(0.01, 1), (0.1, 0)])
def test_a_sampled_candidate_must_beat_the_greedy_one_by_the_margin(tokenizer, monkeypatch,
                                                                     margin, picked):
  """Candidate 1 outscores the greedy candidate 0 by 0.05: said under a margin of 0.01, not
  under 0.1."""
  planner = planning.CALMPlanner(untrained_party(tokenizer), n=3, m=2, h=2, margin=margin)

  def score(self, imagined):
    candidate_R = np.arange(len(imagined)) % self.replicas // self.m
    return np.select([candidate_R == 0, candidate_R == 1], [0.50, 0.55], 0.0), np.zeros(
        len(imagined))

  monkeypatch.setattr(planning.CALMPlanner, "_score", score)
  _assert_said(planner, _play(planner, max_turns=2), picked)


def test_an_agent_with_a_copy_head_plays_and_refuses_the_reward_token_score(tokenizer):
  """The copy head decodes through the party's cache (the customer's words its sources); the
  reward-token score reads the vocabulary logits alone, so planning with it is refused."""
  party = untrained_party(tokenizer, copy_dim=8)
  results = _play(planning.CALMPlanner(party, act="head"))
  assert all(e.turns for e in results) and party.compactions == 0
  with pytest.raises(ValueError, match="copy head"):
    planning.CALMPlanner(untrained_party(tokenizer, copy_dim=8), n=2, score="reward_token")
  planning.CALMPlanner(untrained_party(tokenizer, copy_dim=8), n=2, score="head")


def test_a_margin_needs_the_greedy_candidate(tokenizer):
  with pytest.raises(ValueError, match="greedy=1"):
    planning.CALMPlanner(untrained_party(tokenizer), n=3, m=1, greedy=0, margin=0.1)
  with pytest.raises(ValueError, match="CALM action 'model'"):
    planning.CALMPlanner(untrained_party(tokenizer), act="model")


def saying(party, text):
  """`party` replying `text` in every row, its records kept as LMParty.respond keeps them."""
  tok = party.tokenizer

  def respond(self, histories):
    ids = tok.encode(text) + [tok.eot_id]
    for b, history in enumerate(histories):
      self.generated_ids[b].append(ids)
      self.token_ids[b] += [tok.speaker_token_ids[self.role], *ids]
      self._last[b], self._seen[b] = text, len(history) + 1
    return [text] * len(histories)

  party.respond = types.MethodType(respond, party)
  return party


def test_head_action_takes_status_and_flight_from_the_head_and_the_name_from_the_lm(tokenizer):
  text = "Done. [action] status=book flight=1003 name= Ann Lee [/action]"
  planner = planning.CALMPlanner(saying(untrained_party(tokenizer), text), act="head")
  results = _play(planner, max_turns=2)
  party, model = planner.party, planner.party.decoder
  for b, result in enumerate(results):
    ids = party.token_ids[b]  # The head read again here on the training path, at the marker.
    position = len(ids) - 1 - ids[::-1].index(party.tokenizer.marker_ids["[action]"])
    tokens = jnp.asarray([ids])
    fields = jnp.asarray(party.prefix_fields_BxPxF[b:b + 1])
    hidden, _ = model(tokens, jnp.arange(len(ids))[None], jnp.ones_like(tokens, bool),
                      prefix_BxPxD=model.embed_prefix(fields))
    head_class = int(jnp.argmax(model.action_logits(hidden, jnp.ones_like(tokens, bool),
                                                    jnp.asarray([position]), fields)))
    chosen = actions.class_action(head_class, name="Ann Lee")
    said = result.turns[-1].text
    assert said == "Done. " + action_grammar.format_action(chosen)
    assert result.action == chosen
    assert planner.head_actions[b] == (schema.Action("book", "Ann Lee", (1003,)), chosen)


class IntentReader:
  """A stand-in frozen tracker that reads each acting row's true intent, one-hot, and the
  given names, and records the dialogues it was given."""

  def __init__(self, scenarios, names=None):
    self.codes_NxK = np.stack([state.intent_codes(s.intent) for s in scenarios])
    self.names = names or [None] * len(scenarios)
    self.seen = []

  def read(self, dialogues):
    self.seen.append([list(d) for d in dialogues])
    return [np.where(np.arange(size)[None] == self.codes_NxK[:len(dialogues), k, None], 0.0,
                     state.NEG).astype(np.float32)
            for k, (_, size) in enumerate(state.TRACKED)], self.names[:len(dialogues)]


def test_a_frozen_reader_gives_the_closing_status_and_flight_the_name_from_the_lm(tokenizer):
  text = "Done. [action] status=book flight=1003 name= Ann Lee [/action]"
  scenarios = airdialogue_env.make_scenarios(1000, 2, 30)
  reader = IntentReader(scenarios)
  planner = planning.CALMPlanner(saying(untrained_party(tokenizer), text), act="head",
                                 reader=reader)
  results = _play(planner, max_turns=2)
  assert len(reader.seen) == 1  # One call, at the closing turn, for both rows.
  for b, (result, scenario) in enumerate(zip(results, scenarios)):
    expected = scenario.expected_action
    assert result.action.status == expected.status and result.action.name == "Ann Lee"
    assert set(result.action.flights) <= set(expected.flights)
    assert len(result.action.flights) == min(1, len(expected.flights))
    customer_turn = result.turns[0]
    assert reader.seen[0][b] == [(customer_turn.speaker, customer_turn.text)]


def test_a_reader_with_a_name_pointer_gives_the_closing_name(tokenizer):
  text = "Done. [action] status=book flight=1003 name= Ann Lee [/action]"
  scenarios = airdialogue_env.make_scenarios(1000, 2, 30)
  reader = IntentReader(scenarios, names=["mary jones", None])
  planner = planning.CALMPlanner(saying(untrained_party(tokenizer), text), act="head",
                                 reader=reader)
  results = _play(planner, max_turns=2)
  assert [r.action.name for r in results] == ["mary jones", "Ann Lee"]  # None: the LM's.


def test_a_blended_reader_multiplies_the_two_trackers_posteriors(tokenizer):
  """The reader one-hot on the truth: the product is the truth wherever the model's own
  (untrained) head gives it any weight, so the blended action is the reader's alone."""
  text = "Done. [action] status=book flight=1003 name= Ann Lee [/action]"
  scenarios = airdialogue_env.make_scenarios(1000, 2, 30)
  planner = planning.CALMPlanner(saying(state_head_party(tokenizer), text), act="head",
                                 reader=IntentReader(scenarios), blend=1)
  for result, scenario in zip(_play(planner, max_turns=2), scenarios):
    assert result.action.status == scenario.expected_action.status
    assert set(result.action.flights) <= set(scenario.expected_action.flights)
  with pytest.raises(ValueError, match="blend=1 multiplies"):
    planning.CALMPlanner(state_head_party(tokenizer), act="head", blend=1)


def test_a_frozen_reader_needs_the_head_action(tokenizer):
  with pytest.raises(ValueError, match="reader=DIR .* needs act=head"):
    planning.CALMPlanner(untrained_party(tokenizer), act="lm",
                         reader=IntentReader(airdialogue_env.make_scenarios(1000, 1, 30)))


@pytest.mark.parametrize("text", ["Let me check that for you.",
                                  "Done. [action] status=book flight=soon name= Ann Lee [/action]"])
def test_head_action_leaves_turns_without_a_parsed_block_as_written(tokenizer, text):
  planner = planning.CALMPlanner(saying(untrained_party(tokenizer), text), act="head")
  for result in _play(planner, max_turns=2):
    assert [t.text for t in result.turns if t.speaker == AGENT] == [text]
  assert planner.head_actions == [None, None]


def test_planning_plays_dialogues_without_recompiling_per_turn(tokenizer):
  planner = planning.CALMPlanner(untrained_party(tokenizer), n=2, m=2, h=3)
  _play(planner, max_turns=6)  # Compiles every shape these dialogues' turns use.
  sizes = (sampler._generate._cache_size(), planning.rollout_scores._cache_size(),
           sampler._append._cache_size())
  results = _play(planner, max_turns=6)  # The same dialogues again: new calls, no new shapes.
  assert (sampler._generate._cache_size(), planning.rollout_scores._cache_size(),
          sampler._append._cache_size()) == sizes
  assert len(results) == 2
  for scores in planner.scores:
    assert scores is None or (len(scores) == 2 and all(np.isfinite(scores)))


def test_one_candidate_is_plain_sampling(tokenizer):
  planner = planning.CALMPlanner(untrained_party(tokenizer), n=1, m=4, h=3)
  assert planner.replicas == 1
  results = _play(planner, max_turns=2)
  assert planner.picked == [None, None] and len(results) == 2


@pytest.mark.parametrize("greedy", [1, 0])
def test_candidate_zero_is_the_greedy_reply(tokenizer, greedy):
  planner = planning.CALMPlanner(untrained_party(tokenizer), n=3, m=2, h=1, greedy=greedy)
  _play(planner, max_turns=2)  # One agent turn per dialogue: `candidates` are its.
  plain = untrained_party(tokenizer)
  plain.sampling["temperature"] = 0.0
  for b, result in enumerate(_play(plain, max_turns=2)):
    greedy_reply = [t.text for t in result.turns if t.speaker == AGENT][0]
    assert (planner.candidates[b][0] == greedy_reply) == bool(greedy)
  assert planner.sampling["temperature"] == 1.0  # Imagined turns are still sampled.


def test_spec_options_and_errors():
  def parsed(text):
    spec = party_spec.parse(text)
    return dict(spec.options), spec.inner.target

  assert parsed("calm:n=4,m=2,h=6,score=head:/runs/calm") == (
      {"n": 4, "m": 2, "h": 6, "score": "head"}, "/runs/calm")
  assert parsed("calm:/runs/calm") == ({}, "/runs/calm")
  assert parsed("calm:greedy=0:/runs/calm") == ({"greedy": 0}, "/runs/calm")
  assert parsed("calm:margin=0.1:/runs/calm") == ({"margin": 0.1}, "/runs/calm")
  assert parsed("calm:n=1,act=head:/runs/calm") == ({"n": 1, "act": "head"}, "/runs/calm")
  with pytest.raises(ValueError, match="unknown calm option 'k'"):
    party_spec.parse("calm:k=4:/runs/calm")
  with pytest.raises(ValueError, match="is not a int"):
    party_spec.parse("calm:n=x:/runs/calm")


def test_the_ask_gate_forbids_the_action_markers_where_the_tracker_is_unsure(tokenizer,
                                                                               monkeypatch):
  """`ask=P`: a row whose tracker believes the trip's fields below P may not open or close an
  action block this turn; a confident row may. The gate reads the dialogue so far."""
  party = state_head_party(tokenizer)
  read = []
  fields = len(planning.ASK_FIELDS)

  def confidence(model, fields_BxPxF, tokens_BxT, mask_BxT, position_B, speakers):
    read.append(np.asarray(position_B))
    return np.asarray([[0.2] * fields, [0.9] * fields])

  monkeypatch.setattr(planning, "words_confidence", confidence)
  planner = planning.CALMPlanner(party, act="head", ask=0.5)
  _play(planner, max_turns=2)
  markers = {tokenizer.marker_ids[t] for t in ("[action]", "[/action]")}
  forbidden = np.asarray(party._batch_hook.token_ids_BxK)
  assert markers <= set(forbidden[0].tolist()) and not markers & set(forbidden[1].tolist())
  assert planner.held_back == 1 and len(read) == 1 and (read[0] > 0).all()
  with pytest.raises(ValueError, match="ask"):
    planning.CALMPlanner(untrained_party(tokenizer), act="lm", ask=0.5)


class UnsureReader(IntentReader):
  """IntentReader, but spread evenly over every value of row 0's fields: it does not know."""

  def read(self, dialogues):
    log_p, names = super().read(dialogues)
    for x in log_p:
      x[0] = -np.log(x.shape[-1])
    return log_p, names


def test_the_reader_gate_holds_the_rows_whose_reader_is_unsure(tokenizer, monkeypatch):
  """`gate=reader`: the ask gate reads the frozen reader (no table) on the dialogue so far, not
  the model's head; the row it is unsure of may not close this turn, the other may."""
  party = state_head_party(tokenizer)
  monkeypatch.setattr(planning, "words_confidence", lambda *a: pytest.fail("read the head"))
  reader = UnsureReader(airdialogue_env.make_scenarios(1000, 2, 30))
  planner = planning.CALMPlanner(party, act="head", ask=0.5, reader=reader, gate="reader")
  _play(planner, max_turns=2)
  markers = {tokenizer.marker_ids[t] for t in ("[action]", "[/action]")}
  forbidden = np.asarray(party._batch_hook.token_ids_BxK)
  assert markers <= set(forbidden[0].tolist()) and not markers & set(forbidden[1].tolist())
  assert planner.held_back == 1 and len(reader.seen[0]) == 2
  assert all(turns and turns[0][0] == CUSTOMER for turns in reader.seen[0])
  with pytest.raises(ValueError, match="gate='reader'"):
    planning.CALMPlanner(state_head_party(tokenizer), act="head", ask=0.5, gate="reader")
  with pytest.raises(ValueError, match="gate='table'"):
    planning.CALMPlanner(party, act="head", ask=0.5, reader=reader, gate="table")


def test_once_releases_the_fields_the_agent_has_asked_about(tokenizer):
  """`once=1`: a field the agent's questions have asked about no longer holds the gate nor
  counts as doubt; the row still holds while a doubted field is unasked, and frees when all
  are asked. Without once the same questions change nothing."""
  scenarios = airdialogue_env.make_scenarios(1000, 2, 30)

  def gate(once, questions):
    planner = planning.CALMPlanner(state_head_party(tokenizer), act="head", ask=0.5,
                                   reader=UnsureReader(scenarios), gate="reader", once=once)
    planner.reset([s.context(AGENT) for s in scenarios], [0, 1])
    history = [Turn(CUSTOMER, "Hi."), *(t for q in questions
                                        for t in (Turn(AGENT, q), Turn(CUSTOMER, "Ok.")))]
    histories = [history, [Turn(CUSTOMER, "Hi.")]]
    planner.load_histories(histories)
    return planner._gate(histories)

  dates = [f for f in planning.ASK_FIELDS if f.endswith(("_month", "_day"))]
  hold_B, confidence_BxK = gate(1, ["What are your travel dates?"])
  assert hold_B.tolist() == [True, False]
  for k, f in enumerate(planning.ASK_FIELDS):
    assert (confidence_BxK[0, k] == 1.0) == (f in dates), f
  hold_B, _ = gate(1, ["How can I help you?", "What are your travel dates?",
                       "Where are you flying from and to?"])
  assert hold_B.tolist() == [False, False]
  hold_B, confidence_BxK = gate(0, ["How can I help you?", "What are your travel dates?",
                                    "Where are you flying from and to?"])
  assert hold_B.tolist() == [True, False] and confidence_BxK[0, :-1].max() < 0.5
  with pytest.raises(ValueError, match="once=1"):
    planning.CALMPlanner(state_head_party(tokenizer), act="head", once=1)


class NamelessReader(IntentReader):
  """IntentReader whose name pointer doubts row 0's name (confidence 0.1), not row 1's."""

  def read(self, dialogues, name_confidence=False):
    log_p, names = super().read(dialogues)
    return (log_p, names, np.asarray([0.1, 0.99])[:len(dialogues)]) if name_confidence else (
        log_p, names)


def test_name_holds_the_gate_until_the_customer_has_said_a_name(tokenizer):
  """`name=1`: a row whose reader is sure of the trip but doubts that a name was said may not
  close; with once=1, having asked for the name frees it; a candidate asking for the name
  covers that doubt."""
  scenarios = airdialogue_env.make_scenarios(1000, 2, 30)

  def gate(once, questions):
    planner = planning.CALMPlanner(state_head_party(tokenizer), act="head", ask=0.5,
                                   reader=NamelessReader(scenarios), gate="reader", name=1,
                                   once=once)
    planner.reset([s.context(AGENT) for s in scenarios], [0, 1])
    history = [Turn(CUSTOMER, "Hi."), *(t for q in questions
                                        for t in (Turn(AGENT, q), Turn(CUSTOMER, "Ok.")))]
    planner.load_histories([history, history])
    return planner._gate([history, history])

  hold_B, confidence_BxK = gate(0, [])
  assert hold_B.tolist() == [True, False]
  assert confidence_BxK[0, -1] == pytest.approx(0.1) and confidence_BxK[0, :-1].min() == 1.0
  assert planning.question_scores(["May I know your name?", "What are your dates?"],
                                  confidence_BxK[0]).tolist() == pytest.approx([0.9, 0.0])
  assert gate(1, ["May I know your name?"])[0].tolist() == [False, False]
  assert gate(0, ["May I know your name?"])[0].tolist() == [True, False]
  with pytest.raises(ValueError, match="name=1"):
    planning.CALMPlanner(state_head_party(tokenizer), act="head", ask=0.5,
                         reader=NamelessReader(scenarios), name=1)


def test_the_gate_lets_a_row_close_whose_context_has_no_room_for_another_question(tokenizer):
  """A held row needs room for this reply, the answer and a closing (ROOM_REPLIES replies of
  max_new_tokens); one position less and the gate lets it close rather than end unclosed."""
  scenarios = airdialogue_env.make_scenarios(1000, 2, 30)
  planner = planning.CALMPlanner(state_head_party(tokenizer), act="head", ask=0.5,
                                 reader=UnsureReader(scenarios), gate="reader")
  planner.reset([s.context(AGENT) for s in scenarios], [0, 1])
  history = [Turn(CUSTOMER, "Hi, I would like to book a flight from Boston to Denver, please.")]
  party = planner.party
  needed = (int(np.asarray(party._state.lengths_B)[0]) + len(party._new_tokens(0, history))
            + planning.ROOM_REPLIES * party.max_new_tokens)
  for row_limit, held in ((needed, True), (needed - 1, False)):
    party.row_limit = row_limit
    assert planner._gate([history, history])[0].tolist() == [held, False]


def test_keep_says_a_question_rather_than_a_search_where_no_candidate_covers_the_doubt(
    tokenizer):
  """`keep=1`: a held row whose candidates ask about none of the doubt says the first one that
  asks something, not the greedy search; a question that covers doubt still wins, and a row
  the gate lets through still says candidate 0."""
  scenarios = airdialogue_env.make_scenarios(1000, 2, 30)
  k = len(planning.ASK_FIELDS)

  def pick(keep, candidates, hold):
    planner = planning.CALMPlanner(state_head_party(tokenizer), act="head", ask=0.5, n=3,
                                   score="ask", keep=keep)
    planner.reset([s.context(AGENT) for s in scenarios], [0, 1])
    planner._sync = lambda picks: None
    confidence_BxK = np.full((2, k), 0.3)
    return planner._pick_question(candidates * 2, np.asarray([hold, False]), confidence_BxK)

  search = ["Please wait a moment.", "Do you prefer any airline?", "Any class preference?"]
  assert pick(1, search, True) == [search[1], search[0]]
  assert pick(0, search, True) == [search[0], search[0]]
  airports = ["Please wait a moment.", "Any class preference?", "Where are you flying from?"]
  assert pick(1, airports, True)[0] == airports[2]
  with pytest.raises(ValueError, match="keep=1"):
    planning.CALMPlanner(state_head_party(tokenizer), act="head", ask=0.5, keep=1)


def test_start_begins_each_candidate_of_a_held_row_with_another_first_token(tokenizer):
  """`start=1`: greedy candidates (temp=0) that are all one reply without it start three ways
  with it (the LM's 1st, 2nd and 3rd likeliest first tokens); candidate 0 stays the greedy
  reply."""
  scenarios = airdialogue_env.make_scenarios(1000, 2, 30)

  def first_tokens(start):
    planner = planning.CALMPlanner(state_head_party(tokenizer), act="head", ask=0.5, n=3,
                                   score="ask", temp=0.0, start=start,
                                   reader=UnsureReader(scenarios), gate="reader")
    planner._sync = lambda picks: None  # Keep each replica's own reply to read.
    _play(planner, max_turns=2)
    return [planner.party.generated_ids[j][-1][0] for j in range(3)]  # Row 0's candidates.

  plain, ranked = first_tokens(0), first_tokens(1)
  assert len(set(plain)) == 1 and ranked[0] == plain[0] and len(set(ranked)) == 3, ranked
  with pytest.raises(ValueError, match="start=1"):
    planning.CALMPlanner(state_head_party(tokenizer), act="head", ask=0.5, start=1)


def test_question_scores_weigh_what_each_candidate_asks_by_the_trackers_doubt():
  """A candidate scores the doubt (1 - confidence) of the fields its questions ask about; one
  that asks nothing the tracker needs, offers a flight or closes scores 0."""
  confidence_K = np.ones(len(planning.ASK_FIELDS))
  fields = list(planning.ASK_FIELDS)
  confidence_K[fields.index("departure_airport")] = 0.3
  confidence_K[fields.index("departure_day")] = 0.6
  scores = planning.question_scores([
      "Where are you flying from and to?",
      "What are your travel dates?",
      "Where are you flying from and to, and what are your travel dates?",
      "Do you have any other specifications?",
      "I found flight 1003 for $200. Shall I book it?",
      "Done. [action] status=book flight=1003 name= A B [/action]",
      None], confidence_K)
  np.testing.assert_allclose(scores, [0.7, 0.4, 1.1, 0, 0, 0, 0], atol=1e-9)


def test_words_confidence_doubts_a_field_the_table_alone_sets(monkeypatch):
  """Read with and without the table's dates and airports: a field whose two readings differ
  has confidence 0; one read the same keeps the lower of its two confidences."""
  k = len(planning.ASK_FIELDS)

  def tracker(model, fields_BxPxF, tokens_BxT, mask_BxT, position_B, speakers):
    blanked = bool((np.asarray(fields_BxPxF)[..., airdialogue.FIELD["departure_day"]]
                    [np.asarray(fields_BxPxF)[..., airdialogue.FIELD["row_type"]] ==
                     airdialogue.ROW_FLIGHT] == 1).all())
    value = np.zeros((1, k), np.int32)
    value[0, planning.ASK_FIELDS.index("departure_day")] = 1 if blanked else 26
    return np.full((1, k), 0.7 if blanked else 0.9), value

  monkeypatch.setattr(planning, "tracker_confidence", tracker)
  scenario = airdialogue_env.make_scenarios(1000, 1, 30)[0]
  fields_BxPxF = airdialogue.table_fields(scenario.context(AGENT))[None]
  confidence_K = planning.words_confidence(None, fields_BxPxF, None, None, None, None)[0]
  expected = np.full(k, 0.7)
  expected[planning.ASK_FIELDS.index("departure_day")] = 0.0
  np.testing.assert_allclose(confidence_K, expected)


def test_score_ask_says_the_question_the_tracker_picks_where_the_gate_holds(tokenizer,
                                                                           monkeypatch):
  """`score=ask`: a held row says the candidate whose questions cover most of the tracker's
  doubt, and every replica continues from it; a confident row says its greedy candidate 0.
  Past the agent's first offer the gate no longer holds."""
  party = state_head_party(tokenizer)
  k = len(planning.ASK_FIELDS)
  monkeypatch.setattr(planning, "words_confidence", lambda *a: np.asarray([[0.2] * k, [0.9] * k]))
  monkeypatch.setattr(planning, "question_scores",
                      lambda candidates, confidence_K: np.asarray([0.0, 0.5, 0.2]))
  planner = planning.CALMPlanner(party, n=3, score="ask", act="head", ask=0.5, temp=1.0)
  results = _play(planner, max_turns=2)
  assert planner.picked == [1, 0] and planner.held_back == 1
  for b, result in enumerate(results):
    said = [t.text for t in result.turns if t.speaker == AGENT][-1]
    assert said == planner.candidates[b][planner.picked[b]]
    for i in range(b * 3, b * 3 + 3):  # Every replica holds the said reply.
      assert party._last[i] == said
  offer = [planning.Turn(AGENT, "I found flight 1003 for $200. Shall I book it?")]
  assert planner._offered(offer) and not planner._offered(
      [planning.Turn(AGENT, "What are your travel dates?")])
  with pytest.raises(ValueError, match="score=ask"):
    planning.CALMPlanner(untrained_party(tokenizer), n=3, score="ask", act="head")
  with pytest.raises(ValueError, match="ask"):
    planning.CALMPlanner(untrained_party(tokenizer), n=1, score="ask", act="head", ask=0.5)
