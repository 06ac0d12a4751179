"""Pipeline parallelism (costing/pipeline.py): vLLM's stage split, the stage trees, conservation over stages and
the send/recv pricing of a hop."""

from __future__ import annotations

import numpy as np
import pytest

from graphsim.costing.pipeline import (
    PipelinedCostModel, PipelineError, PipelineSplit, hop_crosses_nodes, pp_indices, pp_of, stage_layers, with_pipeline,
)
from graphsim.workload import parse_batch_spec

STEPS = [parse_batch_spec(s) for s in ("prefill:1x2048", "decode:64x2048")]


# --- the split, against vLLM's get_pp_indices worked by hand -------------------------------------------------
@pytest.mark.parametrize(("layers", "pp", "partition", "want"), [
    (20, 4, None, (5, 5, 5, 5)),  # 20 // 4 = 5, no remainder
    (10, 4, None, (2, 3, 3, 2)),  # 10 // 4 = 2, remainder 2: partitions[-2] and [-3] get one more
    (7, 3, None, (2, 3, 2)),  # 7 // 3 = 2, remainder 1: partitions[-2] gets one more
    (31, 4, None, (8, 8, 8, 7)),  # 31 // 4 = 7, remainder 3: [-2], [-3], [-4] (the first stage too)
    (32, 1, None, (32,)),
    (20, 4, "4,6,6,4", (4, 6, 6, 4)),  # vLLM's tests/distributed/test_pipeline_partition.py case
    (5, 2, [1, 4], (1, 4)),
])
def test_stage_layers_follow_vllm(layers, pp, partition, want):
    assert stage_layers(layers, pp, partition) == want


def test_pp_indices_are_contiguous_ranges():
    # 31 layers over 4 stages: (8, 8, 8, 7) → [0, 8), [8, 16), [16, 24), [24, 31)
    assert [pp_indices(31, r, 4) for r in range(4)] == [(0, 8), (8, 16), (16, 24), (24, 31)]
    assert pp_indices(20, 2, 4, "4,6,6,4") == (10, 16)


@pytest.mark.parametrize(("layers", "pp", "partition", "says"), [
    (20, 4, "4,6,6", "has 3 stages"),
    (20, 4, "4,6,6,5", "sums to 21"),
    (20, 2, "a,b", "invalid layer partition"),
    (20, 2, "20,0", "at least one layer"),
    (4, 5, None, "exceeds the model's 4 layers"),
    (4, 0, None, "out of range"),
])
def test_bad_splits_are_one_line_errors(layers, pp, partition, says):
    with pytest.raises(PipelineError, match=says) as e:
        stage_layers(layers, pp, partition)
    assert "\n" not in str(e.value)


def test_hops_cross_nodes_where_the_ranks_do():
    # global rank = stage × tp + tp_rank, 8 GPUs a node. tp 4: stage 0 on GPUs 0-3, 1 on 4-7, 2 on 8-11
    assert not hop_crosses_nodes(0, 4, 8)  # 0-3 → 4-7: node 0 both
    assert hop_crosses_nodes(1, 4, 8)  # 4-7 → 8-11: node 0 → node 1
    assert not hop_crosses_nodes(2, 4, 8)  # 8-11 → 12-15: node 1 both
    # tp 3: stage 1 on GPUs 3-5 sends to 6-8; GPU 5 → 8 crosses
    assert hop_crosses_nodes(1, 3, 8)
    assert hop_crosses_nodes(0, 8, 8)  # a stage per node: every hop crosses
    split = PipelineSplit.of(32, 4, tp=4, gpus_per_node=8)
    assert [split.crosses_nodes(s) for s in range(3)] == [False, True, False]
    assert not PipelineSplit.of(32, 4, tp=4).crosses_nodes(1)  # no topology known: inside a node


# --- stage trees on a traced model -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama_tp2():
    pytest.importorskip("torch")
    from graphsim.cost_model import build_cost_model

    return build_cost_model("llama-3.1-8b", "h200", tp=2, default_profile=False)


def _split(cm, pp: int) -> PipelinedCostModel:
    pc = with_pipeline(cm, pp)
    assert isinstance(pc, PipelinedCostModel)
    return pc


def _leaf_weight_bytes(cm, tree) -> float:
    from graphsim.passes.partition.conservation import weight_bytes

    nodes = {n.name: n for n in cm.graph.nodes}
    return sum(weight_bytes(nodes[leaf.name], cm.graph) * m for leaf, m in zip(tree.leaves, tree.multiplicity, strict=True)
               if leaf.name in nodes)


def _work(cm, tree) -> tuple[np.ndarray, np.ndarray]:
    ev = tree.evaluate(STEPS, cm.pricer, cm.dtypes)
    f, b = ev.leaf_work()
    keep = np.array([leaf.attrs.kind.value != "send_recv" and not leaf.name.startswith("pp") for leaf in tree.leaves])
    m = tree.multiplicity[:, None]
    return (f * m)[keep].sum(axis=0), (b * m)[keep].sum(axis=0)


@pytest.mark.parametrize("pp", [2, 3, 4])
def test_stages_conserve_flops_bytes_and_weights(llama_tp2, pp):
    cm = llama_tp2
    pc = _split(cm, pp)
    assert pp_of(pc) == pp and pp_of(cm) == 1 and len(pc.stages) == pp
    whole_f, whole_b = _work(cm, cm.tree)
    parts = [_work(pc, t) for t in pc.stages]
    np.testing.assert_allclose(sum(p[0] for p in parts), whole_f, rtol=1e-12)
    np.testing.assert_allclose(sum(p[1] for p in parts), whole_b, rtol=1e-12)
    w_whole = _leaf_weight_bytes(cm, cm.tree)
    w_stages = [_leaf_weight_bytes(pc, t) for t in pc.stages]
    assert sum(w_stages) == pytest.approx(w_whole, rel=1e-12)
    assert all(w > 0 for w in w_stages)


