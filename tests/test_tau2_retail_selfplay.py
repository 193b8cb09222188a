"""τ² retail scripted parties: the shared wording, the customer built from a task, the oracle
agent that follows the policy, and their dialogues (tiny shop, then all 114 real tasks)."""

from __future__ import annotations

import pytest

from domains.tau2_retail import db as db_lib
from domains.tau2_retail import snapshot as snapshot_lib
from domains.tau2_retail import (agents, phrases, policy_audit, reading, selfplay, tasks,
                                 tools, turns, users)
from test_tau2_retail_tools import BIG, BLUE, RED, SMALL, tiny_shop

ADDRESS = {"address1": "9 Elm St", "address2": "", "city": "Austin", "state": "TX",
           "country": "USA", "zip": "78701"}
# The real tasks whose communicate_info the oracle does not say: each asks about something the
# structured wishes do not hold (a count of t-shirt options, a tracking number, a gift card's
# balance, the prices of alternatives, what the customer paid before), which only the free-text
# reason_for_call describes.
UNSAID = {"2", "3", "4", "19", "21", "24", "29", "30", "31", "32", "36", "37", "38", "39", "40",
          "43", "46", "47", "59", "60", "62", "63", "67", "68", "76", "89", "103", "104"}


@pytest.fixture(scope="module")
def data_dir(tau2_data_dir) -> str:
  return tau2_data_dir


def _action(i: int, name: str, **arguments) -> tasks.Action:
  return tasks.Action(f"t_{i}", name, arguments)


def _task(*actions: tasks.Action, known_info="You are Ann Lee in zip code 10001.",
          communicate=()) -> tasks.Task:
  scenario = tasks.Scenario("(not read by the scripted customer)", known_info, None, ".",
                            "retail")
  return tasks.Task("t", tasks.TRAIN, scenario, tuple(actions), tuple(communicate), (),
                    ("DB", "COMMUNICATE"))


def _shop(extra_pending_shirt: bool = False) -> snapshot_lib.Snapshot:
  shop = tiny_shop()
  if extra_pending_shirt:  # A second pending order of one blue T-shirt: #W2 is ambiguous.
    shop["orders"]["#W5"] = dict(shop["orders"]["#W2"], order_id="#W5")
    shop["users"]["ann_lee_1"]["orders"].append("#W5")
  return snapshot_lib.Snapshot(db_lib.from_json(shop))


def test_the_wording_reads_back():
  items = [("T-Shirt", {"color": "blue", "size": "M"}), ("T-Shirt", {"color": "blue", "size": "M"}),
           ("Desk Lamp", {"brightness": "low", "power source": "USB"})]
  held = items + [("T-Shirt", {"color": "red", "size": "M"}), ("Water Bottle", {"capacity": "1L"})]
  for kind in phrases.WISH_TOOLS:
    names = ["T-Shirt", "Water Bottle", "Desk Lamp"] if kind in phrases.ORDER_LEVEL else []
    listed = items if kind in phrases.ITEM_LEVEL else []
    read_kind, said = reading.wish(phrases.wish_text(kind, names, listed))
    assert read_kind == kind
    if names:
      assert reading.products(said, {n for n, _ in held} | {"Laptop"}) == names
    if listed:
      assert reading.items(said, held) == listed
  assert reading.wish("Hello there.") is None
  assert reading.identity(phrases.email_text("a.b@example.com")) == {"email": "a.b@example.com"}
  assert reading.identity(phrases.name_zip_text("Ann", "Lee", "10001")) == {
      "first_name": "Ann", "last_name": "Lee", "zip": "10001"}
  assert reading.address(phrases.address_text(ADDRESS)) == ADDRESS
  assert reading.address("The new address is somewhere.") is None
  for source, key in (("credit_card", "1234"), ("paypal", ""), ("gift_card", "gift_card_7")):
    text = f"Please use {phrases.describe_payment(source, key or 'paypal_1', key)}."
    assert reading.payment(text) == phrases.parse_payment(text) == (source, key)
  assert reading.payment(f"Please use {phrases.ORIGINAL_PAYMENT}.") == ("original", "")
  variants = [{"capacity": c, "stovetop compatibility": s} for c in ("1 liter", "1.5 liters")
              for s in ("electric", "gas")]
  changes = {"capacity": "1.5 liters", "stovetop compatibility": "gas"}
  assert reading.new_options(f"I would like {phrases.pairs_text(changes)}.", variants[0],
                             variants) == changes
  assert reading.new_options("I would like the same options.", variants[0], variants) == {}
  assert reading.reason("It is no longer needed.") == "no longer needed"
  assert reading.reason("I ordered it by mistake.") == "ordered by mistake"
  assert reading.confirmation(phrases.YES) is True
  assert reading.confirmation(phrases.NO) is reading.confirmation(phrases.DECLINE) is False
  assert phrases.question_kind(phrases.ASK_IDENTITY) == "identity"
  assert phrases.question_kind(phrases.new_options_question(*items[2])) == "new_options"


def test_identities_come_from_known_info_emails_first():
  assert users.identities("You are Yusuf Rossi in zip code 19122.") == (
      users.Identity(first_name="Yusuf", last_name="Rossi", zip="19122"),)
  assert users.identities("You are mei_kovacs_8020 living in zipcode 28236.") == (
      users.Identity(first_name="Mei", last_name="Kovacs", zip="28236"),)
  assert users.identities("Your name is Daiki Sanchez, and you live in 46236, your email is "
                          "daikisanchez1479@example.com.") == (
      users.Identity(email="daikisanchez1479@example.com"),
      users.Identity(first_name="Daiki", last_name="Sanchez", zip="46236"))
  assert users.identities("You are Lucas (lucas_santos_6600), you live in Denver CO 80239.") == (
      users.Identity(first_name="Lucas", last_name="Santos", zip="80239"),)
  assert users.identities("You are fatima_taylor_3452, and you just moved from Florida (32169) "
                          "to Phoenix (85033).")[1].zip == "85033"


