"""The token-level MDP of one role: layout, off-by-one convention, truncation, storage, CLI."""

import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from data_pipelines import mdp
from data_pipelines.mdp_dataset import (build_dataset, dataset_stats, dialogue_part,
                                        load_mdp_dataset, parse_part)
from data_pipelines.dialogue import Dialogue, Turn, read_jsonl, write_jsonl
from data_pipelines.tokenization import DialogueTokenizer, train_tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROLES = ("agent", "customer")
TURNS = (
    Turn("customer", "Hi, I need a flight to Boston next week.", reward=-0.1),
    Turn("agent", "Sure. What dates work for you?", reward=0.25),
    Turn("customer", "Leaving on the 12th, back on the 14th."),
    Turn("agent", "I found a Delta flight for 300 dollars."),
    Turn("customer", "Book it please."),
    Turn("agent", "Done, your flight is booked.", reward=0.5),
    Turn("customer", "Thanks, bye!"),
)
CONTEXT = {
    "agent": {"flights": [1001, 1002], "reservation": 0},
    "customer": {"goal": "book", "secret": "ZZTOP"},
}


@functools.cache
def tok() -> DialogueTokenizer:
  corpus = [t.text for t in TURNS] + [json.dumps(c) for c in CONTEXT.values()]
  return train_tokenizer(corpus * 10, ROLES + ("narrator",), vocab_size=320)


def dialogue(turns=TURNS, outcome=1.0, dialogue_id="d0") -> Dialogue:
  return Dialogue(dialogue_id, ROLES, tuple(turns), CONTEXT, outcome)


def turn_spans(ex, tokenizer):
  """(speaker, speaker-token position, <|eot|> position) per turn, found from the special ids alone."""
  ids = ex["input_ids"]
  by_id = {i: r for r, i in tokenizer.speaker_token_ids.items()}
  starts = [(by_id[i], p) for p, i in enumerate(ids) if i in by_id]
  ends = [p for p, i in enumerate(ids) if i == tokenizer.eot_id]
  return [(speaker, s, e) for (speaker, s), e in zip(starts, ends)]


def test_layout_actions_rewards_and_next_states():
  ex = mdp.dialogue_to_example(dialogue(), tok(), "agent", 512)
  t = tok()
  ids = ex["input_ids"]
  assert ids[0] == t.context_id
  dialogue_pos = list(ids).index(t.dialogue_id)
  assert t.decode(ids[1:dialogue_pos]) == mdp.json_context("agent", CONTEXT["agent"])
  spans = turn_spans(ex, t)
  assert [s for s, _, _ in spans] == [turn.speaker for turn in TURNS]
  assert [t.decode(ids[s + 1 : e]) for _, s, e in spans] == [turn.text for turn in TURNS]
  assert ex["length"] == ex["untruncated_length"] == len(ids) and not ex["truncated"]
  for name, dtype in mdp.TOKEN_DTYPES.items():
    assert ex[name].dtype == dtype and ex[name].shape == ids.shape, name

  agent = [(s, e) for speaker, s, e in spans if speaker == "agent"]
  expected_actions = np.zeros(len(ids), bool)
  for s, e in agent:
    expected_actions[s + 1 : e + 1] = True  # Text and <|eot|>; the speaker token s is forced.
  np.testing.assert_array_equal(ex["action_mask"], expected_actions)
  np.testing.assert_array_equal(np.flatnonzero(ex["utterance_end"]), [e for _, e in agent])
  assert set(np.flatnonzero(ex["rewards"])) <= {e for _, e in agent}
  np.testing.assert_allclose(ex["rewards"][[e for _, e in agent]], [0.25, 0.0, 0.5 + 1.0])  # Outcome at the end.
  np.testing.assert_array_equal(np.flatnonzero(ex["terminal"]), [agent[-1][1]])
  np.testing.assert_array_equal(ex["speaker_ids"][:dialogue_pos + 1], mdp.CONTEXT_SPEAKER)
  for speaker, s, e in spans:
    np.testing.assert_array_equal(ex["speaker_ids"][s : e + 1], t.roles.index(speaker) + 1)

  for k, (s, e) in enumerate(agent):
    # Token level: inside an utterance the next state emits token i+1 (state t -> t+1).
    np.testing.assert_array_equal(ex["next_token_index"][s + 1 : e], np.arange(s + 1, e))
    following = agent[k + 1][0] if k + 1 < len(agent) else -1  # Next agent speaker token = its decision state.
    assert ex["next_token_index"][e] == following
    np.testing.assert_array_equal(ex["next_utterance_index"][s + 1 : e + 1], following)
    if following >= 0:  # The customer's tokens in between are skipped.
      assert set(ex["speaker_ids"][e + 1 : following]) == {t.roles.index("customer") + 1}
  assert np.all(ex["next_token_index"][~ex["action_mask"]] == -1)
  assert np.all(ex["next_utterance_index"][~ex["action_mask"]] == -1)


