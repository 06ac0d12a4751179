"""Decoders and multimodal wrappers registered in graphsim/work/builders/modern_b.py: hand-derived goldens,
the schedules the config classes derive, the Qwen3-VL text config defaults, the wrappers' language-model
accounting and their refusals. (tests/work/test_work_config_defaults.py holds every class against the
transformers meta model.)"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from graphsim.errors import ConfigError
from graphsim.serving.kv_layout import layer_kv
from graphsim.work import accounting, build_model, parse_step
from graphsim.work.builders.modern_b import QWEN3_VL_MOE_TEXT_DEFAULTS, QWEN3_VL_TEXT_DEFAULTS
from graphsim.work.dtypes import DType, Precision
from graphsim.work.registry import language_model_config
from graphsim.work.specs import DenseFfn, GqaAttention, MlaAttention, ModelSpec, MoeFfn

BF16 = Precision(weight=DType.BFLOAT16, kv=DType.BFLOAT16, state=DType.BFLOAT16)


def test_aria_text_golden_at_class_defaults():
    # AriaTextConfig's defaults (transformers models/aria/configuration_aria.py): hidden 4096, 32 layers, 32
    # heads, MHA (num_key_value_heads None → 32), head_dim 128, 8 experts of intermediate_size 4096, top-2,
    # 2 shared experts (one MLP of 2 · 4096 = 8192), vocab 32000, untied, no biases.
    cfg = {"architectures": ["AriaTextForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "vocab_size": 32000}
    params = accounting(cfg).params()
    # Per layer: q, k, v, o 4096·4096 = 16,777,216 each → 67,108,864; two norms 8,192; router 8·4096 =
    # 32,768; experts 8 × 3 × 4096·4096 = 402,653,184; shared 3 × 4096·8192 = 100,663,296 →
    # 570,466,304 per layer, × 32 = 18,254,921,728. Embedding and lm_head 32000·4096 = 131,072,000 each,
    # final norm 4,096: total 18,254,921,728 + 262,144,000 + 4,096 = 18,517,069,824.
    assert params.total == 18_517_069_824
    # Activated: 2 of 8 experts (100,663,296) → 67,108,864 + 8,192 + 32,768 + 100,663,296 + 100,663,296 =
    # 268,476,416 per layer, × 32 = 8,591,245,312; + lm_head 131,072,000 + final norm 4,096 = 8,722,321,408.
    assert params.activated == 8_722_321_408


def _beam(**over: Any) -> dict[str, Any]:
    return {"architectures": ["BeamForCausalLM"], "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100, "intermediate_size": 96,
            "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
            "sliding_window": 8, **over}


def test_beam_golden_with_its_output_gate_and_derived_schedules():
    spec = build_model(_beam())
    # BeamConfig.__post_init__: every 6th layer and the last full (4 layers: 0-2 sliding, 3 full); the first
    # min(3, layers) = 3 dense, the rest sparse.
    assert [la.attn.window for la in spec.stack.layers if isinstance(la.attn, GqaAttention)] == [8, 8, 8, None]
    assert [type(la.ffn) for la in spec.stack.layers] == [DenseFfn, DenseFfn, DenseFfn, MoeFfn]
    # Attention per layer: q 64·64 = 4,096, k and v 32·64 = 2,048 each, o 4,096, q/k norms 16 + 16, the
    # gate's gate_proj 64·64 = 4,096 and gate_bias 4 → 16,420; four norms 256. Dense MLP 3·64·96 = 18,432;
    # MoE: router 4·64 = 256, score correction 4, experts 4 × 3 × 64·32 = 24,576 → 24,836.
    # Layers 0-2: 3 × (16,420 + 256 + 18,432) = 105,324; layer 3: 16,420 + 256 + 24,836 = 41,512.
    # Embedding and lm_head 100·64 = 6,400 each, final norm 64: total 146,836 + 12,864 = 159,700.
    assert accounting(_beam()).params().total == 159_700


def _windows(spec: ModelSpec) -> list[int | None]:
    return [la.attn.window if isinstance(la.attn, GqaAttention) else -1 for la in spec.stack.layers]


def test_flint_and_kolibri_derive_their_layer_types():
    base = {"hidden_size": 64, "num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "vocab_size": 100, "sliding_window": 8, "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}
    flint = build_model(dict(base, architectures=["FlintForCausalLM"], intermediate_size=32))
    # FlintConfig.__post_init__: full on layers 0, 1, i % 4 == 1 (5) and the last (6); mlp_only_layers [0, 1]
    assert _windows(flint) == [None, None, 8, 8, 8, None, None]
    assert [isinstance(la.ffn, MoeFfn) for la in flint.stack.layers] == [False, False, True, True, True, True, True]
    kolibri = build_model(dict(base, architectures=["Kolibri1ForCausalLM"]))
    # Kolibri1Config.__post_init__: full where (i + 1) % 5 == 0 (layer 4)
    assert _windows(kolibri) == [8, 8, 8, 8, None, 8, 8]


def test_hy_v4_indexer_schedule_and_its_extras():
    cfg = {"architectures": ["HYV4ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4,
           "vocab_size": 100, "intermediate_size": 96, "moe_intermediate_size": 16, "n_routed_experts": 4,
           "num_experts_per_tok": 2, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
           "qk_rope_head_dim": 8, "v_head_dim": 16, "index_n_heads": 2, "index_head_dim": 8, "index_topk": 4,
           "hc_mult": 2}
    spec = build_model(cfg)
    attns = [la.attn for la in spec.stack.layers]
    assert all(isinstance(a, MlaAttention) and a.indexer is not None for a in attns)
    # HYV4Config.__post_init__: layer 0 and every (i − 1) % 4 == 0 (1, 5) run their own indexer
    assert [a.indexer.shared for a in attns if isinstance(a, MlaAttention) and a.indexer] == [
        False, False, True, True, True, False]
    layer = spec.stack.layers[0]
    # gate_proj (4 heads · v 16 = 64, hidden 64), 4 sinks; attn_hc fn (2·2, 2·64), base 4, scale 2
    assert {w.module: w.shape for w in layer.attn_extras} == {
        "self_attn.gate_proj": (64, 64), "self_attn.sinks": (4,), "attn_hc.fn": (4, 128), "attn_hc.base": (4,),
        "attn_hc.scale": (2,)}
    assert {w.module: w.shape for w in spec.final_extras} == {
        "hc_head.hc_fn": (2, 128), "hc_head.hc_base": (2,), "hc_head.hc_scale": (1,)}


def test_gemma3n_kv_shared_layers_keep_no_cache():
    cfg = {"architectures": ["Gemma3nForCausalLM"], "hidden_size": 64, "num_hidden_layers": 10,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
           "intermediate_size": [96] * 5 + [128] * 5, "num_kv_shared_layers": 4, "vocab_size_per_layer_input": 50,
           "hidden_size_per_layer_input": 8, "laurel_rank": 4}
    layers = build_model(cfg).stack.layers
    # Gemma3nTextConfig.__post_init__: full every 5th layer (4, 9); the last 4 layers reuse K/V
    assert [la.attn.window is None for la in layers if isinstance(la.attn, GqaAttention)] == [i in (4, 9) for i in range(10)]
    assert [la.attn.kv_shared for la in layers if isinstance(la.attn, GqaAttention)] == [False] * 6 + [True] * 4
    assert [la.ffn.intermediate for la in layers if isinstance(la.ffn, DenseFfn)] == [96] * 5 + [128] * 5
    # 6 layers keep K and V: 2 KV heads · 16 · 2 (K, V) · 2 B = 128 B per token each
    assert [k.bytes_per_token for k in layer_kv(build_model(cfg), 1, BF16)] == [128] * 6


# --- wrappers ---------------------------------------------------------------------------------------

# Qwen/Qwen3-VL-8B-Instruct config.json's text_config (the public checkpoint), abridged to what the
# accountant reads; the wrapper states tie_word_embeddings false.
QWEN3_VL_8B = {
    "architectures": ["Qwen3VLForConditionalGeneration"], "tie_word_embeddings": False,
    "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 4096, "num_hidden_layers": 36,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
                    "vocab_size": 151936, "max_position_embeddings": 262144, "dtype": "bfloat16"},
}


def test_qwen3_vl_8b_language_model_golden():
    params = accounting(QWEN3_VL_8B).params()
    # Per layer: q 4096·4096 = 16,777,216, k and v 1024·4096 = 4,194,304 each, o 16,777,216, q/k norms
    # 128 + 128, two norms 8,192, MLP 3 · 4096·12288 = 150,994,944 → 192,946,432; × 36 = 6,946,071,552.
    # Embedding and lm_head 151936·4096 = 622,329,856 each, final norm 4,096: 8,190,735,360. (The transformers
    # model of the full config, its 576,388,336-parameter vision tower included, holds 8,767,123,696: the
    # model page's 8.77B; the accountant does not count the tower.)
    assert params.total == 8_190_735_360
    assert any("other towers are not counted" in n for n in build_model(QWEN3_VL_8B).notes)


def test_qwen3_vl_moe_follows_its_text_config_class():
    # Qwen3VLMoeTextConfig's defaults, not Qwen3-MoE's: without num_key_value_heads and head_dim the text
    # model is MHA (16 → here num_attention_heads 32 is stated, kv default 16) with head_dim hidden/heads
    # (2048 / 32 = 64); Qwen3MoeConfig would give 4 KV heads of 128 (transformers models/qwen3_vl_moe
    # configuration_qwen3_vl_moe.py vs models/qwen3_moe).
    cfg = {"architectures": ["Qwen3VLMoeForConditionalGeneration"],
           "text_config": {"model_type": "qwen3_vl_moe_text", "hidden_size": 2048, "num_hidden_layers": 4,
                           "num_attention_heads": 32, "vocab_size": 1000}}
    layers = build_model(cfg).stack.layers
    attn, ffn = layers[0].attn, layers[0].ffn
    assert isinstance(attn, GqaAttention) and isinstance(ffn, MoeFfn)
    assert (attn.kv_heads, attn.head_dim) == (16, 64)
    # 60 experts of 1408, top-4 (Qwen3VLMoeTextConfig), not Qwen3-MoE's 128 of 768, top-8
    assert (ffn.experts, ffn.expert_intermediate, ffn.top_k) == (60, 1408, 4)
    # Qwen3VLMoeConfig (the wrapper) ties nothing by default, whatever the text config class says
    assert build_model(cfg).tie_embeddings is False


def test_qwen3_vl_text_defaults_equal_the_installed_config_classes():
    transformers = pytest.importorskip("transformers")

    def keyword_defaults(cls: Any) -> dict[str, Any]:
        return {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty}

    for wrapper, table in (("Qwen3VLForConditionalGeneration", QWEN3_VL_TEXT_DEFAULTS),
                           ("Qwen3VLMoeForConditionalGeneration", QWEN3_VL_MOE_TEXT_DEFAULTS)):
        text_class = getattr(transformers, wrapper).config_class.sub_configs["text_config"]
        assert keyword_defaults(text_class) == table, wrapper


def test_a_wrappers_engine_config_is_its_language_models():
    # the engine reads the context length (and the rotary cache) from the language model's config
    cfg = language_model_config(QWEN3_VL_8B)
    assert cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["max_position_embeddings"] == 262144 and cfg["tie_word_embeddings"] is False


def test_wrapper_refusals_are_one_line():
    with pytest.raises(ConfigError, match=r"no text_config object .*; add it"):
        build_model({"architectures": ["Gemma3ForConditionalGeneration"], "hidden_size": 64})
    # Fuyu builds AutoModel.from_config(text_config): a model_type with no registered causal LM, or one naming
    # another wrapper, is refused
    text = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}
    for model_type in ("clip_vision_model", "gemma3"):
        fuyu = {"architectures": ["FuyuForCausalLM"], "text_config": dict(text, model_type=model_type)}
        with pytest.raises(ConfigError, match=rf"model_type '{model_type}' names no language model"):
            build_model(fuyu)


def test_gemma4_assistant_is_a_drafter_without_a_cache():
    text = {"model_type": "gemma4_text", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32, "vocab_size": 100,
            "intermediate_size": 96, "sliding_window": 8, "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": 0, "num_kv_shared_layers": 3}
    cfg = {"architectures": ["Gemma4AssistantForCausalLM"], "backbone_hidden_size": 48, "text_config": text}
    spec = build_model(cfg)
    assert layer_kv(spec, 1, BF16) == ()  # every layer reads the target's K/V
    # pre_projection (64, 2·48) with the embedding, post_projection (48, 64) at the end
    assert [(w.module, w.shape) for w in spec.embed_extras] == [("pre_projection", (64, 96))]
    assert [(w.module, w.shape) for w in spec.final_extras] == [("post_projection", (48, 64))]
    with pytest.raises(ConfigError, match=r"use_ordered_embeddings .* not expressed"):
        build_model(dict(cfg, use_ordered_embeddings=True))


def test_phi4_multimodal_counts_its_language_model_only():
    cfg = {"architectures": ["Phi4MultimodalForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "intermediate_size": 96}
    params = accounting(cfg).params()
    # Per layer: q 64·64 = 4,096, k and v 32·64 = 2,048 each, o 4,096, MLP 3·64·96 = 18,432, two norms 128
    # → 30,848; × 2 = 61,696. Embedding and lm_head (untied by default) 100·64 = 6,400 each, final norm 64:
    # 74,560 (model.embed_tokens_extend, the image/audio towers, not counted).
    assert params.total == 74_560
    assert any("embed_tokens_extend" in n for n in build_model(cfg).notes)


def test_beam_decode_golden_gate_and_core():
    # Decode 2 sequences, one new token each after 16 cached, bf16 (the default with no dtype stated).
    report = accounting(_beam()).step(parse_step([], ["2x16"]))
    work = {s.name: s for s in report.segments}
    # The gate on each of the 3 sliding layers: 2 tokens × 2·(64·64) = 16,384 FLOPs per layer → 49,152; its
    # weights read once: (4,096 + 4 bias) × 2 B = 8,200 per layer → 24,600.
    gate = work["layers[sliding].attn.gate"]
    assert (gate.flops, gate.param_read_bytes) == (49_152, 24_600)
    # Core, sliding (window 8: a query sees the 8 newest positions, itself included): QKᵀ and PV,
    # 2 · 4 heads · (16 + 16) · 8 positions · 2 tokens = 4,096 per layer → 12,288; the full last layer sees
    # 17 positions: 2 · 4 · 32 · 17 · 2 = 8,704.
    assert work["layers[sliding].attn.core"].flops == 12_288
    assert work["layers[full].attn.core"].flops == 8_704
