"""Batched rollouts: scoring and turn accounting, endings, party specs, role enforcement."""

import dataclasses
import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx, struct

from data_pipelines import tokenization
from data_pipelines.airdialogue import (action_grammar, agents, customers, schema, selfplay,
                                        to_dialogue)
from data_pipelines.dialogue import Turn
from ilql_dialogue import bc
from domains.airdialogue.parties import ScriptedAgent, ScriptedCustomer, intent_from_json, table_from_json
from ilql_dialogue.lm_party import LMParty, compact, forbidden_token_ids, start_state
from ilql_dialogue.parties import make_party
from domains.airdialogue import environment as airdialogue_env
from ilql_dialogue.generation import sampler
from ilql_dialogue.models.config import ModelConfig
from domains.airdialogue import task as airdialogue_task

MARKERS = (action_grammar.OPEN_TAG, action_grammar.CLOSE_TAG)


@functools.cache
def scenarios(n=24, seed=7, kb_size=30):
  return airdialogue_env.make_scenarios(seed, n, kb_size)


def play(agent, customer, scenes, **kwargs):
  return list(airdialogue_env.run_dialogues(agent, customer, scenes, **kwargs))


# --- Scripted parties through the batched engine ------------------------------


@pytest.mark.parametrize("style", sorted(customers.STYLES))
def test_oracle_succeeds_and_turns_match_the_pure_python_loop(style):
  scenes = scenarios()
  results = play(ScriptedAgent("oracle"), ScriptedCustomer(style), scenes,
                 batch_size=5, seed=3)
  summary = airdialogue_env.summarize(results)
  assert summary["success_rate"] == 1.0 and summary["success_stderr"] == 0.0
  assert summary["end_reasons"]["action"] == len(scenes)
  agent_seeds = airdialogue_env.row_seeds(3, scenes, 0)
  customer_seeds = airdialogue_env.row_seeds(3, scenes, 1)
  for scene, result, a_seed, c_seed in zip(scenes, results, agent_seeds, customer_seeds):
    # The same parties with the same generators in selfplay.play: identical turns (play adds
    # one closing customer line after the action, which the engine does not ask for).
    lines, action, error = selfplay.play(
        customers.Customer(scene.intent, style, np.random.default_rng(c_seed)),
        agents.ScriptedAgent(scene.table, "oracle", np.random.default_rng(a_seed)))
    assert error is None
    assert [f"{t.speaker}: {t.text}" for t in result.turns] == lines[:-1]
    assert result.action == action and result.action_text == result.turns[-1].text


def test_degraded_agents_score_lower():
  scenes = scenarios()
  by_agent = {name: airdialogue_env.summarize(play(ScriptedAgent(name),
                                           ScriptedCustomer("volunteer"), scenes))
              for name in ("oracle", "wrong_status", "misspell_name", "give_up")}
  assert by_agent["oracle"]["success_rate"] == 1.0
  assert by_agent["wrong_status"]["success_rate"] == 0.0
  assert (by_agent["wrong_status"]["status_acc"], by_agent["wrong_status"]["name_acc"]) == (0, 1)
  assert (by_agent["misspell_name"]["name_acc"], by_agent["misspell_name"]["status_acc"]) == (0, 1)
  assert by_agent["give_up"]["success_rate"] < 1.0
  stderr = by_agent["give_up"]["success_stderr"]
  p, n = by_agent["give_up"]["success_rate"], len(scenes)
  assert stderr == pytest.approx(np.sqrt(p * (1 - p) / n))


def test_results_do_not_depend_on_batching():
  scenes = scenarios()[:10]
  runs = [[r.to_json() for r in play(ScriptedAgent("not_cheapest"),
                                     ScriptedCustomer("chatty"), scenes,
                                     batch_size=size, seed=5)] for size in (1, 3, 10)]
  assert runs[0] == runs[1] == runs[2]


def test_turn_limit_counts_as_failure():
  scenes = scenarios()[:6]
  results = play(ScriptedAgent("oracle"), ScriptedCustomer("answer_only"),
                 scenes, max_turns=3)
  assert all(r.end_reason == "turn_limit" and not r.success for r in results)
  assert all([t.speaker for t in r.turns] == ["customer", "agent", "customer"] for r in results)
  summary = airdialogue_env.summarize(results)
  assert summary["success_rate"] == 0.0 and summary["mean_turns"] == 3.0
  assert summary["status_acc"] == summary["flight_acc"] == summary["name_acc"] == 0.0


