"""benchmarks/rollouts_vs_torch.py at a tiny size: the three rollout loops decode the same tokens.

The benchmark's speed comparison is void unless ours (LMParty, kept KV cache),
transformers re-prefilling with `generate`, and transformers keeping
`past_key_values` play the same dialogues; this runs its own `measure` on a few
short dialogues, where near-ties of random weights are rare enough to require
every agent turn to match.
"""

import pathlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks import rollout_cache, rollouts_vs_torch  # noqa: E402
from ilql_dialogue.generation import sampler  # noqa: E402


@pytest.fixture
def one_torch_thread():
  """Several torch threads stall on their barriers when other jobs share the cores (seconds
  per decode step), and a 3-row batch gains nothing from them."""
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  yield
  torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_torch_thread")
def test_three_loops_decode_the_same_greedy_tokens(tmp_path: pathlib.Path):
  tok = rollout_cache.tokenizer()
  model = rollouts_vs_torch.agent_model()
  hf = rollouts_vs_torch.to_torch(model, tmp_path / "hf")
  # Not the finer-windows arm: XLA:CPU crashed writing its executables to the persistent
  # compilation cache this suite uses (docs/BENCHMARKS.md); its rule is tested apart below.
  loops = ("ours", *rollouts_vs_torch.TORCH)
  result = rollouts_vs_torch.measure(model, hf, tok, batch=3, turns=6, max_new_tokens=8,
                                     repeats=1, loops=loops)
  for loop in loops:
    assert result[loop]["mean_turns"] == 6  # Every dialogue ran to the limit: 3 agent turns.
    assert result[loop]["agent_tokens"] == 3 * 3 * 8  # Untrained: every turn hits the cap.
  for loop in loops[1:]:
    assert result[loop]["agent_turns"] == 9
    assert result[loop]["same_turns"] == 9, loop
  assert result["ratio"] > 0


def test_same_turns_counts_each_row_until_its_first_difference():
  ours = [[[1, 2], [3], [4]], [[5], [6]]]
  theirs = [[[1, 2], [0], [4]], [[5], [6]]]
  assert rollouts_vs_torch.same_turns(ours, theirs) == (3, 5)


def test_finer_windows_round_up_to_64_times_a_power_of_two_or_one_and_a_half_times_it():
  with rollouts_vs_torch.finer_windows():
    windows = [sampler.attend_window(10**6, last) for last in (1, 64, 65, 97, 129, 1031, 1537)]
    capped = sampler.attend_window(1200, 1100)
  assert windows == [64, 64, 96, 128, 192, 1536, 2048] and capped == 1200
  assert sampler.attend_window(10**6, 1031) == 2048  # The engine's rule is back.
