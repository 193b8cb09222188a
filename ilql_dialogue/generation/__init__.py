"""Batched KV-cache decoding and logits processors (see sampler.py)."""

from ilql_dialogue.generation.logits_processors import (
    Compose, ForbidTokens, LogitsProcessor, StepState, Temperature, TopK, TopP, ValueGuidance,
    apply_temperature, compose, filter_min_p, filter_top_k_top_p)
from ilql_dialogue.generation.sampler import (
    DecodeState, SamplingParams, append, generate, mask_from_lengths, positions_from_mask, prefill,
    sample_from_logits)