def test_scenarios_are_prefix_stable_and_seeded():
  assert airdialogue_env.make_scenarios(1000, 3) == airdialogue_env.make_scenarios(1000, 6)[:3]
  assert airdialogue_env.make_scenarios(1000, 3) != airdialogue_env.make_scenarios(1001, 3)
  assert [s.scenario_id for s in airdialogue_env.make_scenarios(1000, 2)] == ["1000:0", "1000:1"]
  scene = airdialogue_env.make_scenarios(1000, 1)[0]
  assert "kb" in scene.context("agent") and "kb" not in scene.context("customer")
  assert intent_from_json(scene.context("customer")) == scene.intent
  assert table_from_json(scene.context("agent")) == scene.table


# --- User classes and odd parties ----------------------------------------------


class BrokenAgent:
  """Asks one question, then writes an action block with no flight and no name."""

  def __init__(self, role):
    assert role == "agent"
    self.role = role

  def reset(self, contexts, seeds):
    self.batch = len(contexts)

  def respond(self, histories):
    return [None if h is None else
            "What is your name?" if len(h) < 2 else "Done. [action] status=book [/action]"
            for h in histories]


class ActionWritingCustomer:
  """A customer that keeps writing action blocks (which must never end a dialogue)."""

  def reset(self, contexts, seeds):
    pass

  def respond(self, histories):
    return [None if h is None else "[action] status=cancel flight=none name=X Y [/action]"
            for h in histories]


class QuittingCustomer:
  def reset(self, contexts, seeds):
    pass

  def respond(self, histories):
    return [None if h is None or h else "Hello." for h in histories]


def test_unparsable_action_is_a_logged_failure(caplog):
  agent = make_party(f"{__name__}:BrokenAgent", "agent")
  assert isinstance(agent, BrokenAgent)
  with caplog.at_level(logging.WARNING):
    results = play(agent, ScriptedCustomer("terse"), scenarios()[:4])
  for r in results:
    assert r.end_reason == "unparsable_action" and not r.success and r.action is None
    assert "status=book" in r.action_text and "not 'status=S flight=F name=N'" in r.parse_error
    assert r.to_json()["parse_error"] == r.parse_error
  assert airdialogue_env.summarize(results)["unparsable_actions"] == 4
  assert sum("unparsable action" in m for m in caplog.messages) == 4


def test_customer_action_blocks_are_counted_not_scored():
  results = play(ScriptedAgent("oracle"),
                 make_party(f"{__name__}:ActionWritingCustomer", "customer"),
                 scenarios()[:3], max_turns=6)
  assert all(r.end_reason == "turn_limit" and r.action is None for r in results)
  assert airdialogue_env.summarize(results)["customer_action_blocks"] == 3 * 3


def test_party_may_end_a_dialogue():
  results = play(ScriptedAgent("oracle"),
                 make_party(f"{__name__}:QuittingCustomer", "customer"),
                 scenarios()[:2])
  assert [r.end_reason for r in results] == ["customer_ended"] * 2
  assert all(len(r.turns) == 2 for r in results)


@pytest.mark.parametrize("spec, role, message", [
    ("scripted:nobody", "customer", "unknown customer style"),
    ("scripted:terse", "agent", "scripted customer"),
    ("scripted_agent:oracle", "customer", "scripted agent"),
    ("no_such_module_xyz:Party", "agent", "cannot import"),
    (f"{__name__}:Missing", "agent", "has no class"),
    ("/no/such/dir", "agent", "expected scripted:STYLE"),
])
def test_bad_specs_say_what_is_wrong(spec, role, message):
  with pytest.raises(ValueError, match=message):
    make_party(spec, role)


def test_bad_replies_name_the_party_and_row():
  class Bad:
    def reset(self, contexts, seeds):
      pass

    def respond(self, histories):
      return [1] * len(histories)

  with pytest.raises(ValueError, match="customer party: reply of row 0 is int"):
    play(ScriptedAgent("oracle"), Bad(), scenarios()[:2])


