"""Tasks: AirDialogue table prefix, P4G donation statement, offline metrics, decoding, learning."""

import json
import math
import os
import types

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

from data_pipelines import tokenization
from data_pipelines.airdialogue import action_grammar, schema
from data_pipelines.dialogue import Dialogue, Turn, read_jsonl
from data_pipelines.persuasion import loader
from domains.airdialogue import task as airdialogue
from domains.persuasion import task as persuasion
from experiments.configs import bc_airdialogue_quick, quickstart
from ilql_dialogue import bc, metrics, tasks, text_metrics
from ilql_dialogue.models.config import ModelConfig
from workflows import offline_eval, quickstart as pipeline_lib
from workflows import train as launcher

F = airdialogue.FIELD


def flight(number, **changes):
  f = {"departure_airport": "DFW", "return_airport": "STL", "departure_month": "Apr",
       "return_month": "May", "departure_day": "29", "return_day": "1", "departure_time_num": 3,
       "return_time_num": 21, "class": "economy", "num_connections": 1, "price": 250,
       "flight_number": number, "airline": "UA"}
  f.update(changes)
  return f


def test_table_prefix_has_static_shape_and_marks_the_reservation():
  table = {"kb": [flight(1000), flight(1007, airline="Spirit", price=5600, **{"class": "business"}),
                  flight(1003, departure_time_num=13)], "reservation": 1007}
  fields = airdialogue.table_fields(table)
  assert fields.shape == (32, len(airdialogue.TABLE_FIELDS)) == (32, 16)
  assert fields.dtype == np.int32
  assert fields[:, F["row_type"]].tolist() == (
      [airdialogue.ROW_NO_FLIGHT] + [airdialogue.ROW_FLIGHT] * 3 + [airdialogue.ROW_PADDING] * 27
      + [airdialogue.ROW_RESERVATION])
  assert (fields[0, 1:] == 0).all() and (fields[4:31, 1:] == 0).all()  # No-flight and padding rows.
  first = fields[1]
  assert first[F["flight_slot"]] == 1 and first[F["airline"]] == schema.AIRLINES.index("UA") + 1
  assert first[F["departure_airport"]] == airdialogue.context_lib.AIRPORTS.index("DFW") + 1
  assert first[F["departure_month"]] == 4 and first[F["departure_day"]] == 29
  assert first[F["departure_hour"]] == 4 and first[F["return_hour"]] == 22
  morning, afternoon, evening = 1, 2, 3
  assert first[F["departure_time_of_day"]] == morning and first[F["return_time_of_day"]] == evening
  assert fields[3, F["departure_time_of_day"]] == afternoon
  assert first[F["class"]] == 1 and first[F["connections"]] == 2 and first[F["price_bucket"]] == 3
  reserved = fields[2]
  assert reserved[F["flight_slot"]] == 8 and reserved[F["class"]] == 2
  assert reserved[F["price_bucket"]] == airdialogue.NUM_PRICE_BUCKETS  # $5000 and up.
  np.testing.assert_array_equal(fields[-1, 1:], reserved[1:])  # The reservation row is flight 1007.
  sizes = np.asarray(airdialogue.TABLE_PREFIX.field_vocab_sizes)
  assert (fields < sizes).all() and (fields >= 0).all()

  no_reservation = airdialogue.table_fields({**table, "reservation": 0})
  assert no_reservation[-1, F["row_type"]] == airdialogue.ROW_RESERVATION
  assert (no_reservation[-1, 1:] == 0).all()
  np.testing.assert_array_equal(no_reservation[:-1], fields[:-1])


@pytest.mark.parametrize("table, message", [
    ({"kb": [flight(1000), flight(1001, departure_airport="XXX")], "reservation": 0},
     r"d7: field 'kb\[1\]\.departure_airport': 'XXX' is not one of"),
    ({"kb": [flight(1000)], "reservation": 1005},
     r"d7: field 'reservation': flight 1005 appears 0 times"),
    ({"kb": [flight(1031)], "reservation": 0},
     r"d7: field 'kb\[0\]\.flight_number': 1031 is not an integer in \[1000, 1029\]"),
    ({"kb": [{k: v for k, v in flight(1000).items() if k != "price"}], "reservation": 0},
     r"d7: field 'kb\[0\]\.price': missing"),
])
def test_unrepresentable_tables_name_the_field(table, message):
  with pytest.raises(airdialogue.TableFieldError, match=message):
    airdialogue.table_fields(table, "d7")


