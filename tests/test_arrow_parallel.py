"""AirDialogue -> Arrow with several worker processes: the same file, and errors that name the line."""

import pytest

from data_pipelines.airdialogue import arrow, official_io, selfplay


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  root = tmp_path_factory.mktemp("official")
  data, kb = str(root / "data.json"), str(root / "kb.json")
  official_io.write_samples(selfplay.generate_samples(0, 7, kb_size=3), data, kb)
  return data, kb


def test_two_processes_write_the_file_one_process_writes(corpus, tmp_path):
  data, kb = corpus
  one, two = str(tmp_path / "one.arrow"), str(tmp_path / "two.arrow")
  assert arrow.convert(data, kb, one, batch_size=2) == 7
  assert arrow.convert(data, kb, two, batch_size=2, num_proc=2) == 7
  with open(one, "rb") as a, open(two, "rb") as b:
    assert a.read() == b.read()
  assert sorted(p.name for p in tmp_path.iterdir()) == ["one.arrow", "two.arrow"]


def test_a_bad_line_in_a_workers_share_is_reported_by_its_line(corpus, tmp_path):
  data, kb = corpus
  with open(data) as f:
    lines = f.readlines()
  lines[3] = lines[3].replace('"intent"', '"intnet"', 1)  # Line 4: block 1, the second worker's.
  bad = str(tmp_path / "data.json")
  with open(bad, "w") as f:
    f.writelines(lines)
  with pytest.raises(official_io.AirDialogueFormatError, match=f"{bad}:4: field 'intent'"):
    arrow.convert(bad, kb, str(tmp_path / "out.arrow"), batch_size=2, num_proc=2)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["data.json"]
