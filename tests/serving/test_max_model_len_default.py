"""The default context length is the text model's, as vLLM reads it (`hf_text_config`,
transformers_utils/config.py get_hf_text_config): a multimodal wrapper may state it only in its `text_config`."""

from __future__ import annotations

import pytest

from graphsim.costing.hardware import load_hardware
from graphsim.serving.engine_config import EngineArgs, EngineConfigError, default_max_model_len


def test_the_text_models_length_first():
    # MiniMax-M3-NVFP4's wrapper (minimax_m3_vl) holds max_position_embeddings only in text_config
    assert default_max_model_len({"model_type": "w", "text_config": {"max_position_embeddings": 1048576}}) == 1048576
    # both stated: the text model's, as vLLM's _get_and_verify_max_len(hf_text_config)
    assert default_max_model_len({"max_position_embeddings": 4096, "text_config": {"max_position_embeddings": 8192}}) == 8192
    # the text config silent: the top level's (as before); a plain config unchanged
    assert default_max_model_len({"max_position_embeddings": 4096, "text_config": {"hidden_size": 8}}) == 4096
    assert default_max_model_len({"n_positions": 1024}) == 1024
    assert default_max_model_len({"text_config": {}}) is None


def test_no_length_anywhere_is_one_line():
    with pytest.raises(EngineConfigError, match="no max_position_embeddings; give --max-model-len"):
        EngineArgs().resolve(load_hardware("h200"), {"text_config": {"hidden_size": 8}})
