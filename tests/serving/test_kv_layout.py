"""KV bytes per token per rank, hand-derived from the configs, and vLLM's paging of them."""

import pytest

from graphsim.catalog import resolve_model
from graphsim.serving import KvKind, kv_layout
from graphsim.serving.kv_layout import KvLayoutError
from graphsim.work import accounting


def layout(name, tp=1, kv_dtype=None, block_size=None):
    acc = accounting(resolve_model(name).config, kv_dtype=kv_dtype)
    return kv_layout(acc.spec, acc.precision, tp, block_size)


def test_llama_31_8b_gqa():
    # 32 layers × 2 (K, V) × 8 kv heads × head_dim 128 × 2 B (bf16) = 131,072 B per token
    lay = layout("llama-3.1-8b")
    assert lay.bytes_per_token == 32 * 2 * 8 * 128 * 2 == 131_072
    assert [(p.layer.kind, p.layers) for p in lay.parts()] == [(KvKind.FULL, 32)]
    # one group of all 32 layers, 16-token blocks: a block id holds 32 × 16 × 4,096 B = 2 MiB
    assert lay.block_size == 16 and lay.bytes_per_block == 32 * 16 * 4096 == 2 * 2**20
    assert lay.prefix_cacheable and not lay.hybrid
    # tp=2 splits the 8 kv heads: 4 per rank → 65,536 B; fp8 halves the element: 65,536 B at tp=1
    assert layout("llama-3.1-8b", tp=2).bytes_per_token == 32 * 2 * 4 * 128 * 2 == 65_536
    assert layout("llama-3.1-8b", kv_dtype="fp8").bytes_per_token == 32 * 2 * 8 * 128 * 1 == 65_536
    # tp=16 > 8 kv heads: vLLM keeps max(1, 8 // 16) = 1 head per rank (replicated), not half a head
    assert layout("llama-3.1-8b", tp=16).bytes_per_token == 32 * 2 * 1 * 128 * 2 == 16_384


def test_deepseek_v3_mla_latent_whole_on_every_rank():
    # 61 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 B = 70,272 B per token, at any tp
    for tp in (1, 8):
        assert layout("deepseek-v3", tp=tp).bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert layout("deepseek-v3", kv_dtype="fp8").bytes_per_token == 61 * 576 * 1 == 35_136
    lay = layout("deepseek-v3")
    assert [(p.layer.kind, p.layers) for p in lay.parts()] == [(KvKind.MLA, 61)]
    # FlashMLA takes 64-token blocks only: one block id = 61 layers × 64 × 1,152 B
    assert lay.block_size == 64 and lay.bytes_per_block == 61 * 64 * 1152
    assert any("FlashMLA" in n for n in lay.notes)


def test_gpt_oss_20b_sliding_window_and_sinks():
    # 24 layers alternating sliding (window 128) / full; 8 kv heads × head_dim 64:
    # per layer 2 × 8 × 64 × 2 B = 2,048 B per token; 24 layers → 49,152 B (window not applied)
    lay = layout("gpt-oss-20b")
    parts = {p.layer.kind: p for p in lay.parts()}
    assert parts[KvKind.SLIDING].layers == 12 and parts[KvKind.SLIDING].layer.window == 128
    assert parts[KvKind.FULL].layers == 12
    assert parts[KvKind.SLIDING].layer.bytes_per_token == 2 * 8 * 64 * 2 == 2_048
    assert lay.bytes_per_token == 24 * 2_048 == 49_152
    # sinks are one learned logit per head: weights, no KV
    assert "sinks" in parts[KvKind.SLIDING].layer.detail
    # one request of 10,000 tokens holds 12 × 2,048 × 10,000 (full) + 12 × 2,048 × 128 (window)
    assert lay.bytes_for_request(10_000) == 12 * 2048 * 10_000 + 12 * 2048 * 128
    # vLLM: two KV-cache groups of 12 layers each, one shared pool; a block id = 12 × 16 × 2,048 B
    assert [(g.kind, g.layers) for g in lay.groups] == [(KvKind.SLIDING, 12), (KvKind.FULL, 12)]
    assert lay.bytes_per_block == 12 * 16 * 2048 == 393_216
    # admission blocks at 32,768 tokens with 2 × 8,192 in-flight tokens:
    # full cdiv(32768, 16) = 2,048; sliding cdiv(min(127 + 16,384, 32,768), 16) + 1 = 1,032 + 1 = 1,033
    assert lay.admission_blocks(32_768, 16_384) == 2_048 + 1_033
    assert lay.hybrid and not lay.prefix_cacheable


