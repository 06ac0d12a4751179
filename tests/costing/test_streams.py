"""Overlapped streams in the cost tree: a token-limited Parallel (vLLM's shared-expert aux stream), its shared
roofline floor, leaves launched only up to a token limit, the detection on a kernel graph, and the simulator's
table pricing of such trees (exactly the tree's own evaluation)."""

import numpy as np
import pytest

from graphsim.costing.cost_tree import Leaf, Parallel, Scale, Sum, build_tree, compile_tree
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import MEASURED, ROOFLINE, SOURCES, KernelPricer
from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.kernels import GemmKey
from graphsim.costing.streams import StreamSettings, shared_expert_overlaps
from graphsim.ir import DType, Graph, LayerSchedule, Node, Op, T, TensorSpec
from graphsim.ir.geometry import (
    AttentionGeometry, CollectiveGeometry, ElementwiseGeometry, GemmGeometry, MoeExpertsGeometry, MoeRouterGeometry,
    NormGeometry,
)
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.serving.pricing import MemoCost, TreeCost, is_additive
from graphsim.workload import SeqGroup, Step

H200 = load_hardware("h200")
DT = Dtypes()


class TablePricer(KernelPricer):
    """A pricer whose GEMM times are stated per output width n (µs, 'measured', whatever the tokens), so the
    expected times of a tree are hand arithmetic; the H200 spec supplies the roofline floor."""

    def __init__(self, us_by_n: dict[int, float]) -> None:
        super().__init__(None, H200)
        self.us_by_n = us_by_n

    def times(self, key, coords):
        assert isinstance(key, GemmKey)
        n = len(np.asarray(coords).reshape(len(coords), -1))
        return np.full(n, self.us_by_n[key.n]), np.full(n, MEASURED, dtype=np.int8)


def gemm(name: str, n: int, k: int, max_tokens: int | None = None) -> Leaf:
    return Leaf(name, KernelAttrs(KernelKind.GEMM, "gemm", GemmGeometry(n=n, k=k), "bf16", Rows.TOKENS),
                max_tokens=max_tokens)


def prefill(t: int) -> Step:
    return Step((SeqGroup(t, 0, 1),))


def test_parallel_overlaps_up_to_its_token_limit_and_sums_above():
    # routed 30 µs, shared 20 µs, clone 5 µs (launched only at <= 256 tokens); small GEMMs (n = k <= 320), so
    # the shared roofline floor is far below: at 512 tokens the biggest moves 2·(512·320·3 + 320²) B ≈ 1.2 MB,
    # 0.25 µs at 4.8 TB/s.
    pricer = TablePricer({256: 30.0, 288: 20.0, 320: 5.0})
    tree = Sum((gemm("clone", 320, 320, max_tokens=256),
                Parallel((gemm("routed", 256, 256), gemm("shared", 288, 288)), max_tokens=256)))
    ev = compile_tree(tree).evaluate([prefill(64), prefill(256), prefill(257), prefill(512)], pricer, DT)
    # ≤ 256 tokens: 5 (clone) + max(30, 20) = 35; above: 0 (no clone) + 30 + 20 = 50
    np.testing.assert_allclose(ev.total_us(), [35.0, 35.0, 50.0, 50.0])
    # the overlap hides the shared 20 µs below the limit, nothing above
    np.testing.assert_allclose(ev.hidden_us()[0], [20.0, 20.0, 0.0, 0.0])
    # the clone does no work where it is not launched
    flops, nbytes = ev.leaf_work()
    assert nbytes[0, 1] > 0 and nbytes[0, 2] == 0 and flops[0, 3] == 0


def test_parallel_never_below_the_streams_joint_roofline():
    # two bf16 GEMMs n = k = 8192 at T = 16 "measured" at 20 µs each; each reads its 8192² × 2 B = 134.2 MB of
    # weights (+ 2·(16·8192·2) B activations = 0.52 MB): 134.74 MB. On one device both streams share HBM:
    # 2 × 134.74 MB / 4.8 TB/s = 56.14 µs > max(20, 20), so the overlap costs the floor, labelled roofline.
    pricer = TablePricer({8192: 20.0})
    tree = Parallel((gemm("a", 8192, 8192), gemm("b", 8192, 8192)), max_tokens=256)
    ev = compile_tree(tree).evaluate([prefill(16)], pricer, DT)
    per = 8192 * 8192 * 2 + 2 * (16 * 8192 * 2)
    expected = 2 * per / H200.memory_bandwidth_bytes_per_s * 1e6
    assert H200.memory_bandwidth_bytes_per_s == pytest.approx(4.8e12)
    assert ev.total_us()[0] == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(56.14, abs=0.01)
    assert SOURCES[int(ev.node_source[ev.tree.root, 0])] is SOURCES[ROOFLINE]
    # above the limit the streams add: 20 + 20 = 40 µs (each leaf's own time stands as measured)
    above = compile_tree(tree).evaluate([prefill(300)], pricer, DT)
    assert above.total_us()[0] == pytest.approx(40.0)


