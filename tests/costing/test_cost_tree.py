"""Cost-tree algebra and bulk evaluation (torch-free: graphs are built by hand)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsim.costing.cost_tree import (
    Labeled, Leaf, Max, NodeKind, Parallel, Scale, Sum, build_tree, compile_tree, price_leaves,
)
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import KernelPricer
from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.kernels import AttentionDecodeKey, AttentionPrefillKey, GemmKey
from graphsim.costing.roofline import kernel_work
from graphsim.ir import DType, Graph, LayerSchedule, Node, Op, T, TensorSpec
from graphsim.ir.geometry import AttentionGeometry, ElementwiseGeometry, EmbeddingGeometry, GemmGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.workload import SeqGroup, Step

H200 = load_hardware("h200")
PRICER = KernelPricer(None, H200)
DT = Dtypes()


def gemm_leaf(i: int, n: int, k: int) -> Leaf:
    return Leaf(f"g{i}", KernelAttrs(KernelKind.GEMM, "gemm", GemmGeometry(n=n, k=k), "bf16", Rows.TOKENS))


STEPS = [Step((SeqGroup(1, 1024, 8),)), Step((SeqGroup(512, 0, 1),)), Step((SeqGroup(128, 64, 2), SeqGroup(1, 10, 3)))]


def _gemm_parts_us(leaf: Leaf) -> tuple[np.ndarray, np.ndarray]:
    """(compute µs, memory µs) of a bf16 GEMM leaf on STEPS, from the roofline's own definition: 2·m·n·k FLOPs
    at the H200's bf16 peak; m·k + k·n + m·n elements of 2 bytes at its HBM bandwidth."""
    g = leaf.attrs.geometry_as(GemmGeometry)
    m = np.asarray([s.tokens for s in STEPS], dtype=np.float64)
    flops = 2.0 * m * g.n * g.k
    nbytes = 2.0 * (m * g.k + g.k * g.n + m * g.n)
    peak = H200.peak_flops(KernelDtype.BF16)
    assert peak is not None
    return (flops / peak * 1e6, nbytes / H200.memory_bandwidth_bytes_per_s * 1e6)


def _floor_parts(tree) -> tuple[np.ndarray, np.ndarray]:
    """(Σ compute µs, Σ memory µs) of the work below a node on one device: leaves add through Sum, Scale and
    Parallel; a Max is one of its children (the slowest rank), the one whose own max(compute, memory) is largest."""
    if isinstance(tree, Leaf):
        return _gemm_parts_us(tree)
    if isinstance(tree, Labeled):
        return _floor_parts(tree.child)
    if isinstance(tree, Scale):
        c, m = _floor_parts(tree.child)
        return c * tree.n, m * tree.n
    kids = [_floor_parts(c) for c in tree.children]
    if isinstance(tree, Max):
        comp, mem = kids[0]
        for c, m in kids[1:]:
            take = np.maximum(c, m) > np.maximum(comp, mem)
            comp, mem = np.where(take, c, comp), np.where(take, m, mem)
        return comp, mem
    return np.sum([c for c, _ in kids], axis=0), np.sum([m for _, m in kids], axis=0)


def reference(tree, leaf_times) -> np.ndarray:
    """The tree's definition, reading leaf times in depth-first order (as compile_tree lists leaves). A Parallel
    of several streams is their longest, but never below max(Σ compute, Σ memory) of its leaves (one device)."""
    if isinstance(tree, Leaf):
        return next(leaf_times)
    if isinstance(tree, Sum):
        return np.asarray(sum(reference(c, leaf_times) for c in tree.children))
    if isinstance(tree, Max):
        return np.max([reference(c, leaf_times) for c in tree.children], axis=0)
    if isinstance(tree, Parallel):
        t = np.max([reference(c, leaf_times) for c in tree.children], axis=0)
        if len(tree.children) > 1:
            t = np.maximum(t, np.maximum(*_floor_parts(tree)))
        return t
    if isinstance(tree, Scale):
        return tree.n * reference(tree.child, leaf_times)
    return reference(tree.child, leaf_times)