def test_qwen3_next_state_per_request_and_block_alignment():
    # linear-attention layers: recurrent 32 v heads × 128 × 128 + conv (2·16·128 + 32·128 = 8,192) × (4 − 1)
    # = 524,288 + 24,576 elements × 2 B = 1,097,728 B per request and layer; 36 of the 48 layers
    lay = layout("qwen3-next-80b-a3b")
    parts = {p.layer.kind: p for p in lay.parts()}
    assert parts[KvKind.STATE].layers == 36
    assert parts[KvKind.STATE].layer.state_bytes == (32 * 128 * 128 + 8192 * 3) * 2 == 1_097_728
    # the 12 full-attention layers: 2 kv heads × 256 × 2 × 2 B = 2,048 B per token per layer
    assert parts[KvKind.FULL].layers == 12 and lay.bytes_per_token == 12 * 2 * 2 * 256 * 2
    # vLLM raises the attention block until a page holds a state page: 16 × cdiv(1,097,728, 16 × 2,048) = 544
    assert lay.block_size == 16 * 34 == 544
    assert {g.page_bytes for g in lay.groups} == {544 * 2048}  # state pages padded to the attention page
    assert [g.kind for g in lay.groups].count(KvKind.STATE) == 3  # 36 layers in groups of 12
    # tp=4 splits the state (8 v heads per rank) but replicates the 2 kv heads (1 per rank)
    lay4 = layout("qwen3-next-80b-a3b", tp=4)
    assert {p.layer.kind: p for p in lay4.parts()}[KvKind.STATE].layer.state_bytes == (8 * 128 * 128 + 2048 * 3) * 2
    assert lay4.bytes_per_token == 12 * 2 * 1 * 256 * 2


def test_window_on_every_layer_is_one_sliding_group():
    # Phi-3-mini-4k: sliding_window 2047 on all 32 layers, 32 kv heads × 96: 2 × 32 × 96 × 2 B = 12,288 B per layer
    lay = layout("phi-3-mini-4k-instruct")
    assert [(g.kind, g.layers, g.window) for g in lay.groups] == [(KvKind.SLIDING, 32, 2047)]
    assert lay.bytes_per_token == 32 * 12_288
    # a 4,096-token request with 2 × 2,048 in flight: cdiv(min(2046 + 4096, 4096), 16) + 1 = 257 blocks
    assert lay.admission_blocks(4096, 4096) == 257
    # Mistral-7B-v0.3 sets sliding_window null: full attention
    assert [g.kind for g in layout("mistral-7b-v0.3").groups] == [KvKind.FULL]


def test_heads_not_divisible_by_tp_is_an_error():
    # 32 query heads at tp 3: vLLM's ModelConfig.verify_with_parallel_config refuses before the 8 kv heads matter,
    # and kv quotes it as predict does
    with pytest.raises(KvLayoutError, match=r"'Total number of attention heads \(32\) must be divisible by tensor "
                                            r"parallel size \(3\)'"):
        layout("llama-3.1-8b", tp=3)
    # Qwen2.5-7B at tp 7: 28 query heads divide, its 4 kv heads neither divide 7 nor does 7 divide them
    with pytest.raises(KvLayoutError, match="tp = 7 is not a multiple of num_key_value_heads = 4"):
        layout("qwen2.5-7b-instruct", tp=7)


def test_held_blocks_follow_the_window():
    import numpy as np

    lay = layout("gpt-oss-20b")
    # at 1,000 computed tokens + 1 new: full cdiv(1001, 16) = 63; sliding 63 − (1000 − 127) // 16 = 63 − 54 = 9
    assert lay.held_blocks_one(1000, 1) == 63 + 9
    assert list(lay.held_blocks(np.array([0, 1000]), np.array([16, 1]))) == [2, 72]
