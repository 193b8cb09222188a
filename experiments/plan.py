"""Per-device memory of a training config on a mesh, and whether it fits.

    python -m experiments.plan --config=experiments/configs/qwen2_scale.py:1.5b \
        --mesh=data:2,fsdp:8,tensor:1 --device_memory_gib=16

Prints parameters, optimizer state, gradients, activations and the decoding KV
cache per device (ilql_dialogue/memory_plan.py: jax.eval_shape of the real
train state and loss, sharded by the run's own rules on an abstract mesh, so
no device and no weights are needed), then "fits" or "does NOT fit".
`--parameters=N` first lists the model's N largest arrays (0: all) with their
placement and bytes per device (any algorithm: no loss is traced for it): an
array still whole on a mesh of several devices is one no sharding rule reaches.
"""

import copy

from absl import flags

from data_pipelines import cli
from ilql_dialogue import memory_plan
from workflows import config_checks

_CONFIG = cli.define_config_file("config", None, "Training config file.", lock_config=True)
_MESH = flags.DEFINE_string("mesh", "data:1,fsdp:1,tensor:1",
                            "Mesh sizes as AXIS:SIZE,... (axes data, fsdp, tensor; left out = 1).")
_DEVICE_GIB = flags.DEFINE_float("device_memory_gib", None,
                                 "Memory per device (v5e 16, v5p 95, H100 80); omit to skip "
                                 "the verdict.", lower_bound=0.0)
_SEQ_LEN = flags.DEFINE_integer("seq_len", None, "Padded training row length (default "
                                "model.max_seq_len).", lower_bound=1)
_DECODE_BATCH = flags.DEFINE_integer("decode_batch", 16, "Rows decoded at once.", lower_bound=1)
_DECODE_LEN = flags.DEFINE_integer("decode_len", None, "KV cache slots per row (default "
                                   "model.max_seq_len).", lower_bound=1)
_PARAMETERS = flags.DEFINE_integer("parameters", None, "Also list the model's N largest "
                                   "arrays per device (0: all).", lower_bound=0)


def main(argv):
  del argv
  config = copy.deepcopy(_CONFIG.value)
  if config.get("data") is not None:  # No data is read: a dataset-less config plans too.
    with config.unlocked():
      config.data.synthetic = True
  with cli.reported_as():
    mesh = memory_plan.parse_mesh(_MESH.value)
  if config.model.vocab_size <= 0:
    raise cli.BadInput("config.model.vocab_size is 0 (taken from the data when training); "
                       "pass --config.model.vocab_size=N")
  config_checks.check_train_fields(config)
  if _PARAMETERS.value is not None:
    with cli.reported_as("--config"):
      arrays = memory_plan.state_bytes(config, mesh)[1]
    print(memory_plan.parameter_report(arrays, _PARAMETERS.value))
  with cli.reported_as("--config"):
    plan = memory_plan.plan(config, mesh, seq_len=_SEQ_LEN.value,
                            decode_batch=_DECODE_BATCH.value, decode_len=_DECODE_LEN.value)
  print(memory_plan.report(plan, _DEVICE_GIB.value))


if __name__ == "__main__":
  cli.run(main)