def trees(depth=3):
    leaves = st.builds(gemm_leaf, st.integers(0, 10**6), st.sampled_from([256, 1024, 4096]),
                       st.sampled_from([512, 4096]))
    return st.recursive(
        leaves,
        lambda kids: st.one_of(
            st.builds(lambda c: Sum(tuple(c)), st.lists(kids, min_size=1, max_size=3)),
            st.builds(lambda c: Max(tuple(c)), st.lists(kids, min_size=1, max_size=3)),
            st.builds(lambda c: Parallel(tuple(c)), st.lists(kids, min_size=1, max_size=3)),
            st.builds(Scale, st.integers(1, 80), kids),
            st.builds(Labeled, st.just("x"), kids),
        ),
        max_leaves=12,
    )


@settings(max_examples=60, deadline=None)
@given(trees())
def test_compiled_tree_matches_recursive_definition(tree):
    c = compile_tree(tree)
    ev = c.evaluate(STEPS, PRICER, DT)
    t, _ = price_leaves(c.leaves, STEPS, PRICER, DT)
    np.testing.assert_allclose(ev.total_us(), reference(tree, iter(t)), rtol=1e-12)


def test_scale_is_n_times_child_and_max_of_identical_ranks_is_one_rank():
    child = Sum((gemm_leaf(1, 4096, 4096), gemm_leaf(2, 1024, 4096)))
    one = compile_tree(child).evaluate(STEPS, PRICER, DT).total_us()
    scaled = compile_tree(Scale(61, child)).evaluate(STEPS, PRICER, DT).total_us()
    ranks = compile_tree(Max((child, child, child, child))).evaluate(STEPS, PRICER, DT).total_us()
    np.testing.assert_allclose(scaled, 61 * one)
    np.testing.assert_allclose(ranks, one)
    assert np.all(one > 0)


def test_missing_leaf_is_nan_and_marked_missing_never_zero():
    # no profile and no hardware spec: nothing can price the kernel
    pricer = KernelPricer(None, None)
    c = compile_tree(Sum((gemm_leaf(1, 4096, 4096), gemm_leaf(2, 4096, 4096))))
    ev = c.evaluate(STEPS[:1], pricer, DT)
    assert math.isnan(ev.total_us()[0])
    assert ev.total_source(0).value == "missing"


def _fused_graph() -> Graph:
    x = TensorSpec((1, T, 64), DType.BFLOAT16)
    k = lambda name, attrs, layer, inp: Node(name, Op.KERNEL, (inp,), (x,), attrs, layer=layer)  # noqa: E731
    g = Graph("toy", inputs={"ids": TensorSpec((1, T), DType.INT64)})
    emb = KernelAttrs(KernelKind.EMBEDDING, "embedding", EmbeddingGeometry(vocab=100, width=64), "bf16")
    g.nodes = [
        k("emb", emb, None, "ids"),
        k("L0.g", gemm_leaf(0, 64, 64).attrs, 0, "emb"),
        k("L1.g", gemm_leaf(0, 128, 64).attrs, 1, "L0.g"),
        k("head", KernelAttrs(KernelKind.GEMM, "lm_head", GemmGeometry(n=100, k=64), "bf16", Rows.SEQUENCES), None,
          "L1.g"),
    ]
    g.outputs = ["head"]
    g.schedule = LayerSchedule(("a", "b", "a", "a"), {"a": 0, "b": 1})
    g.verify()
    return g


def test_build_tree_scales_each_layer_type_by_its_count():
    tree = build_tree(_fused_graph())
    c = compile_tree(tree)
    mult = {leaf.name: m for leaf, m in zip(c.leaves, c.multiplicity, strict=True)}
    assert mult == {"emb": 1, "L0.g": 3, "L1.g": 1, "head": 1}
    assert "a ×3" in c.labels and "b ×1" in c.labels


def test_lm_head_rows_are_sequences():
    c = compile_tree(build_tree(_fused_graph()))
    step = [Step((SeqGroup(1, 100, 32),))]  # 32 decode sequences
    big = [Step((SeqGroup(1, 100, 4096),))]
    head = next(i for i, leaf in enumerate(c.leaves) if leaf.name == "head")
    t1 = c.evaluate(step, PRICER, DT).leaf_time_us[head, 0]
    t2 = c.evaluate(big, PRICER, DT).leaf_time_us[head, 0]
    assert t2 > t1 > 0


