"""Fusion machinery: rules claim aten-level nodes into kernels; the builder rewrites the graph.

A rule has a name, the engine source it follows, `match(ctx)` (candidate groups), `check`
(a reason when a candidate does not apply, else None) and `build` (the kernel's attributes).
Rules run in order; a node belongs to at most one kernel. Nodes no rule claims are handled by
the target's leftover policy: view-like and creation ops are absorbed (no launch of their own),
everything else becomes a memory-bound elementwise placeholder, and the pass reports which.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from graphsim.errors import GraphError
from graphsim.ir import Graph, Node, Op, TensorSpec, split_value, unique_name, value_name
from graphsim.ir.kernel import KernelAttrs
from graphsim.passes.fuse.acyclic import KernelDag


@dataclass
class Candidate:
    """A set of aten nodes a rule proposes to replace by one kernel (or to absorb)."""

    nodes: list[Node]
    info: dict = field(default_factory=dict)  # rule-specific facts found while matching


@dataclass(frozen=True)
class Rule:
    name: str
    source: str  # engine source the rule follows (file:function)
    match: Callable[[FuseContext], Iterable[Candidate]]
    build: Callable[[FuseContext, Candidate], KernelAttrs | None]  # None: absorb (no launch)
    check: Callable[[FuseContext, Candidate], str | None] = lambda ctx, c: None


class FuseContext:
    """Read-only views of the aten graph that rules query, plus what has been claimed so far."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.by_name = {n.name: n for n in graph.nodes}
        self.pos = {n.name: i for i, n in enumerate(graph.nodes)}
        self.users: dict[str, list[Node]] = {}
        for n in graph.nodes:
            for v in n.inputs:
                self.users.setdefault(v, []).append(self.by_name[n.name])
        self.claimed: dict[str, int] = {}  # node name → group index

    def producer(self, value: str) -> Node | None:
        return self.by_name.get(split_value(value)[0])

    def is_free(self, n: Node) -> bool:
        return n.name not in self.claimed

    def nodes_in_scope(self, scope: str, exact: bool = False) -> list[Node]:
        if exact:
            return [n for n in self.graph.nodes if n.scope == scope]
        return [n for n in self.graph.nodes if n.scope == scope or n.scope.startswith(scope + ".")]

    def spec(self, value: str) -> TensorSpec:
        return self.graph.spec_of(value)

    def outputs_of(self, nodes: list[Node]) -> list[str]:
        return [value_name(n.name, i) for n in nodes for i in range(len(n.outputs))]

    def external_inputs(self, nodes: list[Node]) -> list[str]:
        inside = {n.name for n in nodes}
        seen, out = set(), []
        for n in nodes:
            for v in n.inputs:
                if split_value(v)[0] not in inside and v not in seen:
                    seen.add(v)
                    out.append(v)
        return out

    def index_only(self, n: Node) -> bool:
        """True if the node computes only from tensor-creation ops (positions, iota): no data
        from graph inputs or parameters reaches it."""
        memo = self.__dict__.setdefault("_index_only", {})
        if n.name in memo:
            return memo[n.name]
        memo[n.name] = False  # guards cycles
        result = True
        for v in n.inputs:
            p = self.producer(v)
            if p is None or not self.index_only(p):
                result = False
                break
        memo[n.name] = result
        return result

    def param_inputs(self, nodes: list[Node]) -> list[str]:
        return [v for v in self.external_inputs(nodes) if v in self.graph.params]


@dataclass
class Group:
    nodes: list[Node]
    attrs: KernelAttrs | None  # None: absorbed into its input (no kernel)
    rule: str


@dataclass
class FuseOutcome:
    graph: Graph
    stats: dict[str, int]
    notes: list[str]