def walk(ex, next_key):
  """Follows next-state indices from the first decision state; returns visited actions and return."""
  state = int(np.flatnonzero(ex["action_mask"])[0]) - 1  # Action i is chosen in state i - 1.
  visited, total = [], 0.0
  while True:
    action = state + 1
    assert ex["action_mask"][action], f"state {state} is not a decision state"
    visited.append(action)
    if next_key == "next_utterance_index":  # One utterance = one action: its reward is the sum.
      end = action + int(np.argmax(ex["utterance_end"][action:]))
      total += ex["rewards"][action : end + 1].sum()
      action = end
    else:
      total += ex["rewards"][action]
    if ex["terminal"][action]:
      return visited, total
    state = int(ex[next_key][action])
    assert action <= state < len(ex["input_ids"])


def test_next_indices_chain_through_every_decision_state():
  ex = mdp.dialogue_to_example(dialogue(), tok(), "agent", 512)
  visited, total = walk(ex, "next_token_index")
  np.testing.assert_array_equal(visited, np.flatnonzero(ex["action_mask"]))
  assert total == pytest.approx(0.25 + 0.5 + 1.0)
  firsts = [s + 1 for speaker, s, _ in turn_spans(ex, tok()) if speaker == "agent"]
  visited, total = walk(ex, "next_utterance_index")
  assert visited == firsts
  assert total == pytest.approx(1.75)


def test_roles_get_complementary_action_masks_over_turn_text():
  agent = mdp.dialogue_to_example(dialogue(), tok(), "agent", 512, include_context=False)
  customer = mdp.dialogue_to_example(dialogue(), tok(), "customer", 512, include_context=False)
  np.testing.assert_array_equal(agent["input_ids"], customer["input_ids"])
  assert not np.any(agent["action_mask"] & customer["action_mask"])
  forced = np.isin(agent["input_ids"], [*tok().special_ids - {tok().eot_id}])
  np.testing.assert_array_equal(agent["action_mask"] | customer["action_mask"], ~forced)
  # The customer's own turn reward is on its side only; the outcome is credited to both.
  customer_ends = [e for s, _, e in turn_spans(customer, tok()) if s == "customer"]
  np.testing.assert_allclose(customer["rewards"][customer_ends], [-0.1, 0, 0, 1.0])
  assert customer["rewards"].sum() == pytest.approx(0.9)


def test_private_context_is_only_the_role_own():
  ex = mdp.dialogue_to_example(dialogue(), tok(), "agent", 512)
  assert "ZZTOP" not in tok().decode(ex["input_ids"])
  assert json.loads(ex["context_json"]) == CONTEXT["agent"]
  custom = mdp.dialogue_to_example(
      dialogue(), tok(), "customer", 512, serialize_context=lambda role, c: f"{role} wants to {c['goal']}")
  ids = custom["input_ids"]
  assert tok().decode(ids[1 : list(ids).index(tok().dialogue_id)]) == "customer wants to book"
  assert json.loads(custom["context_json"]) == CONTEXT["customer"]
  bare = mdp.dialogue_to_example(dialogue(), tok(), "agent", 512, include_context=False)
  assert bare["input_ids"][0] == tok().dialogue_id
  assert len(bare["input_ids"]) < len(ex["input_ids"])


