"""The LM core: decoder trunk, KV cache, heads, structured prefix, HF checkpoints."""

from ilql_dialogue.models.config import ModelConfig
from ilql_dialogue.models.heads import Head, ScalarHead, VocabHead
from ilql_dialogue.models.kv_cache import KVCache, init_cache
from ilql_dialogue.models.prefix import StructuredPrefix
from ilql_dialogue.models.transformer import Transformer

__all__ = [
    "Head",
    "KVCache",
    "ModelConfig",
    "ScalarHead",
    "StructuredPrefix",
    "Transformer",
    "VocabHead",
    "init_cache",
]
