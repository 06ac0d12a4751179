"""fuse never builds a cycle between kernels (passes/fuse/acyclic.py): a rule's group that an outside path leaves and
re-enters loses the path's source nodes (they stay free for later rules), or is refused when an anchor would go."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsim.ir import DType, Graph, Node, Op, T, TensorSpec, split_value
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule, apply_rules

X = TensorSpec((1, T, 8), DType.BFLOAT16)


def _kernel(name: str, nodes: list[Node]) -> KernelAttrs:
    return KernelAttrs(KernelKind.ELEMENTWISE, name, ElementwiseGeometry(width=8), "bf16", Rows.TOKENS,
                       tuple(n.name for n in nodes), name)


def _leftover(ctx: FuseContext, n: Node):
    return _kernel("left", [n]), "left"


def _rule(name: str, groups: list[list[str]], anchor: str | None = None) -> Rule:
    """A rule proposing fixed groups of node names (the first `anchor` member is its `info` anchor)."""
    def match(ctx: FuseContext):
        for names in groups:
            nodes = [ctx.by_name[n] for n in names]
            yield Candidate(nodes, {"anchor": ctx.by_name[anchor]} if anchor in names else {})
    return Rule(name, "test", match, lambda ctx, c: _kernel(name, c.nodes))


def _graph(edges: dict[str, tuple[str, ...]]) -> Graph:
    """Nodes in the given (topological) order, each reading the named nodes (or the input x)."""
    g = Graph("tiny", inputs={"x": X})
    for name, ins in edges.items():
        g.nodes.append(Node(name, Op.ADD if len(ins) > 1 else Op.CAST, ins or ("x",), (X,), scope=f"m.{name}"))
    g.outputs = [list(edges)[-1]]
    return g


def _kernel_of(out, node: str) -> str:
    return next(n.kernel.name for n in out.graph.nodes if node in n.kernel.covers)


def test_the_hunyuan_v4_shape_leaves_the_cast_to_the_leftovers():
    # HunYuan-V4's indexer (modeling_hy_v4.py HYV4Indexer.forward): cast = hidden_states.to(fp32) → weights_proj (a
    # GEMM kernel of its own) → indexer, which the indexer rule gathered with the cast (an ancestor in its scope).
    g = _graph({"cast": (), "proj": ("cast",), "q": (), "indexer": ("q", "proj")})
    gemm = _rule("gemm", [["proj"]])
    indexer = _rule("indexer", [["cast", "q", "indexer"]], anchor="indexer")
    out = apply_rules(g, [gemm, indexer], _leftover, "test")
    assert _kernel_of(out, "indexer") == "indexer" and _kernel_of(out, "q") == "indexer"
    assert _kernel_of(out, "cast") == "left"  # the path cast → proj → indexer left the group: cast dropped
    assert [n.kernel.name for n in out.graph.nodes] == ["left", "gemm", "indexer"]  # a DAG, in order
    assert any("left cast" in note for note in out.notes)


def test_a_group_that_would_lose_its_anchor_is_refused():
    # a → b → c with b another kernel; the rule anchors a (the source of the path back into {a, c}): refused.
    g = _graph({"a": (), "b": ("a",), "c": ("a", "b")})
    out = apply_rules(g, [_rule("b", [["b"]]), _rule("ac", [["a", "c"]], anchor="a")], _leftover, "test")
    assert [n.kernel.name for n in out.graph.nodes] == ["left", "b", "left"]
    assert any("ac: its group would close a cycle" in note for note in out.notes)


def test_two_groups_each_convex_alone_but_crossed():
    # a1 → b1 and b2 → a2: {b1, b2} is taken first; {a1, a2} alone has no outside path in the aten graph, but with
    # {b1, b2} contracted a1 → (b1 b2) → a2 is one: a1 (the source) is dropped.
    g = _graph({"a1": (), "b2": (), "b1": ("a1",), "a2": ("b2", "x")})
    out = apply_rules(g, [_rule("B", [["b1", "b2"]]), _rule("A", [["a1", "a2"]], anchor="a2")], _leftover, "test")
    assert _kernel_of(out, "a2") == "A" and _kernel_of(out, "a1") == "left"
    assert _kernel_of(out, "b1") == "B" == _kernel_of(out, "b2")


def test_a_convex_group_is_taken_whole():
    g = _graph({"a": (), "b": ("a",), "c": ("b",), "d": ("c",)})
    out = apply_rules(g, [_rule("d", [["d"]]), _rule("abc", [["a", "b", "c"]])], _leftover, "test")
    assert [n.kernel.name for n in out.graph.nodes] == ["abc", "d"]
    assert not out.notes


@pytest.mark.parametrize("span", [3, 40])
def test_a_path_back_through_a_far_reaching_kernel_is_found(span):
    # The kernel K = {k_lo, k_hi} straddles the group's last member: the path g1 → k_hi … k_lo → g2 goes through
    # K's member after g2 (the bound must follow K's span, not stop at g2's position).
    edges: dict[str, tuple[str, ...]] = {"g1": (), "k_lo": (), "g2": ("k_lo",)}
    prev = "g2"
    for i in range(span):  # filler after the group
        edges[f"f{i}"] = (prev,)
        prev = f"f{i}"
    edges["k_hi"] = ("g1",)
    edges["end"] = (prev, "k_hi")
    out = apply_rules(_graph(edges), [_rule("K", [["k_lo", "k_hi"]]), _rule("G", [["g1", "g2"]], anchor="g2")],
                      _leftover, "test")
    assert _kernel_of(out, "g2") == "G" and _kernel_of(out, "g1") == "left"


@st.composite
def _dags_and_groups(draw):
    n = draw(st.integers(3, 14))
    edges = {f"n{i}": tuple(sorted({f"n{j}" for j in draw(st.lists(st.integers(0, i - 1), max_size=3))} if i else ()))
             for i in range(n)}
    rules = draw(st.lists(st.lists(st.lists(st.integers(0, n - 1), min_size=1, max_size=4, unique=True),
                                   min_size=1, max_size=3), min_size=1, max_size=4))
    return edges, rules


@given(_dags_and_groups())
@settings(max_examples=300, deadline=None)
def test_random_groups_never_make_a_cycle(case):
    edges, rules = case
    rs = [_rule(f"r{k}", [[f"n{i}" for i in grp] for grp in groups]) for k, groups in enumerate(rules)]
    out = apply_rules(_graph(edges), rs, _leftover, "test")  # (a cycle raises GraphError)
    seen: set[str] = set()
    for node in out.graph.nodes:  # every kernel after the kernels it reads, every aten node in one kernel
        assert all(split_value(v)[0] in seen or v == "x" for v in node.inputs)
        seen.add(node.name)
    covered = [c for node in out.graph.nodes for c in node.kernel.covers]
    assert sorted(covered) == sorted(edges)