def action(status, flights=(), name="John Smith"):
  return schema.Action(status, name, tuple(flights))


def test_final_action_exact_match_on_hand_made_predictions():
  submitted = [action("book", [1012]), action("book", [1012]), action("no_flight"),
               action("book", [1003]), action("cancel")]
  expected = [action("book", [1012, 1020]), action("book", [1020]), action("no_flight"),
              action("book", [1003]), action("cancel")]
  decoded = [
      "Booked! [action] status=book flight=1012 name=john  smith [/action]",  # Both right.
      "[action] status=book flight=1012 name=John Smith [/action]",  # Submitted, not expected.
      "Sorry. [action] status=no_flight flight=none name=Jane Doe [/action]",  # Wrong name.
      "Done. [action] status=book flight=1003 name=John Smith",  # Never closed: unparsable.
      "I cancelled it.",  # No block: unparsable.
  ]
  got = airdialogue.final_action_metrics(decoded, submitted, expected)
  assert got == {"final_action/n": 5, "final_action/exact_match_submitted": 2 / 5,
                 "final_action/success_expected": 1 / 5, "final_action/status_acc_expected": 3 / 5,
                 "final_action/flight_acc_expected": 2 / 5, "final_action/name_acc_expected": 2 / 5,
                 "final_action/unparsable": 2, "final_action/unparsable_rate": 2 / 5}
  dialogue = Dialogue("d1", ("customer", "agent"), (Turn("agent", "x"),), meta={
      "action": submitted[0].to_json(), "expected_action": expected[0].to_json()})
  one = airdialogue.final_turn_metrics([dialogue], decoded[:1])
  assert one["final_action/success_expected"] == 1
  with pytest.raises(ValueError, match=r"'d1': field 'meta.expected_action'"):
    airdialogue.final_turn_metrics([Dialogue("d1", ("agent",), (), meta={
        "action": submitted[0].to_json()})], decoded[:1])


def p4g_dialogue(turns, donation=0.5):
  return Dialogue("p1", loader.ROLES, tuple(Turn(s, t) for s, t in turns),
                  outcome=donation / 2, meta={"donation": donation})


def test_donation_statement_round_trips():
  for amount in (0.0, 0.05, 0.5, 1.0, 1.999, 2.0):
    assert loader.parse_donation("I'll give. " + loader.format_donation(amount)) == round(amount, 2)
  assert loader.format_donation(0.5) == "[donate] 0.50 [/donate]"
  d = loader.with_donation_statement(p4g_dialogue([
      ("persuader", "Will you donate?"), ("persuadee", "Sure, 50 cents."),
      ("persuader", "Thanks!")]))
  assert [t.text for t in d.turns] == [
      "Will you donate?", "Sure, 50 cents. [donate] 0.50 [/donate]", "Thanks!"]
  assert d.meta["donation_statement"] == "[donate] 0.50 [/donate]"
  silent = loader.with_donation_statement(p4g_dialogue([("persuader", "Hi?")], donation=0.0))
  assert [(t.speaker, t.text) for t in silent.turns] == [
      ("persuader", "Hi?"), ("persuadee", "[donate] 0.00 [/donate]")]
  with pytest.raises(loader.PersuasionFormatError, match=r"'p1': field 'turns\[1\].text'"):
    loader.with_donation_statement(p4g_dialogue([("persuader", "a"), ("persuadee", "[donate] 1")]))
  for bad, why in (("no statement", "no '\\[donate\\]"), ("[donate] 1.00", "never closed"),
                   ("[donate] lots [/donate]", "not an amount"),
                   ("[donate] 2.50 [/donate]", "exceeds"),
                   ("[donate] 1 [/donate] [donate] 2 [/donate]", "2 donation statements")):
    with pytest.raises(loader.DonationParseError, match=why):
      loader.parse_donation(bad)


