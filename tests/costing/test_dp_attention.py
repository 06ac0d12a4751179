"""Data-parallel attention + expert parallel (costing/dp_attention.py, costing/all2all.py): vLLM's expert spread,
conservation of work over ranks, the lockstep composition and hand-derived exchange times on a tiny MoE model."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from graphsim.catalog import ResolvedModel
from graphsim.cost_model import build_cost_model
from graphsim.costing.aiconfigurator_tables import convert_moe_a2a
from graphsim.costing.all2all import All2AllError, MoeExchange, exchange_bytes, implementation
from graphsim.costing.dp_attention import (
    DataParallelMoe, merged, moe_leaf_indices, parse_rank_batches, price_dp_step, regions, shared_overlaps,
)
from graphsim.costing.kernels import CollectiveKey, CollectiveOp, MessagePoint
from graphsim.costing.moe_routing import parse_routing
from graphsim.importers.hf import import_hf
from graphsim.workload import parse_batch_spec

# tiny Qwen3-MoE: hidden 64, 2 layers (both MoE), 4 experts of width 32, top-2, 4 heads (2 KV) of 16
TINY_MOE = dict(num_hidden_layers=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16,
                hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
                max_position_embeddings=256)
# the h200_sxm spec's NVSwitch link (graphsim/profiles/hardware/h200_sxm.json): 450 GB/s per direction, 5 µs
LINK_BW, LINK_LAT_US = 450e9, 5.0


def _tiny(name: str, **overrides) -> ResolvedModel:
    import copy

    from graphsim.catalog import resolve_model

    cfg = copy.deepcopy(resolve_model(name).config)
    cfg.pop("quantization_config", None)
    cfg.update(overrides)
    return ResolvedModel(f"tiny-{name}", cfg, "path", "test")


@pytest.fixture(scope="module")
def moe_cm():
    graph, _ = import_hf(_tiny("qwen3-30b-a3b", **TINY_MOE), full_depth=True, cache=False)
    return build_cost_model(graph, "h200", tp=1, default_profile=False, moe_routing=parse_routing("balanced"))


def test_expert_spread_follows_fused_moe_parallel_config_make():
    # FusedMoEParallelConfig.make: EP → ep = dp × tp, tp 1; no EP → tp flattened across dp, ep 1
    assert (DataParallelMoe(8, 1, True).moe_tp, DataParallelMoe(8, 1, True).moe_ep) == (1, 8)
    assert (DataParallelMoe(4, 2, False).moe_tp, DataParallelMoe(4, 2, False).moe_ep) == (8, 1)
    assert DataParallelMoe(4, 2, True).world_size == 8
    with pytest.raises(All2AllError, match="--data-parallel-size >= 2"):
        DataParallelMoe(1)
    with pytest.raises(All2AllError, match="unknown --all2all-backend 'nccl'"):
        DataParallelMoe(2, all2all_backend="nccl")


def test_work_is_conserved_over_ranks(moe_cm):
    """Σ over ranks of each rank's own FLOPs = the same kernels on the merged batch (GEMMs are linear in tokens,
    attention is per sequence); dp × one GPU's expert FLOPs = the experts on one GPU at the global tokens."""
    a, b = parse_batch_spec("decode:3x40"), parse_batch_spec("prefill:1x24")
    p = price_dp_step(moe_cm, DataParallelMoe(2, 1, True), [a, b])
    ev = moe_cm.evaluate([merged([a, b])])
    flops, _ = ev.leaf_work()
    mult = moe_cm.tree.multiplicity
    moe = moe_leaf_indices(moe_cm.tree)
    own = np.ones(len(mult), dtype=bool)
    own[moe] = False
    assert sum(p.rank_flops) == pytest.approx(float((flops[own, 0] * mult[own]).sum()), rel=1e-12)
    assert p.experts_flops * 2 == pytest.approx(float((flops[moe, 0] * mult[moe]).sum()), rel=1e-12)
    assert p.global_tokens == 3 + 24 and p.rank_tokens == [3, 24]


def test_lockstep_is_the_slowest_rank_then_the_moe_layers(moe_cm):
    steps = parse_rank_batches("prefill:1x200|decode:2x16|idle|decode:1x8", 4)
    p = price_dp_step(moe_cm, DataParallelMoe(4, 1, False, "naive"), steps)
    # every region (before the layers, the 2 layers, after them) is slowest on rank 0 here: the Max over ranks of
    # each region, summed, is rank 0's own part
    assert p.slowest_rank == 0 and p.attention_us == pytest.approx(max(p.rank_us))
    assert p.rank_tokens[2] == 0 and p.rank_us[2] > 0  # the idle rank runs vLLM's dummy batch
    assert p.total_us == p.attention_us + p.experts_us + p.dispatch_us + p.combine_us
    assert p.moe_layers == 2
    assert any("idle" in n for n in p.notes)


def test_allgather_reducescatter_exchange_by_hand(moe_cm):
    # 2 DP ranks of 4 tokens: the all-gather produces 8 tokens × 64 hidden × 2 bytes = 1024 B; ring roofline on
    # one node: 5 µs + (2-1)/2 × 1024 B / 450 GB/s; two MoE layers; the reduce-scatter moves the same bytes
    p = price_dp_step(moe_cm, DataParallelMoe(2, 1, True), [parse_batch_spec("decode:4x16")] * 2)
    per_layer = LINK_LAT_US + 0.5 * 1024 / LINK_BW * 1e6
    assert p.dispatch_us == pytest.approx(2 * per_layer)
    assert p.combine_us == pytest.approx(2 * per_layer)
    assert p.sources["exchange"] == "roofline"


