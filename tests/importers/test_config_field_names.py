"""The importer's required-field check reads a field under the name its config class stores it."""

import pytest

pytest.importorskip("transformers")

from graphsim.errors import ConfigError
from graphsim.importers.hf.build import check_config


def test_gpt2_and_bloom_name_the_frame_their_own_way():
    # GPT2Config.attribute_map: hidden_size → n_embd, num_hidden_layers → n_layer
    gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_layer": 2, "vocab_size": 96}
    assert check_config(gpt2) == "GPT2LMHeadModel"
    # BloomConfig.__post_init__ takes n_embed as hidden_size; attribute_map: num_hidden_layers → n_layer
    bloom = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "n_embed": 64, "n_layer": 2, "vocab_size": 96}
    assert check_config(bloom) == "BloomForCausalLM"


def test_a_missing_field_is_still_named():
    gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 2, "vocab_size": 96}
    with pytest.raises(ConfigError, match="missing required field\\(s\\) hidden_size;"):
        check_config(gpt2)
