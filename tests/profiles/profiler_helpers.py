"""A tiny Llama config, a tiny grid and fast timing for profiler tests."""

from __future__ import annotations

import copy

from graphsim.catalog import ResolvedModel, resolve_model


def tiny_config() -> dict:
    cfg = copy.deepcopy(resolve_model("llama-3.1-8b").config)
    cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
               num_hidden_layers=2)
    # the catalog's special-token ids lie outside a 96-token vocabulary (transformers warns)
    cfg.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return cfg


def tiny_model() -> ResolvedModel:
    return ResolvedModel("tiny", tiny_config(), "path", "test")


def tiny_grid():
    from graphsim.profiles.profiler import Grid

    return Grid(gemm_m=(1, 2, 16), tokens=(1, 2, 16), moe_tokens=(1, 4), prefill_batch=(1,), prefill_q=(16,),
                prefill_max_kv=32, decode_batch=(1, 2), decode_kv=(128,))


def fast_timing():
    from graphsim.profiles.profiler import TimingOptions

    return TimingOptions(warmup_calls=1, warmup_time_s=0.0, min_samples=3, min_time_s=0.0, max_time_s=0.2,
                         floor_samples=3)