def test_scaled_overlap_hides_per_layer_times_the_layer_count():
    pricer = TablePricer({256: 30.0, 288: 20.0})
    tree = Scale(58, Sum((Parallel((gemm("routed", 256, 256), gemm("shared", 288, 288)), max_tokens=256),)))
    ev = compile_tree(tree).evaluate([prefill(8)], pricer, DT)
    assert ev.total_us()[0] == pytest.approx(58 * 30.0)
    assert ev.hidden_us()[0, 0] == pytest.approx(58 * 20.0)


# --- detection on a kernel graph ----------------------------------------------------------------------------
def _moe_layer_graph(gated: bool = False) -> Graph:
    """One MoE layer as vLLM's fuse target leaves it: norm → {cast → gate → topk → experts} and {gate_up → act →
    down [· sigmoid(gate)]} → add → all_reduce (hidden 64, 8 experts top-2, shared intermediate 32)."""
    h = TensorSpec((1, T, 64), DType.BFLOAT16)

    def k(name, attrs, *inputs, spec=h):
        return Node(name, Op.KERNEL, inputs, (spec,), attrs, layer=0)

    ew = lambda name, width=64: KernelAttrs(KernelKind.ELEMENTWISE, name, ElementwiseGeometry(width=width), "bf16")  # noqa: E731
    g = Graph("toy-moe", inputs={"x": h})
    nodes = [
        k("L0.norm", KernelAttrs(KernelKind.RMS_NORM, "rms_norm", _norm_geometry(), "bf16"), "x"),
        k("L0.cast", ew("cast"), "L0.norm"),
        k("L0.gate", KernelAttrs(KernelKind.GEMM, "gate", GemmGeometry(n=8, k=64), "bf16"), "L0.cast"),
        k("L0.topk", KernelAttrs(KernelKind.MOE_ROUTER, "grouped_topk", MoeRouterGeometry(num_experts=8, top_k=2),
                                 "f32"), "L0.gate"),
        k("L0.experts", KernelAttrs(KernelKind.MOE_EXPERTS, "fused_moe", MoeExpertsGeometry(
            hidden_size=64, inter_size=32, top_k=2, num_experts=8), "bf16"), "L0.norm", "L0.topk"),
        k("L0.gate_up", KernelAttrs(KernelKind.GEMM, "gate_up_proj", GemmGeometry(n=64, k=64), "bf16"), "L0.norm"),
        k("L0.act", KernelAttrs(KernelKind.ACT_AND_MUL, "silu_and_mul", ElementwiseGeometry(width=32), "bf16"),
          "L0.gate_up"),
        k("L0.down", KernelAttrs(KernelKind.GEMM, "down_proj", GemmGeometry(n=64, k=32), "bf16"), "L0.act"),
    ]
    last = "L0.down"
    if gated:
        nodes += [k("L0.sgate", KernelAttrs(KernelKind.GEMM, "shared_expert_gate", GemmGeometry(n=1, k=64), "bf16"),
                    "L0.norm"),
                  k("L0.sig", ew("sigmoid", 1), "L0.sgate"),
                  k("L0.mul", ew("mul"), "L0.down", "L0.sig")]
        last = "L0.mul"
    nodes += [k("L0.add", ew("add"), "L0.experts", last),
              k("L0.add.all_reduce", KernelAttrs(KernelKind.ALL_REDUCE, "all_reduce", _ar_geometry(), "bf16"),
                "L0.add")]
    g.nodes = nodes
    g.outputs = ["L0.add.all_reduce"]
    g.schedule = LayerSchedule(("moe",), {"moe": 0})
    g.verify()
    return g


def _norm_geometry() -> NormGeometry:
    return NormGeometry(width=64, dim=64)


def _ar_geometry() -> CollectiveGeometry:
    return CollectiveGeometry(num_gpus=2, group="tp", width=64, bytes_per_row=128, reason="row-parallel sum")


@pytest.mark.parametrize("gated", [False, True])
def test_detection_finds_the_routed_and_shared_branches_by_data_flow(gated):
    g = _moe_layer_graph(gated)
    (ov,) = shared_expert_overlaps(g.nodes)
    assert ov.routed == ("L0.cast", "L0.gate", "L0.topk", "L0.experts")
    shared = ("L0.gate_up", "L0.act", "L0.down") + (("L0.sgate", "L0.sig", "L0.mul") if gated else ())
    assert ov.shared == shared
    # vLLM clones the block input (hidden 64 bf16) on the main stream before the fork
    assert ov.clone.geometry == ElementwiseGeometry(width=64) and ov.clone.dtype == "bf16"


