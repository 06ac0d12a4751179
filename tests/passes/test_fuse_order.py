"""fuse orders its kernels as networkx.lexicographical_topological_sort would (smallest original position first
among the ready ones) without importing networkx."""

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsim.passes.fuse.core import _lexicographic_order


@given(st.integers(1, 25).flatmap(lambda n: st.tuples(
    st.permutations(range(n)), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=60),
    st.lists(st.integers(0, 3 * n), min_size=n, max_size=n, unique=True))))
@settings(max_examples=300, deadline=None)
def test_the_order_is_networkx_lexicographic_order(case):
    nodes, pairs, firsts = case
    nodes = list(nodes)
    edges = [(a, b) for a, b in pairs if a < b]  # forward edges only: a DAG
    succ: dict[int, dict[int, None]] = {n: {} for n in nodes}
    for a, b in edges:
        succ[a][b] = None
    key = dict(zip(nodes, firsts, strict=True))
    dag = nx.DiGraph()
    dag.add_nodes_from(nodes)
    dag.add_edges_from(edges)
    assert _lexicographic_order(nodes, succ, key) == list(nx.lexicographical_topological_sort(dag, key=key.__getitem__))


def test_a_cycle_leaves_the_order_short():
    succ = {0: {1: None}, 1: {2: None}, 2: {1: None}, 3: {}}
    assert _lexicographic_order([0, 1, 2, 3], succ, {0: 0, 1: 1, 2: 2, 3: 3}) == [0, 3]
