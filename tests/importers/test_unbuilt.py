"""A config asking for mechanisms transformers' class does not build is refused by name (Kimi-K3), and an
activation transformers lacks is named with what it is, instead of a bare KeyError."""

from __future__ import annotations

import copy

import pytest

from graphsim.errors import ConfigError, UnsupportedArchitectureError
from graphsim.importers.hf.build import build_on_meta
from graphsim.importers.hf.unbuilt import unbuilt_reason, unknown_activation

# a tiny Kimi Linear transformers builds (tests/importers/test_kda.py's)
KIMI_LINEAR = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "torch_dtype": "bfloat16",
    "vocab_size": 96, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "hidden_size": 32,
    "intermediate_size": 64, "moe_intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": None, "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8, "v_head_dim": 8, "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1,
    "first_k_dense_replace": 1,
    "linear_attn_config": {"head_dim": 8, "num_heads": 4, "short_conv_kernel_size": 4, "full_attn_layers": [3],
                           "kda_layers": [1, 2]},
}
# Kimi-K3's checkpoint (aiconfigurator-core model_configs/moonshotai--Kimi-K3_config.json) at toy size: its wrapper
# around a KimiLinearForCausalLM text model with the keys its remote code reads
K3_TEXT = KIMI_LINEAR | {"hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
                         "routed_expert_hidden_size": 16, "latent_moe_use_norm": True, "attn_res_block_size": 2,
                         "mla_use_output_gate": True}
K3 = {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": K3_TEXT}


def test_kimi_k3_is_refused_naming_every_mechanism_transformers_does_not_build():
    with pytest.raises(UnsupportedArchitectureError) as e:
        build_on_meta(copy.deepcopy(K3))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("graphsim cannot trace this config as KimiLinearForCausalLM")
    for key in ("routed_expert_hidden_size", "attn_res_block_size", "mla_use_output_gate", "'situ'", "SituAndMul"):
        assert key in msg


def test_plain_kimi_linear_is_not_refused_and_one_unbuilt_key_is_enough():
    assert unbuilt_reason("KimiLinearForCausalLM", KIMI_LINEAR) is None
    assert unbuilt_reason("KimiLinearForCausalLM", KIMI_LINEAR | {"mla_use_output_gate": False}) is None
    got = unbuilt_reason("KimiLinearForCausalLM", KIMI_LINEAR | {"attn_res_block_size": 12})
    assert got is not None and got.endswith("does not build the attention residuals (attn_res_block_size)")


def test_an_activation_transformers_lacks_is_named_not_a_bare_key_error():
    assert unknown_activation(KIMI_LINEAR) is None and unknown_activation({"hidden_act": "situ"}) == "situ"
    with pytest.raises(ConfigError) as e:
        build_on_meta(KIMI_LINEAR | {"hidden_act": "situ"})
    assert "its activation 'situ' (vLLM's SituAndMul" in str(e.value) and "KeyError" not in str(e.value)