def test_deepep_low_latency_runs_in_chunks_of_256_tokens(moe_cm):
    # rank 0 holds 600 tokens: ceil(600 / 256) = 3 chunks of 256 (VLLM_MOE_DP_CHUNK_SIZE); a chunk sends
    # 256 tokens × top-2 × 64 hidden × 2 bytes = 65,536 B over EP 2: 5 µs + 1/2 × 65,536 / 450e9 s
    ex = MoeExchange("deepep_low_latency", 2, 2, 64, 2, 4)
    d, c = ex.price([600, 10], moe_cm.pricer)
    assert exchange_bytes(256, 64, 2) == 65536
    assert d.time_us == pytest.approx(3 * (LINK_LAT_US + 0.5 * 65536 / LINK_BW * 1e6))
    assert c.time_us == d.time_us and "3 chunks" in d.note and d.source == "roofline"


def test_measured_exchange_rows_are_read_at_the_busiest_rank():
    # aiconfigurator's moe_a2a_perf latency is in µs (= transmit_us + notify_us): 50.8 µs stays 50.8 µs
    cols = {"comm_backend": ["deepep_ll", "deepep_ll"], "phase": ["dispatch", "dispatch"], "ep_size": [8, 8],
            "node_num": [1, 2], "hidden_size": [7168, 7168], "topk": [8, 8], "num_experts": [256, 256],
            "num_tokens": [16, 16], "latency": [50.8, 70.0], "kernel_source": ["deepep", "deepep"]}
    out = convert_moe_a2a(cols)
    assert len(out.rows) == 1 and out.skipped["exchange across nodes"] == 1
    key, point, m = out.rows[0]
    assert key == CollectiveKey(CollectiveOp.ALL_TO_ALL, 8, key.dtype, "deepep_ll.dispatch.h7168.k8.e256")
    assert point == MessagePoint(16 * 8 * 7168 * 2) and m.time_us == pytest.approx(50.8)
    assert implementation("deepep_ht", "combine", 7168, 8, 256) == "deepep_ht.combine.h7168.k8.e256"


def test_shared_experts_overlap_the_routed_path_up_to_the_stream_limit():
    """vLLM runs the shared experts on an aux stream beside router, dispatch, experts and combine at ≤ 256 tokens a
    rank: two streams side by side hide the shorter one (one MoE layer here, identical ranks); above 256 tokens a
    rank they run one after the other and nothing is hidden."""
    cfg = dict(num_hidden_layers=2, first_k_dense_replace=1, hidden_size=64, intermediate_size=128,
               moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
               num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
               v_head_dim=16, vocab_size=96, max_position_embeddings=4096, bos_token_id=0, eos_token_id=1)
    graph, _ = import_hf(_tiny("deepseek-v2-lite", **cfg), full_depth=True, cache=False)
    cm = build_cost_model(graph, "h200", default_profile=False, moe_routing=parse_routing("balanced"))
    assert len(shared_overlaps(cm.tree, moe_leaf_indices(cm.tree))) == 1
    plan = DataParallelMoe(2, 1, True)
    small = price_dp_step(cm, plan, [parse_batch_spec("decode:4x64")] * 2)
    routed = small.experts_us + small.dispatch_us + small.combine_us
    assert small.moe_layers == 1 and small.shared_us > 0
    assert small.hidden_us == pytest.approx(min(small.shared_us, routed))
    big = price_dp_step(cm, plan, [parse_batch_spec("prefill:1x300")] * 2)
    assert big.hidden_us == 0.0 and big.shared_us > 0 and any("one after the other" in n for n in big.notes)


def test_ranks_meet_per_region_of_layers():
    """A model with sliding-window and full-attention layers (gpt-oss): a rank with long contexts is the slowest in
    the full-attention layers, one with many short ones can be elsewhere; the ranks meet at every MoE layer, so
    the step's own part is the Σ over regions of each region's slowest rank, more than the slowest rank's total."""
    cfg = dict(num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"], hidden_size=64,
               intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, vocab_size=96, max_position_embeddings=65536, sliding_window=128,
               pad_token_id=0, eos_token_id=1, bos_token_id=0)
    graph, _ = import_hf(_tiny("gpt-oss-20b", **cfg), full_depth=True, cache=False)
    cm = build_cost_model(graph, "h200", default_profile=False, moe_routing=parse_routing("balanced"))
    assert [cm.tree.labels[i] for i in regions(cm.tree)] == ["before layers", "sliding.moe ×1", "full.moe ×1",
                                                             "after layers"]
    p = price_dp_step(cm, DataParallelMoe(2, 1, True), [parse_batch_spec("decode:64x60000"),
                                                         parse_batch_spec("decode:256x100")])
    assert max(p.rank_us) < p.attention_us < sum(p.rank_us)


def test_refusals(moe_cm):
    dense_graph, _ = import_hf(_tiny("llama-3.1-8b", num_hidden_layers=1, hidden_size=64, intermediate_size=128,
                                     num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
                                     max_position_embeddings=256), full_depth=True, cache=False)
    dense = build_cost_model(dense_graph, "h200", default_profile=False)
    with pytest.raises(All2AllError, match=r"no routed experts.*independent replicas"):
        price_dp_step(dense, DataParallelMoe(2), [parse_batch_spec("decode:1x8")] * 2)
    with pytest.raises(All2AllError, match="4 routed experts do not divide over EP 8"):
        price_dp_step(moe_cm, DataParallelMoe(8, 1, True), [parse_batch_spec("decode:1x8")] * 8)
    with pytest.raises(All2AllError, match="one batch per DP rank"):
        price_dp_step(moe_cm, DataParallelMoe(2), [parse_batch_spec("decode:1x8")])
    with pytest.raises(All2AllError, match="every DP rank is idle"):
        parse_rank_batches("idle|idle", 2)
