"""Qwen2 0.5B / 1.5B / 7B architectures for planning and launching runs on pods.

    python -m experiments.plan --config=experiments/configs/qwen2_scale.py:7b,ilql \
        --mesh=data:1,fsdp:64,tensor:1 --device_memory_gib=16

`SIZE[,ALGORITHM]`: SIZE in 0.5b, 1.5b, 7b (the Hugging Face configs of
Qwen/Qwen2-*), ALGORITHM bc (default) or ilql. Float32 master weights and
AdamW moments, bfloat16 compute, rematerialized layers, 1024-token rows,
64 rows per step; synthetic data until a run names its dataset and adds
`model.init_from=HF_DIR` (docs/SCALING.md).
"""

import ml_collections

from experiments.configs import bc_tiny, ilql_airdialogue_quick

# Hugging Face config.json of Qwen/Qwen2-{0.5B,1.5B,7B}.
SIZES = {
    "0.5b": dict(vocab_size=151936, num_layers=24, d_model=896, num_heads=14, num_kv_heads=2,
                 head_dim=64, mlp_dim=4864, tie_embeddings=True),
    "1.5b": dict(vocab_size=151936, num_layers=28, d_model=1536, num_heads=12, num_kv_heads=2,
                 head_dim=128, mlp_dim=8960, tie_embeddings=True),
    "7b": dict(vocab_size=152064, num_layers=28, d_model=3584, num_heads=28, num_kv_heads=4,
               head_dim=128, mlp_dim=18944, tie_embeddings=False),
}
ALGORITHMS = ("bc", "ilql")


def get_config(spec: str = "0.5b") -> ml_collections.ConfigDict:
  size, _, algorithm = spec.partition(",")
  algorithm = algorithm or "bc"
  if size not in SIZES or algorithm not in ALGORITHMS:
    raise ValueError(f"qwen2_scale.py:{spec}: expected SIZE[,ALGORITHM] with SIZE in "
                     f"{sorted(SIZES)} and ALGORITHM in {ALGORITHMS}")
  c = bc_tiny.get_config()
  if algorithm == "ilql":
    c.algorithm = ilql_airdialogue_quick.ilql_section()
  c.model.update(family="llama", qkv_bias=True, rope_theta=1_000_000.0, norm_eps=1e-6,
                 max_seq_len=1024, dtype="bfloat16", param_dtype="float32", remat=True,
                 **SIZES[size])
  c.train.update(batch_size=64, grad_accum_steps=1)
  c.data.synthetic = True  # Until a run names its data (--config.data.dataset_dir=DIR).
  return c
