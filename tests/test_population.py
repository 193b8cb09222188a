"""Population Co-Training's pool: FIFO order, the seeded draw, and resume from the workdir."""

import collections
import os

import pytest

from cotraining.population import Population


def save_marker(step):
  def save(path):
    os.makedirs(path)
    with open(os.path.join(path, "step"), "w") as f:
      f.write(str(step))
  return save


def steps_of(members):
  return [int(open(os.path.join(m, "step")).read()) for m in members]


def run(pool, steps):
  for step in steps:
    pool.update(step, save_marker(step))


def test_fifo_one_member_every_add_every_steps(tmp_path):
  pool = Population(str(tmp_path), capacity=3, add_every=4, retain=1)
  run(pool, range(0, 22, 2))  # Rollout batches every 2 steps.
  assert steps_of(pool.members) == [12, 16, 20]  # Added at 0, 4, ..., 20; the last 3 kept.
  on_disk = sorted(d for d in os.listdir(tmp_path) if d.startswith("step_"))
  assert on_disk == ["step_00000008", "step_00000012", "step_00000016",
                     "step_00000020"]  # One evicted member retained for a resume.


def test_adds_wait_for_the_next_batch_after_add_every_steps(tmp_path):
  pool = Population(str(tmp_path), capacity=10, add_every=16)
  run(pool, range(0, 60, 6))
  assert steps_of(pool.members) == [0, 18, 36, 54]


def test_sample_is_seeded_per_batch_and_uniform_over_members(tmp_path):
  pool = Population(str(tmp_path / "a"), capacity=4, add_every=1, seed=7)
  run(pool, range(4))
  draws = [pool.sample(r) for r in range(4000)]
  assert draws[:50] == [pool.sample(r) for r in range(50)]
  counts = collections.Counter(draws)
  assert set(counts) == set(pool.members)
  chi2 = sum((c - 1000) ** 2 / 1000 for c in counts.values())
  assert chi2 < 16.3  # Chi-square, 3 degrees of freedom, p = 0.001.
  other = Population(str(tmp_path / "b"), capacity=4, add_every=1, seed=8)
  run(other, range(4))
  assert [os.path.basename(other.sample(r)) for r in range(50)] != [
      os.path.basename(d) for d in draws[:50]]


def test_members_and_draws_survive_resume(tmp_path):
  pool = Population(str(tmp_path), capacity=3, add_every=2, seed=3, retain=2)
  run(pool, range(0, 9))  # Adds at 0, 2, 4, 6, 8.
  reopened = Population(str(tmp_path), capacity=3, add_every=2, seed=3, retain=2)
  assert reopened.members == pool.members
  assert [reopened.sample(r) for r in range(20)] == [pool.sample(r) for r in range(20)]

  reopened.resume(5)  # Restored to a checkpoint at step 5: the adds at 6 and 8 are replayed.
  assert steps_of(reopened.members) == [0, 2, 4]
  assert not os.path.exists(reopened.path(8))
  run(reopened, range(6, 9))
  assert steps_of(reopened.members) == [4, 6, 8]


def test_resume_past_the_retained_members_fails_clearly(tmp_path):
  pool = Population(str(tmp_path), capacity=2, add_every=1, retain=0)
  run(pool, range(5))
  with pytest.raises(ValueError, match="retain=0 is too small"):
    pool.resume(2)


def test_an_empty_pool_cannot_be_sampled_and_adds_go_forward(tmp_path):
  pool = Population(str(tmp_path))
  with pytest.raises(ValueError, match="empty"):
    pool.sample(0)
  pool.add(16, save_marker(16))
  with pytest.raises(ValueError, match="resume"):
    pool.add(16, save_marker(16))
