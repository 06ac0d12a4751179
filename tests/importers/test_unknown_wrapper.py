"""A wrapper class transformers lacks around a language model it has (Kimi-K2.5: KimiK25ForConditionalGeneration
holding a DeepseekV3ForCausalLM text config of model_type "kimi_k2") is traced as that language model; a
checkpoint's model_type transformers lacks, naming a class it has (Kimi-K2: "kimi_k2" / DeepseekV3ForCausalLM),
builds that class with its own config class."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.errors import UnsupportedArchitectureError
from graphsim.importers.hf import import_hf
from graphsim.importers.hf.wrappers import unknown_wrapper_text_config

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
         "max_position_embeddings": 256}
# DeepSeek-V3's layout at a tiny size, under Kimi-K2's model_type (unknown to transformers)
KIMI_TEXT = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 64,
             "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 4, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
             "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "q_lora_rank": 32, "kv_lora_rank": 16,
             "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "vocab_size": 128,
             "max_position_embeddings": 256}


def test_a_known_model_type_is_left_alone():
    assert unknown_wrapper_text_config(copy.deepcopy(LLAMA)) is None
    wrapped = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "text_config": LLAMA}
    assert unknown_wrapper_text_config(wrapped) is None  # transformers builds this wrapper itself


def test_unknown_wrapper_traces_its_language_model():
    cfg = {"architectures": ["MadeUpForConditionalGeneration"], "model_type": "made_up", "tie_word_embeddings": False,
           "text_config": {k: v for k, v in LLAMA.items()}, "vision_config": {"hidden_size": 8}}
    text = unknown_wrapper_text_config(cfg)
    assert text is not None and text["architectures"] == ["LlamaForCausalLM"] and text["tie_word_embeddings"] is False
    g, _ = import_hf(ResolvedModel("tiny-wrapped", cfg, "path", "test"), cache=False)
    ref, _ = import_hf(ResolvedModel("tiny-llama", dict(LLAMA, tie_word_embeddings=False), "path", "test"), cache=False)
    assert g.meta.num_layers == ref.meta.num_layers == 2
    assert g.meta.param_count == ref.meta.param_count  # the language model's parameters: no vision tower


def test_kimi_style_model_type_builds_the_named_class():
    g, report = import_hf(ResolvedModel("tiny-kimi", copy.deepcopy(KIMI_TEXT), "path", "test"), cache=False)
    assert report.architecture == "DeepseekV3ForCausalLM" and g.meta.num_layers == 2
    wrapper = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
               "text_config": copy.deepcopy(KIMI_TEXT)}
    g2, _ = import_hf(ResolvedModel("tiny-kimi-k25", wrapper, "path", "test"), cache=False)
    assert g2.meta.param_count == g.meta.param_count


def test_unknown_wrapper_without_a_known_text_model_fails_by_name():
    cfg = {"architectures": ["MadeUpForConditionalGeneration"], "model_type": "made_up",
           "text_config": dict(LLAMA, architectures=["NoSuchForCausalLM"], model_type="no_such")}
    assert unknown_wrapper_text_config(cfg) is None
    with pytest.raises(UnsupportedArchitectureError, match="MadeUpForConditionalGeneration"):
        import_hf(ResolvedModel("tiny-unknown", cfg, "path", "test"), cache=False)