# --- Tokenizer markers -----------------------------------------------------------


@functools.cache
def marker_tokenizer():
  scenes = airdialogue_env.make_scenarios(3, 30, kb_size=3)
  texts = [to_dialogue.serialize_context(role, s.context(role)) for s in scenes
           for role in to_dialogue.ROLES]
  for style, s in zip(sorted(customers.STYLES) * 6, scenes):
    lines, _, _ = selfplay.play(customers.Customer(s.intent, style, np.random.default_rng(0)),
                                agents.ScriptedAgent(s.table, "oracle", np.random.default_rng(0)))
    texts += [line.partition(": ")[2] for line in lines]
  return tokenization.train_tokenizer(texts, to_dialogue.ROLES, vocab_size=600, markers=MARKERS)


def test_markers_are_single_plain_ids_that_round_trip(tmp_path):
  tok = marker_tokenizer()
  assert tok.vocab_size <= 600
  ids = {m: tok.encode(m) for m in MARKERS}
  # One id each, after the space every encoded text starts with (tokenization.TEXT_PREFIX).
  assert {m: v[-1] for m, v in ids.items()} == tok.marker_ids
  assert all(tok.decode(v[:-1]) == "" for v in ids.values())
  assert not set(tok.marker_ids.values()) & tok.special_ids
  text = "Booked. [action] status=book flight=1001 name=Ann Lee [/action] x[action]y"
  encoded = tok.encode(text)
  assert encoded.count(tok.marker_ids["[action]"]) == 2 and tok.decode(encoded) == text
  assert tok.decode(encoded, skip_special_tokens=True) == text  # Markers are plain text.
  tok.save(str(tmp_path))
  again = tokenization.load_tokenizer(str(tmp_path))
  assert again.marker_ids == tok.marker_ids and again.encode(text) == encoded


def test_markers_can_be_added_to_an_old_tokenizer_directory(tmp_path):
  old = tokenization.train_tokenizer(["hello [action] there"] * 5, ("agent", "customer"),
                                     vocab_size=300)
  assert old.marker_ids == {} and len(old.encode("[action]")) > 1
  old.save(str(tmp_path))
  assert tokenization.load_tokenizer(str(tmp_path)).markers == ()  # Backward compatible.
  new = tokenization.load_tokenizer(str(tmp_path), markers=MARKERS)
  assert new.marker_ids == {"[action]": old.vocab_size, "[/action]": old.vocab_size + 1}
  assert new.marker_ids["[action]"] in new.encode("hello [action] there")
  with pytest.raises(ValueError, match="markers"):
    tokenization.train_tokenizer(["x"], ("agent",), vocab_size=300, markers=("<|eot|>",))


# --- Learned parties: KV-cached decoding and role enforcement ---------------------

LM_BATCH, LM_NEW = 4, 8  # One batch size and turn cap for every LM test: one set of compiles.


