"""Hand-derived goldens for dense and sliding-window models: Llama-3.1-8B, Gemma-2-9b, gpt-oss-20b.

Every expectation is arithmetic on the config's numbers, written out here; none is read back from
the code under test. Conventions (docs/work.md): matmul 2·m·n·k; attention pairs
S = Σ_{i=1..n} min(p+i, W) per head, 2·S·H·d for scores plus 2·S·H·d for values; parameters read
once per step; KV read = cached positions attended, KV written = new positions later steps can
still attend (min(n, W−1) with a window); LM head on one row per sequence.
"""

from __future__ import annotations

from work_helpers import buckets, check

# --- Llama-3.1-8B: h 4096, 32 layers, 32 heads, 8 KV heads, head_dim 4096/32 = 128, ffn 14336,
# vocab 128256, bf16 (2 B), untied head.
# Matrices per layer: q 4096·4096 + k 4096·1024 + v 4096·1024 + o 4096·4096 + mlp 3·4096·14336
LLAMA_LAYER_MATRIX = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336  # 218,103,808
LLAMA_LAYER_NORMS = 2 * 4096
LLAMA_HEAD = 128256 * 4096  # 525,336,576 (also the embedding table)
LLAMA_KV_BYTES_PER_TOKEN_LAYER = 2 * 8 * 128 * 2  # K and V, 8 heads of 128, bf16 = 4096 B


def test_llama_prefill_8192_at_0():
    n = 8192
    pairs = n * (n + 1) // 2  # 33,558,528 causal pairs per head
    check(
        buckets("Llama-3.1-8B", prefill=["8192@0"]),
        {
            # T = 8192 rows through every layer's matrices; head on 1 row (one sequence)
            "matmul_flops": 2 * n * 32 * LLAMA_LAYER_MATRIX + 2 * 1 * 4096 * 128256,
            # scores + values: 2·S·32·128 each, 32 layers
            "attention_flops": 32 * (2 * pairs * 32 * 128) * 2,
            # embedding rows min(T, vocab) = 8192, all layer weights, final norm, head; 2 B each
            "param_read_bytes": 2 * (n * 4096 + 32 * (LLAMA_LAYER_MATRIX + LLAMA_LAYER_NORMS) + 4096 + LLAMA_HEAD),
            "state_read_bytes": 0,  # nothing cached
            "state_write_bytes": n * LLAMA_KV_BYTES_PER_TOKEN_LAYER * 32,  # 1,073,741,824
        },
    )


def test_llama_decode_64x2048():
    b, c = 64, 2048
    check(
        buckets("Llama-3.1-8B", decode=["64x2048"]),
        {
            "matmul_flops": 2 * b * 32 * LLAMA_LAYER_MATRIX + 2 * b * 4096 * 128256,
            # each new token attends to 2048 cached positions and itself: S = 2049 per sequence
            "attention_flops": b * 32 * (2 * (c + 1) * 32 * 128) * 2,
            "param_read_bytes": 2 * (b * 4096 + 32 * (LLAMA_LAYER_MATRIX + LLAMA_LAYER_NORMS) + 4096 + LLAMA_HEAD),
            "state_read_bytes": b * c * LLAMA_KV_BYTES_PER_TOKEN_LAYER * 32,  # 17,179,869,184
            "state_write_bytes": b * 1 * LLAMA_KV_BYTES_PER_TOKEN_LAYER * 32,
        },
    )


def test_llama_kv_fp8_halves_kv_bytes_only():
    base = buckets("Llama-3.1-8B", decode=["64x2048"])
    fp8 = buckets("Llama-3.1-8B", decode=["64x2048"], kv_dtype="fp8")
    assert fp8["state_read_bytes"] == base["state_read_bytes"] / 2
    assert fp8["param_read_bytes"] == base["param_read_bytes"]


# --- Gemma-2-9b: h 3584, 42 layers alternating sliding (even index, W 4096) / full, 16 heads of 256,
# 8 KV heads, ffn 14336 (GeGLU: 3 matrices), vocab 256000, tied embeddings, bf16, 4 norms per layer.
GEMMA_LAYER_MATRIX = 3584 * 4096 + 2 * 3584 * 2048 + 4096 * 3584 + 3 * 3584 * 14336  # 198,180,864
GEMMA_LAYER_NORMS = 4 * 3584
GEMMA_TABLE = 256000 * 3584  # 917,504,000; the head reads it (tied)
GEMMA_KV_BYTES = 2 * 8 * 256 * 2  # 8192 B per token per layer


def test_gemma2_prefill_8192_at_0_window_caps_sliding_layers():
    n, w = 8192, 4096
    full_pairs = n * (n + 1) // 2  # 33,558,528
    sliding_pairs = w * (w + 1) // 2 + (n - w) * w  # 8,390,656 + 16,777,216 = 25,167,872
    check(
        buckets("Gemma-2-9b", prefill=["8192@0"]),
        {
            "matmul_flops": 2 * n * 42 * GEMMA_LAYER_MATRIX + 2 * 1 * 3584 * 256000,
            # 21 layers of each kind; 2·S·16·256 for scores and again for values
            "attention_flops": 21 * 4 * 16 * 256 * (full_pairs + sliding_pairs),
            "param_read_bytes": 2 * (n * 3584 + 42 * (GEMMA_LAYER_MATRIX + GEMMA_LAYER_NORMS) + 3584 + GEMMA_TABLE),
            "state_read_bytes": 0,
            # full layers keep all 8192 new positions; sliding layers only the last W-1 = 4095
            "state_write_bytes": 21 * GEMMA_KV_BYTES * (n + (w - 1)),
        },
    )