def test_donation_error_on_hand_made_cases():
  decoded = ["[donate] 0.50 [/donate]", "ok [donate] 2.00 [/donate]", "no idea",
             "[donate] 0.00 [/donate]"]
  got = persuasion.donation_metrics(decoded, [1.0, 0.5, 0.3, 0.0])
  assert got["donation/n"] == 4 and got["donation/unparsable"] == 1
  assert got["donation/unparsable_rate"] == 0.25
  assert got["donation/mae"] == pytest.approx((0.5 + 1.5 + 0.0) / 3)
  assert got["donation/mean_stated"] == pytest.approx(2.5 / 3)
  assert got["donation/mean_real"] == pytest.approx(1.8 / 4)
  nothing = persuasion.donation_metrics(["?"], [1.0])
  assert np.isnan(nothing["donation/mae"]) and nothing["donation/unparsable"] == 1


def write_tiny_p4g(data_dir, num_dialogues=20, seed=0):
  """Persuasion for Good CSVs in the real format, small enough for a test."""
  rng = np.random.default_rng(seed)
  os.makedirs(os.path.join(data_dir, "FullData"), exist_ok=True)
  lines, info = [",Unit,Turn,B4,B2"], ["B2,B3,B4,B6,B7,extrovert.x,age.x,sex.x"]
  words = ["children", "donate", "help", "save", "money", "today", "yes", "no", "maybe", "good"]
  for i in range(num_dialogues):
    for turn in range(int(rng.integers(2, 5))):
      for role in (0, 1):
        text = " ".join(rng.choice(words, int(rng.integers(3, 8))))
        lines.append(f"{len(lines) - 1},{text},{turn},{role},dlg{i}")
    donation = float(rng.choice([0.0, 0.25, 1.0, 2.0, 5.0]))
    info.append(f"dlg{i},u{2 * i},0,0.0,3,3.2,30.0,Male")
    info.append(f"dlg{i},u{2 * i + 1},1,{donation},3,{rng.uniform(1, 5):.3f},41.0,Female")
  for name, rows in (("full_dialog.csv", lines), ("full_info.csv", info)):
    with open(os.path.join(data_dir, "FullData", name), "w") as f:
      f.write("\n".join(rows) + "\n")
  return str(data_dir)


def test_p4g_build_keeps_the_split_held_out_and_states_donations(tmp_path):
  data_dir = write_tiny_p4g(tmp_path / "p4g")
  root = str(tmp_path / "run")
  built = persuasion.build_datasets(root, context="text", max_length=256, data_dir=data_dir,
                                    vocab_size=300)
  splits = {s: [json.loads(line) for line in open(p)]
            for s, p in persuasion.corpus_paths(root).items()}
  ids = {s: {d["dialogue_id"] for d in ds} for s, ds in splits.items()}
  assert len(ids["eval"]) == 2 and len(ids["train"]) == 18 and not ids["train"] & ids["eval"]
  _, expected_eval = loader.train_test_split(loader.load_dialogues(data_dir, with_labels=False))
  assert ids["eval"] == {d.dialogue_id for d in expected_eval}
  for d in splits["train"] + splits["eval"]:
    last = [t["text"] for t in d["turns"] if t["speaker"] == "persuadee"][-1]
    assert loader.parse_donation(last) == d["meta"]["donation"] <= 2.0
  tokenizer, loaded = tasks.load_role_datasets(built["persuadee"])
  assert set(built) == {"persuader", "persuadee"} and len(loaded["eval"]) == 2
  assert all(tokenizer.encode(m)[-1] == tokenizer.marker_ids[m]  # Single-id markers.
             for m in persuasion.MARKERS)
  first = loaded["train"][0]
  assert first["input_ids"][0] == tokenizer.context_id  # context="text": the persona is read.
  assert "age=41" in tokenizer.decode(first["input_ids"][:first["input_ids"].index(
      tokenizer.dialogue_id)])


def tiny_airdialogue_root(root, train=48, eval_=8, vocab=400):
  """The pipeline's AirDialogue stages (corpora, tokenizer) at a test's size."""
  config = quickstart.get_config()
  config.airdialogue.update(train_dialogues=train, eval_dialogues=eval_)
  config.tokenizer.vocab_size = vocab
  paths = pipeline_lib.generate_airdialogue(config, root)
  pipeline_lib.train_tokenizer(config, paths["train"], os.path.join(root, "tokenizer"))
  return root