@functools.cache
def tiny_lm():
  """An untrained 1-layer model with peaked logits (std 0.4 weights), table prefix optional.

  Weights are drawn with numpy into the traced structure: initialising the
  module op by op costs far more compile time on CPU than the tests below.
  """
  tok = marker_tokenizer()
  prefix = airdialogue_task.TABLE_PREFIX  # Every LM test shares this one model (and its compiles).
  cfg = ModelConfig.llama(vocab_size=-(-tok.vocab_size // 64) * 64, num_layers=1, d_model=32,
                          num_heads=2, max_seq_len=256,
                          prefix_field_vocab_sizes=prefix.field_vocab_sizes,
                          prefix_num_rows=prefix.num_rows)
  graphdef, state = nnx.split(nnx.eval_shape(lambda: bc.PrefixLM(cfg, rngs=nnx.Rngs(0))))
  rng = np.random.default_rng(0)

  def draw(path, leaf):
    if path[-1].key == "scale":  # Norm scales.
      return jnp.ones(leaf.shape, leaf.dtype)
    return jnp.asarray(rng.normal(0.0, 0.4, leaf.shape), leaf.dtype)

  nnx.replace_by_pure_dict(state, jax.tree_util.tree_map_with_path(draw, nnx.to_pure_dict(state)))
  return nnx.merge(graphdef, state)


@struct.dataclass
class PreferTokens:
  """Adds a large bonus to some logits: an LM that WANTS to write the forbidden ids."""

  token_ids_K: jax.Array  # Padded with out-of-range ids (dropped).

  def __call__(self, logits_BxV, step):
    return logits_BxV.at[:, self.token_ids_K].add(20.0, mode="drop")


def lm_party(role, **kwargs):
  """A tiny LM tempted to write exactly what `role` must not write."""
  tok = marker_tokenizer()
  tempting = forbidden_token_ids(tok, role)
  tempting = jnp.asarray(tempting + [1 << 20] * (16 - len(tempting)))
  kwargs.setdefault("serialize_context", to_dialogue.serialize_context)
  return LMParty(tiny_lm(), tok, role, max_new_tokens=LM_NEW,
                 hook=lambda batch: PreferTokens(tempting), **kwargs)


def generated(party):
  return [i for row in party.generated_ids for turn in row for i in turn]


def test_lm_agent_never_writes_another_speakers_token():
  tok = marker_tokenizer()
  scenes = airdialogue_env.make_scenarios(11, LM_BATCH, kb_size=1)

  def run(**kwargs):
    party = lm_party("agent", **kwargs)
    results = play(party, ScriptedCustomer("terse"), scenes, batch_size=LM_BATCH,
                   max_turns=8)
    return party, results

  party, results = run()
  forbidden = set(tok.special_ids) - {tok.eot_id}
  assert set(party.forbidden_ids) == forbidden  # The agent may write the action markers.
  assert len(generated(party)) >= 4 * LM_BATCH
  assert not forbidden & set(generated(party))
  for r, row in zip(results, party.generated_ids):
    assert [t.speaker for t in r.turns][:2] == ["customer", "agent"]
    agent_texts = [t.text for t in r.turns if t.speaker == "agent"]
    assert len(agent_texts) == len(row)
    for text, turn in zip(agent_texts, row):
      assert text == tok.decode(turn[:-1] if turn and turn[-1] == tok.eot_id else turn).strip()

  unmasked, _ = run(forbidden_ids=[])  # Without the mask this LM writes them at once.
  assert forbidden & set(generated(unmasked))


def test_lm_customer_never_writes_the_action_marker():
  tok = marker_tokenizer()
  party = lm_party("customer")
  assert set(tok.marker_ids.values()) <= set(party.forbidden_ids)
  scenes = airdialogue_env.make_scenarios(12, LM_BATCH, kb_size=1)
  results = play(ScriptedAgent("oracle"), party, scenes, batch_size=LM_BATCH,
                 max_turns=8)
  ids = set(generated(party))
  assert len(generated(party)) >= 4 * LM_BATCH
  assert not ids & (set(tok.marker_ids.values()) | (set(tok.special_ids) - {tok.eot_id}))
  assert airdialogue_env.summarize(results)["customer_action_blocks"] == 0


class UnevenCustomer:
  """Row 0 talks at length, the others say "Ok.": most cache slots end up padding."""

  def reset(self, contexts, seeds):
    pass

  def respond(self, histories):
    long = "I would like to book a flight from Boston to Denver on Monday morning, please. " * 2
    return [None if h is None else long if b == 0 else "Ok." for b, h in enumerate(histories)]


@pytest.mark.parametrize("context", ["text", "prefix"])
def test_kv_cached_turns_equal_decoding_the_whole_history_afresh(context):
  """Turn-by-turn appends and compactions reproduce one pass over the full training layout."""
  tok = marker_tokenizer()
  table = airdialogue_task.table_fields if context == "prefix" else None
  party = lm_party("agent", temperature=0.0, include_context=context == "text",
                   prefix_fields=table)
  scenes = airdialogue_env.make_scenarios(13, LM_BATCH, kb_size=1)
  results = play(party, UnevenCustomer(), scenes, batch_size=LM_BATCH, max_turns=60)
  assert party.compactions >= 1
  prompts = []
  for scene, result, own_turns in zip(scenes, results, party.generated_ids):
    text = to_dialogue.serialize_context("agent", scene.context("agent"))
    ids = [tok.context_id, *tok.encode(text)] if context == "text" else []
    ids.append(tok.dialogue_id)
    own = iter(own_turns)
    last_agent_turn = max(i for i, t in enumerate(result.turns) if t.speaker == "agent")
    for turn in result.turns[:last_agent_turn]:
      if turn.speaker == "agent":
        said = next(own)
        ids += [tok.speaker_token_ids["agent"], *said]
        ids += [] if said[-1] == tok.eot_id else [tok.eot_id]
      else:
        ids += [tok.speaker_token_ids["customer"], *tok.encode(turn.text), tok.eot_id]
    prompts.append(ids + [tok.speaker_token_ids["agent"]])
  prefix = None
  if table is not None:
    prefix = party.decoder.embed_prefix(
        jnp.asarray(np.stack([table(s.context("agent")) for s in scenes])))
  state = start_state(party.decoder, prompts, tok.pad_id, party.chunk,
                                 party.cache_len, prefix)
  params = sampler.SamplingParams.make(LM_BATCH, max_new_tokens=LM_NEW, temperature=0.0,
                                       stop_tokens=[tok.eot_id])
  _, new, _, lengths = sampler.generate(party.decoder, state, params, jax.random.key(0),
                                        max_new_tokens=LM_NEW, pad_id=tok.pad_id,
                                        hook=party._hook(LM_BATCH))
  assert min(map(len, party.generated_ids)) >= 2 and max(map(len, party.generated_ids)) >= 8
  for b, own_turns in enumerate(party.generated_ids):
    assert np.asarray(new[b, :lengths[b]]).tolist() == own_turns[-1]


def test_compaction_frees_slots_and_changes_no_decoded_token():
  tok = marker_tokenizer()
  party = lm_party("agent", temperature=0.0)
  scenes = airdialogue_env.make_scenarios(15, LM_BATCH, kb_size=1)
  play(party, ScriptedCustomer("chatty"), scenes, batch_size=LM_BATCH, max_turns=4)
  copy = lambda: jax.tree.map(jnp.copy, party.state)
  compacted = compact(copy())
  assert int(compacted.cache.index) == int(np.max(np.sum(party.state.cache.valid_BxS, axis=1)))
  assert int(compacted.cache.index) < int(party.state.cache.index)
  params = sampler.SamplingParams.make(LM_BATCH, max_new_tokens=LM_NEW, temperature=0.0,
                                       stop_tokens=[tok.eot_id])
  decoded = [sampler.generate(party.decoder, state, params, jax.random.key(0),
                              max_new_tokens=LM_NEW, pad_id=tok.pad_id,
                              hook=party._hook(LM_BATCH))[1] for state in (copy(), compacted)]
  np.testing.assert_array_equal(decoded[0], decoded[1])


def test_lm_party_rejects_a_history_it_did_not_write():
  party = lm_party("agent")
  scenes = airdialogue_env.make_scenarios(14, LM_BATCH, kb_size=1)
  party.reset([s.context("agent") for s in scenes], list(range(LM_BATCH)))
  history = [Turn("customer", "Hi, I need to book a flight.")]
  replies = party.respond([history] * LM_BATCH)
  edited = [history + [Turn("agent", r + " (edited)"), Turn("customer", "Ok.")] for r in replies]
  with pytest.raises(ValueError, match="row 0: the history does not continue"):
    party.respond(edited)


def test_booking_success_sees_an_agent_that_never_finds_a_flight():
  """An agent that answers no_flight to everyone scores on the scenarios without a flight
  and on none of the bookings: success > 0, booking success 0."""
  scenes = scenarios(n=40)
  oracle = play(ScriptedAgent("oracle"), ScriptedCustomer("volunteer"),
                scenes)
  summary = airdialogue_env.summarize(oracle)
  by_status = summary["success_by_expected_status"]
  assert sum(v["n"] for v in by_status.values()) == len(scenes)
  assert summary["booking_success"] == 1.0
  assert summary["booking_n"] == sum(by_status.get(s, {"n": 0})["n"] for s in ("book", "change"))
  assert 0 < summary["booking_n"] < len(scenes)
  shortcut = [dataclasses.replace(r, action=schema.Action("no_flight", r.action.name))
              for r in oracle]
  summary = airdialogue_env.summarize(shortcut)
  assert summary["success_rate"] == by_status["no_flight"]["n"] / len(scenes) > 0
  assert summary["booking_success"] == 0.0
