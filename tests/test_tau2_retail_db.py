"""τ² retail database: typed loading with errors naming file and field, fresh copies, the hash.

The tiny shop needs no data; the tests on db.json take `data_dir` and skip, saying what to set,
when $TAU2_RETAIL_DATA_DIR names no data folder.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os

import pytest

from domains.tau2_retail import db as db_lib
from domains.tau2_retail import snapshot as snapshot_lib
from domains.tau2_retail import paths
from test_tau2_retail_tools import tiny_shop

# sha256 of db.json's state as db_lib.canonical_json writes it (tau2-bench commit a2c0247).
PRISTINE_HASH = "3ca5bd70e621602e23d909c87f26224a1a486e75955d8a6da53721ec224b23dc"


@pytest.fixture(scope="module")
def data_dir(tau2_data_dir) -> str:
  return tau2_data_dir


def _without_nulls(obj):
  if isinstance(obj, dict):
    return {k: _without_nulls(v) for k, v in obj.items() if v is not None}
  if isinstance(obj, list):
    return [_without_nulls(v) for v in obj]
  return obj


def test_the_data_folder_comes_from_the_argument_or_the_environment(monkeypatch, tmp_path):
  monkeypatch.delenv(paths.DATA_DIR_ENV, raising=False)
  with pytest.raises(paths.MissingDataError, match=paths.DATA_DIR_ENV):
    paths.resolve_data_dir()
  assert paths.missing_reason() is not None
  with pytest.raises(paths.MissingDataError, match=f"{tmp_path}/db.json: no such file"):
    db_lib.load(str(tmp_path))
  monkeypatch.setenv(paths.DATA_DIR_ENV, str(tmp_path))
  assert paths.resolve_data_dir() == str(tmp_path)
  assert paths.resolve_data_dir("/elsewhere") == "/elsewhere"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["orders"]["#W1"]["items"][0].update(price="50"),
     "orders['#W1'].items[0].price: expected a number, got str"),
    (lambda d: d["users"]["ann_lee_1"].pop("email"), "users['ann_lee_1'].email: missing"),
    (lambda d: d["products"]["1000000001"].update(color="blue"),
     "products['1000000001'].color: unknown field"),
    (lambda d: d["orders"]["#W2"].update(status="shipped"),
     "orders['#W2'].status: 'shipped' is not one of"),
    (lambda d: d["orders"]["#W2"].update(order_id="#W7"),
     "orders['#W2'].order_id: '#W7' differs from its key '#W2'"),
    (lambda d: d["users"]["bob_ray_2"]["payment_methods"]["gift_card_2"].pop("balance"),
     "users['bob_ray_2'].payment_methods['gift_card_2'].balance: missing"),
    (lambda d: d["users"]["bob_ray_2"]["payment_methods"]["gift_card_2"].update(source="cash"),
     "payment_methods['gift_card_2'].source: 'cash' is not one of"),
    (lambda d: d["orders"]["#W3"].update(user_id="carl"),
     "orders['#W3'].user_id: 'carl' is not a user"),
    (lambda d: d["orders"]["#W3"].update(cancel_reason="changed my mind"),
     "orders['#W3'].cancel_reason: 'changed my mind' is not one of"),
    (lambda d: d.pop("users"), "<top>.users: missing"),
])
def test_format_errors_name_the_file_and_the_field(tmp_path, edit, message):
  shop = tiny_shop()
  edit(shop)
  (tmp_path / "db.json").write_text(json.dumps(shop))
  with pytest.raises(db_lib.DatabaseFormatError) as info:
    db_lib.load(str(tmp_path))
  assert str(info.value).startswith(f"{tmp_path}/db.json: ")
  assert message in str(info.value)


def test_a_file_that_is_not_json_names_its_line(tmp_path):
  (tmp_path / "db.json").write_text('{\n"products": {,\n')
  with pytest.raises(db_lib.DatabaseFormatError, match=r"db.json:2: not JSON"):
    db_lib.load(str(tmp_path))


def test_fresh_copies_are_independent_and_the_hash_sees_every_field():
  database = db_lib.from_json(tiny_shop())
  snapshot = snapshot_lib.Snapshot(database)
  database.orders["#W1"].status = "cancelled"  # The snapshot was taken before.
  first, second = snapshot.fresh(), snapshot.fresh()
  assert db_lib.state_hash(first) == db_lib.state_hash(second) == snapshot.state_hash()
  edits = [
      lambda d: setattr(d.users["ann_lee_1"].payment_methods["gift_card_1"], "balance", 10.01),
      lambda d: setattr(d.orders["#W1"], "status", "cancelled"),
      lambda d: setattr(d.orders["#W1"].address, "zip", "10002"),
      lambda d: d.orders["#W3"].items[1].options.update(color="navy"),
      lambda d: setattr(d.products["1000000001"].variants["2000000003"], "available", True),
      lambda d: setattr(d.orders["#W3"], "return_items", []),
      lambda d: d.users["bob_ray_2"].orders.append("#W4"),
  ]
  hashes = {snapshot.state_hash()}
  for edit in edits:
    changed = snapshot.fresh()
    edit(changed)
    hashes.add(db_lib.state_hash(changed))
  assert len(hashes) == len(edits) + 1
  assert db_lib.state_hash(snapshot.fresh()) == snapshot.state_hash()  # The edits stayed out.
  third = first.copy()
  third.orders["#W1"].items.pop()
  assert len(first.orders["#W1"].items) == 2
  first.orders["#W2"].status = "cancelled"
  fourth = first.copy()
  assert fourth.orders["#W2"].status == "cancelled"
  fourth.orders["#W2"].items.clear()
  assert first.orders["#W2"].items and second.orders["#W2"].status == "pending"


def test_an_episode_copy_reads_only_what_it_reaches_and_acts_as_a_dict():
  snapshot = snapshot_lib.Snapshot(db_lib.from_json(tiny_shop()))
  episode = snapshot.fresh()
  assert "#W1" in episode.orders and "#W9" not in episode.orders and len(episode.orders) == 4
  assert episode.orders.touched == 0
  assert episode.orders["#W3"].status == "delivered" and episode.orders.touched == 1
  assert list(episode.users) == ["ann_lee_1", "bob_ray_2"]  # The file's order.
  assert [u.email for u in episode.users.values()] == ["Ann.Lee@example.com", "bob@example.com"]
  with pytest.raises(KeyError):
    episode.orders["#W9"]  # pylint: disable=pointless-statement
  del episode.orders["#W4"]
  episode.orders["#W5"] = db_lib.from_json(tiny_shop()).orders["#W4"]
  episode.orders["#W5"].order_id = "#W5"
  assert list(episode.orders) == ["#W1", "#W2", "#W3", "#W5"]


def test_the_hash_put_together_per_record_is_the_whole_canonical_json():
  snapshot = snapshot_lib.Snapshot(db_lib.from_json(tiny_shop()))
  episode = snapshot.fresh()
  assert db_lib.canonical_text(episode) == db_lib.canonical_json(episode.to_json())
  episode = snapshot.fresh()
  episode.orders["#W2"].status = "cancelled"
  episode.users["ann_lee_1"].payment_methods["gift_card_1"].balance = 60.0
  expected = db_lib.canonical_json(episode.copy().to_json())
  assert db_lib.canonical_text(episode) == expected
  plain = db_lib.from_json(tiny_shop())
  plain.orders["#W2"].status = "cancelled"
  plain.users["ann_lee_1"].payment_methods["gift_card_1"].balance = 60.0
  assert db_lib.canonical_text(plain) == expected
  assert db_lib.state_hash(plain) == db_lib.state_hash(episode)


def test_the_hash_is_sha256_of_canonical_json():
  database = db_lib.from_json(tiny_shop())
  text = json.dumps(database.to_json(), sort_keys=True, separators=(",", ":"))
  assert db_lib.state_hash(database) == hashlib.sha256(text.encode()).hexdigest()


def test_db_json_loads_and_round_trips(data_dir):
  database = db_lib.load(data_dir)
  assert (len(database.products), len(database.users), len(database.orders)) == (50, 500, 1000)
  with open(os.path.join(data_dir, paths.DB_FILE), encoding="utf-8") as f:
    raw = json.load(f)
  # The same records, fields and order; only the unset optional order fields are added as null.
  assert json.dumps(_without_nulls(database.to_json())) == json.dumps(raw)
  assert db_lib.state_hash(database) == PRISTINE_HASH
  assert snapshot_lib.Snapshot(database).state_hash() == PRISTINE_HASH
  assert db_lib.state_hash(copy.deepcopy(database)) == PRISTINE_HASH
  assert db_lib.state_hash(database.copy()) == PRISTINE_HASH