def agent_prefix_task(root):
  """The agent's prefix Task without its MDP datasets (decoding reads only dialogues)."""
  return tasks.Task(
      name="airdialogue", role="agent", context="prefix",
      tokenizer=tokenization.load_tokenizer(os.path.join(root, "tokenizer")), datasets={},
      dialogue_paths=airdialogue.dialogue_paths(root),
      serialize_context=airdialogue.to_dialogue.serialize_context, include_context=False,
      prefix=airdialogue.TABLE_PREFIX, final_turn_metrics=airdialogue.final_turn_metrics)


def test_final_turn_prompt_ends_with_the_speaker_token_of_the_last_turn(tmp_path):
  task = agent_prefix_task(tiny_airdialogue_root(str(tmp_path), train=8, eval_=4))
  dialogue = next(read_jsonl(task.dialogue_paths["eval"]))
  prompt = offline_eval.final_turn_prompt(dialogue, task)
  assert prompt[0] == task.tokenizer.dialogue_id  # Prefix context: no table tokens.
  assert prompt[-1] == task.tokenizer.speaker_token_ids["agent"]
  last = max(i for i, t in enumerate(dialogue.turns) if t.speaker == "agent")
  history = "".join(f"<|{t.speaker}|> {t.text}<|eot|>" for t in dialogue.turns[:last])
  assert task.tokenizer.decode(prompt) == f"<|dialogue|>{history}<|agent|>"


def test_batched_greedy_decoding_matches_a_naive_loop(tmp_path):
  """decode_final_turns (sorted, left-padded, bucketed, KV cache, prefix) == one row at a time
  with a full forward per token."""
  task = agent_prefix_task(tiny_airdialogue_root(str(tmp_path), train=16, eval_=5, vocab=1024))
  cfg = ModelConfig.llama(vocab_size=1024, num_layers=1, d_model=32, num_heads=2, head_dim=16,
                          max_seq_len=1024, prefix_field_vocab_sizes=task.prefix.field_vocab_sizes,
                          prefix_num_rows=task.prefix.num_rows, init_std=0.5)
  model = bc.PrefixLM(cfg, rngs=nnx.Rngs(3))
  dialogues = list(read_jsonl(task.dialogue_paths["eval"]))
  prompts = [offline_eval.final_turn_prompt(d, task) for d in dialogues]
  assert len({len(p) for p in prompts}) > 1  # Rows of a batch really are padded.
  new_tokens = 5
  decoded = offline_eval.decode_final_turns(model, task, dialogues, prompts, batch_size=4,
                                            max_new_tokens=new_tokens)
  width = max(len(p) for p in prompts) + new_tokens

  @nnx.jit
  def next_token(model, ids_1xL, length, fields_1xPxF):
    mask_1xL = jnp.arange(width)[None] < length  # Right padding: causal attention ignores it.
    hidden, _ = model(ids_1xL, jnp.arange(width)[None], mask_1xL,
                      prefix_BxPxD=model.embed_prefix(fields_1xPxF))
    return jnp.argmax(model.logits(hidden[0, length - 1]))

  for d, prompt, text in zip(dialogues, prompts, decoded):
    fields = jnp.asarray(airdialogue.table_fields(d.context["agent"])[None])
    ids = list(prompt)
    for _ in range(new_tokens):
      padded = jnp.asarray([ids + [0] * (width - len(ids))], jnp.int32)
      ids.append(int(next_token(model, padded, len(ids), fields)))
      if ids[-1] == task.tokenizer.eot_id:
        ids.pop()
        break
    assert text == task.tokenizer.decode(ids[len(prompt):])


def test_turn_prompts_hold_the_true_history_before_each_role_turn(tmp_path):
  task = agent_prefix_task(tiny_airdialogue_root(str(tmp_path), train=8, eval_=3))
  for dialogue in read_jsonl(task.dialogue_paths["eval"]):
    prompts = offline_eval.turn_prompts(dialogue, task)
    turns = [i for i, t in enumerate(dialogue.turns) if t.speaker == "agent"]
    assert len(prompts) == len(turns) > 1
    for k, (prompt, i) in enumerate(zip(prompts, turns)):
      history = "".join(f"<|{t.speaker}|> {t.text}<|eot|>" for t in dialogue.turns[:i])
      assert task.tokenizer.decode(prompt) == f"<|dialogue|>{history}<|agent|>"
      np.testing.assert_array_equal(offline_eval.final_turn_prompt(dialogue, task, k), prompt)