def test_truncation_inside_the_last_utterance_bootstraps():
  full = mdp.dialogue_to_example(dialogue(), tok(), "agent", 512)
  s, e = [(s, e) for speaker, s, e in turn_spans(full, tok()) if speaker == "agent"][-1]
  cut = (s + 1 + e) // 2 + 1  # Window ends inside the last agent utterance.
  ex = mdp.dialogue_to_example(dialogue(), tok(), "agent", cut)
  assert ex["truncated"] and ex["length"] == cut and ex["untruncated_length"] == full["length"]
  assert not ex["terminal"].any()
  for name in mdp.TOKEN_COLUMNS:
    if name not in mdp.INDEX_COLUMNS + ("terminal", "rewards"):
      np.testing.assert_array_equal(ex[name], full[name][:cut], err_msg=name)
  last = int(np.flatnonzero(ex["action_mask"])[-1])
  assert last == cut - 1 and ex["next_token_index"][last] == last  # Bootstraps from h_{T-1}.
  assert ex["rewards"].sum() == pytest.approx(0.25)  # Turn 2's reward; no outcome, no cut rewards.
  assert np.all(ex["next_token_index"] < cut) and np.all(ex["next_utterance_index"] < cut)
  td = mdp.td_mask(ex["action_mask"], ex["terminal"], ex["next_token_index"])
  np.testing.assert_array_equal(td, ex["action_mask"])


def test_truncation_after_an_utterance_end_masks_the_unobservable_transition():
  full = mdp.dialogue_to_example(dialogue(), tok(), "agent", 512)
  spans = turn_spans(full, tok())
  _, _, first_agent_end = spans[1]
  cut = spans[2][2]  # Window ends inside the customer's reply: the agent's next state is not in it.
  ex = mdp.dialogue_to_example(dialogue(), tok(), "agent", cut)
  assert ex["truncated"] and not ex["terminal"].any()
  assert ex["action_mask"][first_agent_end] and ex["next_token_index"][first_agent_end] == -1
  td = mdp.td_mask(ex["action_mask"], ex["terminal"], ex["next_token_index"])
  np.testing.assert_array_equal(np.flatnonzero(ex["action_mask"] & ~td), [first_agent_end])


def test_cutting_only_the_other_speakers_last_turn_still_ends_the_episode():
  full = mdp.dialogue_to_example(dialogue(), tok(), "agent", 512)
  last_agent_end = [e for speaker, _, e in turn_spans(full, tok()) if speaker == "agent"][-1]
  ex = mdp.dialogue_to_example(dialogue(), tok(), "agent", last_agent_end + 3)
  assert not ex["truncated"] and ex["terminal"][last_agent_end]
  assert ex["untruncated_length"] > ex["length"]
  assert ex["rewards"][last_agent_end] == pytest.approx(1.5)


def test_consecutive_turns_and_empty_text():
  turns = (Turn("agent", "Hello?"), Turn("agent", ""), Turn("customer", "Hi."), Turn("agent", "Bye."))
  ex = mdp.dialogue_to_example(dialogue(turns, outcome=-1.0), tok(), "agent", 512)
  (_, s0, e0), (_, s1, e1), _, (_, s3, e3) = turn_spans(ex, tok())
  assert e1 == s1 + 1 and ex["action_mask"][e1] and ex["utterance_end"][e1]  # Empty turn: <|eot|> only.
  assert ex["next_token_index"][e0] == s1 == e0 + 1  # The role's own next speaker token.
  assert ex["next_token_index"][e1] == s3
  assert ex["rewards"][e3] == -1.0 and ex["terminal"][e3]


def test_bad_inputs_name_the_dialogue_and_field():
  with pytest.raises(ValueError, match=r"'d0'.*roles.*'pilot'"):
    mdp.dialogue_to_example(dialogue(), tok(), "pilot", 512)
  stranger = Dialogue("d9", ("agent", "pilot"), (Turn("agent", "hi"),))
  with pytest.raises(ValueError, match=r"'d9'.*no speaker token.*pilot"):
    mdp.dialogue_to_example(stranger, tok(), "agent", 512)
  with pytest.raises(mdp.NoActionsError, match="'d0'"):
    mdp.dialogue_to_example(dialogue(), tok(), "agent", 20)  # The context prefix fills the window.
  silent = dialogue([Turn("customer", "anyone?")], dialogue_id="silent")
  with pytest.raises(mdp.NoActionsError, match="'silent'"):
    mdp.dialogue_to_example(silent, tok(), "agent", 512)