def apply_rules(graph: Graph, rules: list[Rule], leftover: Callable[[FuseContext, Node], tuple[KernelAttrs | None, str]],
                target: str) -> FuseOutcome:
    ctx = FuseContext(graph)
    groups: list[Group] = []
    stats: dict[str, int] = {}
    rejected: dict[str, int] = {}
    dag = KernelDag(graph.nodes, ctx.users)  # the guard against groups that close a cycle (acyclic.py)
    trims: list[str] = []
    for rule in rules:
        for cand in rule.match(ctx):
            nodes = [n for n in cand.nodes if ctx.is_free(n)]
            if not nodes or len(nodes) != len(cand.nodes):
                continue
            reason = rule.check(ctx, cand)
            if reason is not None:
                rejected[f"{rule.name}: {reason}"] = rejected.get(f"{rule.name}: {reason}", 0) + 1
                continue
            attrs = rule.build(ctx, cand)
            if attrs is not None and len(nodes) > 1:
                cut = _acyclic_part(ctx, dag, rule, cand)
                if cut is None:
                    why = f"{rule.name}: its group would close a cycle between kernels"
                    rejected[why] = rejected.get(why, 0) + 1
                    continue
                if cut is not cand:
                    left = {n.name for n in nodes} - {n.name for n in cut.nodes}
                    for n in sorted(left, key=ctx.pos.__getitem__):
                        trims.append(f"rule {rule.name} left {n} ({ctx.by_name[n].op.value} in "
                                     f"{ctx.by_name[n].scope}) to other rules: in its group it closed a cycle")
                    cand, nodes = cut, cut.nodes
                    attrs = rule.build(ctx, cand)
            idx = len(groups)
            groups.append(Group(sorted(nodes, key=lambda n: ctx.pos[n.name]), attrs, rule.name))
            for n in nodes:
                ctx.claimed[n.name] = idx
            if attrs is not None:
                dag.add(idx, [n.name for n in nodes])
            stats[rule.name] = stats.get(rule.name, 0) + 1
    left_stats: dict[str, int] = {}
    for n in graph.nodes:
        if n.name in ctx.claimed:
            continue
        attrs, label = leftover(ctx, n)
        idx = len(groups)
        groups.append(Group([n], attrs, label))
        ctx.claimed[n.name] = idx
        left_stats[label] = left_stats.get(label, 0) + 1
    stats.update(left_stats)
    notes = [f"rule {k} did not apply ×{v}" for k, v in sorted(rejected.items())] + trims
    return FuseOutcome(_build_graph(graph, ctx, groups, target), stats, notes)


def _acyclic_part(ctx: FuseContext, dag: KernelDag, rule: Rule, cand: Candidate) -> Candidate | None:
    """`cand` itself when contracting it closes no cycle with the kernels claimed so far; else the part of it that
    closes none, checked again by the rule (None: nothing acceptable is left, or an anchor of `info` would go)."""
    anchors = {v.name for v in cand.info.values() if isinstance(v, Node)}
    part = dag.convex_part([n.name for n in cand.nodes], anchors)
    if part is None:
        return None
    kept, dropped = part
    if not dropped:
        return cand
    trimmed = Candidate([n for n in cand.nodes if n.name in set(kept)], cand.info)
    return trimmed if rule.check(ctx, trimmed) is None else None