def test_next_utterance_metrics_score_every_role_turn_against_its_own_words(tmp_path,
                                                                           monkeypatch):
  """A decoder that answers each prompt with its held-out turn scores BLEU 100 on exactly the
  turns that fit; action blocks are not words; an empty decoder scores 0 and has no n-grams."""
  task = agent_prefix_task(tiny_airdialogue_root(str(tmp_path), train=8, eval_=4))
  dialogues = list(read_jsonl(task.dialogue_paths["eval"]))
  agent_id = task.tokenizer.speaker_token_ids["agent"]
  lengths = sorted(len(p) for d in dialogues for p in offline_eval.turn_prompts(d, task))
  config = ml_collections.ConfigDict({"offline_eval": offline_eval.default_config()})
  config.offline_eval.update(max_dialogues=3, max_new_tokens=8)
  # Prompts longer than the median do not fit this model's positions.
  model = types.SimpleNamespace(cfg=types.SimpleNamespace(
      max_seq_len=lengths[len(lengths) // 2] + config.offline_eval.max_new_tokens))

  def held_out_turns(model, task, turn_dialogues, prompts, batch_size, max_new_tokens):
    del model, batch_size, max_new_tokens
    return [[t.text for t in d.turns if t.speaker == task.role][int(np.sum(p == agent_id)) - 1]
            for d, p in zip(turn_dialogues, prompts)]

  monkeypatch.setattr(offline_eval, "decode_final_turns", held_out_turns)
  got = offline_eval.next_utterance_metrics(model, task, config, "eval")
  turns = [t.text for d in dialogues[:3] for t in d.turns if t.speaker == "agent"]
  assert got["next_utterance/dialogues"] == 3
  assert got["next_utterance/too_long"] > 0
  assert got["next_utterance/evaluated"] + got["next_utterance/too_long"] == len(turns)
  assert got["next_utterance/bleu"] == pytest.approx(100.0)
  assert got["next_utterance/distinct_1"] == got["next_utterance/reference_distinct_1"]
  assert any(action_grammar.contains_action(t) for t in turns)
  spoken = [action_grammar.strip_action(t) for t in turns]
  model.cfg.max_seq_len = 10**6  # Every turn fits: the references are the spoken words.
  got = offline_eval.next_utterance_metrics(model, task, config, "eval")
  assert got["next_utterance/evaluated"] == len(turns)
  for n in (1, 2):
    assert got[f"next_utterance/reference_distinct_{n}"] == text_metrics.distinct_n(spoken, n)

  monkeypatch.setattr(offline_eval, "decode_final_turns", lambda *args: [""] * len(args[3]))
  got = offline_eval.next_utterance_metrics(model, task, config, "eval")
  assert got["next_utterance/bleu"] == 0.0 and math.isnan(got["next_utterance/distinct_1"])


def test_bc_learns_on_a_tiny_airdialogue_corpus(tmp_path):
  """A one-layer BC agent with the table prefix, 100 steps: the held-out loss falls clearly."""
  root = tiny_airdialogue_root(str(tmp_path / "data"), train=64, eval_=16)
  config = bc_airdialogue_quick.get_config()
  config.task.root = root
  config.model.update(num_layers=1, d_model=64, num_heads=4, num_kv_heads=2, head_dim=16,
                      mlp_dim=128)
  config.data.update(bucket_boundaries=(384,), eval_batches=2)  # One shape: one compile.
  config.train.update(steps=100, batch_size=8, log_every=50, eval_every=0, checkpoint_every=100,
                      progress_bar=False, eval_at_start=True)
  config.online_eval.num_dialogues = 0  # The held-out loss is what this test measures.
  config.selection.metric = ""
  config.optim.update(learning_rate=1e-2, warmup_steps=10)
  workdir = str(tmp_path / "run")
  final = launcher.run(config, workdir)
  assert isinstance(final.model, bc.PrefixLM)
  records = metrics.read_metrics(os.path.join(workdir, "metrics.jsonl"))
  evals = [r for r in records if r["split"] == "eval"]
  assert [r["step"] for r in evals] == [0, 100]
  assert evals[0]["loss"] > 5.5  # ~log(512) before training.
  assert evals[-1]["loss"] < 0.5 * evals[0]["loss"]
  assert evals[-1]["token_accuracy"] > 0.3