def corpus(n=12):
  rng = np.random.default_rng(0)
  out = []
  for k in range(n):
    turns = [Turn(("customer", "agent")[j % 2], TURNS[int(rng.integers(len(TURNS)))].text)
             for j in range(2 + k % 5)]
    out.append(dialogue(turns, outcome=float(k % 3), dialogue_id=f"d{k}"))
  return out


def test_build_dataset_save_load_round_trip(tmp_path):
  dialogues = corpus()
  ds = build_dataset(dialogues, tok(), "agent", 96, cache_dir=str(tmp_path / "cache"))
  ds.save_to_disk(str(tmp_path / "ds"))
  loaded = load_mdp_dataset(str(tmp_path / "ds")).with_format("numpy")
  assert len(loaded) == len(dialogues)
  for d, row in zip(dialogues, loaded):
    ex = mdp.dialogue_to_example(d, tok(), "agent", 96)
    for name, value in ex.items():
      np.testing.assert_array_equal(row[name], value, err_msg=f"{d.dialogue_id}.{name}")
  stats = dataset_stats(loaded)
  lengths = [mdp.dialogue_to_example(d, tok(), "agent", 96)["length"] for d in dialogues]
  assert stats["examples"] == len(dialogues) and stats["tokens"] == sum(lengths)
  assert 0 < stats["action_token_fraction"] < 1 and 0 < stats["truncated_fraction"] < 1
  assert stats["terminal_fraction"] == pytest.approx(1 - stats["truncated_fraction"])


def test_dialogue_parts_are_disjoint_cover_everything_and_keep_dialogues_whole(tmp_path):
  dialogues = corpus(24)
  ds = build_dataset(dialogues, tok(), "agent", 96, cache_dir=str(tmp_path / "cache"))
  ds = ds.add_item({**ds[0]})  # A second window of dialogue 0: it must go where the first goes.
  parts = [dialogue_part(ds, k, 3) for k in range(3)]
  ids = [p["dialogue_id"] for p in parts]
  assert sorted(i for part in ids for i in part) == sorted(ds["dialogue_id"])
  assert all(set(a).isdisjoint(b) for a, b in ((ids[0], ids[1]), (ids[0], ids[2]),
                                                (ids[1], ids[2])))
  assert all(part.count(ds[0]["dialogue_id"]) in (0, 2) for part in ids)
  assert all(len(set(part)) >= 3 for part in ids)  # A hash split, not one part taking all.
  assert dialogue_part(ds, 1, 3)["dialogue_id"] == ids[1]  # The same on every call.
  assert parse_part("") is None and parse_part("1/2") == (1, 2)
  for bad in ("2/2", "1", "a/2", "-1/2"):
    with pytest.raises(ValueError, match="expected K/N"):
      parse_part(bad)


def test_build_dataset_never_drops_silently(tmp_path):
  dialogues = corpus(3) + [dialogue([Turn("customer", "anyone?")], dialogue_id="silent")]
  with pytest.raises(mdp.NoActionsError, match="silent"):
    build_dataset(dialogues, tok(), "agent", 96, cache_dir=str(tmp_path / "a"))
  skipped = []
  ds = build_dataset(dialogues, tok(), "agent", 96, cache_dir=str(tmp_path / "b"),
                     on_no_actions=lambda dialogue_id, why: skipped.append(dialogue_id))
  assert skipped == ["silent"] and ds["dialogue_id"][:] == ["d0", "d1", "d2"]
  with pytest.raises(ValueError, match="2 dialogues read, none kept"):
    build_dataset(dialogues[3:] * 2, tok(), "agent", 96, cache_dir=str(tmp_path / "c"),
                  on_no_actions=lambda *_: None)


def test_build_dataset_reports_bad_records_with_file_and_line(tmp_path):
  path = tmp_path / "bad.jsonl"
  write_jsonl(str(path), corpus(2))
  with open(path, "a") as f:
    f.write('{"dialogue_id": "x", "roles": ["agent"], "turns": [{"speaker": "pilot", "text": "hi"}]}\n')
  with pytest.raises(ValueError, match=r"bad.jsonl:3: field 'turns\[0\].speaker'"):
    build_dataset(read_jsonl(str(path)), tok(), "agent", 96, cache_dir=str(tmp_path / "cache"))


