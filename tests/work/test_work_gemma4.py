"""Gemma-4 text: per-layer head widths, K=V global layers, KV sharing, a MoE block beside the dense MLP,
per-layer input embeddings. Every expected number is arithmetic written out here, never read back from
the code under test."""

from __future__ import annotations

import pytest

from graphsim.serving.kv_layout import KvKind, layer_kv
from graphsim.work import accounting, build_model, parse_step
from graphsim.work.dtypes import DType, Precision
from graphsim.work.specs import GqaAttention, MoeFfn

TINY = {
    "architectures": ["Gemma4ForCausalLM"], "hidden_size": 8, "num_hidden_layers": 4, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 4, "global_head_dim": 6, "num_global_key_value_heads": 1,
    "vocab_size": 10, "intermediate_size": 6, "sliding_window": 3,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "attention_k_eq_v": True, "num_kv_shared_layers": 2, "use_double_wide_mlp": True,
    "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 5,
    "hidden_size_per_layer_input": 2, "vocab_size_per_layer_input": 10, "tie_word_embeddings": True,
}


def test_tiny_layers():
    spec = build_model(TINY)
    attn = [la.attn for la in spec.stack.layers]
    assert all(isinstance(a, GqaAttention) for a in attn)
    # sliding layers: head_dim 4, window 3; full layers: global_head_dim 6, K=V; the last 2 layers reuse K/V
    assert [(a.head_dim, a.window, a.k_eq_v, a.kv_shared) for a in attn if isinstance(a, GqaAttention)] == [
        (4, 3, False, False), (6, None, True, False), (4, 3, False, True), (6, None, True, True)]
    # use_double_wide_mlp: the shared layers' dense MLP is 2 × 6 wide
    assert [la.ffn.dense_intermediate for la in spec.stack.layers if isinstance(la.ffn, MoeFfn)] == [6, 6, 12, 12]


def test_tiny_parameters_by_hand():
    # Attention (two sandwich norms 16 in each layer):
    #   L0 sliding: q 2·4·8 = 64, k 32, v 32, o 64, q/k norms 4 + 4 → 216
    #   L1 full (head_dim 6, K=V: no v_proj): q 2·6·8 = 96, k 48, o 96, q/k norms 6 + 6 → 268
    #   L2 sliding, K/V shared: q 64, o 64, q norm 4 → 148;  L3 full, shared: q 96, o 96, q norm 6 → 214
    # FFN: dense 3·8·6 = 144 (3·8·12 = 288 on the shared layers), router proj 4·8 + scale 8 + per-expert
    #   scale 4 = 44, experts 4·(2·5·8 + 8·5) = 480, five norms 40 → 708 (852 on the shared layers)
    # Per layer: layer_scalar 1 + per-layer-input gate 2·8 + projection 8·2 + norm 8 = 41, × 4 = 164
    # Model: tied embedding 10·8 = 80, per-layer table 10·(4·2) = 80, its projection (4·2)·8 = 64, its norm 2,
    #   final norm 8
    p = accounting(TINY).params()
    total = 216 + 268 + 148 + 214 + 2 * 708 + 2 * 852 + 164 + 80 + 80 + 64 + 2 + 8
    assert p.total == total == 4364
    # activated: 2 of 4 experts per layer (−4·2·120) and the per-layer table (a lookup, −80); the tied
    # table counts (the head multiplies by all of it)
    assert p.activated == total - 4 * 2 * 120 - 80


def test_tiny_decode_after_10_cached():
    r = accounting(TINY).step(parse_step([], ["1x10"]))
    # L0 sliding W 3: min(11, 3) = 3 pairs, 2·3·2 heads·(4 + 4) = 96 FLOPs; KV 2·1·4·2 B = 16 B per token:
    #   read min(10, 2) = 2 positions (32 B), write 1 (16 B)
    # L1 full: 11 pairs, 2·11·2·(6 + 6) = 528; KV 1·(6 + 6)·2 B = 24 B: read 10 (240 B), write 24 B
    # L2, L3 reuse L0's and L1's K/V: the same FLOPs and reads, no writes
    assert r.attention_flops == 2 * (96 + 528)
    assert r.total.state_read_bytes == 2 * (32 + 240)
    assert r.total.state_write_bytes == 16 + 24


def test_tiny_kv_layout_skips_shared_layers():
    bf16 = Precision(weight=DType.BFLOAT16, kv=DType.BFLOAT16, state=DType.BFLOAT16)
    kv = layer_kv(build_model(TINY), 1, bf16)
    assert [(k.kind, k.bytes_per_token, k.window) for k in kv] == [(KvKind.SLIDING, 16, 3), (KvKind.FULL, 24, None)]


# google/gemma-4-26B-A4B (config.json's text_config, as aiconfigurator-core ships it): hidden 2816, 30 layers
# (every 6th full), 16 heads; sliding layers 8 KV heads of 256, window 1024; full layers K=V with 2 KV
# heads of 512; dense MLP 2112 beside 128 experts top-8 of 704; vocab 262144, tied.
G26 = {
    "architectures": ["Gemma4ForConditionalGeneration"], "tie_word_embeddings": True, "dtype": "bfloat16",
    "text_config": {
        "model_type": "gemma4_text", "hidden_size": 2816, "num_hidden_layers": 30, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 256, "global_head_dim": 512, "num_global_key_value_heads": 2,
        "attention_k_eq_v": True, "sliding_window": 1024, "intermediate_size": 2112, "enable_moe_block": True,
        "num_experts": 128, "top_k_experts": 8, "moe_intermediate_size": 704, "hidden_size_per_layer_input": 0,
        "num_kv_shared_layers": 0, "vocab_size": 262144, "attention_bias": False,
    },
}
H = 2816
SLIDING = H * 4096 + 2 * H * 2048 + 4096 * H + 2 * 256 + 2 * H  # q, k, v, o, q/k norms, two norms
FULL = H * 8192 + H * 1024 + 8192 * H + 2 * 512 + 2 * H  # q, k (= v), o, q/k norms, two norms
EXPERT = 3 * H * 704
FFN_REST = 3 * H * 2112 + 128 * H + H + 128 + 5 * H  # dense MLP, router proj + scales, five norms
G26_TOTAL = 25 * SLIDING + 5 * FULL + 30 * (FFN_REST + 128 * EXPERT + 1) + 262144 * H + H  # + layer_scalar, table, final norm


def test_gemma4_26b_a4b_against_hand_and_model_card():
    p = accounting(G26).params()
    assert p.total == G26_TOTAL
    assert p.activated == G26_TOTAL - 30 * 120 * EXPERT  # 8 of 128 experts; the tied table counts
    # Model card (huggingface.co/google/gemma-4-26B-A4B): 25.2 B total, 3.8 B active (the language model;
    # the ~0.55 B vision encoder is not counted by the accountant)
    assert p.total == pytest.approx(25.2e9, rel=0.005)
    assert p.activated == pytest.approx(3.8e9, rel=0.025)