def _build_graph(graph: Graph, ctx: FuseContext, groups: list[Group], target: str) -> Graph:
    group_of = ctx.claimed
    # resolve absorbed groups: each of their values forwards to the first external input
    forward: dict[str, str | None] = {}

    def resolve(v: str) -> str | None:
        seen = set()
        while v in forward:
            if v in seen:
                return None
            seen.add(v)
            nxt = forward[v]
            if nxt is None:
                return None
            v = nxt
        return v

    for g in groups:
        if g.attrs is None:
            ext = ctx.external_inputs(g.nodes)
            tensor_in = next((v for v in ext if v not in graph.params), ext[0] if ext else None)
            for v in ctx.outputs_of(g.nodes):
                forward[v] = tensor_in
    # which member values each kernel must expose (read by other groups or graph outputs)
    kernels = [i for i, g in enumerate(groups) if g.attrs is not None]
    needed: dict[int, list[str]] = {i: [] for i in kernels}
    reads: dict[int, list[str]] = {i: [] for i in kernels}
    for i in kernels:
        for v in ctx.external_inputs(groups[i].nodes):
            r = resolve(v)
            if r is not None and r not in reads[i]:
                reads[i].append(r)
    for i in kernels:
        for r in reads[i]:
            src = split_value(r)[0]
            if src in group_of:
                j = group_of[src]
                if r not in needed[j]:
                    needed[j].append(r)
    outs = [resolve(o) for o in graph.outputs]
    for r in outs:
        if r is not None and split_value(r)[0] in group_of:
            j = group_of[split_value(r)[0]]
            if r not in needed[j]:
                needed[j].append(r)
    # order kernels topologically, original position as tie-break
    first = {i: min(ctx.pos[n.name] for n in groups[i].nodes) for i in kernels}
    succ: dict[int, dict[int, None]] = {i: {} for i in kernels}  # insertion-ordered edge sets
    for i in kernels:
        for r in reads[i]:
            src = split_value(r)[0]
            if src in group_of and group_of[src] != i:
                succ[group_of[src]][i] = None
    order = _lexicographic_order(kernels, succ, first)
    if len(order) < len(kernels):
        import networkx as nx  # only to name the cycle in the error

        dag = nx.DiGraph()
        dag.add_edges_from((a, b) for a, bs in succ.items() for b in bs)
        cycle = nx.find_cycle(dag)
        where = " → ".join(f"{groups[a].rule}({groups[a].nodes[0].scope})" for a, _ in cycle)
        raise GraphError(f"fuse{{target={target}}} built a cycle between kernels: {where}; a rule grouped "
                         "nodes wrongly") from None
    rename: dict[str, str] = {}
    names: set[str] = set()
    last_suffix: dict[str, int] = {}
    new_nodes: list[Node] = []
    for i in order:
        g = groups[i]
        assert g.attrs is not None  # `kernels` holds the groups with attrs
        base = _kernel_name(g, names, last_suffix)
        exposed = needed[i] or [ctx.outputs_of(g.nodes)[-1]]
        for k, v in enumerate(exposed):
            rename[v] = value_name(base, k)
        lead = g.nodes[-1]
        new_nodes.append(Node(
            name=base, op=Op.KERNEL,
            inputs=tuple(rename.get(r, r) for r in reads[i]),
            outputs=tuple(ctx.spec(v) for v in exposed),
            attrs=g.attrs, scope=_common_scope([n.scope for n in g.nodes]), module_type=lead.module_type,
            layer=g.nodes[-1].layer, target=g.attrs.name,
            provenance=f"fuse.{target}:{g.rule}",
        ))
    out = graph.copy(new_nodes)
    out.outputs = [rename[r] for r in outs if r is not None and r in rename]
    used = {v for n in new_nodes for v in n.inputs}
    out.params = {k: v for k, v in graph.params.items() if k in used}
    out.inputs = {k: v for k, v in graph.inputs.items() if k in used}
    return out


def _common_scope(scopes: list[str]) -> str:
    parts = [s.split(".") for s in scopes if s]
    if not parts:
        return ""
    common = []
    for items in zip(*parts, strict=False):  # up to the shortest scope
        if len(set(items)) != 1:
            break
        common.append(items[0])
    return ".".join(common)


def _kernel_name(g: Group, used: set[str], last: dict[str, int]) -> str:
    attrs = g.attrs
    assert attrs is not None, "only groups that make a kernel are named"
    layer = g.nodes[-1].layer
    return unique_name((f"L{layer}." if layer is not None else "") + attrs.name, used, last)


def _lexicographic_order(nodes: list[int], succ: dict[int, dict[int, None]], key: dict[int, int]) -> list[int]:
    """Kahn's topological sort taking, of the nodes whose predecessors are all placed, the one with the smallest
    (key, position in `nodes`) — the order networkx.lexicographical_topological_sort gives, without importing
    networkx (~19 MiB a search's fuse would otherwise load). Shorter than `nodes` when they contain a cycle."""
    pos = {n: k for k, n in enumerate(nodes)}
    indegree = dict.fromkeys(nodes, 0)
    for n in nodes:
        for m in succ[n]:
            indegree[m] += 1
    ready = [(key[n], pos[n], n) for n in nodes if indegree[n] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, _, n = heapq.heappop(ready)
        order.append(n)
        for m in succ[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                heapq.heappush(ready, (key[m], pos[m], m))
    return order
