"""Kimi-K3 / Kimi Linear (KDA + MLA), MiniMax-Text-01 (lightning attention) and MiniMax-M3 (block-sparse
attention), by hand.

Every expected number is arithmetic on the config values written out here, never read back from the
code under test. The transformers meta-model cross-check of these classes (class defaults, flips, the
real MiniMax-M3 config) is the sweep in tests/work/test_work_config_defaults.py; this file holds the
configs against their published totals and the state / sparse-attention work.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from graphsim.errors import ConfigError
from graphsim.serving.kv_layout import KvKind, layer_kv
from graphsim.work import accounting, build_model, parse_step
from graphsim.work.dtypes import DType, Precision
from graphsim.work.linear_work import block_sparse_keys, block_sparse_pairs
from graphsim.work.specs import GqaAttention, MlaAttention, RecurrentMixer

BF16 = DType.BFLOAT16
PREC = Precision(weight=BF16, kv=BF16, state=BF16)

# --- Kimi-K3 -----------------------------------------------------------------------------------------
# moonshotai/Kimi-K3 config.json (as aiconfigurator-core 0.12 ships it: model_configs/moonshotai--Kimi-K3_config.json),
# the fields a count reads; the wrapper's text_config names KimiLinearForCausalLM.
K3_FULL = [*range(4, 93, 4), 93]  # 1-indexed MLA layers: 4, 8, …, 92 and 93 (24)
K3: dict[str, Any] = {
    "architectures": ["KimiK3ForConditionalGeneration"], "dtype": "bfloat16", "tie_word_embeddings": False,
    "text_config": {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "dtype": "bfloat16",
        "hidden_size": 7168, "intermediate_size": 33792, "num_hidden_layers": 93, "num_attention_heads": 96,
        "num_key_value_heads": 96, "vocab_size": 163840, "hidden_act": "situ", "first_k_dense_replace": 1,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "mla_use_nope": True, "mla_use_output_gate": True, "moe_intermediate_size": 3072, "num_experts": 896,
        "num_experts_per_token": 16, "num_shared_experts": 2, "routed_expert_hidden_size": 3584,
        "latent_moe_use_norm": True, "attn_res_block_size": 12, "num_nextn_predict_layers": 0,
        "tie_word_embeddings": False,
        "linear_attn_config": {
            "full_attn_layers": K3_FULL, "kda_layers": [i for i in range(1, 94) if i not in K3_FULL],
            "head_dim": 128, "num_heads": 96, "short_conv_kernel_size": 4, "use_full_rank_gate": True,
        },
    },
}
h, V = 7168, 163840
P = 96 * 128  # KDA projection width H·d = 12,288
# KDA layer: q/k/v_proj, the q/k/v conv (3·P channels × 4 taps), f_a (d × h), f_b (P × d), dt_bias (P), A_log (H),
# b_proj (H × h), the full-rank g_proj (P × h), o_norm (d), o_proj (h × P).
KDA_W = 3 * P * h + 3 * P * 4 + 128 * h + P * 128 + P + 96 + 96 * h + P * h + 128 + h * P
# Gated MLA: q_a (1536 × h) + its norm, q_b (96·192 × 1536), kv_a (576 × h) + its norm (512), kv_b (96·256 × 512),
# o_proj (h × 96·128), g_proj (96·128 × h).
MLA_W = 1536 * h + 1536 + 96 * 192 * 1536 + 576 * h + 512 + 96 * 256 * 512 + h * 96 * 128 + 96 * 128 * h
DENSE_W = 3 * h * 33792  # layer 0: gate, up, down
EXPERT = 3 * 3584 * 3072  # one routed expert, in the latent width 3584
# MoE besides the routed experts: router (896 × h) + its score-correction buffer, 2 shared experts (3·h·6144),
# routed_expert_down_proj (3584 × h), routed_expert_norm (3584), routed_expert_up_proj (h × 3584).
MOE_OTHER = 896 * h + 896 + 3 * h * 6144 + 3584 * h + 3584 + h * 3584
LAYER_OTHER = 2 * h + 2 * h + 2 * h  # input/post-attention norms, the two res norms, the two 1 × h res projections
K3_TOTAL = (69 * KDA_W + 24 * MLA_W + DENSE_W + 92 * (896 * EXPERT + MOE_OTHER) + 93 * LAYER_OTHER
            + 2 * V * h + h + 2 * h)  # embedding and lm_head, the final norm, output_attn_res norm + projection
K3_ACTIVATED = K3_TOTAL - V * h - 92 * (896 - 16) * EXPERT  # 16 of 896 experts; the input table is a lookup


def test_kimi_k3_counts_by_hand():
    p = accounting(K3).params()
    assert p.total == K3_TOTAL  # 2,779,484,476,000
    assert p.activated == K3_ACTIVATED  # 104,189,612,640


def test_kimi_k3_against_its_published_totals():
    # Kimi-K3's release (summarised in public deployment notes: "总参 2.8T / 激活约 104B", 93 layers = 69 KDA + 24
    # gated MLA, 896 experts choose 16 + 2 shared). "2.8T" has two significant digits, so the total is held to
    # what rounds to it (2.7795 T is 0.7 % under 2.8 T: a 0.5 % band around a rounded figure says nothing);
    # the activated count within 2.5 %.
    assert 2.75e12 <= K3_TOTAL < 2.85e12
    assert pytest.approx(104e9, rel=0.025) == K3_ACTIVATED


def test_kimi_k3_layers_and_kv_layout():
    spec = build_model(K3)
    kinds = [type(layer.attn) for layer in spec.stack.layers]
    assert kinds.count(RecurrentMixer) == 69 and kinds.count(MlaAttention) == 24
    assert isinstance(spec.stack.layers[3].attn, MlaAttention) and isinstance(spec.stack.layers[92].attn, MlaAttention)
    parts = layer_kv(spec, 8, PREC)
    state = [x for x in parts if x.kind is KvKind.STATE]
    mla = [x for x in parts if x.kind is KvKind.MLA]
    assert len(state) == 69 and len(mla) == 24
    # vLLM kda_state_shape at tp 8: conv 3·12288/8 = 4608 channels × 3 taps in bf16, recurrent 96/8 = 12 heads × 128 ×
    # 128 in float32 (kda_state_dtype): 27,648 + 786,432 B
    assert state[0].state_bytes == 4608 * 3 * 2 + 12 * 128 * 128 * 4
    assert mla[0].bytes_per_token == (512 + 64) * 2  # the latent and the rope key, whole on every rank


def test_kimi_k3_decode_state_and_core_work():
    r = accounting(K3).step(parse_step([], ["4x4096"]))
    kda_state = 3 * P * 3 * 2 + 96 * 128 * 128 * 4  # per sequence and layer: 221,184 + 6,291,456 B
    mla_token = 576 * 2
    assert r.total.state_read_bytes == 69 * 4 * kda_state + 24 * 4 * 4096 * mla_token
    assert r.total.state_write_bytes == 69 * 4 * kda_state + 24 * 4 * mla_token
    # KDA: 6·H·d² per token (state read with k, delta update, read with q) plus the depthwise conv (2·3P·4 per token,
    # a weight of the core); 4 new tokens, 69 layers
    assert r.segment("layers[linear].attn.core").flops == 69 * 4 * (6 * 96 * 128 * 128 + 2 * 3 * P * 4)
    # MLA decode, absorbed form: 2·S·H·(2r + d_r), S = 4097 positions per sequence, 4 sequences, 24 layers
    assert r.segment("layers[mla].attn.core").flops == 24 * 4 * 2 * 4097 * 96 * (2 * 512 + 64)


# --- MiniMax-Text-01 ------------------------------------------------------------------------------------
# MiniMax-Text-01 (arXiv:2501.08313 §2 and the MiniMaxAI/MiniMax-Text-01-hf config.json): 80 layers of hidden 6144,
# 64 heads of 128 (8 KV heads on the softmax layers), a softmax layer after every 7 lightning layers, 32 experts
# (top-2) of FFN width 9216, vocabulary 200,064.
MINIMAX = {
    "architectures": ["MiniMaxForCausalLM"], "hidden_size": 6144, "num_hidden_layers": 80, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 200064, "intermediate_size": 9216,
    "num_local_experts": 32, "num_experts_per_tok": 2, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "layer_types": (["linear_attention"] * 7 + ["full_attention"]) * 10,
}
H6 = 6144
LIGHT_W = 3 * 8192 * H6 + 8192 * H6 + 8192 + H6 * 8192  # qkv_proj, output_gate, norm over H·d, out_proj
FULL_W = 8192 * H6 + 2 * 1024 * H6 + 8192 * H6  # q, k, v (8 KV heads), o
MOE_W = 32 * H6 + 32 * 3 * H6 * 9216  # router + 32 gated experts
MINIMAX_TOTAL = 70 * LIGHT_W + 10 * FULL_W + 80 * (MOE_W + 2 * H6) + 2 * 200064 * H6 + H6


def test_minimax_text_01_counts_by_hand_and_against_the_paper():
    p = accounting(MINIMAX).params()
    assert p.total == MINIMAX_TOTAL  # 456,089,655,296
    # The paper's 456 B total; its 45.9 B activated excludes the embedding table and the LM head (both V·h):
    assert pytest.approx(456e9, rel=0.005) == MINIMAX_TOTAL
    activated = MINIMAX_TOTAL - 200064 * H6 - 80 * 30 * 3 * H6 * 9216  # 2 of 32 experts; the input table is a lookup
    assert p.activated == activated
    assert activated - 200064 * H6 == pytest.approx(45.9e9, rel=0.025)


def test_minimax_text_01_own_config_spelling():
    # The checkpoint's own config (vLLM MiniMaxText01ForCausalLM) lists the layer kinds in attn_type_list (0 lightning,
    # 1 softmax): the same model as MINIMAX above.
    own = {k: v for k, v in MINIMAX.items() if k != "layer_types"}
    own |= {"architectures": ["MiniMaxText01ForCausalLM"], "attn_type_list": ([0] * 7 + [1]) * 10}
    assert accounting(own).params().total == MINIMAX_TOTAL
    # with shared_intermediate_size: a gated shared MLP (3·h·w) and its coefficient (h → 1) in each of the 80 layers
    shared = accounting(dict(own, shared_intermediate_size=1024)).params().total
    assert shared == MINIMAX_TOTAL + 80 * (3 * H6 * 1024 + H6)
    with pytest.raises(ConfigError, match="attn_type_list"):
        build_model(dict(own, attn_type_list=[0, 1]))

def test_minimax_lightning_state_and_work():
    spec = build_model(MINIMAX)
    assert [type(layer.attn) for layer in spec.stack.layers[:8]] == [RecurrentMixer] * 7 + [GqaAttention]
    parts = layer_kv(spec, 1, PREC)
    light = [x for x in parts if x.kind is KvKind.STATE]
    full = [x for x in parts if x.kind is KvKind.FULL]
    assert len(light) == 70 and len(full) == 10
    assert light[0].state_bytes == 64 * 128 * 128 * 2  # linear_attention_state_shape (H, d, d) in the state dtype
    assert full[0].bytes_per_token == 2 * 8 * 128 * 2
    r = accounting(MINIMAX).step(parse_step(["1000@0"], []))
    # lightning: 4·H·d² per token (kᵀv into the state, q read-out); 1000 tokens, 70 layers; state written once
    assert r.segment("layers[linear].attn.core").flops == 70 * 1000 * 4 * 64 * 128 * 128
    assert r.segment("layers[linear].attn.core").state_write_bytes == 70 * 64 * 128 * 128 * 2
    assert r.segment("layers[linear].attn.core").state_read_bytes == 0  # nothing cached yet


# --- MiniMax-M3 -----------------------------------------------------------------------------------------
# MiniMaxAI/MiniMax-M3 config.json (aiconfigurator-core 0.12 model_configs/MiniMaxAI--MiniMax-M3_config.json), the
# fields a count reads; its architectures[0] is MiniMaxM3ForCausalLM (transformers: MiniMaxM3VLForCausalLM).
FLAGS = [0, 0, 0] + [1] * 57
M3 = {
    "architectures": ["MiniMaxM3ForCausalLM"], "hidden_size": 6144, "num_hidden_layers": 60, "num_attention_heads": 64,
    "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 200064, "intermediate_size": 3072,
    "dense_intermediate_size": 12288, "shared_intermediate_size": 3072, "n_shared_experts": 1,
    "num_local_experts": 128, "num_experts_per_tok": 4, "moe_layer_freq": FLAGS, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "num_mtp_modules": 7,
    "sparse_attention_config": {
        "sparse_attention_freq": FLAGS, "sparse_block_size": 128, "sparse_index_dim": 128, "sparse_local_block": 1,
        "sparse_num_index_heads": 4, "sparse_topk_blocks": 16, "use_sparse_attention": True,
    },
}
ATTN_W = H6 * 8192 + 2 * H6 * 512 + 8192 * H6 + 2 * 128  # q, k, v (4 KV heads), o, per-head q/k norms
INDEX_W = 4 * 128 * H6 + 128 * H6 + 2 * 128  # indexer q (4 heads × 128), k (128), q/k norms
M3_DENSE = 3 * H6 * 12288
M3_EXPERT = 3 * H6 * 3072
M3_MOE = 128 * H6 + 128 + 128 * M3_EXPERT + M3_EXPERT  # router + bias buffer, 128 experts, one shared expert
M3_TOTAL = 60 * (ATTN_W + 2 * H6) + 57 * INDEX_W + 3 * M3_DENSE + 57 * M3_MOE + 2 * 200064 * H6 + H6


def test_minimax_m3_counts_by_hand_and_against_the_model_card():
    p = accounting(M3).params()
    assert p.total == M3_TOTAL  # 426,174,572,928
    activated = M3_TOTAL - 200064 * H6 - 57 * 124 * M3_EXPERT  # 4 of 128 experts
    assert p.activated == activated
    # MiniMaxAI/MiniMax-M3 model card: ~428 B total (with the vision tower, not counted here), ~23 B activated
    # (without the embedding table and the LM head)
    assert pytest.approx(428e9, rel=0.005) == M3_TOTAL
    assert activated - 200064 * H6 == pytest.approx(23e9, rel=0.025)
    assert build_model(M3).architecture == "MiniMaxM3ForCausalLM"


def test_block_sparse_keys_by_hand():
    # block B = 4, top-2 blocks: positions 0..7 (blocks 0, 1) see every earlier key (1..8: 36 pairs); positions
    # 8..11 see one full block + their own partial block: 4 + (t mod 4) + 1 = 5, 6, 7, 8 (26 pairs).
    assert [block_sparse_keys(t, 4, 2) for t in range(12)] == [1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 7, 8]
    assert block_sparse_pairs(12, 0, 4, 2) == 36 + 26
    assert block_sparse_pairs(5, 7, 4, 2) == 8 + 5 + 6 + 7 + 8  # positions 7..11
    # M3 (B = 128, top-16): position 100,000 is in block 781; 15 full blocks + (100000 mod 128 = 32) + 1
    assert block_sparse_keys(100_000, 128, 16) == 15 * 128 + 33


def test_minimax_m3_sparse_decode_is_not_dense():
    r = accounting(M3).step(parse_step([], ["1x100000"]))
    dense_pairs, sparse_pairs = 100_001, 15 * 128 + 33  # the decode query at position 100,000
    core = r.segment("layers.attn.core")
    # 3 dense layers + 57 sparse layers (attended keys, and the indexer's 4 heads × 2·128 over every key)
    assert core.flops == (3 * 2 * dense_pairs * 64 * 256
                          + 57 * (2 * sparse_pairs * 64 * 256 + dense_pairs * 4 * 2 * 128))
    kv_token, index_key = 2 * 4 * 128 * 2, 128 * 2  # K and V of 4 KV heads in bf16; one bf16 index key
    # cached K/V read: every cached position on dense layers, at most top-k·B = 2048 on sparse ones; every index key
    assert core.state_read_bytes == 3 * 100_000 * kv_token + 57 * (2048 * kv_token + 100_000 * index_key)
    assert core.state_write_bytes == 3 * kv_token + 57 * (kv_token + index_key)


def test_minimax_m3_kv_layout_at_tp8():
    parts = layer_kv(build_model(M3), 8, PREC)
    # 4 KV heads over 8 ranks: replicated to one per rank (K + V of 128 in bf16); sparse layers add the index key
    assert sorted({x.bytes_per_token for x in parts}) == [2 * 128 * 2, 2 * 128 * 2 + 128 * 2]


def test_bad_configs_fail_in_one_line():
    bad = dict(M3, sparse_attention_config=dict(M3["sparse_attention_config"], sparse_local_block=0))
    with pytest.raises(ConfigError, match="index_local_blocks"):
        build_model(bad)
    lin = {"full_attn_layers": K3_FULL, "kda_layers": [1, 2, 3], "head_dim": 128, "num_heads": 96}
    text = dict(K3["text_config"], architectures=["KimiLinearForCausalLM"], linear_attn_config=lin)
    with pytest.raises(ConfigError, match="lists no type for layer"):
        build_model(text)
    with pytest.raises(ConfigError, match="moe_layer_freq"):
        build_model(dict(M3, moe_layer_freq=60))  # the NVFP4 export's scalar, not a per-layer list


# --- OLMo Hybrid ---------------------------------------------------------------------------------------
# OlmoHybridConfig() defaults (allenai/Olmo-Hybrid-7B): hidden 3840, 32 layers (full attention where i % 4 == 3:
# 8 layers, gated delta net elsewhere: 24), 30 heads of 128 (MHA), vocabulary 100,352, MLP 11,008. Gated delta net:
# 30 key and value heads, key head int(0.75·3840/30) = 96, value head 2·96 = 192; key width 2880, value width 5760.
OLMO = {"architectures": ["OlmoHybridForCausalLM"], "hidden_size": 3840, "num_hidden_layers": 32,
        "num_attention_heads": 30, "vocab_size": 100352}
H3 = 3840
GDN_W = (2880 * H3 * 2 + 5760 * H3 + 2 * 30 * H3 + 5760 * H3 + H3 * 5760  # q, k, v, a, b, g, o
         + 11520 * 4 + 30 + 30 + 192)  # conv over 2·2880 + 5760 channels, A_log, dt_bias, o_norm
OLMO_FULL_W = 4 * H3 * H3 + 2 * H3  # q, k, v, o (30 heads of 128) and the full-width q/k norms
OLMO_TOTAL = 24 * GDN_W + 8 * OLMO_FULL_W + 32 * (3 * H3 * 11008 + 2 * H3) + 2 * 100352 * H3 + H3


def test_olmo_hybrid_counts_and_state_by_hand():
    assert accounting(OLMO).params().total == OLMO_TOTAL  # 7,430,870,688 (the "7B" of the checkpoint's name)
    parts = layer_kv(build_model(OLMO), 2, PREC)
    state = [x for x in parts if x.kind is KvKind.STATE]
    assert len(state) == 24
    # vLLM gated_delta_net_state_shape at tp 2: conv 11520/2 channels × 3 taps, recurrent 15 heads × 96 × 192, bf16
    assert state[0].state_bytes == (5760 * 3 + 15 * 96 * 192) * 2
    assert [x.bytes_per_token for x in parts if x.kind is KvKind.FULL] == [2 * 15 * 128 * 2] * 8


def test_bailing_hybrid_gates():
    spec = build_model({"architectures": ["BailingHybridForCausalLM"], "hidden_size": 2560, "num_hidden_layers": 12,
                        "num_attention_heads": 32, "vocab_size": 157184, "head_dim": 128})
    # BailingHybridConfig: layer_group_size 6 (every 6th layer MLA), first_k_dense_replace 2
    kinds = [type(layer.attn) for layer in spec.stack.layers]
    assert kinds == ([RecurrentMixer] * 5 + [MlaAttention]) * 2
    mla = spec.stack.layers[5].attn
    assert isinstance(mla, MlaAttention) and mla.output_gate == 32  # one sigmoid gate per head
    kda = spec.stack.layers[0].attn
    assert isinstance(kda, RecurrentMixer)
    shapes = {w.module: w.shape for w in kda.weights}
    # full-rank forget and output gates, KDA heads of the stated head_dim 128
    assert shapes["self_attn.forget_gate.f_proj"] == shapes["self_attn.g_proj"] == (32 * 128, 2560)


# --- RecurrentGemma and RWKV-4 --------------------------------------------------------------------------
# google/recurrentgemma-2b config.json: hidden 2560, 26 layers cycling (recurrent, recurrent, attention) → 18 RG-LRU
# + 8 local-attention layers, 10 heads of 256, lru_width 2560, conv1d_width 4, intermediate_size 15360 (the MLP is
# 15360 // 2 = 7680 wide), vocabulary 256,000, tied embeddings.
RG = {"architectures": ["RecurrentGemmaForCausalLM"], "hidden_size": 2560, "num_hidden_layers": 26,
      "num_attention_heads": 10, "vocab_size": 256000, "intermediate_size": 15360, "lru_width": 2560,
      "attention_window_size": 2048, "conv1d_width": 4, "block_types": ["recurrent", "recurrent", "attention"]}
R = 2560
RG_LRU_W = (2 * (R * R + R)  # linear_y, linear_x with biases
            + R * 4 + R + R  # conv_1d and its bias, recurrent_param
            + 2 * (10 * 256 * 256 + R)  # block-diagonal input and recurrent gates with biases
            + R * R + R)  # linear_out with its bias
RG_ATTN_W = 4 * R * R + R  # q, k, v (10 KV heads of 256), o with its bias
RG_MLP_W = 3 * R * 7680 + 2 * 7680 + R  # gate, up, down with biases
RG_TOTAL = 18 * RG_LRU_W + 8 * RG_ATTN_W + 26 * (RG_MLP_W + 2 * R) + 256000 * R + R


def test_recurrent_gemma_counts_and_state_by_hand():
    p = accounting(RG).params()
    assert p.total == RG_TOTAL  # 2,777,233,920 (no published total to hold it to was at hand offline)
    parts = layer_kv(build_model(RG), 1, PREC)
    state = [x for x in parts if x.kind is KvKind.STATE]
    local = [x for x in parts if x.kind is KvKind.SLIDING]
    assert (len(state), len(local)) == (18, 8)
    assert state[0].state_bytes == 2560 * 3 * 2 + 2560 * 4  # conv state (bf16) + the float32 recurrent state
    assert local[0].bytes_per_token == 2 * 10 * 256 * 2 and local[0].window == 2048


# RWKV/rwkv-4-169m-pile config.json: hidden 768, 12 layers, vocabulary 50,277; attention_hidden_size and
# intermediate_size absent (768 and 4·768), untied head.
RWKV = {"architectures": ["RwkvForCausalLM"], "hidden_size": 768, "num_hidden_layers": 12, "vocab_size": 50277}
D = 768
RWKV_LAYER = (4 * D * D + 2 * D + 3 * D  # key, value, receptance, output; time_decay, time_first; 3 time-mix vectors
              + 2 * D * 3072 + D * D + 2 * D  # channel mix key, value, receptance; 2 time-mix vectors
              + 4 * D)  # ln1, ln2 with biases
RWKV_TOTAL = 12 * RWKV_LAYER + 2 * 50277 * D + 2 * D + 2 * D  # tables, ln_out and blocks[0].pre_ln with biases


def test_rwkv_counts_and_state_by_hand():
    assert accounting(RWKV).params().total == RWKV_TOTAL  # 169,342,464: the checkpoint's "169m"
    parts = layer_kv(build_model(RWKV), 1, PREC)
    assert len(parts) == 12 and all(x.kind is KvKind.STATE and x.bytes_per_token == 0 for x in parts)
    assert parts[0].state_bytes == 2 * D * 2 + 3 * D * 4  # token shifts in bf16, WKV num/den/max in float32


# NX-AI/xLSTM-7b (xLSTMConfig() defaults): hidden 4096, 32 mLSTM blocks, 8 heads, vocabulary 50,304; q/k width
# 0.5·4096 = 2048 (256 a head), v width 4096 (512 a head); FFN round_up(4096·2.667 = 10924.03, 64) = 10944.
XLSTM = {"architectures": ["xLSTMForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32, "num_heads": 8,
         "vocab_size": 50304}
X = 4096
MLSTM_W = (2 * 2048 * X + 2 * 4096 * X  # q, k, v, the output-gate pre-activation
           + 2 * (8 * X + 8)  # input and forget gates, one biased output per head
           + 4096 + X * 4096)  # the per-head LayerNorm over v, out_proj
XLSTM_TOTAL = 32 * (MLSTM_W + 3 * X * 10944 + 2 * X) + 2 * 50304 * X + X


def test_xlstm_counts_state_and_work_by_hand():
    acc = accounting(XLSTM)
    assert acc.params().total == XLSTM_TOTAL  # 6,865,424,896: the checkpoint's "7b"
    parts = layer_kv(build_model(XLSTM), 1, PREC)
    # (C, n, m) per head in float32 (inference_state_dtype): 8·(256·512 + 256 + 1)·4 B
    assert parts[0].state_bytes == 8 * (256 * 512 + 256 + 1) * 4
    r = acc.step(parse_step([], ["2x1000"]))
    # H·(4·d_qk·d_v + 2·d_qk) per token: 2 new tokens, 32 layers
    assert r.segment("layers.attn.core").flops == 32 * 2 * 8 * (4 * 256 * 512 + 2 * 256)


def test_kv_command_lays_out_kimi_k3_and_minimax_m3(tmp_path, capsys, monkeypatch):
    from graphsim.cli.app import main

    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))

    def kv_layout_of(cfg: dict[str, Any]) -> dict[str, Any]:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        code = main(["kv", str(path), "--gpu", "h200", "-tp", "8", "--max-model-len", "131072", "--json"])
        out = capsys.readouterr()
        assert code == 0, out.err
        return json.loads(out.out)["layout"]

    k3 = kv_layout_of(K3)
    # 69 KDA layers × (4608 × 3 × 2 B conv + 12 × 128 × 128 × 4 B recurrent) per request; 24 MLA layers × 1152 B a token
    assert k3["state_bytes_per_request_per_rank"] == 69 * (4608 * 3 * 2 + 12 * 128 * 128 * 4)
    assert k3["bytes_per_token_per_rank"] == 24 * 1152
    m3 = kv_layout_of(M3)
    # 4 KV heads replicated to one per rank at tp 8: K + V of 128 in bf16 (512 B) on every layer, + the 256-B index
    # key on the 57 sparse layers
    assert m3["bytes_per_token_per_rank"] == 60 * 512 + 57 * 256