def test_the_profile_turns_gold_writes_back_into_wishes():
  frozen = _shop()
  task = _task(
      _action(0, "find_user_id_by_name_zip", first_name="Ann", last_name="Lee", zip="10001"),
      _action(1, "exchange_delivered_order_items", order_id="#W3", item_ids=[BLUE, SMALL],
              new_item_ids=[RED, BIG], payment_method_id="credit_card_1"),
      _action(2, "return_delivered_order_items", order_id="#W3", item_ids=[BLUE],
              payment_method_id="paypal_1"),  # Fails: #W3 is no longer delivered.
      _action(3, "cancel_pending_order", order_id="#W2", reason="ordered by mistake"))
  profile = users.profile(task, frozen)
  assert profile.identities == (users.Identity(first_name="Ann", last_name="Lee", zip="10001"),)
  exchange, cancel = profile.wishes
  assert exchange == users.Wish(
      phrases.EXCHANGE, "#W3", changes=(
          users.Change("T-Shirt", {"color": "blue"}, {"color": "red"}),
          users.Change("Water Bottle", {"capacity": "500ml"}, {"capacity": "1000ml"})),
      payment="my credit card ending in 1234")
  assert cancel == users.Wish(phrases.CANCEL, "#W2", ("T-Shirt",), reason="ordered by mistake")
  assert users.Profile.from_json(profile.to_json()) == profile


def test_the_oracle_reaches_the_gold_database_and_keeps_the_policy():
  frozen = _shop(extra_pending_shirt=True)
  task = _task(
      _action(0, "modify_user_address", user_id="ann_lee_1", **ADDRESS),
      _action(1, "exchange_delivered_order_items", order_id="#W3", item_ids=[BLUE, BLUE],
              new_item_ids=[RED, BLUE], payment_method_id="gift_card_1"),
      _action(2, "cancel_pending_order", order_id="#W2", reason="no longer needed"),
      _action(3, "transfer_to_human_agents", summary="wants a human"),
      communicate=["$45.00"])  # The running total: 50 refunded by the cancel, 5 paid before.
  episode = selfplay.play_oracle(task, frozen)
  assert (episode.end_reason, episode.reward.db, episode.reward.communicate) == (
      selfplay.CUSTOMER_STOP, 1.0, 1.0)
  assert episode.success and policy_audit.audit(episode.turns) == []
  said = [t.text for t in episode.turns]
  assert any("several orders" in t for t in said)  # #W2 and #W5 hold the same: it asks.
  assert "It is #W2." in said and phrases.TRANSFER_MESSAGE in said
  for i, turn in enumerate(episode.turns):
    parsed = turns.parse_agent_turn(turn.text) if turn.speaker == turns.AGENT else None
    if parsed is not None and parsed.call is not None:
      assert episode.turns[i + 1].speaker == turns.TOOL  # The result follows its call.
  dialogue = episode.to_dialogue()
  assert dialogue.roles == turns.ROLES and dialogue.outcome == 1.0


def test_no_write_without_a_yes():
  class Refusing(users.ScriptedCustomer):
    def _confirm(self, agent_text):
      return phrases.NO

  frozen = _shop()
  task = _task(_action(0, "cancel_pending_order", order_id="#W2", reason="no longer needed"))
  episode = selfplay.play(task, frozen, agents.OracleAgent(),
                          Refusing(users.profile(task, frozen)))
  assert episode.end_reason == selfplay.CUSTOMER_STOP and episode.reward.db == 0.0
  assert episode.reward.state_hash == frozen.state_hash()
  assert any("I will not make this change" in t.text for t in episode.turns)
  writes = [t for t in episode.turns if t.speaker == turns.AGENT and "cancel_pending" in t.text]
  assert not writes
  forced = list(episode.turns) + [
      turns.Turn(turns.AGENT, turns.format_call("cancel_pending_order",
                                                {"order_id": "#W2", "reason": "no longer needed"}))]
  assert [b.rule for b in policy_audit.audit(forced)] == ["write_without_yes"]


def test_the_audit_sees_each_rule():
  call = turns.format_call
  dialogue = [
      turns.Turn(turns.AGENT, call("get_order_details", {"order_id": "#W1"})),
      turns.Turn(turns.TOOL, "{}"),
      turns.Turn(turns.AGENT, "One moment. " + call("find_user_id_by_email", {"email": "x"})),
      turns.Turn(turns.TOOL, "ann_lee_1"),
      turns.Turn(turns.AGENT, call("transfer_to_human_agents", {"summary": "s"})),
      turns.Turn(turns.TOOL, tools.TRANSFER_RESULT),
      turns.Turn(turns.AGENT, "Bye."),
  ]
  assert [(b.turn, b.rule) for b in policy_audit.audit(dialogue)] == [
      (0, "unauthenticated"), (2, "mixed_turn"), (4, "transfer_message")]


def test_the_oracle_on_every_real_task(data_dir):
  frozen = snapshot_lib.Snapshot(db_lib.load(data_dir))
  episodes = selfplay.evaluate(tasks.load(data_dir), frozen)
  summary = selfplay.summarize(episodes)
  assert summary["db_match"] == 1.0 and not summary["not_stopped"]
  assert {e.task_id for e in episodes if not e.success} == UNSAID
  assert summary["tool_errors"] == {tools.TOOL_ERROR: 7}  # Wrong emails tried first.
  for episode in episodes:
    assert policy_audit.audit(episode.turns) == [], episode.task_id
