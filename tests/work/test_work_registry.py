"""Registry coverage, layer schedules and segment tags, and config validation errors."""

from __future__ import annotations

import copy

import pytest
from work_helpers import catalog_stems, load_config

from graphsim.errors import ConfigError, UnsupportedArchitectureError
from graphsim.work import BUILDERS, accounting, build_model, config_defaults, parse_step, supported_architectures
from graphsim.work.registry import NO_TRANSFORMERS_CLASS, TRANSFORMERS_CLASS


def test_registry_covers_every_catalog_architecture():
    archs = {load_config(s)["architectures"][0] for s in catalog_stems()}
    assert archs <= set(BUILDERS)
    # Every registered architecture has its config-class defaults in the table (which holds every
    # causal-LM class of the pinned transformers), so test_work_config_defaults.py cross-checks it.
    # (a checkpoint's own spelling of a class, registry.TRANSFORMERS_CLASS, reads that class's entry)
    table = set(config_defaults.table_architectures())
    # (registry.NO_TRANSFORMERS_CLASS: remote-code-only architectures, held to their model cards instead)
    assert set(supported_architectures()) - set(TRANSFORMERS_CLASS) - NO_TRANSFORMERS_CLASS <= table
    assert not NO_TRANSFORMERS_CLASS & table
    assert set(TRANSFORMERS_CLASS.values()) <= table
    assert len(supported_architectures()) >= 36


@pytest.mark.parametrize("stem", catalog_stems())
def test_every_catalog_model_accounts(stem):
    acc = accounting(load_config(stem))
    r = acc.step(parse_step(["512@128"], ["8x1024"]))
    t = r.total
    assert t.flops > 0 and t.param_read_bytes > 0 and t.state_write_bytes > 0
    assert all(s.flops >= 0 and s.param_read_bytes >= 0 for s in r.segments)
    assert acc.params().total == sum(s.params for s in r.segments)
    assert r.to_dict()["total"]["flops"] == t.flops


def test_unknown_architecture_names_the_supported_list():
    with pytest.raises(UnsupportedArchitectureError) as e:
        build_model({"architectures": ["NoSuchModelForCausalLM"], "hidden_size": 8})
    msg = str(e.value)
    assert "NoSuchModelForCausalLM" in msg and "LlamaForCausalLM" in msg and "Qwen3NextForCausalLM" in msg
    assert "\n" not in msg


def test_architecture_is_matched_exactly():
    cfg = load_config("Llama-3.1-8B")
    cfg["architectures"] = ["LlamaForCausalLMX"]
    with pytest.raises(UnsupportedArchitectureError):
        build_model(cfg)


def _schedule(stem: str, **changes) -> tuple[str, ...]:
    cfg = load_config(stem)
    cfg.update(changes)
    return build_model(cfg).stack.schedule()


def test_layer_schedules():
    gemma = _schedule("Gemma-2-9b")
    assert gemma[:3] == ("sliding/dense", "full/dense", "sliding/dense") and gemma.count("sliding/dense") == 21
    assert _schedule("gpt-oss-20b")[:2] == ("sliding/moe", "full/moe")
    nxt = _schedule("Qwen3-Next-80B-A3B")
    assert [i for i, k in enumerate(nxt) if k.startswith("full")] == list(range(3, 48, 4))
    ds = _schedule("DeepSeek-V3")
    assert ds[:4] == ("mla/dense",) * 3 + ("mla/moe",) and ds.count("mla/moe") == 58
    assert set(_schedule("Qwen3-30B-A3B")) == {"full/moe"}
    assert set(_schedule("Phi-3-mini-4k-instruct")) == {"sliding/dense"}  # sliding_window 2047 on all layers
    assert set(_schedule("Mistral-7B-v0.3")) == {"full/dense"}  # explicit null
    cfg = load_config("Mistral-7B-v0.3")
    del cfg["sliding_window"]  # absent: the HF MistralConfig default 4096 applies
    assert set(build_model(cfg).stack.schedule()) == {"sliding/dense"}
    assert set(_schedule("Qwen2.5-7B-Instruct")) == {"full/dense"}  # use_sliding_window false
    qwen2 = _schedule("Qwen2.5-7B-Instruct", use_sliding_window=True, max_window_layers=20)
    assert qwen2[19:21] == ("full/dense", "sliding/dense")
    moe = _schedule("Qwen3-30B-A3B", mlp_only_layers=[0, 5], decoder_sparse_step=2)
    assert moe[:6] == ("full/dense", "full/moe", "full/dense", "full/moe", "full/dense", "full/dense")
    v3 = _schedule("DeepSeek-V3", moe_layer_freq=2)
    assert v3[3:6] == ("mla/dense", "mla/moe", "mla/dense")