def test_gemma2_decode_16x8000():
    b, c, w = 16, 8000, 4096
    check(
        buckets("Gemma-2-9b", decode=["16x8000"]),
        {
            "matmul_flops": 2 * b * 42 * GEMMA_LAYER_MATRIX + 2 * b * 3584 * 256000,
            # full: 8001 pairs; sliding: min(8001, 4096) = 4096 pairs
            "attention_flops": b * 21 * 4 * 16 * 256 * ((c + 1) + w),
            "param_read_bytes": 2 * (b * 3584 + 42 * (GEMMA_LAYER_MATRIX + GEMMA_LAYER_NORMS) + 3584 + GEMMA_TABLE),
            # full reads 8000 cached positions, sliding min(8000, W-1) = 4095
            "state_read_bytes": b * 21 * GEMMA_KV_BYTES * (c + (w - 1)),
            "state_write_bytes": b * 21 * GEMMA_KV_BYTES * 2,
        },
    )


# --- gpt-oss-20b: h 2880, 24 layers alternating sliding (W 128) / full, 64 heads of 64, 8 KV heads,
# q/k/v/o biases, 64 sinks per layer, 32 experts top-4 of width 2880 with biases, router with bias,
# vocab 201088, untied, bf16 except the expert matrices in MXFP4 (attention, router, embedding and
# lm_head are in modules_to_not_convert).
OSS_ATTN_MATRIX = 2880 * 4096 + 2 * 2880 * 512 + 4096 * 2880  # 26,542,080
OSS_ATTN_OTHER = (4096 + 512 + 512 + 2880) + 64 + 2880  # biases, sinks, input norm = 10,944
OSS_ROUTER = 32 * 2880 + 32  # 92,192 (weight + bias)
OSS_EXPERT_MATRIX = 3 * 2880 * 2880  # gate, up (fused gate_up 5760x2880) and down: 24,883,200 per expert
# MXFP4 bytes per expert: 0.5 B per element + 1 B per 32 inputs per row (2880/32 = 90), 3 matrices of
# 2880 rows: 3·(2880·2880/2 + 2880·90) = 3·(4,147,200 + 259,200) = 13,219,200; biases 3·2880 bf16 = 17,280
OSS_EXPERT_BYTES = 3 * (2880 * 2880 // 2 + 2880 * 90) + 3 * 2880 * 2  # 13,236,480
OSS_NON_EXPERT_LAYER_BYTES = 2 * (OSS_ATTN_MATRIX + OSS_ATTN_OTHER + OSS_ROUTER + 2880)  # + ffn norm
OSS_TABLE = 201088 * 2880  # 579,133,440
OSS_KV_BYTES = 2 * 8 * 64 * 2  # 2048 B per token per layer


def test_gpt_oss_prefill_2048_at_0():
    n, w = 2048, 128
    full_pairs = n * (n + 1) // 2  # 2,098,176
    sliding_pairs = w * (w + 1) // 2 + (n - w) * w  # 8,256 + 245,760 = 254,016
    # 2048 tokens x top-4 of 32 experts: 32·(1 - (28/32)^2048) = 32 to double precision
    check(
        buckets("gpt-oss-20b", prefill=["2048@0"]),
        {
            "matmul_flops": 2 * n * 24 * (OSS_ATTN_MATRIX + 32 * 2880 + 4 * OSS_EXPERT_MATRIX) + 2 * 2880 * 201088,
            "attention_flops": 12 * 4 * 64 * 64 * (full_pairs + sliding_pairs),
            "param_read_bytes": 2 * n * 2880 + 24 * (OSS_NON_EXPERT_LAYER_BYTES + 32 * OSS_EXPERT_BYTES)
            + 2 * 2880 + 2 * OSS_TABLE,
            "state_read_bytes": 0,
            "state_write_bytes": 12 * OSS_KV_BYTES * (n + (w - 1)),  # full keeps 2048, sliding 127
        },
    )


def test_gpt_oss_decode_8x4096_expected_and_worst_experts():
    b, c, w = 8, 4096, 128
    expected_experts = 32 * (1 - (28 / 32) ** 8)  # = 32·(1 - 5764801/16777216) ≈ 21.0046
    worst_experts = min(32, 8 * 4)  # 32
    rest = 2 * b * 2880 + 24 * OSS_NON_EXPERT_LAYER_BYTES + 2 * 2880 + 2 * OSS_TABLE
    check(
        buckets("gpt-oss-20b", decode=["8x4096"]),
        {
            "matmul_flops": 2 * b * 24 * (OSS_ATTN_MATRIX + 32 * 2880 + 4 * OSS_EXPERT_MATRIX) + 2 * b * 2880 * 201088,
            # full: 4097 pairs; sliding: 128 pairs
            "attention_flops": b * 12 * 4 * 64 * 64 * ((c + 1) + w),
            "param_read_bytes": rest + 24 * expected_experts * OSS_EXPERT_BYTES,
            "param_read_bytes_worst": rest + 24 * worst_experts * OSS_EXPERT_BYTES,
            "state_read_bytes": b * 12 * OSS_KV_BYTES * (c + (w - 1)),
            "state_write_bytes": b * 12 * OSS_KV_BYTES * 2,
        },
    )


def test_mixed_step_is_the_sum_of_its_parts_except_shared_parameter_reads():
    mixed = buckets("Llama-3.1-8B", prefill=["8192@0"], decode=["64x2048"])
    pre = buckets("Llama-3.1-8B", prefill=["8192@0"])
    dec = buckets("Llama-3.1-8B", decode=["64x2048"])
    for key in ("matmul_flops", "attention_flops", "state_read_bytes", "state_write_bytes"):
        assert mixed[key] == pre[key] + dec[key]
    # parameters are read once for the whole step; only the embedding rows (8192 + 64) add up
    assert mixed["param_read_bytes"] == pre["param_read_bytes"] + 2 * 64 * 4096
