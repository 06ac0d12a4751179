"""Iteration times from the cost tree: the tables agree with `CompiledTree.evaluate`."""

import numpy as np
import pytest

from graphsim.costing.cost_tree import Leaf, Parallel, Sum, compile_tree
from graphsim.costing.interpolate import ROOFLINE
from graphsim.ir.kernel import KernelKind, Rows
from graphsim.serving.pricing import MemoCost, TreeCost, chunk_grid, context_grid, is_additive, iteration_cost
from graphsim.workload import SeqGroup, Step


@pytest.fixture(scope="module")
def tables(llama_tree):
    tree, pricer, dtypes = llama_tree
    return TreeCost(tree, pricer, dtypes, max_tokens=2048, max_seqs=256, max_context=32768)


def exact(llama_tree, groups):
    tree, pricer, dtypes = llama_tree
    ev = tree.evaluate([Step(tuple(groups))], pricer, dtypes)
    return float(ev.total_us()[0]), int(ev.node_source[tree.root, 0])


def test_the_vllm_tree_is_additive(llama_tree):
    tree, pricer, dtypes = llama_tree
    assert is_additive(tree)
    assert isinstance(iteration_cost(tree, pricer, dtypes, 512, 64, 4096), TreeCost)


def test_tables_match_the_tree_on_grid_points(llama_tree, tables):
    # decode at a grid context, a prefill from an empty cache (exact tables), a mixed step
    cases = [
        (64, 64, 64, 1024.0, [], [SeqGroup(1, 1024, 64)]),
        (1500, 1, 0, 0.0, [(1500, 0)], [SeqGroup(1500, 0, 1)]),
        (1532, 33, 32, 512.0, [(1500, 0)], [SeqGroup(1500, 0, 1), SeqGroup(1, 512, 32)]),
    ]
    for tokens, seqs, dec, ctx, chunks, groups in cases:
        t, s = tables.step_us(tokens, seqs, dec, ctx, chunks)
        want, src = exact(llama_tree, groups)
        assert t == pytest.approx(want, rel=1e-9)
        assert s == src == ROOFLINE


def test_tables_interpolate_between_grid_points(llama_tree, tables):
    rng = np.random.default_rng(0)
    for _ in range(40):
        b, ctx = int(rng.integers(1, 256)), int(rng.integers(0, 30000))
        n, p = int(rng.integers(2, 1800)), int(rng.integers(1, 20000))
        t, _ = tables.step_us(b + n, b + 1, b, float(ctx), [(n, p)])
        want, _ = exact(llama_tree, [SeqGroup(n, p, 1), SeqGroup(1, ctx, b)])
        assert t == pytest.approx(want, rel=2e-3)


def test_decode_runs_equal_single_steps(tables):
    times, src = tables.decode_run_us(48, 2000.0, 20)
    singles = [tables.step_us(48, 48, 48, 2000.0 + j, [])[0] for j in range(20)]
    np.testing.assert_allclose(times, singles, rtol=1e-12)
    assert set(src.tolist()) == {ROOFLINE}
    assert np.all(np.diff(times) >= 0)  # more context, more time


def test_memo_cost_is_exact(llama_tree):
    memo = MemoCost(*llama_tree)
    t, s = memo.step_us(1532, 33, 32, 512.0, [(1500, 0)])
    assert (t, s) == pytest.approx(exact(llama_tree, [SeqGroup(1500, 0, 1), SeqGroup(1, 512, 32)]))
    before = memo.evaluations
    memo.step_us(1532, 33, 32, 512.0, [(1500, 0)])
    assert memo.evaluations == before  # memoised


def test_a_tree_with_overlap_falls_back_to_exact_evaluation(llama_tree):
    # an overlap over attention hides a time that depends on more than the step's tokens: no exact tables
    tree, pricer, dtypes = llama_tree
    attn = next(lf for lf in tree.leaves if lf.attrs.kind is KernelKind.ATTENTION)
    leaves = [Leaf(f"k{i}", lf.attrs) for i, lf in enumerate(tree.leaves[:3])]
    overlapped = compile_tree(Sum((Parallel((Leaf("a", attn.attrs), leaves[1])), leaves[2])))
    assert not is_additive(overlapped)
    cost = iteration_cost(overlapped, pricer, dtypes, 64, 8, 1024)
    assert isinstance(cost, MemoCost)
    # over per-token kernels only it hides a function of T alone: the tables stay exact (tests/costing/test_streams.py)
    tokens_only = [lf for lf in tree.leaves if lf.attrs.kind is not KernelKind.ATTENTION
                   and lf.attrs.rows is Rows.TOKENS][:2]
    assert is_additive(compile_tree(Sum((Parallel(tuple(Leaf(f"t{i}", lf.attrs) for i, lf in enumerate(tokens_only))),
                                         leaves[2]))))


def test_grids():
    g = context_grid(131072)
    assert g[0] == 0 and g[-1] == 131072 and np.all(np.diff(g) > 0)
    assert np.all(np.diff(g)[g[1:] > 1100] / g[1:][g[1:] > 1100] < 1 / 60)
    n = chunk_grid(8192)
    assert n[0] == 2 and n[-1] == 8192 and list(n[:63]) == list(range(2, 65))


def test_missing_kernel_times_stop_with_the_kernel_named(llama_tree):
    from graphsim.costing.interpolate import KernelPricer
    from graphsim.serving.pricing import MissingTimingError

    tree, _, dtypes = llama_tree
    nothing = KernelPricer(None, None)  # no profile rows and no hardware spec: every kernel is missing
    with pytest.raises(MissingTimingError, match="qkv_proj"):
        TreeCost(tree, nothing, dtypes, 64, 8, 1024)
    with pytest.raises(MissingTimingError, match="import measured rows"):
        MemoCost(tree, nothing, dtypes).step_us(8, 8, 8, 100.0, [])


def test_summary_carries_the_worst_source():
    from serving_helpers import AffineCost, small_setup

    from graphsim.costing.interpolate import EXTRAPOLATED, INTERPOLATED, MEASURED
    from graphsim.serving import parse_lengths, simulate, summarize, synthetic

    class Mixed(AffineCost):  # decode measured/interpolated, prefill extrapolated
        def step_us(self, tokens, seqs, dec_count, dec_ctx_mean, chunks):
            t, _ = super().step_us(tokens, seqs, dec_count, dec_ctx_mean, chunks)
            return t, EXTRAPOLATED if chunks else MEASURED

        def decode_run_us(self, batch, ctx_mean0, k):
            t, _ = super().decode_run_us(batch, ctx_mean0, k)
            return t, np.full(k, INTERPOLATED, dtype=np.int8)

    work = synthetic(100, 5.0, parse_lengths("100:500", "in"), parse_lengths("20:80", "out"), seed=0)
    res = simulate(small_setup(cost=Mixed()), work)
    s = summarize(res)
    assert s.source == "extrapolated" and not s.all_roofline
    assert set(s.source_counts) == {"measured", "interpolated", "extrapolated"}
    assert sum(s.source_counts.values()) == s.iterations
    log_sources = res.iterations["source"]
    assert set(np.unique(log_sources).tolist()) == {MEASURED, INTERPOLATED, EXTRAPOLATED}