def test_segment_names_carry_tags_only_where_kinds_differ():
    def names(stem):
        return {s.name for s in accounting(load_config(stem)).step(parse_step(["16@0"])).segments}

    assert {"layers[sliding].attn.qkv", "layers[full].attn.core", "layers.ffn.mlp"} <= names("Gemma-2-9b")
    assert {"layers.attn.q", "layers.attn.kv", "layers[moe].ffn.routed", "layers[dense].ffn.mlp"} <= names("DeepSeek-V3")
    assert {"layers[linear].attn.core", "layers[full].attn.qkv", "layers.ffn.shared"} <= names("Qwen3-Next-80B-A3B")
    assert {"embed", "layers.attn.qkv", "layers.ffn.mlp", "final_norm", "head"} == names("Llama-3.1-8B") - {
        "layers.attn.norm", "layers.attn.core", "layers.attn.out", "layers.ffn.norm"
    }


def _broken(stem: str, drop: tuple[str, ...] = (), **changes) -> dict:
    cfg = copy.deepcopy(load_config(stem))
    for key in drop:
        cfg.pop(key, None)
    cfg.update(changes)
    return cfg


@pytest.mark.parametrize(
    "stem,field",
    [
        ("Llama-3.1-8B", "hidden_size"),
        ("Llama-3.1-8B", "num_hidden_layers"),
        ("Qwen3-30B-A3B", "num_attention_heads"),
        ("DeepSeek-V3", "vocab_size"),
    ],
)
def test_missing_frame_field_is_named(stem, field):
    # The four fields that say which model this is stay required (config_defaults.FRAME_KEYS).
    with pytest.raises(ConfigError, match=f"'{field}'"):
        build_model(_broken(stem, drop=(field,)))


@pytest.mark.parametrize(
    "stem,field,read,expected",
    [
        # Expected values are the keyword defaults in transformers 5.24's config classes:
        # LlamaConfig(intermediate_size=11008), Qwen3MoeConfig(moe_intermediate_size=768),
        # DeepseekV3Config(kv_lora_rank=512), Qwen3NextConfig(linear_num_value_heads=32),
        # GptOssConfig(num_local_experts=128).
        ("Llama-3.1-8B", "intermediate_size", lambda s: s.stack.layers[0].ffn.intermediate, 11008),
        ("Qwen3-30B-A3B", "moe_intermediate_size", lambda s: s.stack.layers[0].ffn.expert_intermediate, 768),
        ("DeepSeek-V3", "kv_lora_rank", lambda s: s.stack.layers[0].attn.kv_lora_rank, 512),
        ("Qwen3-Next-80B-A3B", "linear_num_value_heads", lambda s: s.stack.layers[0].attn.v_heads, 32),
        ("gpt-oss-20b", "num_local_experts", lambda s: s.stack.layers[0].ffn.experts, 128),
    ],
)
def test_omitted_field_takes_the_config_class_default(stem, field, read, expected):
    assert read(build_model(_broken(stem, drop=(field,)))) == expected


