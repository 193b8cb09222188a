"""The accelerator benchmark: its JSON survives failures, and the leases' JSONs render."""

import json
import pathlib

import numpy as np
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


# The sections added for one GPU call, each run here on CPU at the tiny QUICK sizes.


def test_cudnn_mask_trace_reports_where_the_mask_is_made_and_renders(tmp_path):
  results = ba.run(ba.QUICK, deadline_s=600, json_path=tmp_path / "a.json",
                   only=["device", "cudnn_mask"])
  section = json.loads((tmp_path / "a.json").read_text())["sections"]["cudnn_mask"]
  trace = section["trace"]
  b, t = ba.QUICK.attention_batch, ba.QUICK.seq_len
  assert trace["mask_broadcast_to_BxTxT"] == bool(trace["BxTxT_arrays"])
  if trace["mask_broadcast_to_BxTxT"]:  # Then it names our line that made it.
    assert trace["bias"] == f"bfloat16[{b}, 1, {t}, {t}]"
    assert all("ilql_dialogue/models/attention_kernels.py:" in row
               for row in trace["BxTxT_arrays"])
  assert set(section["rows"]) == {"as used: attend_block",
                                  "key lengths (key_value_seq_lengths), no bias",
                                  "causal only, no key mask (the floor)"}
  for row in section["rows"].values():
    assert row["forward_ms"] > 0 and row["forward_backward_ms"] > 0
    assert row["max_error_vs_f32"] < 0.05  # bfloat16 against float32; a wrong mask is O(1).
  text = ba.render(results, "cmd")
  yes_no = "yes" if trace["mask_broadcast_to_BxTxT"] else "no"
  assert f"Key mask broadcast to [B, 1, T, T]: **{yes_no}**" in text
  assert "| key lengths (key_value_seq_lengths), no bias | " in text


def test_cudnn_mask_trace_sees_no_bias_when_the_mask_goes_as_key_lengths(monkeypatch):
  def key_lengths(q, k, v, valid_BxT, prefix_len, prefix_bidirectional, implementation):
    b, t, kv, g, h = q.shape
    out = ba.jax.nn.dot_product_attention(
        q.reshape(b, t, kv * g, h), k, v, is_causal=True, implementation=implementation,
        key_value_seq_lengths=valid_BxT.sum(axis=1).astype("int32"))
    return out.reshape(q.shape)

  monkeypatch.setattr(ba.attention_kernels, "jax_nn", key_lengths)
  trace = ba.cudnn_mask_trace(2, 16, 2, 16)
  assert trace["bias"] is None and not trace["bias_gradient"]
  assert trace["mask_type"] == "MaskType.PADDING_CAUSAL"
  assert trace["BxTxT_arrays"] == [] and not trace["mask_broadcast_to_BxTxT"]


@pytest.fixture
def one_torch_thread():
  """torch's thread barriers stall when other jobs share the cores; a 2-row batch gains nothing."""
  torch = pytest.importorskip("torch")
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  yield
  torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_torch_thread")
def test_rollouts_section_plays_every_loop_and_renders(tmp_path):
  ba.run(ba.QUICK, deadline_s=600, json_path=tmp_path / "a.json", only=["rollouts"])
  section = json.loads((tmp_path / "a.json").read_text())["sections"]["rollouts"]
  assert "error" not in section, section.get("error")
  assert (section["batch"], section["turns"], section["torch_device"]) == (2, 4, "cpu")
  for loop in ("ours", "torch_reprefill", "torch_kept"):
    assert section[loop]["mean_turns"] == 4  # Untrained: every dialogue runs to the limit.
    assert section[loop]["dialogues_per_sec"] > 0
  for loop in ("torch_reprefill", "torch_kept"):
    assert section[loop]["same_turns"] == section[loop]["agent_turns"] == 4
  text = "\n".join(ba.render_later_sections({"rollouts": section}))
  assert f"| 2 | 4 | {section['ours']['dialogues_per_sec']:.2f} | " in text
  assert "| 4/4 / 4/4 |" in text


