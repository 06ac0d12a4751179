"""The cost tree: leaves are kernels (the only place numbers come from); everything above wires them.

    Sum        one stream, no overlap: children add
    Max        parallel ranks: the slowest rank sets the time
    Parallel   concurrent streams on one device: perfect overlap, the longest stream
    Scale{n}   n identical copies of the child (a layer region)
    Labeled    a name for a subtree

`build_tree(graph)` makes the tree of a fused (and optionally partitioned) folded graph;
`compile_tree(tree)` flattens it once; `CompiledTree.evaluate(steps, pricer, dtypes)` prices many
batches at once, vectorised per kernel key. A composed time carries the worst source of its
leaves; a missing leaf makes its ancestors' times NaN, never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import numpy as np

from graphsim.costing.interpolate import MISSING, SOURCES, KernelPricer
from graphsim.costing.kernel_map import Dtypes, NoKernelKey, key_for
from graphsim.costing.kernels import KernelKey
from graphsim.errors import GraphsimError
from graphsim.ir import Graph, Node, Op
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.workload import Step


@dataclass(frozen=True)
class Leaf:
    name: str
    attrs: KernelAttrs
    layer: int | None = None


@dataclass(frozen=True)
class Sum:
    children: tuple[Tree, ...]


@dataclass(frozen=True)
class Max:
    children: tuple[Tree, ...]


@dataclass(frozen=True)
class Parallel:
    children: tuple[Tree, ...]


@dataclass(frozen=True)
class Scale:
    n: int
    child: Tree


@dataclass(frozen=True)
class Labeled:
    label: str
    child: Tree


Tree = Union[Leaf, Sum, Max, Parallel, Scale, Labeled]


def build_tree(graph: Graph) -> Tree:
    """iteration → ranks (Max over identical TP ranks) → [before layers, layer regions ×n, after]."""
    if not graph.nodes or not all(n.op is Op.KERNEL for n in graph.nodes):
        raise GraphsimError("cost trees are built from fused graphs; run the fuse pass first "
                            "(e.g. graphsim passes MODEL -p 'fold,fuse{target=vllm}')")
    sched = graph.schedule

    def leaf(n: Node) -> Leaf:
        return Leaf(n.name, n.attrs, n.layer)

    first_layer = next((i for i, m in enumerate(graph.nodes) if m.layer is not None), len(graph.nodes))
    before = [leaf(n) for n in graph.nodes[:first_layer] if n.layer is None]
    after = [leaf(n) for n in graph.nodes[first_layer:] if n.layer is None]
    parts: list[Tree] = []
    if before:
        parts.append(Labeled("before layers", Sum(tuple(before))))
    if sched is not None:
        seen: list[str] = []
        for tag in sched.tags:
            if tag not in seen:
                seen.append(tag)
        for tag in seen:
            rep = sched.representative[tag]
            leaves = tuple(leaf(n) for n in graph.nodes if n.layer == rep)
            parts.append(Labeled(f"{tag} ×{sched.count(tag)}", Scale(sched.count(tag), Sum(leaves))))
    elif any(n.layer is not None for n in graph.nodes):
        raise GraphsimError("the graph has layers but no layer schedule; run the fold pass first")
    if after:
        parts.append(Labeled("after layers", Sum(tuple(after))))
    tp = int(graph.meta.get("tp", 1))
    rank = Labeled(f"rank 0 of {tp} (TP ranks are identical)" if tp > 1 else "rank 0", Sum(tuple(parts)))
    return Labeled(f"iteration {graph.name}", Max((rank,)))


# --- compiled form ---------------------------------------------------------------------------
_LEAF, _SUM, _MAX, _PAR, _SCALE, _LABEL = range(6)


@dataclass
class CompiledTree:
    """Post-order program over node ids; leaves priced in bulk per kernel key."""

    kinds: list[int]
    children: list[list[int]]
    scale: list[int]
    labels: list[str]
    leaf_of: list[int]  # node id → leaf index (-1 if not a leaf)
    leaves: list[Leaf]
    multiplicity: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per leaf: product of Scale above

    @property
    def root(self) -> int:
        return len(self.kinds) - 1

    def evaluate(self, steps: list[Step], pricer: KernelPricer, dtypes: Dtypes) -> Evaluation:
        leaf_t, leaf_s = price_leaves(self.leaves, steps, pricer, dtypes)
        n_b = len(steps)
        node_t = np.zeros((len(self.kinds), n_b))
        node_s = np.zeros((len(self.kinds), n_b), dtype=np.int8)
        for i, kind in enumerate(self.kinds):
            if kind == _LEAF:
                node_t[i] = leaf_t[self.leaf_of[i]]
                node_s[i] = leaf_s[self.leaf_of[i]]
                continue
            ch = self.children[i]
            ct, cs = node_t[ch], node_s[ch]
            node_s[i] = cs.max(axis=0)
            if kind == _SUM:
                node_t[i] = ct.sum(axis=0)
            elif kind in (_MAX, _PAR):
                node_t[i] = ct.max(axis=0)
            elif kind == _SCALE:
                node_t[i] = self.scale[i] * ct[0]
            else:
                node_t[i] = ct[0]
        return Evaluation(self, steps, leaf_t, leaf_s, node_t, node_s)


def compile_tree(tree: Tree) -> CompiledTree:
    c = CompiledTree([], [], [], [], [], [])
    mult: list[float] = []

    def visit(t: Tree, m: int) -> int:
        if isinstance(t, Leaf):
            kind, kids, scale, label = _LEAF, [], 1, t.name
            c.leaves.append(t)
            mult.append(m)
            leaf_idx = len(c.leaves) - 1
        else:
            leaf_idx = -1
            if isinstance(t, Scale):
                kids, kind, scale, label = [visit(t.child, m * t.n)], _SCALE, t.n, f"×{t.n}"
            elif isinstance(t, Labeled):
                kids, kind, scale, label = [visit(t.child, m)], _LABEL, 1, t.label
            else:
                kind = {Sum: _SUM, Max: _MAX, Parallel: _PAR}[type(t)]
                kids, scale, label = [visit(x, m) for x in t.children], 1, type(t).__name__.lower()
        c.kinds.append(kind)
        c.children.append(kids)
        c.scale.append(scale)
        c.labels.append(label)
        c.leaf_of.append(leaf_idx)
        return len(c.kinds) - 1

    visit(tree, 1)
    c.multiplicity = np.asarray(mult, dtype=np.float64)
    return c


@dataclass
class Evaluation:
    tree: CompiledTree
    steps: list[Step]
    leaf_time_us: np.ndarray  # (leaves, batches), NaN where missing; one instance of the kernel
    leaf_source: np.ndarray  # (leaves, batches) source codes (costing.interpolate.SOURCES)
    node_time_us: np.ndarray
    node_source: np.ndarray

    def total_us(self) -> np.ndarray:
        return self.node_time_us[self.tree.root]

    def total_source(self, b: int = 0):
        return SOURCES[int(self.node_source[self.tree.root, b])]


# --- bulk leaf pricing -----------------------------------------------------------------------
@dataclass
class _Arrays:
    tokens: np.ndarray  # per batch
    seqs: np.ndarray
    g_batch: np.ndarray  # per sequence group: which batch
    g_new: np.ndarray
    g_cached: np.ndarray
    g_count: np.ndarray


def _arrays(steps: list[Step]) -> _Arrays:
    gb, gn, gc, gk = [], [], [], []
    for b, s in enumerate(steps):
        for g in s.groups:
            gb.append(b)
            gn.append(g.new_tokens)
            gc.append(g.cached_tokens)
            gk.append(g.count)
    return _Arrays(np.asarray([s.tokens for s in steps], dtype=np.float64),
                   np.asarray([s.sequences for s in steps], dtype=np.float64),
                   np.asarray(gb, dtype=np.int64), np.asarray(gn, dtype=np.float64),
                   np.asarray(gc, dtype=np.float64), np.asarray(gk, dtype=np.float64))


def _leaf_requests(leaf_idx: int, a: KernelAttrs, arr: _Arrays, dtypes: Dtypes):
    """Yield (key, coords (N,d), batch index per row) for one leaf."""
    n_b = len(arr.tokens)
    if a.kind is KernelKind.ATTENTION:
        dec = arr.g_new == 1
        if dec.any():
            coords = np.stack([arr.g_count[dec], arr.g_cached[dec] + 1], axis=1)
            yield key_for(a, dtypes, prefill=False), coords, arr.g_batch[dec]
        pre = ~dec
        if pre.any():
            # one point per prefill sequence: repeat each group's row `count` times
            reps = arr.g_count[pre].astype(np.int64)
            coords = np.stack([np.ones(int(reps.sum())), np.repeat(arr.g_new[pre], reps),
                               np.repeat(arr.g_cached[pre] + arr.g_new[pre], reps)], axis=1)
            yield key_for(a, dtypes, prefill=True), coords, np.repeat(arr.g_batch[pre], reps)
        return
    key = key_for(a, dtypes)
    rows = arr.seqs if a.rows is Rows.SEQUENCES else np.ones(n_b) if a.rows is Rows.ONCE else arr.tokens
    if a.kind.is_collective:
        rows = np.maximum(1, rows * int(a.geo("bytes_per_row")))
    yield key, rows.reshape(-1, 1), np.arange(n_b)


def price_leaves(leaves: list[Leaf], steps: list[Step], pricer: KernelPricer, dtypes: Dtypes):
    """(times (leaves, batches) µs, NaN if missing; source codes) — one pricer call per key."""
    arr = _arrays(steps)
    n_l, n_b = len(leaves), len(steps)
    times = np.zeros((n_l, n_b))
    src = np.zeros((n_l, n_b), dtype=np.int8)
    requests: dict[KernelKey, list[tuple[int, np.ndarray, np.ndarray]]] = {}
    for i, leaf in enumerate(leaves):
        try:
            for key, coords, bidx in _leaf_requests(i, leaf.attrs, arr, dtypes):
                requests.setdefault(key, []).append((i, coords, bidx))
        except NoKernelKey:  # e.g. a bool mask op of the eager target: reported missing
            src[i] = MISSING
    for key, reqs in requests.items():
        coords = np.concatenate([c for _, c, _ in reqs])
        t, s = pricer.times(key, coords)
        pos = 0
        for i, c, bidx in reqs:
            k = len(c)
            np.add.at(times[i], bidx, t[pos:pos + k])  # NaN propagates: missing is never zero
            np.maximum.at(src[i], bidx, s[pos:pos + k])
            pos += k
    times[src == MISSING] = np.nan
    return times, src