def test_inconsistent_dims():
    with pytest.raises(ConfigError, match=r"not divisible.*head_dim"):
        build_model(_broken("Llama-3.1-8B", hidden_size=4100))
    assert build_model(_broken("Llama-3.1-8B", hidden_size=4100, head_dim=128)).hidden == 4100
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        build_model(_broken("Llama-3.1-8B", num_key_value_heads=5))
    with pytest.raises(ConfigError, match="not an integer"):
        build_model(_broken("Llama-3.1-8B", num_hidden_layers="32"))
    with pytest.raises(ConfigError, match="exceeds"):
        build_model(_broken("Mixtral-8x7B-v0.1", num_experts_per_tok=9))
    with pytest.raises(ConfigError, match="layer_types"):
        build_model(_broken("gpt-oss-20b", num_hidden_layers=23))
    with pytest.raises(ConfigError, match="architectures"):
        build_model(_broken("Llama-3.1-8B", drop=("architectures",)))


def test_quantization_and_dtype_errors():
    with pytest.raises(ConfigError, match=r"'bitsandbytes' is not supported.*--ignore-quant"):
        build_model(_broken("Llama-3.1-8B", quantization_config={"quant_method": "bitsandbytes"}))
    with pytest.raises(ConfigError, match="weight_block_size"):
        build_model(_broken("DeepSeek-V3", quantization_config={"quant_method": "fp8", "weight_block_size": [128]}))
    with pytest.raises(ConfigError, match="--kv-dtype"):
        accounting(load_config("Llama-3.1-8B"), kv_dtype="fp7")
    assert accounting(load_config("Llama-3.1-8B"), dtype="float16").precision.kv.label == "fp16"


def test_dtype_comes_from_the_config():
    assert accounting(_broken("Llama-3.1-8B", torch_dtype="float32")).precision.weight.label == "fp32"
    assert accounting(_broken("Llama-3.1-8B", drop=("torch_dtype",), dtype="float16")).precision.weight.label == "fp16"
    gpt = accounting(load_config("gpt-oss-20b")).precision
    assert gpt.weight.label == "bf16" and gpt.weight_source.startswith("default")


def test_multimodal_wrapper_is_accounted_as_its_language_model():
    # A Qwen3.5-style wrapper: the language model sits in text_config, whose model_type maps to a
    # registered causal-LM class; the wrapper's top-level tie_word_embeddings applies to it.
    text = copy.deepcopy(load_config("Qwen3-8B"))
    text.pop("architectures")
    text["model_type"] = "qwen3"
    tie = text.pop("tie_word_embeddings")
    wrapper = {"architectures": ["SomeVLForConditionalGeneration"], "tie_word_embeddings": tie, "text_config": text}
    spec = build_model(wrapper)
    plain = build_model(load_config("Qwen3-8B"))
    assert spec.architecture == "Qwen3ForCausalLM"
    assert accounting(wrapper).params().total == accounting(load_config("Qwen3-8B")).params().total
    assert spec.stack == plain.stack
    assert any("SomeVLForConditionalGeneration: accounts its language model (Qwen3ForCausalLM" in n for n in spec.notes)


def test_multimodal_wrapper_with_an_unregistered_language_model_is_refused_by_name():
    wrapper = {"architectures": ["OtherForConditionalGeneration"], "text_config": {"model_type": "no_such_text"}}
    with pytest.raises(UnsupportedArchitectureError, match="'OtherForConditionalGeneration'"):
        build_model(wrapper)


def test_wrapper_text_config_naming_a_registered_class_with_an_unknown_model_type():
    # Kimi-K2.5: text_config names DeepseekV3ForCausalLM while its model_type (kimi_k2) is unknown
    # to transformers; the named class is used.
    text = dict(copy.deepcopy(load_config("DeepSeek-V3")), model_type="kimi_k2")
    wrapper = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": text}
    assert accounting(wrapper).params().total == accounting(load_config("DeepSeek-V3")).params().total


def test_a_field_stated_under_its_transformers_alias_is_read():
    # MellumConfig.attribute_map: num_experts -> num_local_experts; a config may state either name.
    base = {
        "architectures": ["MellumForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "intermediate_size": 128,
        "moe_intermediate_size": 32, "num_experts_per_tok": 2, "mlp_layer_types": ["dense", "sparse"],
    }
    by_alias = build_model(dict(base, num_experts=6)).stack.layers[1].ffn
    by_name = build_model(dict(base, num_local_experts=6)).stack.layers[1].ffn
    assert getattr(by_alias, "experts", None) == getattr(by_name, "experts", None) == 6
