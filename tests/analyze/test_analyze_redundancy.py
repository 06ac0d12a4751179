"""R7 finds a planted redundancy with the hand-derived amount: TP above num_kv_heads replicates KV heads.

Qwen3-30B-A3B (catalog config): hidden 2048, 32 query heads, 4 KV heads, head_dim 128, 48 layers,
bf16 KV cache (2 B), router 2048 → 128 experts. Batch decode:64x2048: 64 sequences, one new token
each after 2048 cached.

Necessary KV traffic (accountant): per layer and sequence the 2048 cached positions are read once and
the new one written once: (2048 + 1) · 2 (K, V) · 4 heads · 128 · 2 B = 2049 · 2048 B = 4,196,352 B;
× 64 sequences × 48 layers = 12,891,193,344 B.

At tp=8 the 4 KV heads cannot be split over 8 ranks: every KV head lives on 2 ranks (kv_replicas = 2)
and each rank keeps 1 head. Its attention kernel reads the 2049 positions of its head:
2049 · 2 · 1 · 128 · 2 B = 1,049,088 B per layer and sequence; × 64 × 48 × 8 ranks = 25,782,386,688 B,
twice the necessary traffic. Excess = 25,782,386,688 − 12,891,193,344 = 12,891,193,344 B (one more
copy of every KV head). Query heads split evenly (32 / 8 = 4 per rank), so the attention FLOPs carry
no excess.

The router GEMM stays replicated under TP: necessary 2 · 64 tokens · 128 · 2048 · 48 layers =
1,610,612,736 FLOPs; all 8 ranks compute it, excess 7 × that = 11,274,289,152 FLOPs, and its
128 · 2048 · 2 B · 48 = 25,165,824 B of weights are read 7 extra times: 176,160,768 B.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from analyze_helpers import analysis

ATTN = "full.moe/self_attn/flash_attn_varlen"
ROUTER = "full.moe/mlp.gate/gate"


def _loc(a, location):
    return next(r for r in a.locations if r.location == location)


def test_kv_heads_replicated_under_tp_appear_in_r7_with_the_hand_derived_amount():
    a = analysis("qwen3-30b-a3b", 8, "decode:64x2048")
    assert a.necessary_work_available and a.map_id == "gqa-qknorm-moe v1"
    attn = _loc(a, ATTN)
    assert attn.necessary.state_bytes == 12_891_193_344
    assert attn.performed.state_bytes == 25_782_386_688
    assert attn.redundancy.state_bytes == 12_891_193_344
    assert attn.redundancy.flops == 0 and attn.redundancy.param_bytes == 0
    assert any("KV heads replicated ×2" in c for c in attn.causes)
    # it is the largest excess of the step, and R7's total KV excess is exactly this amount
    assert a.redundancy is not None
    assert a.redundancy.top[0].location == ATTN
    assert a.redundancy.excess.state_bytes == 12_891_193_344
    assert a.redundancy.excess_roofline_us is not None and a.redundancy.excess_roofline_us > 0
    router = _loc(a, ROUTER)
    assert router.necessary.flops == 1_610_612_736
    assert router.redundancy.flops == 11_274_289_152
    assert router.redundancy.param_bytes == 176_160_768
    assert any("replicated" in c for c in router.causes)


def test_no_kv_excess_while_tp_divides_the_kv_heads():
    a = analysis("qwen3-30b-a3b", 4, "decode:64x2048")  # 4 ranks, 4 KV heads: one each, nothing replicated
    attn = _loc(a, ATTN)
    assert attn.performed.state_bytes == attn.necessary.state_bytes == 12_891_193_344
    assert attn.redundancy.state_bytes == 0 and not attn.causes
    assert a.redundancy is not None
    assert a.redundancy.excess.state_bytes == 0


def test_json_carries_the_same_numbers():
    out = analysis("qwen3-30b-a3b", 8, "decode:64x2048").to_dict()
    assert out["necessary_work_available"] is True and out["map"]["id"] == "gqa-qknorm-moe v1"
    attn = next(r for r in out["locations"] if r["location"] == ATTN)
    assert attn["redundancy"]["state_bytes"] == 12_891_193_344
    assert out["r7_redundancy"]["excess"]["state_bytes"] == 12_891_193_344
    assert out["r7_redundancy"]["top"][0]["location"] == ATTN
    assert out["reconciliation"]["ok"] is True
    assert out["iteration_time_source"] == "roofline"
    assert out["necessary_roofline_source"].startswith("roofline")