def _tiny_gguf(path, vocab=96, d=32, heads=2, mlp=64):
  """A one-layer llama GGUF of random float32 weights, without a tokenizer."""
  gguf = pytest.importorskip("gguf")
  rng = np.random.default_rng(0)
  writer = gguf.GGUFWriter(str(path), "llama")
  writer.add_block_count(1)
  writer.add_context_length(64)
  writer.add_embedding_length(d)
  writer.add_feed_forward_length(mlp)
  writer.add_head_count(heads)
  writer.add_head_count_kv(heads)
  writer.add_rope_freq_base(10000.0)
  writer.add_layer_norm_rms_eps(1e-5)
  shapes = {"token_embd.weight": (vocab, d), "output_norm.weight": (d,),
            "blk.0.attn_norm.weight": (d,), "blk.0.ffn_norm.weight": (d,),
            "blk.0.attn_q.weight": (d, d), "blk.0.attn_k.weight": (d, d),
            "blk.0.attn_v.weight": (d, d), "blk.0.attn_output.weight": (d, d),
            "blk.0.ffn_gate.weight": (mlp, d), "blk.0.ffn_up.weight": (mlp, d),
            "blk.0.ffn_down.weight": (d, mlp)}
  for name, shape in shapes.items():
    value = np.ones(shape) if "norm" in name else 0.05 * rng.standard_normal(shape)
    writer.add_tensor(name, value.astype(np.float32))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


def test_smollm2_section_times_bc_updates_and_renders(tmp_path):
  path = _tiny_gguf(tmp_path / "tiny.gguf")
  ba.run(ba.QUICK, deadline_s=600, json_path=tmp_path / "a.json", only=["smollm2"],
         smollm2_gguf=str(path))
  section = json.loads((tmp_path / "a.json").read_text())["sections"]["smollm2"]
  assert "error" not in section, section.get("error")
  assert (section["weights"], section["layers"], section["vocab_size"]) == ("tiny.gguf", 1, 96)
  assert section["rows"].startswith("random ids")
  assert abs(section["first_loss"] - np.log(96)) < 0.5  # Near-uniform predictions at start.
  assert section["last_loss"] < section["first_loss"]  # The updates train.
  assert section["step_s"] > 0 and section["compile_s"] > 0
  text = "\n".join(ba.render_later_sections({"smollm2": section}))
  assert f"| 2 x 16 | tiny.gguf | {section['load_s']:.1f} s | " in text
  assert f"| {1 / section['step_s']:.2f} | " in text
  assert text.rstrip().endswith(f"| {section['first_loss']:.2f} |")


def test_smollm2_section_without_the_file_times_random_weights(tmp_path, monkeypatch):
  tiny = ba.smollm2.SMOLLM2_135M.replace(num_layers=1, d_model=32, num_heads=2, num_kv_heads=1,
                                         head_dim=16, mlp_dim=64, vocab_size=96)
  monkeypatch.setattr(ba.smollm2, "SMOLLM2_135M", tiny)
  results = ba.run(ba.QUICK, deadline_s=600, json_path=tmp_path / "a.json",
                   only=["smollm2"], smollm2_gguf=str(tmp_path / "absent.gguf"))
  section = json.loads((tmp_path / "a.json").read_text())["sections"]["smollm2"]
  assert "error" not in section, section.get("error")
  assert section["weights"] == "random (file absent)"
  assert section["why_random"].startswith("FileNotFoundError") and "absent.gguf" in section[
      "why_random"]
  assert (section["layers"], section["num_kv_heads"], section["vocab_size"]) == (1, 1, 96)
  assert "load_s" not in section and section["step_s"] > 0
  text = "\n".join(ba.render_later_sections(results["sections"]))
  assert "| 2 x 16 | random (file absent) | – | " in text
  assert text.rstrip().endswith(" | – |")  # No loss for random weights.


def test_smollm2_architecture_is_the_files():
  """The random-weights shape is the installed file's (skipped without the file)."""
  gguf_io = pytest.importorskip("ilql_dialogue.models.gguf_io")
  try:
    path = gguf_io.smollm2_path()
  except FileNotFoundError as e:
    pytest.skip(str(e))
  assert gguf_io.gguf_config(path) == ba.smollm2.SMOLLM2_135M


def test_importing_the_smollm2_benchmark_defines_no_flags():
  """Its --output would clash with ours: it defines its flags only when run."""
  assert "benchmarks.smollm2" not in ba.flags.FLAGS.flags_by_module_dict()
