"""Length-bucketed batches: static shapes, exact coverage, determinism, exact resume."""

import numpy as np
import pytest

from data_pipelines import batching, mdp
from data_pipelines.mdp_dataset import build_dataset
from data_pipelines.dialogue import Dialogue, Turn
from data_pipelines.tokenization import train_tokenizer

WORDS = "please book a flight to boston on monday morning thanks sure what dates".split()
BOUNDARIES = (16, 32, 64, 96)
BATCH = 4


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
  rng = np.random.default_rng(1)
  dialogues = []
  for k in range(37):
    turns = tuple(
        Turn(("customer", "agent")[j % 2], " ".join(rng.choice(WORDS, size=rng.integers(1, 9))))
        for j in range(int(rng.integers(2, 12))))
    dialogues.append(Dialogue(f"d{k}", ("agent", "customer"), turns, outcome=float(k)))
  tok = train_tokenizer([" ".join(WORDS)] * 20, ("agent", "customer"), vocab_size=300)
  return build_dataset(dialogues, tok, "agent", 96, include_context=False, cache_dir=str(tmp_path_factory.mktemp("arrow")))


def epoch(ds, seed=0, number=0, start_step=0, **kwargs):
  return list(batching.batches(ds, BATCH, seed, number, start_step, boundaries=BOUNDARIES, **kwargs))


def assert_batches_equal(a, b):
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert x.keys() == y.keys()
    for name in x:
      np.testing.assert_array_equal(x[name], y[name], err_msg=name)


def test_bucket_boundaries():
  assert batching.bucket_boundaries(256) == (16, 32, 64, 128, 256)
  assert batching.bucket_boundaries(100, min_length=32) == (32, 64, 100)
  assert batching.bucket_boundaries(8) == (8,)


def test_static_shapes_and_every_example_exactly_once(ds):
  rows = ds.with_format("numpy")
  lengths = np.asarray(rows["length"])
  assert len(np.unique(np.searchsorted(BOUNDARIES, lengths))) >= 3  # The corpus spans several buckets.
  seen = []
  for batch in epoch(ds):
    length = batch["input_ids"].shape[1]
    assert length in BOUNDARIES
    for name in mdp.TOKEN_COLUMNS:
      assert batch[name].shape == (BATCH, length) and batch[name].dtype == mdp.TOKEN_DTYPES[name]
    for name in ("outcome", "truncated", "length", "row_mask", "example_index"):
      assert batch[name].shape == (BATCH,)
    for b, index in enumerate(batch["example_index"]):
      if index < 0:  # Padding row: masked everywhere.
        assert not batch["row_mask"][b] and not batch["attention_mask"][b].any()
        assert not batch["action_mask"][b].any() and np.all(batch["next_token_index"][b] == -1)
        continue
      seen.append(index)
      row = rows[int(index)]
      n = row["length"]
      assert BOUNDARIES[np.searchsorted(BOUNDARIES, n)] == length  # Smallest bucket that fits.
      for name in mdp.TOKEN_COLUMNS:
        np.testing.assert_array_equal(batch[name][b, :n], row[name], err_msg=name)
      assert not batch["attention_mask"][b, n:].any() and not batch["action_mask"][b, n:].any()
      assert np.all(batch["next_utterance_index"][b, n:] == -1)
      assert batch["outcome"][b] == row["outcome"] and batch["length"][b] == n
  assert sorted(seen) == list(range(len(rows)))


def test_order_depends_on_seed_and_epoch_only(ds):
  order = lambda batches: np.concatenate([b["example_index"] for b in batches])
  assert_batches_equal(epoch(ds, seed=3, number=1), epoch(ds, seed=3, number=1))
  assert not np.array_equal(order(epoch(ds, seed=3, number=1)), order(epoch(ds, seed=3, number=2)))
  assert not np.array_equal(order(epoch(ds, seed=3, number=1)), order(epoch(ds, seed=4, number=1)))


def test_resume_matches_a_fresh_iterator_and_skips_reading(ds, monkeypatch):
  full = epoch(ds, seed=7, number=2)
  loads = []
  load_batch = batching.load_batch
  monkeypatch.setattr(batching, "load_batch", lambda *a: loads.append(1) or load_batch(*a))
  resumed = epoch(ds, seed=7, number=2, start_step=5)
  assert_batches_equal(resumed, full[5:])
  assert len(loads) == len(full) - 5  # Skipped steps were planned, never read.


def test_stream_resumes_across_epochs(ds):
  steps = batching.plan_epoch(
      np.asarray(ds["length"]), BATCH, 11, 0, BOUNDARIES).num_steps
  take = lambda it, n: [next(it) for _ in range(n)]
  straight = take(batching.stream(ds, BATCH, 11, boundaries=BOUNDARIES), 2 * steps + 3)
  assert_batches_equal(straight[:steps], epoch(ds, seed=11, number=0))
  assert_batches_equal(straight[steps : 2 * steps], epoch(ds, seed=11, number=1))
  resumed = take(batching.stream(ds, BATCH, 11, steps + 2, boundaries=BOUNDARIES), steps + 1)
  assert_batches_equal(resumed, straight[steps + 2 :])


def test_drop_remainder_is_counted(ds):
  lengths = np.asarray(ds["length"])
  counts = np.bincount(np.searchsorted(BOUNDARIES, lengths), minlength=len(BOUNDARIES))
  plan = batching.plan_epoch(lengths, BATCH, 0, 0, BOUNDARIES, drop_remainder=True)
  assert plan.num_dropped == int(np.sum(counts % BATCH)) > 0
  assert np.all(plan.rows_SxB >= 0) and plan.rows_SxB.size == len(lengths) - plan.num_dropped
  batches = epoch(ds, drop_remainder=True)
  assert len(batches) == plan.num_steps and all(b["row_mask"].all() for b in batches)


def test_one_compile_per_bucket(ds):
  import jax
  traces = []

  @jax.jit
  def masked_return(batch):
    traces.append(batch["rewards"].shape)
    return (batch["rewards"] * batch["action_mask"]).sum()

  total = 0.0
  for number in range(3):
    for batch in epoch(ds, number=number):
      total += float(masked_return({k: batch[k] for k in ("rewards", "action_mask")}))
  assert len(traces) == len(set(traces)) <= len(BOUNDARIES)
  in_dataset = sum(float(r.sum()) for r in ds.with_format("numpy")["rewards"])
  assert total == pytest.approx(3 * in_dataset) and in_dataset > 0  # Every reward once per epoch.


def test_examples_longer_than_the_largest_bucket_are_an_error():
  with pytest.raises(ValueError, match="exceeds the largest bucket"):
    batching.plan_epoch([10, 40], BATCH, 0, 0, (16, 32))


def test_hosts_read_disjoint_slices_that_make_up_the_global_batch(ds, monkeypatch):
  whole = epoch(ds, seed=3)
  read = []
  original = batching.load_batch
  monkeypatch.setattr(batching, "load_batch",
                      lambda d, rows_B, length: read.append(len(rows_B)) or
                      original(d, rows_B, length))
  per_host = [epoch(ds, seed=3, host=(i, 2)) for i in range(2)]
  assert set(read) == {BATCH // 2}  # Each host reads only its own rows.
  for step, batch in enumerate(whole):
    for name in batch:
      np.testing.assert_array_equal(
          np.concatenate([per_host[0][step][name], per_host[1][step][name]]), batch[name])
  with pytest.raises(ValueError, match="split evenly over 3 hosts"):
    epoch(ds, host=(0, 3))
