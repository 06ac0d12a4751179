"""Hand-derived goldens for MoE, MLA and hybrid models: Qwen3-30B-A3B, Mixtral-8x7B, DeepSeek-V3,
Qwen3-Next-80B-A3B. Arithmetic on the config's numbers, written out; never read back from the code.

Routed experts: FLOPs on T·k token-expert pairs; parameter bytes for the expected number of
distinct experts under uniform routing, E·(1 − (1 − k/E)^T), and the worst case min(E, T·k).
"""

from __future__ import annotations

import pytest
from work_helpers import buckets, check

# --- Qwen3-30B-A3B: h 2048, 48 layers, 32 heads of 128 (explicit head_dim), 4 KV heads, q/k norms,
# 128 experts top-8 of width 768 in every layer, vocab 151936, untied, bf16.
Q3_ATTN_MATRIX = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048  # 18,874,368
Q3_ROUTER = 128 * 2048  # 262,144
Q3_EXPERT = 3 * 2048 * 768  # 4,718,592
Q3_NON_EXPERT = Q3_ATTN_MATRIX + 2 * 128 + 2 * 2048 + Q3_ROUTER  # + q/k norms + 2 layer norms
Q3_TABLE = 151936 * 2048  # 311,164,928
Q3_KV_BYTES = 2 * 4 * 128 * 2  # 2048 B per token per layer


