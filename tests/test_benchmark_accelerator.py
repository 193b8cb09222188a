"""The accelerator benchmark: its JSON survives failures, and the leases' JSONs render."""

import json
import pathlib

import pytest

from benchmarks import accelerator as ba

LEASES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "benchmarks"


def _leases():
  return [json.loads((LEASES / f"h200_lease{i}.json").read_text()) for i in (1, 2)]


def test_merge_takes_measured_sections_with_their_own_config():
  merged = ba.merge(_leases())
  assert "error" in _leases()[0]["sections"]["train"]
  assert "error" not in merged["sections"]["train"]  # The second lease's measurement.
  assert merged["configs"]["train"]["mfu_batch"] == 32
  assert merged["configs"]["decode"]["mfu_batch"] == 64  # Kept from the first lease.
  assert "error" in merged["sections"]["memory"]  # Nothing measured anywhere: the error stays.


def test_render_of_the_h200_leases():
  text = ba.render(ba.merge(_leases()), "cmd")
  assert text.startswith(ba.SECTION)
  assert "| ours, batch 32 x 1024 | 80.8 |" in text
  assert "Ours / torch at batch 16: 1.99x" in text
  assert "| cudnn | 0.44 | 1.06 |" in text
  assert "Section `memory` did not run" in text


def test_a_failing_section_keeps_the_others_and_its_error(tmp_path, monkeypatch):
  def broken(ac):
    raise RuntimeError("no such kernel")

  monkeypatch.setattr(ba, "attention_section", broken)
  path = tmp_path / "acc.json"
  results = ba.run(ba.QUICK, deadline_s=600, json_path=path, only=["device", "attention"])
  on_disk = json.loads(path.read_text())
  assert on_disk["sections"]["device"]["peak_bf16"] > 0
  assert "RuntimeError: no such kernel" in on_disk["sections"]["attention"]["error"]
  assert set(results["sections"]) == {"device", "attention"}


def test_sections_past_the_deadline_are_skipped_and_say_so(tmp_path):
  results = ba.run(ba.QUICK, deadline_s=-1, json_path=tmp_path / "a.json", only=["device"])
  assert results["sections"]["device"]["skipped"].startswith("deadline")


def test_unknown_section_is_refused(tmp_path):
  with pytest.raises(ValueError, match="unknown"):
    ba.run(ba.QUICK, deadline_s=600, json_path=tmp_path / "a.json", only=["trian"])