def test_build_tree_overlaps_only_with_the_stream_on():
    g = _moe_layer_graph()
    plain = compile_tree(build_tree(g))
    on = compile_tree(build_tree(g, streams=StreamSettings()))
    off = compile_tree(build_tree(g, streams=StreamSettings(disable_shared_experts_stream=True)))
    cpu = compile_tree(build_tree(g, streams=StreamSettings(cuda=False)))
    assert not plain.overlaps and not off.overlaps and not cpu.overlaps
    (node,) = on.overlaps
    assert on.max_tokens[node] == 256  # VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD's default
    assert sorted(on.leaves[i].name for i in on.under[node]) == sorted(
        ["L0.cast", "L0.gate", "L0.topk", "L0.experts", "L0.gate_up", "L0.act", "L0.down"])
    # same kernels plus the clone, each once (FLOPs and bytes are conserved: nothing is priced twice)
    assert sorted(lf.name for lf in on.leaves) == sorted([lf.name for lf in plain.leaves] + ["L0.gate_up.input_clone"])


# --- the simulator's tables ---------------------------------------------------------------------------------
def test_tree_cost_tables_equal_the_trees_own_evaluation_across_the_limit():
    pricer = TablePricer({256: 30.0, 288: 20.0, 320: 5.0, 100: 7.0})
    seq_leaf = Leaf("head", KernelAttrs(KernelKind.GEMM, "lm_head", GemmGeometry(n=100, k=64), "bf16", Rows.SEQUENCES))
    tree = compile_tree(Sum((Scale(4, Sum((gemm("clone", 320, 320, max_tokens=256),
                                           Parallel((gemm("routed", 256, 256), gemm("shared", 288, 288)),
                                                    max_tokens=256)))), seq_leaf)))
    assert is_additive(tree)
    cost = TreeCost(tree, pricer, DT, max_tokens=300, max_seqs=4, max_context=64)
    for tokens in (1, 200, 256, 257, 300):
        t, _ = cost.step_us(tokens, 1, 0, 0.0, [])
        exact = tree.evaluate([prefill(tokens)], pricer, DT).total_us()[0]
        # ≤ 256: 4 × (5 + 30) + 7 = 147; above: 4 × 50 + 7 = 207
        assert t == pytest.approx(147.0 if tokens <= 256 else 207.0)
        assert t == pytest.approx(exact)
        assert cost.step_split_us(tokens, 1, 0, 0.0, []).sum() == pytest.approx(t)


def test_overlap_over_attention_falls_back_to_exact_memo_pricing():
    attn = Leaf("attn", KernelAttrs(KernelKind.ATTENTION, "attention", AttentionGeometry(
        num_heads=8, num_kv_heads=8, head_dim=64, v_head_dim=64, window=0, causal=True), "bf16", Rows.NONE))
    tree = compile_tree(Parallel((attn, gemm("g", 256, 256))))
    assert not is_additive(tree)
    from graphsim.serving.pricing import iteration_cost

    assert isinstance(iteration_cost(tree, KernelPricer(None, H200), DT, 64, 4, 64), MemoCost)


# --- a traced model -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_deepseek_moe_layers_overlap_their_shared_experts_in_predict(hf_import):
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.predict import predict
    from graphsim.workload import parse_batch_spec

    graph, _ = hf_import("deepseek-v3")
    cm = build_cost_model(graph, "h200", tp=8, default_profile=False)
    (node,) = cm.tree.overlaps  # one MoE layer type (the dense first layer has no shared/routed pair)
    kinds = sorted(cm.tree.leaves[i].attrs.kind.value for i in cm.tree.under[node])
    # compiled mode (the default): the router's fp32 cast is in the Inductor kernel of the residual add and the FFN
    # norm before the streams split (passes/fuse/vllm_inductor.py), so the overlap holds the router GEMM, top-k and
    # routed experts beside the shared expert's three kernels
    assert kinds == sorted(["gemm", "moe_router", "moe_experts", "gemm", "act_and_mul", "gemm"])
    eager = build_cost_model(graph, "h200", tp=8, default_profile=False, compiled=False)
    (node,) = eager.tree.overlaps  # the custom-op graph (--enforce-eager): the cast is a kernel of the routed side
    kinds = sorted(eager.tree.leaves[i].attrs.kind.value for i in eager.tree.under[node])
    assert kinds == sorted(["elementwise", "gemm", "moe_router", "moe_experts", "gemm", "act_and_mul", "gemm"])
    assert "VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD" in cm.streams
    p = predict(cm, [parse_batch_spec("decode:8x512"), parse_batch_spec("prefill:1x512")], ["d", "p"])
    for b in p.batches:
        (ov,) = b.overlaps
        assert b.total_us is not None and ov["hidden_us"] is not None
        # what the overlap hides is exactly the kernel sum less the tree's total
        assert b.known_us - b.total_us == pytest.approx(ov["hidden_us"], rel=1e-9, abs=1e-6)
    assert p.batches[1].overlaps[0]["hidden_us"] == 0.0  # 512 tokens: above the limit, one stream
    # on a CPU spec vLLM runs no aux stream: no overlap
    cpu = build_cost_model(graph, "h200", tp=8, default_profile=False, streams=StreamSettings(cuda=False))
    assert not cpu.tree.overlaps and cpu.streams == ""