def test_qwen3_moe_prefill_4096_at_0():
    n = 4096
    # 128·(1 - (120/128)^4096) = 128 to double precision: every expert is touched
    check(
        buckets("Qwen3-30B-A3B", prefill=["4096@0"]),
        {
            "matmul_flops": 2 * n * 48 * (Q3_ATTN_MATRIX + Q3_ROUTER + 8 * Q3_EXPERT) + 2 * 2048 * 151936,
            "attention_flops": 48 * 4 * 32 * 128 * (n * (n + 1) // 2),
            "param_read_bytes": 2 * (n * 2048 + 48 * (Q3_NON_EXPERT + 128 * Q3_EXPERT) + 2048 + Q3_TABLE),
            "state_read_bytes": 0,
            "state_write_bytes": 48 * Q3_KV_BYTES * n,
        },
    )


def test_qwen3_moe_decode_32x1024():
    b, c = 32, 1024
    expected = 128 * (1 - (1 - 8 / 128) ** 32)  # ≈ 111.2 experts per layer
    worst = min(128, 32 * 8)  # 128
    rest = 2 * (b * 2048 + 48 * Q3_NON_EXPERT + 2048 + Q3_TABLE)
    check(
        buckets("Qwen3-30B-A3B", decode=["32x1024"]),
        {
            "matmul_flops": 2 * b * 48 * (Q3_ATTN_MATRIX + Q3_ROUTER + 8 * Q3_EXPERT) + 2 * b * 2048 * 151936,
            "attention_flops": b * 48 * 4 * 32 * 128 * (c + 1),
            "param_read_bytes": rest + 48 * expected * Q3_EXPERT * 2,
            "param_read_bytes_worst": rest + 48 * worst * Q3_EXPERT * 2,
            "state_read_bytes": b * 48 * Q3_KV_BYTES * c,
            "state_write_bytes": b * 48 * Q3_KV_BYTES,
        },
    )


# --- Mixtral-8x7B: h 4096, 32 layers, 32 heads of 128, 8 KV heads, 8 experts top-2 of width 14336,
# sliding_window null (full attention), vocab 32000, untied, bf16.
MX_ATTN_MATRIX = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096  # 41,943,040
MX_ROUTER = 8 * 4096  # 32,768
MX_EXPERT = 3 * 4096 * 14336  # 176,160,768
MX_NON_EXPERT = MX_ATTN_MATRIX + MX_ROUTER + 2 * 4096
MX_TABLE = 32000 * 4096  # 131,072,000
MX_KV_BYTES = 2 * 8 * 128 * 2  # 4096 B


def test_mixtral_prefill_1024_after_3072_cached():
    n, p = 1024, 3072
    pairs = n * p + n * (n + 1) // 2  # 3,145,728 + 524,800 = 3,670,528
    check(
        buckets("Mixtral-8x7B-v0.1", prefill=["1024@3072"]),
        {
            "matmul_flops": 2 * n * 32 * (MX_ATTN_MATRIX + MX_ROUTER + 2 * MX_EXPERT) + 2 * 4096 * 32000,
            "attention_flops": 32 * 4 * 32 * 128 * pairs,
            # 8·(1 - 0.75^1024) = 8: all experts
            "param_read_bytes": 2 * (n * 4096 + 32 * (MX_NON_EXPERT + 8 * MX_EXPERT) + 4096 + MX_TABLE),
            "state_read_bytes": 32 * MX_KV_BYTES * p,
            "state_write_bytes": 32 * MX_KV_BYTES * n,
        },
    )


def test_mixtral_decode_4x4096():
    b, c = 4, 4096
    expected = 8 * (1 - (6 / 8) ** 4)  # 8·175/256 = 5.46875 experts
    rest = 2 * (b * 4096 + 32 * MX_NON_EXPERT + 4096 + MX_TABLE)
    check(
        buckets("Mixtral-8x7B-v0.1", decode=["4x4096"]),
        {
            "matmul_flops": 2 * b * 32 * (MX_ATTN_MATRIX + MX_ROUTER + 2 * MX_EXPERT) + 2 * b * 4096 * 32000,
            "attention_flops": b * 32 * 4 * 32 * 128 * (c + 1),
            "param_read_bytes": rest + 32 * 5.46875 * MX_EXPERT * 2,
            "param_read_bytes_worst": rest + 32 * min(8, 4 * 2) * MX_EXPERT * 2,
            "state_read_bytes": b * 32 * MX_KV_BYTES * c,
            "state_write_bytes": b * 32 * MX_KV_BYTES,
        },
    )
    assert expected == 5.46875


# --- DeepSeek-V3: h 7168, 61 layers (first_k_dense_replace 3 dense of 18432, then 58 MoE layers of
# 256 experts top-8 of width 2048 plus 1 shared expert of 2048), MLA with 128 heads, q_lora 1536,
# kv_lora r = 512, qk_nope 128, qk_rope 64, v 128; vocab 129280; bf16 with FP8 128x128 block weights.
DS_ATTN_MATRIX = (
    7168 * 1536  # q_a_proj 11,010,048
    + 1536 * 128 * 192  # q_b_proj 37,748,736
    + 7168 * (512 + 64)  # kv_a_proj_with_mqa 4,128,768
    + 512 * 128 * (128 + 128)  # kv_b_proj 16,777,216
    + 128 * 128 * 7168  # o_proj 117,440,512
)  # 187,105,280
DS_DENSE = 3 * 7168 * 18432  # 396,361,728
DS_ROUTER = 256 * 7168  # 1,835,008
DS_EXPERT = 3 * 7168 * 2048  # 44,040,192 (routed and shared alike)
# FP8 block bytes: 1 B per element + 4 B (fp32 scale) per ceil(out/128)·ceil(in/128) block
DS_ATTN_BYTES = (
    (11_010_048 + 4 * 12 * 56)  # q_a 1536x7168: 12·56 blocks
    + (37_748_736 + 4 * 192 * 12)  # q_b 24576x1536
    + (4_128_768 + 4 * 5 * 56)  # kv_a 576x7168: ceil(576/128) = 5
    + (16_777_216 + 4 * 256 * 4)  # kv_b 32768x512
    + (117_440_512 + 4 * 56 * 128)  # o 7168x16384
)  # 187,151,072
DS_ATTN_NORM_BYTES = 2 * (7168 + 1536 + 512)  # input, q_a and kv_a norms, bf16
DS_DENSE_BYTES = 3 * (132_120_576 + 4 * 144 * 56)  # 18432x7168 (and transpose) each
DS_EXPERT_BYTES = 2 * (14_680_064 + 4 * 16 * 56) + (14_680_064 + 4 * 56 * 16)  # 44,050,944
DS_ROUTER_BYTES = 2 * (DS_ROUTER + 256)  # bf16 router + e_score_correction_bias
DS_FFN_NORM_BYTES = 2 * 7168
DS_HEAD_BYTES = 2 * 129280 * 7168  # lm_head, bf16 (not quantized); the embedding table is the same size
DS_LATENT_BYTES = (512 + 64) * 2  # 1152 B per token per layer


def _ds_param_bytes(tokens: int, experts: float) -> float:
    return (
        2 * tokens * 7168  # embedding rows
        + 61 * (DS_ATTN_BYTES + DS_ATTN_NORM_BYTES)
        + 3 * (DS_DENSE_BYTES + DS_FFN_NORM_BYTES)
        + 58 * (DS_FFN_NORM_BYTES + DS_ROUTER_BYTES + DS_EXPERT_BYTES + experts * DS_EXPERT_BYTES)
        + 2 * 7168  # final norm
        + DS_HEAD_BYTES  # lm_head
    )


def _ds_matmul_per_token() -> int:
    return 61 * DS_ATTN_MATRIX + 3 * DS_DENSE + 58 * (DS_ROUTER + 8 * DS_EXPERT + DS_EXPERT)


def test_deepseek_v3_prefill_4096_at_0_decompressed_form():
    n = 4096
    pairs = n * (n + 1) // 2  # 8,390,656
    # nothing cached: the decompressed form costs 2·S·128·(192 + 128) per layer, less than the
    # absorbed 2·S·128·(2·512 + 64)
    check(
        buckets("DeepSeek-V3", prefill=["4096@0"]),
        {
            "matmul_flops": 2 * n * _ds_matmul_per_token() + 2 * 7168 * 129280,
            "attention_flops": 61 * 2 * pairs * 128 * (192 + 128),
            "param_read_bytes": _ds_param_bytes(n, 256),  # 256·(1 - (248/256)^4096) = 256
            "state_read_bytes": 0,
            "state_write_bytes": 61 * DS_LATENT_BYTES * n,
        },
    )


def test_deepseek_v3_decode_128x4096_absorbed_form():
    b, c = 128, 4096
    absorbed = 2 * (c + 1) * 128 * (2 * 512 + 64)  # 1,141,178,368 per sequence and layer
    decompressed = 2 * c * 512 * 128 * (128 + 128) + 2 * (c + 1) * 128 * (192 + 128)
    assert absorbed < decompressed
    expected = 256 * (1 - (1 - 8 / 256) ** 128)  # ≈ 251.6 of 256 experts
    check(
        buckets("DeepSeek-V3", decode=["128x4096"]),
        {
            "matmul_flops": 2 * b * _ds_matmul_per_token() + 2 * b * 7168 * 129280,
            "attention_flops": b * 61 * absorbed,
            "param_read_bytes": _ds_param_bytes(b, expected),
            "param_read_bytes_worst": _ds_param_bytes(b, min(256, 128 * 8)),
            "state_read_bytes": b * 61 * DS_LATENT_BYTES * c,
            "state_write_bytes": b * 61 * DS_LATENT_BYTES,
        },
    )


def test_deepseek_v3_ignore_quant_doubles_the_quantized_matrices():
    q = buckets("DeepSeek-V3", prefill=["4096@0"])
    bf16 = buckets("DeepSeek-V3", prefill=["4096@0"], ignore_quant=True)
    # all parameters bf16: 671,026,419,200 params minus the 129280·7168 table rows not read, plus 4096 rows
    assert bf16["param_read_bytes"] == 2 * (671_026_419_200 - 129280 * 7168 + 4096 * 7168)
    assert q["param_read_bytes"] < 0.51 * bf16["param_read_bytes"]


# --- Qwen3-Next-80B-A3B: h 2048, 48 layers, layer i full attention when (i+1) % 4 == 0 (12 layers),
# else gated delta net (36 layers). Full: 16 heads of 256, 2 KV heads, q_proj emits query and gate.
# Linear: 16 key heads and 32 value heads of 128, conv kernel 4. MoE in every layer: 512 experts
# top-10 of width 512, a shared expert of 512 with a 2048→1 gate. Vocab 151936, untied, bf16.
QN_FULL_MATRIX = 2048 * (16 * 256 * 2) + 2 * 2048 * (2 * 256) + (16 * 256) * 2048  # 27,262,976
QN_LINEAR_MATRIX = 2048 * (2 * 2048 + 2 * 4096) + 2048 * (2 * 32) + 4096 * 2048  # 33,685,504
QN_CONV = (2 * 2048 + 4096) * 4  # depthwise conv weight 8192x4 = 32,768
QN_MOE_MATRIX = 512 * 2048 + 10 * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048  # router, 10 experts, shared, gate
QN_EXPERT = 3 * 2048 * 512  # 3,145,728
QN_RECURRENCE = 6 * 32 * 128 * 128  # 3,145,728 FLOPs per token per linear layer
QN_STATE_BYTES = (32 * 128 * 128 + 8192 * 3) * 2  # recurrent 524,288 + conv 24,576 elements, bf16
QN_KV_BYTES = 2 * 2 * 256 * 2  # 2048 B per token per full layer
# every parameter except the routed experts and the embedding table, in bf16:
# 79,674,391,296 total - 48·512·3,145,728 routed - 311,164,928 table
QN_NON_ROUTED = 79_674_391_296 - 48 * 512 * QN_EXPERT - 151936 * 2048


def test_qwen3_next_prefill_4096_at_0():
    n = 4096
    check(
        buckets("Qwen3-Next-80B-A3B", prefill=["4096@0"]),
        {
            "matmul_flops": 2 * n * (12 * QN_FULL_MATRIX + 36 * QN_LINEAR_MATRIX + 48 * QN_MOE_MATRIX)
            + 2 * 2048 * 151936,
            "attention_flops": 12 * 4 * 16 * 256 * (n * (n + 1) // 2)
            + 36 * n * (QN_RECURRENCE + 2 * QN_CONV),
            # 512·(1 - (502/512)^4096) = 512: every expert
            "param_read_bytes": 2 * (QN_NON_ROUTED + 48 * 512 * QN_EXPERT + n * 2048),
            "state_read_bytes": 0,  # no prior state
            "state_write_bytes": 12 * QN_KV_BYTES * n + 36 * QN_STATE_BYTES,
        },
    )


def test_qwen3_next_decode_64x8192_state_is_constant_in_context():
    b, c = 64, 8192
    expected = 512 * (1 - (1 - 10 / 512) ** 64)  # ≈ 365.6 experts
    rest = 2 * (QN_NON_ROUTED + b * 2048)
    check(
        buckets("Qwen3-Next-80B-A3B", decode=["64x8192"]),
        {
            "matmul_flops": 2 * b * (12 * QN_FULL_MATRIX + 36 * QN_LINEAR_MATRIX + 48 * QN_MOE_MATRIX)
            + 2 * b * 2048 * 151936,
            "attention_flops": b * (12 * 4 * 16 * 256 * (c + 1) + 36 * (QN_RECURRENCE + 2 * QN_CONV)),
            "param_read_bytes": rest + 48 * expected * QN_EXPERT * 2,
            "param_read_bytes_worst": rest + 48 * min(512, 64 * 10) * QN_EXPERT * 2,
            "state_read_bytes": b * (12 * QN_KV_BYTES * c + 36 * QN_STATE_BYTES),
            "state_write_bytes": b * (12 * QN_KV_BYTES + 36 * QN_STATE_BYTES),
        },
    )
    longer = buckets("Qwen3-Next-80B-A3B", decode=["64x16384"])
    # only the 12 full-attention layers grow with context
    assert longer["state_read_bytes"] - b * 12 * QN_KV_BYTES * 16384 == pytest.approx(b * 36 * QN_STATE_BYTES)
