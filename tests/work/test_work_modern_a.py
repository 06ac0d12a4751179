"""This year's decoders registered in graphsim/work/builders/modern_a.py: a hand-derived golden, the
layer schedules the config classes derive, and the meta-model parameter count on variants the class
defaults do not reach (per-layer heads, dense prefixes, nested DBRX configs, biased heads)."""

from __future__ import annotations

from typing import Any

import pytest

from graphsim.errors import ConfigError
from graphsim.serving.kv_layout import layer_kv
from graphsim.work import accounting, build_model, parse_step
from graphsim.work.dtypes import DType, Precision
from graphsim.work.specs import DenseFfn, GqaAttention, MoeFfn

BF16 = Precision(weight=DType.BFLOAT16, kv=DType.BFLOAT16, state=DType.BFLOAT16)


def test_phi_3_5_moe_golden_at_class_defaults():
    # PhimoeConfig's defaults are Phi-3.5-MoE's shape (transformers models/phimoe/configuration_phimoe.py):
    # hidden 4096, 32 layers, 32 heads / 8 KV heads of 128, 16 experts of 6400, top-2, vocab 32064, untied,
    # LayerNorms with bias, no attention or lm_head bias.
    cfg = {"architectures": ["PhimoeForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "vocab_size": 32064}
    params = accounting(cfg).params()
    # Per layer: q 4096·4096 = 16,777,216, k and v 1024·4096 = 4,194,304 each, o 16,777,216 → 41,943,040;
    # two LayerNorms with bias 4·4096 = 16,384; router 16·4096 = 65,536; experts 16 × 3 × 4096·6400 =
    # 16 × 78,643,200 = 1,258,291,200 → 1,300,316,160 per layer, × 32 = 41,610,117,120.
    # Embedding and lm_head 32064·4096 = 131,334,144 each; final LayerNorm 2·4096 = 8,192.
    # Total 41,610,117,120 + 262,668,288 + 8,192 = 41,872,793,600 (the model card: 41.9B total).
    assert params.total == 41_872_793_600
    # Activated: 2 of 16 experts, 2 × 78,643,200 = 157,286,400 per layer → 41,943,040 + 16,384 + 65,536 +
    # 157,286,400 = 199,311,360 per layer, × 32 = 6,377,963,520; + head 131,334,144 + final norm 8,192 =
    # 6,509,305,856; with the input embedding 6,640,640,000 (the model card: 6.6B active).
    assert params.activated == 6_509_305_856
    assert params.activated_with_embedding == 6_640_640_000
    # KV per token and layer: 2 · 8 heads · 128 · 2 B = 4,096 B; 32 layers → 131,072 B.
    kv = layer_kv(build_model(cfg), 1, BF16)
    assert [k.bytes_per_token for k in kv] == [4096] * 32


def test_cohere2_moe_schedule_without_layer_types():
    # Cohere2MoeConfig.__post_init__: the first first_k_dense_replace = 2 layers are dense, full every
    # prefix_dense_sliding_window_pattern = 1st of them (both full); the rest are sparse, full every
    # sliding_window_pattern = 4th of them (layer 2 + 3 = 5), the others slide over sliding_window.
    cfg = {"architectures": ["Cohere2MoeForCausalLM"], "hidden_size": 64, "num_hidden_layers": 6,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
           "intermediate_size": 32, "prefix_dense_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2,
           "num_shared_experts": 1, "sliding_window": 8, "first_k_dense_replace": 2}
    layers = build_model(cfg).stack.layers
    assert [la.attn.window for la in layers if isinstance(la.attn, GqaAttention)] == [None, None, 8, 8, 8, None]
    ffns = [la.ffn for la in layers]
    assert [isinstance(f, MoeFfn) for f in ffns] == [False, False, True, True, True, True]
    dense, moe = ffns[0], ffns[2]
    assert isinstance(dense, DenseFfn) and isinstance(moe, MoeFfn)
    # dense layers are prefix_dense_intermediate_size wide; the shared MLP is 1 × intermediate_size
    assert (dense.intermediate, moe.expert_intermediate, moe.shared_intermediate) == (48, 32, 32)


def test_laguna_per_layer_heads_and_gate():
    cfg = {"architectures": ["LagunaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 3,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
           "num_attention_heads_per_layer": [4, 8, 4], "gating": True}
    layers = build_model(cfg).stack.layers
    assert [la.attn.heads for la in layers if isinstance(la.attn, GqaAttention)] == [4, 8, 4]
    # per-head gate: g_proj is heads × hidden (4·64, 8·64, 4·64)
    assert [la.attn_extras[0].elements for la in layers] == [256, 512, 256]
    # KV per token and layer does not depend on the query heads: 2 · 2 · 16 · 2 B = 128 B
    assert [k.bytes_per_token for k in layer_kv(build_model(cfg), 1, BF16)] == [128, 128, 128]


# databricks/dbrx-instruct's config.json (the geometry fields; nested attn_config / ffn_config as published).
DBRX_INSTRUCT = {
    "architectures": ["DbrxForCausalLM"], "d_model": 6144, "n_heads": 48, "n_layers": 40, "vocab_size": 100352,
    "max_seq_len": 32768, "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
    "ffn_config": {"ffn_act_fn": {"name": "silu"}, "ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def test_dbrx_golden_at_its_published_size():
    params = accounting(DBRX_INSTRUCT).params()
    # Per layer: Wqkv (6144 + 2·8·128)·6144 = 50,331,648; out_proj 6144·6144 = 37,748,736; norm_1, norm_2 12,288;
    # router 16·6144 = 98,304; experts 16 × 3 × 6144·10752 = 16 × 198,180,864 = 3,170,893,824 → 3,259,084,800,
    # × 40 = 130,363,392,000; wte and lm_head 100352·6144 = 616,562,688 each; norm_f 6,144.
    # Total 131,596,523,520 (Databricks' DBRX announcement: 132 B total, −0.3 %).
    assert params.total == 131_596_523_520
    # Activated: 4 of 16 experts, 792,723,456 per layer → 880,914,432 per layer, × 40 = 35,236,577,280; + lm_head
    # 616,562,688 + norm_f 6,144 = 35,853,146,112; with wte 36,469,708,800 (the announcement: 36 B active).
    assert (params.activated, params.activated_with_embedding) == (35_853_146_112, 36_469_708_800)
    # KV per token and layer: 2 · 8 · 128 · 2 B = 4,096 B.
    assert {k.bytes_per_token for k in layer_kv(build_model(DBRX_INSTRUCT), 1, BF16)} == {4096}


def test_diffllama_refuses_odd_kv_heads():
    cfg = {"architectures": ["DiffLlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 100}
    with pytest.raises(ConfigError, match="num_key_value_heads must be even"):
        build_model(cfg)


def test_dbrx_refuses_tied_embeddings():
    cfg = {"architectures": ["DbrxForCausalLM"], "d_model": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 100,
           "tie_word_embeddings": True}
    with pytest.raises(ConfigError, match="tie_word_embeddings"):
        build_model(cfg)


def test_dbrx_reads_its_nested_configs():
    cfg = {"architectures": ["DbrxForCausalLM"], "d_model": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 100,
           "attn_config": {"kv_n_heads": 2}, "ffn_config": {"ffn_hidden_size": 48, "moe_num_experts": 8,
                                                            "moe_top_k": 2}}
    layer = build_model(cfg).stack.layers[0]
    assert isinstance(layer.attn, GqaAttention) and isinstance(layer.ffn, MoeFfn)
    assert (layer.attn.kv_heads, layer.attn.head_dim) == (2, 16)
    assert (layer.ffn.experts, layer.ffn.top_k, layer.ffn.expert_intermediate) == (8, 2, 48)


def test_longcat_flash_golden_at_class_defaults():
    # LongcatFlashConfig's defaults are LongCat-Flash's shape (transformers models/longcat_flash): hidden 6144,
    # 28 layers of two MLA sublayers (64 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128), two dense
    # MLPs of 12288, a MoE of 512 experts of 2048 plus 256 zero-computation experts, top-12; vocab 131072.
    cfg = {"architectures": ["LongcatFlashForCausalLM"], "hidden_size": 6144, "num_layers": 28,
           "num_attention_heads": 64, "vocab_size": 131072}
    params = accounting(cfg).params()
    # MLA sublayer: q_a 1536·6144 = 9,437,184 + q_a norm 1,536 + q_b 64·192·1536 = 18,874,368 + kv_a
    # 576·6144 = 3,538,944 + kv_a norm 512 + kv_b 64·256·512 = 8,388,608 + o 6144·8192 = 50,331,648 = 90,572,800;
    # dense MLP 3·6144·12288 = 226,492,416; two norms 12,288 → 317,077,504 per sublayer, 634,155,008 per layer.
    # MoE: router 768·6144 = 4,718,592 + score bias 768 + experts 512·3·6144·2048 = 19,327,352,832.
    # Per layer 19,966,227,200, × 28 = 559,054,361,600; embedding and head 131072·6144 = 805,306,368 each;
    # final norm 6,144 → 560,664,980,480 (the model card: 560 B).
    assert params.total == 560_664_980_480
    # Activated: 12 picks over 768 slots land on 12·512/768 = 8 real experts, 8·37,748,736 = 301,989,888 per
    # layer → 634,155,008 + 4,718,592 + 768 + 301,989,888 = 940,864,256, × 28 = 26,344,199,168; + head
    # 805,306,368 + final norm 6,144 = 27,149,511,680 (the report: 18.6-31.3 B by context, ~27 B on average).
    assert params.activated == 27_149_511_680
    # KV per token: 56 MLA sublayers × (512 + 64) × 2 B = 64,512 B.
    assert sum(k.bytes_per_token for k in layer_kv(build_model(cfg), 1, BF16)) == 64_512


def test_jetmoe_mixture_of_attention_heads():
    # JetMoE-8B's shape (JetMoeConfig defaults): hidden 2048, 16 KV heads of 128, 8 attention experts, top-2.
    cfg = {"architectures": ["JetMoeForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 24,
           "num_attention_heads": 32, "vocab_size": 32000}
    layer = build_model(cfg).stack.layers[0]
    assert isinstance(layer.attn, GqaAttention)
    # 2 experts × 16 heads = 32 query heads over 16 KV heads of 128: KV 2·16·128·2 B = 8,192 B per token and layer
    assert (layer.attn.heads, layer.attn.kv_heads) == (32, 16)
    assert layer_kv(build_model(cfg), 1, BF16)[0].bytes_per_token == 8_192
    params = accounting(cfg).params()
    # Per layer attention: router 8·2048 = 16,384; q experts 8 × 2048·2048 = 33,554,432 (2 active: 8,388,608);
    # kv_proj 4096·2048 = 8,388,608; o experts 33,554,432 (active 8,388,608); bias 2048; norms 2·2048 = 4,096.
    # FFN: router 16,384; experts 8 × 3·2048·5632 = 276,824,064 (2 active: 69,206,016); bias 2048.
    # Total per layer 352,362,496; × 24 = 8,456,699,904; tied embedding 32000·2048 = 65,536,000; final norm 2,048.
    assert params.total == 8_522_237_952
    # Activated per layer 16,384 + 8,388,608 + 8,388,608 + 8,388,608 + 2,048 + 4,096 + 16,384 + 69,206,016 + 2,048
    # = 94,412,800; × 24 = 2,265,907,200; + the tied table (the head) 65,536,000 + final norm 2,048.
    assert params.activated == 2_331_445_248


_SMALL = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 100, "intermediate_size": 48}

# Variants of each class the class-default sweep (tests/work/test_work_config_defaults.py) does not reach.
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("PhimoeForCausalLM", _SMALL | {"num_local_experts": 4, "lm_head_bias": True, "attention_bias": True,
                                     "sliding_window": 16}),
    ("Cohere2MoeForCausalLM", _SMALL | {"num_hidden_layers": 6, "head_dim": 16, "num_experts": 4,
                                         "num_experts_per_tok": 2, "num_shared_experts": 2,
                                         "prefix_dense_intermediate_size": 40, "first_k_dense_replace": 2,
                                         "layer_types": None, "mlp_layer_types": None, "attention_bias": True}),
    ("AfmoeForCausalLM", _SMALL | {"head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2, "num_dense_layers": 2,
                                    "moe_intermediate_size": 24, "num_shared_experts": 1, "attention_bias": True,
                                    "layer_types": None, "global_attn_every_n_layers": 2}),
    ("LagunaForCausalLM", _SMALL | {"head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                                     "moe_intermediate_size": 24, "shared_expert_intermediate_size": 24,
                                     "num_attention_heads_per_layer": [4, 8, 4, 2], "gating": "per-element",
                                     "mlp_layer_types": ["dense", "dense", "sparse", "sparse"],
                                     "layer_types": ["full_attention", "sliding_attention"] * 2, "sliding_window": 8}),
    ("LagunaForCausalLM", _SMALL | {"head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                                     "moe_intermediate_size": 24, "num_attention_heads_per_layer": [4, 8, 4, 2]}),
    ("NanoChatForCausalLM", _SMALL | {"attention_bias": True}),
    ("BitNetForCausalLM", _SMALL | {"attention_bias": True}),
    ("DiffLlamaForCausalLM", _SMALL | {"head_dim": 32}),
    ("AXK1ForCausalLM", _SMALL | {"num_hidden_layers": 5, "n_routed_experts": 8, "num_experts_per_tok": 2,
                                   "n_group": 2, "topk_group": 1, "moe_intermediate_size": 16, "n_shared_experts": 2,
                                   "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
                                   "qk_rope_head_dim": 4, "v_head_dim": 8, "first_k_dense_replace": 2,
                                   "moe_layer_freq": 2, "mlp_layer_types": None}),
    ("DbrxForCausalLM", {"d_model": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 100,
                         "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
                         "ffn_config": {"ffn_hidden_size": 48, "moe_num_experts": 8, "moe_top_k": 2}}),
    ("CohereCompassForCausalLM", _SMALL | {"layer_types": ["sliding_attention", "full_attention"] * 2,
                                            "sliding_window": 8, "attention_bias": True,
                                            "rope_parameters": {t: {"rope_type": "default", "rope_theta": 10000.0}
                                                                for t in ("sliding_attention", "full_attention")}}),
    ("DbrxForCausalLM", {k: v for k, v in DBRX_INSTRUCT.items() if k != "architectures"}),
    ("JetMoeForCausalLM", {"hidden_size": 64, "num_hidden_layers": 2, "num_key_value_heads": 2, "kv_channels": 16,
                           "num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 48, "vocab_size": 100,
                           "tie_word_embeddings": False}),
    ("LongcatFlashForCausalLM", {"hidden_size": 64, "num_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
                                 "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
                                 "v_head_dim": 8, "ffn_hidden_size": 48, "n_routed_experts": 4, "zero_expert_num": 2,
                                 "moe_topk": 3, "expert_ffn_hidden_size": 16, "attention_bias": True}),
    ("AXK2ForCausalLM", _SMALL | {"num_hidden_layers": 4, "n_routed_experts": 8, "num_experts_per_tok": 2,
                                   "moe_intermediate_size": 16, "n_shared_experts": 1, "q_lora_rank": 32,
                                   "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
                                   "index_n_heads": 4, "index_head_dim": 16, "index_topk": 8, "gated_norm_rank": 4,
                                   "first_k_dense_replace": 2, "mlp_layer_types": None, "layer_types": None}),
]


@pytest.mark.parametrize(("arch", "cfg"), VARIANTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(VARIANTS)])
def test_variant_parameter_count_equals_the_meta_model(arch: str, cfg: dict[str, Any]):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    hf = getattr(transformers, arch).config_class(**cfg)
    with torch.device("meta"):
        model = getattr(transformers, arch)(hf)
    persistent = set(model.state_dict(keep_vars=True))
    meta = sum(p.numel() for p in model.parameters()) + sum(
        b.numel() for name, b in model.named_buffers() if name in persistent)
    if arch == "LongcatFlashForCausalLM":  # gate_up_proj rows of the zero experts, never read (builders/modern_a.py)
        meta -= hf.num_layers * hf.zero_expert_num * 2 * hf.expert_ffn_hidden_size * hf.hidden_size
    spec = build_model(dict(cfg, architectures=[arch]))
    assert accounting(dict(cfg, architectures=[arch])).params().total == meta
    # the layer schedule the config class derived: sliding layers and MoE layers where transformers put them
    types = getattr(hf, "layer_types", None)
    if types is not None and all(isinstance(la.attn, GqaAttention) for la in spec.stack.layers):
        windows = [la.attn.window for la in spec.stack.layers if isinstance(la.attn, GqaAttention)]
        assert [w is not None for w in windows] == [t == "sliding_attention" for t in types]
    kinds = getattr(hf, "mlp_layer_types", None)
    if kinds is not None:
        assert [isinstance(la.ffn, MoeFfn) for la in spec.stack.layers] == [k == "sparse" for k in kinds]


def test_jetmoe_decode_work_by_hand():
    # One layer: hidden 8, 1 KV head of kv_channels 4, 4 attention experts and 4 MLP experts, top-2, MLP width 6,
    # vocab 10 (tied). One sequence decodes 1 token after 3 cached.
    cfg = {"architectures": ["JetMoeForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "kv_channels": 4, "num_local_experts": 4,
           "num_experts_per_tok": 2, "intermediate_size": 6, "vocab_size": 10}
    report = accounting(cfg).step(parse_step(decode=["1x3"]))
    flops = {s.name: s.flops for s in report.segments}
    # attention router 4×8: 2·32 = 64; q experts 2 of 4, each 4×8: 2·2·32 = 128; k and v 4×8 each: 2·2·32 = 128
    assert flops["layers.attn.router"] == 64
    assert flops["layers.attn.qkv"] == 128 + 128
    # o experts 2 of 4, each 8×4: 2·2·32 = 128
    assert flops["layers.attn.out"] == 128
    # 2 query heads (2 experts × 1 KV head) over 3 + 1 positions, d 4: 2·4·2·(4 + 4) = 128
    assert flops["layers.attn.core"] == 128
    # MLP: router 4×8 → 64; 2 experts × (gate, up 6×8, down 8×6 = 144 elements): 2·2·144 = 576
    assert (flops["layers.ffn.router"], flops["layers.ffn.routed"]) == (64, 576)
    # KV: 1 head · (4 + 4) · 2 B = 16 B per token: 3 cached read (48 B), 1 written (16 B)
    core = report.segment("layers.attn.core")
    assert (core.state_read_bytes, core.state_write_bytes) == (48, 16)


def test_longcat_zero_experts_decode_work_by_hand():
    # One decoder layer (two MLA sublayers): hidden 8, 4 real experts of width 3 and 2 zero experts, top-3.
    cfg = {"architectures": ["LongcatFlashForCausalLM"], "hidden_size": 8, "num_layers": 1,
           "num_attention_heads": 2, "vocab_size": 10, "q_lora_rank": 4, "kv_lora_rank": 4, "qk_nope_head_dim": 2,
           "qk_rope_head_dim": 2, "v_head_dim": 2, "ffn_hidden_size": 6, "n_routed_experts": 4,
           "zero_expert_num": 2, "moe_topk": 3, "expert_ffn_hidden_size": 3}
    acc = accounting(cfg)
    assert len(acc.spec.stack.layers) == 2
    report = acc.step(parse_step(decode=["1x3"]))
    routed, router = report.segment("layers[moe].ffn.routed"), report.segment("layers[moe].ffn.router")
    # the router scores 4 + 2 = 6 slots: 6×8 = 48 → 2·48 = 96 FLOPs; its score bias 6 more parameters
    assert (router.flops, router.params) == (96, 48 + 6)
    # 3 picks over 6 slots land on 3·4/6 = 2 real experts: 2 × (gate, up 3×8, down 8×3 = 72) → 2·2·72 = 288 FLOPs;
    # one token touches 4·(1 − (1 − 2/4)^1) = 2 experts: 2 × 72 × 2 B = 288 B read
    assert (routed.flops, routed.param_read_bytes, routed.params) == (288, 288, 4 * 72)