def test_build_tree_rejects_unfused_graph():
    from graphsim.errors import GraphsimError

    g = Graph("raw", inputs={"x": TensorSpec((1, T, 8), DType.BFLOAT16)})
    g.nodes = [Node("n", Op.ADD, ("x",), (TensorSpec((1, T, 8), DType.BFLOAT16),))]
    with pytest.raises(GraphsimError, match="fused graphs"):
        build_tree(g)


GQA = AttentionGeometry(num_heads=32, num_kv_heads=8, head_dim=128, v_head_dim=128, window=0, causal=True)


def test_prefill_sequences_add_and_unkeyable_kernels_are_missing():
    attn = Leaf("attn", KernelAttrs(KernelKind.ATTENTION, "flash_attn_varlen", GQA, "bf16", Rows.NONE))
    mask = Leaf("mask", KernelAttrs(KernelKind.ELEMENTWISE, "logical", ElementwiseGeometry(width=64), "bool",
                                    Rows.TOKENS))
    c = compile_tree(Sum((attn, mask)))
    one, two = [Step((SeqGroup(256, 0, k),)) for k in (1, 2)]
    ev = c.evaluate([one, two], PRICER, DT)
    t = ev.leaf_time_us[0]
    assert t[1] == pytest.approx(2 * t[0])  # two prefill sequences cost two single-sequence launches
    assert np.isnan(ev.leaf_time_us[1]).all() and ev.total_source(0).value == "missing"


def test_node_kinds_are_public():
    c = compile_tree(Labeled("it", Max((Scale(3, Sum((gemm_leaf(0, 64, 64),))),))))
    assert c.kinds == [NodeKind.LEAF, NodeKind.SUM, NodeKind.SCALE, NodeKind.MAX, NodeKind.LABELED]


def test_each_leaf_is_converted_once_for_times_and_work(monkeypatch):
    """evaluate() converts every leaf to (key, coordinates) rows once; leaf_work() reads the same rows."""
    import graphsim.costing.kernel_map as km

    calls = []
    real = km.key_for
    monkeypatch.setattr(km, "key_for", lambda a, dt, prefill=True: calls.append(a.name) or real(a, dt, prefill))
    attn = Leaf("attn", KernelAttrs(KernelKind.ATTENTION, "flash_attn_varlen", GQA, "bf16", Rows.NONE))
    c = compile_tree(Sum((attn, gemm_leaf(1, 4096, 4096))))
    ev = c.evaluate(STEPS, PRICER, DT)
    ev.leaf_work()
    ev.leaf_work()
    assert sorted(calls) == ["flash_attn_varlen", "flash_attn_varlen", "gemm"]  # attention: prefill + decode keys


def test_leaf_work_sums_the_work_of_each_point():
    """Work per step = Σ kernel_work over the step's points: one per decode group, one per prefill sequence."""
    attn = Leaf("attn", KernelAttrs(KernelKind.ATTENTION, "flash_attn_varlen", GQA, "bf16", Rows.NONE))
    c = compile_tree(Sum((attn, gemm_leaf(1, 4096, 4096))))
    mixed = Step((SeqGroup(300, 100, 2), SeqGroup(1, 50, 4)))  # 2 prefill chunks of 300 after 100, 4 decodes at 51
    flops, nbytes = c.evaluate([STEPS[0], mixed], PRICER, DT).leaf_work()
    pre = kernel_work(AttentionPrefillKey(32, 8, 128, KernelDtype.BF16, KernelDtype.BF16, 0), np.array([[1, 300, 400]]))
    dec = kernel_work(AttentionDecodeKey(32, 8, 128, KernelDtype.BF16, KernelDtype.BF16, 0), np.array([[4, 51]]))
    assert pre is not None and dec is not None
    assert flops[0, 1] == pytest.approx(2 * pre.flops[0] + dec.flops[0])
    assert nbytes[0, 1] == pytest.approx(2 * pre.bytes[0] + dec.bytes[0])
    gemm = kernel_work(GemmKey(4096, 4096, KernelDtype.BF16), np.array([[mixed.tokens]]))
    assert gemm is not None and flops[1, 1] == pytest.approx(gemm.flops[0]) == 2 * 604 * 4096 * 4096