def test_load_rejects_a_foreign_dataset(tmp_path):
  import datasets
  datasets.Dataset.from_dict({"text": ["a"]}).save_to_disk(str(tmp_path / "other"))
  with pytest.raises(ValueError, match="input_ids"):
    load_mdp_dataset(str(tmp_path / "other"))


def test_cli_trains_tokenizer_builds_and_reports(tmp_path):
  path = str(tmp_path / "dialogues.jsonl")
  write_jsonl(path, corpus())
  out = subprocess.run(
      [sys.executable, "-m", "data_pipelines.build_dataset", f"--dialogues={path}",
       f"--tokenizer={tmp_path / 'tok'}", "--role=customer", "--max_length=64", f"--out={tmp_path / 'ds'}",
       "--train_tokenizer", "--vocab_size=300"],
      cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
  assert out.returncode == 0, out.stderr
  stats = json.loads(out.stdout)
  ds = load_mdp_dataset(str(tmp_path / "ds"))
  assert stats["examples"] == len(ds) == 12 and stats["skipped"] == 0
  assert stats["tokens"] == sum(ds["length"][:]) and stats["vocab_size"] <= 300
  assert set(ds["role"][:]) == {"customer"}
  assert os.path.exists(tmp_path / "ds" / "tokenizer" / "tokenizer.json")


def test_parallel_build_is_the_one_process_dataset_row_for_row(tmp_path):
  """build_dataset_from_file with 2 workers: contiguous blocks, concatenated in order; a
  dialogue without actions is an error, or skipped and reported by id."""
  from data_pipelines.mdp_dataset import build_dataset_from_file

  path = str(tmp_path / "d.jsonl")
  dialogues = corpus(7) + [dialogue([Turn("customer", "anyone?")], dialogue_id="silent")] + corpus(3)
  write_jsonl(path, dialogues)
  with pytest.raises(mdp.NoActionsError, match="silent"):
    build_dataset_from_file(path, tok(), "agent", 96, num_proc=2, cache_dir=str(tmp_path / "a"))
  one, skipped_one = build_dataset_from_file(path, tok(), "agent", 96, skip_no_actions=True,
                                             cache_dir=str(tmp_path / "b"))
  two, skipped_two = build_dataset_from_file(path, tok(), "agent", 96, num_proc=2,
                                             skip_no_actions=True, cache_dir=str(tmp_path / "c"))
  assert skipped_one == skipped_two == ["silent"]
  assert len(one) == len(two) == 10
  assert one.to_dict() == two.to_dict()


def test_read_jsonl_reads_only_its_lines(tmp_path):
  path = str(tmp_path / "d.jsonl")
  write_jsonl(path, corpus(5))
  assert [d.dialogue_id for d in read_jsonl(path, (2, 4))] == ["d1", "d2"]


def test_parallel_build_names_a_bad_record(tmp_path):
  from data_pipelines.mdp_dataset import build_dataset_from_file

  path = tmp_path / "bad.jsonl"
  write_jsonl(str(path), corpus(4))
  with open(path, "a") as f:
    f.write('{"dialogue_id": "x", "roles": ["agent"], "turns": [{"speaker": "pilot", "text": "hi"}]}\n')
  with pytest.raises(ValueError, match=r"bad.jsonl:5: field 'turns\[0\].speaker'"):
    build_dataset_from_file(str(path), tok(), "agent", 96, num_proc=2,
                            cache_dir=str(tmp_path / "cache"))


def test_a_block_that_keeps_nothing_still_reports_its_skipped(tmp_path):
  from data_pipelines.mdp_dataset import build_dataset_from_file

  path = str(tmp_path / "d.jsonl")
  write_jsonl(path, corpus(1) + [dialogue([Turn("customer", "anyone?")], dialogue_id="silent")])
  ds, skipped = build_dataset_from_file(path, tok(), "agent", 96, num_proc=2,
                                        skip_no_actions=True, cache_dir=str(tmp_path / "c"))
  assert ds["dialogue_id"][:] == ["d0"] and skipped == ["silent"]