def test_stage_weights_by_hand(llama_tp2):
    # Llama-3.1-8B at tp 2, pp 2: 16 layers a stage. A layer holds 218,112,000 parameters (the graph's
    # params_per_layer), bf16: its two RMSNorm weights (2 × 4096) are replicated on both TP ranks, the other
    # 218,103,808 split: (218,103,808 / 2 + 8192) × 2 B = 218,120,192 B per rank per layer. Stage 0 adds the
    # embedding's vocab shard (128,256 / 2 × 4096 × 2 B = 525,336,576 B), stage 1 the final norm (4096 × 2 B,
    # replicated) and lm_head's shard (525,336,576 B).
    pc = _split(llama_tp2, 2)
    w0, w1 = (_leaf_weight_bytes(pc, t) for t in pc.stages)
    assert w0 == pytest.approx(16 * 218_120_192 + 525_336_576, rel=1e-9)
    assert w1 == pytest.approx(16 * 218_120_192 + 8192 + 525_336_576, rel=1e-9)


def test_the_tree_shows_each_transfer_and_sums_the_stages(llama_tp2):
    pc = _split(llama_tp2, 3)
    labels = pc.tree.labels
    assert [lab for lab in labels if " of 3 (layers " in lab] == ["stage 0 of 3 (layers 0–10)",
                                                                 "stage 1 of 3 (layers 11–21)",
                                                                 "stage 2 of 3 (layers 22–31)"]  # 11, 11, 10
    assert [lab for lab in labels if "recv from" in lab] == ["stage 1: recv from stage 0 (inside a node)",
                                                             "stage 2: recv from stage 1 (inside a node)"]
    total = pc.evaluate(STEPS).total_us()
    stages = sum(t.evaluate(STEPS, pc.pricer, pc.dtypes).total_us() for t in pc.stages)
    np.testing.assert_allclose(total, stages, rtol=1e-12)
    # one batch through three stages is the unsplit iteration plus two hops: never faster
    assert np.all(total > llama_tp2.evaluate(STEPS).total_us())


def test_a_hop_is_priced_on_the_link_or_the_network(llama_tp2):
    from graphsim.costing.hardware import load_hardware

    h200 = load_hardware("h200")
    # decode:64x2048 at tp 2: each rank sends its half of a 4096-wide bf16 row, 2048 × 2 B = 4096 B per token,
    # 64 tokens = 262,144 B per tensor (hidden states and residual: two sends).
    # Inside a node (NVLink, 450 GB/s, 5 µs): 5 + 262,144 / 450e9 s = 5 + 0.58254 µs = 5.58254 µs.
    # Across nodes (gpus_per_node 2, so stage 0 = GPUs 0-1, stage 1 = GPUs 2-3): the network's 50 GB/s and
    # 5 + 10 µs latency: 15 + 262,144 / 50e9 s = 15 + 5.24288 µs = 20.24288 µs.
    for hw, want in ((h200, 5.58254), (h200.with_topology(gpus_per_node=2), 20.24288)):
        from graphsim.cost_model import build_cost_model

        cm = build_cost_model(llama_tp2.graph, hw, default_profile=False)
        pc = with_pipeline(cm, 2)
        assert isinstance(pc, PipelinedCostModel)
        ev = pc.evaluate([STEPS[1]])
        hops = [i for i, leaf in enumerate(pc.tree.leaves) if leaf.attrs.kind.value == "send_recv"]
        assert len(hops) == 2
        for i in hops:
            assert ev.leaf_time_us[i, 0] == pytest.approx(want, rel=1e-5)


def test_pp_needs_a_folded_graph(llama_tp2):
    from dataclasses import replace

    graph = replace(llama_tp2.graph, schedule=None)
    cm = replace(llama_tp2, graph=graph)
    with pytest.raises(PipelineError, match="no layer schedule"):
        with_pipeline(cm, 2)


@pytest.mark.slow
def test_a_mixed_stack_splits_by_layer_index_and_conserves():
    # DeepSeek-V2-Lite: layer 0 dense, layers 1-26 MoE (first_k_dense_replace = 1); 27 layers over 3 stages =
    # 9 each, so stage 0 holds the dense layer and 8 MoE layers, stages 1 and 2 nine MoE layers each.
    pytest.importorskip("torch")
    from graphsim.cost_model import build_cost_model

    cm = build_cost_model("deepseek-v2-lite", "h200", tp=2, default_profile=False)
    pc = _split(cm, 3)
    regions = [[lab for lab in t.labels if lab.startswith(f"stage {s}: full.")] for s, t in enumerate(pc.stages)]
    assert regions == [["stage 0: full.dense ×1", "stage 0: full.moe ×8"], ["stage 1: full.moe ×9"],
                       ["stage 2: full.moe ×9"]]
    whole_f, whole_b = _work(cm, cm.tree)
    parts = [_work(pc, t) for t in pc.stages]
    np.testing.assert_allclose(sum(p[0] for p in parts), whole_f, rtol=1e-12)
    np.testing.assert_allclose(sum(p[1] for p in parts), whole_b, rtol=1e-12)
    assert sum(_leaf_weight_bytes(pc, t) for t in pc.stages) == pytest.approx(_leaf_weight_bytes(cm, cm.tree), rel=1e-12)
    # each MoE stage keeps the shared-expert overlap the unsplit tree has
    assert len(pc.tree.overlaps) == 3 and len(cm.tree.overlaps) == 1
