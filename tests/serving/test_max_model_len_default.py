"""The default context length is the text model's, as vLLM reads it (`hf_text_config`,
transformers_utils/config.py get_hf_text_config): a multimodal wrapper may state it only in its `text_config`."""

from __future__ import annotations

import pytest

from graphsim.costing.hardware import load_hardware
from graphsim.serving.engine_config import EngineArgs, default_max_model_len


def test_the_text_models_length_first():
    # MiniMax-M3-NVFP4's wrapper (minimax_m3_vl) holds max_position_embeddings only in text_config
    assert default_max_model_len({"model_type": "w", "text_config": {"max_position_embeddings": 1048576}}) == 1048576
    # both stated: the text model's, as vLLM's _get_and_verify_max_len(hf_text_config)
    assert default_max_model_len({"max_position_embeddings": 4096, "text_config": {"max_position_embeddings": 8192}}) == 8192
    # the text config silent: the top level's (as before); a plain config unchanged
    assert default_max_model_len({"max_position_embeddings": 4096, "text_config": {"hidden_size": 8}}) == 4096
    assert default_max_model_len({"n_positions": 1024}) == 1024
    assert default_max_model_len({"text_config": {}}) is None


@pytest.mark.parametrize("engine, where", [
    # vLLM: _get_and_verify_max_len's default_max_len = 2048 (0.10.1 vllm/config/__init__.py; 0.19.0 / 0.33.0
    # vllm/config/model.py); SGLang 0.5.14 get_context_length's `return 2048`; TensorRT-LLM infer_max_seq_len's
    # inferred_max_seq_len = 2048
    ("vllm", "_get_and_verify_max_len"), ("vllm==0.10.1", "_get_and_verify_max_len"),
    ("sglang", "get_context_length"), ("trtllm", "infer_max_seq_len")])
def test_no_length_anywhere_takes_the_engines_fallback(engine, where):
    e = EngineArgs(engine=engine).resolve(load_hardware("h200"), {"text_config": {"hidden_size": 8}})
    assert e.max_model_len == 2048 and e.max_model_len_fallback
    assert "fallback" in e.max_model_len_source and where in e.max_model_len_source


def test_given_or_stated_length_is_no_fallback():
    h200 = load_hardware("h200")
    e = EngineArgs(max_model_len=8192).resolve(h200, {})  # vLLM returns the given length when no key is found
    assert (e.max_model_len, e.max_model_len_source, e.max_model_len_fallback) == (8192, "given (--max-model-len)",
                                                                                   False)
    e = EngineArgs().resolve(h200, {"n_positions": 1024, "max_position_embeddings": 1024})
    # a tie goes to the first of vLLM's possible_keys (its `max_len < derived_max_model_len` is strict)
    assert (e.max_model_len, e.max_model_len_source) == (1024, "the config's max_position_embeddings")
    assert not e.max_model_len_fallback


def test_vllms_context_keys_smallest_and_model_max_length_over_them():
    # Kimi-Linear-48B-A3B's config.json states only model_max_length (1,048,576): vLLM's possible_keys has it
    # (derive_max_model_len_and_key, 0.33.0 / 0.19.0; _get_and_verify_max_len, 0.10.1)
    assert default_max_model_len({"model_type": "kimi_linear", "model_max_length": 1048576}) == 1048576
    # stated beside another key, model_max_length wins even when larger (vLLM's "For Command-R / Cohere" override)
    assert default_max_model_len({"max_position_embeddings": 8192, "model_max_length": 131072}) == 131072
    # otherwise the smallest of the keys: Whisper's decoder, 448 target positions against 1500 source ones (the
    # source key is not one of vLLM's)
    assert default_max_model_len({"max_target_positions": 448, "max_source_positions": 1500}) == 448
    assert default_max_model_len({"max_position_embeddings": 4096, "seq_length": 2048}) == 2048
    # a bool is no length
    assert default_max_model_len({"max_seq_len": True}) is None


@pytest.mark.parametrize("cfg, vllm, sglang, trtllm", [
    # GPT-2's n_positions: one of vLLM's keys, not SGLang's CONTEXT_LENGTH_KEYS nor TRT-LLM's (max_position_embeddings
    # only): both fall back to 2048
    ({"n_positions": 1024}, 1024, 2048, 2048),
    # vLLM the smallest (seq_length 2048); SGLang the first of its order (seq_length before max_position_embeddings);
    # TRT-LLM max_position_embeddings
    ({"max_position_embeddings": 4096, "seq_length": 2048}, 2048, 2048, 4096),
    # SGLang's order puts max_sequence_length first, so the larger 16384; vLLM the smaller 8192
    ({"max_position_embeddings": 8192, "max_sequence_length": 16384}, 8192, 16384, 8192),
    # Kimi-Linear's model_max_length only: vLLM and SGLang read it, TRT-LLM's rule does not
    ({"model_max_length": 1048576}, 1048576, 1048576, 2048),
])
def test_each_engine_reads_its_own_keys(cfg, vllm, sglang, trtllm):
    h200 = load_hardware("h200")
    got = [EngineArgs(engine=e).resolve(h200, cfg).max_model_len for e in ("vllm", "sglang", "trtllm")]
    assert got == [vllm, sglang, trtllm]
