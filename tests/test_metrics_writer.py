"""MetricsWriter: metrics.jsonl keeps every key as logged; TensorBoard gets legal tags."""

import logging
import os

from ilql_dialogue import metrics


def test_keys_tensorboard_refuses_are_written_without_a_warning(tmp_path, caplog):
  writer = metrics.MetricsWriter(str(tmp_path))
  with caplog.at_level(logging.INFO):
    writer.write(100, "eval", {"return/beta=4": 0.5, "loss": 1.0})
  writer.close()
  assert not [r for r in caplog.records if "is illegal" in r.getMessage()]
  [record] = metrics.read_metrics(os.path.join(tmp_path, metrics.METRICS_FILE))
  assert record == {"step": 100, "split": "eval", "return/beta=4": 0.5, "loss": 1.0}
  assert os.listdir(tmp_path / "tensorboard")
