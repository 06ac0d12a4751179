"""The cost tree: leaves are kernels (the only place numbers come from); everything above wires them.

    Sum        one stream, no overlap: children add
    Max        parallel ranks: the slowest rank sets the time
    Parallel   concurrent streams on one device: perfect overlap, the longest stream
    Scale{n}   n identical copies of the child (a layer region)
    Labeled    a name for a subtree

`build_tree(graph)` makes the tree of a fused (and optionally partitioned) folded graph;
`compile_tree(tree)` flattens it once into a post-order program of `NodeKind`s;
`CompiledTree.evaluate(steps, pricer, dtypes)` prices many batches at once, vectorised per kernel
key. Each leaf is converted to (key, coordinates) rows once per evaluation
(`kernel_map.kernel_rows`); its time and its work (`Evaluation.leaf_work`) are read from the same
rows. A composed time carries the worst source of its leaves; a missing leaf makes its ancestors'
times NaN, never zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from graphsim.costing.collectives import CollectiveContext
from graphsim.costing.composite import HasRows, MlaModuleBlock, composite_rows, mla_block
from graphsim.costing.interpolate import MISSING, SOURCES, KernelPricer
from graphsim.costing.kernel_map import Dtypes, KernelRows, StepArrays, kernel_rows
from graphsim.costing.kernels import KernelKey
from graphsim.costing.roofline import kernel_work
from graphsim.errors import GraphsimError
from graphsim.ir import Graph, Node, Op
from graphsim.ir.kernel import KernelAttrs
from graphsim.workload import Step


@dataclass(frozen=True)
class Leaf:
    name: str
    attrs: KernelAttrs
    layer: int | None = None
    block: MlaModuleBlock | None = None  # a composite leaf: the block its measured module rows replace


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


Tree = Leaf | Sum | Max | Parallel | Scale | Labeled


def build_tree(graph: Graph, dtypes: Dtypes | None = None, has_rows: HasRows | None = None) -> Tree:
    """iteration → ranks (Max over identical TP ranks) → [before layers, layer regions ×n, after]."""
    if not graph.nodes or not all(n.op is Op.KERNEL for n in graph.nodes):
        raise GraphsimError("cost trees are built from fused graphs; run the fuse pass first "
                            "(e.g. graphsim passes MODEL -p 'fold,fuse{target=vllm}')")
    sched = graph.schedule

    def leaf(n: Node) -> Leaf:
        return Leaf(n.name, n.kernel, n.layer)

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
            leaves = _layer_leaves([n for n in graph.nodes if n.layer == rep], leaf, dtypes, has_rows)
            parts.append(Labeled(f"{tag} ×{sched.count(tag)}", Scale(sched.count(tag), Sum(leaves))))
    elif any(n.layer is not None for n in graph.nodes):
        raise GraphsimError("the graph has layers but no layer schedule; run the fold pass first")
    if after:
        parts.append(Labeled("after layers", Sum(tuple(after))))
    tp = graph.meta.tp
    rank = Labeled(f"rank 0 of {tp} (TP ranks are identical)" if tp > 1 else "rank 0", Sum(tuple(parts)))
    return Labeled(f"iteration {graph.name}", Max((rank,)))


def _layer_leaves(nodes: list[Node], leaf, dtypes: Dtypes | None, has_rows: HasRows | None) -> tuple[Leaf, ...]:
    """A layer's leaves; with `has_rows`, an MLA block the profile has module rows for becomes one composite
    leaf in place of its kernels (`costing.composite`)."""
    block = mla_block(nodes, dtypes or Dtypes(), has_rows) if has_rows is not None else None
    if block is None or not block.used:
        return tuple(leaf(n) for n in nodes)
    name = next(n.name for n in nodes if n.kernel is block.attention)
    out: list[Leaf] = []
    for n in nodes:
        if n.name == block.part_names[0]:
            out.append(Leaf(name, block.attrs(), n.layer, block))
        elif n.name not in block.part_names:
            out.append(leaf(n))
    return tuple(out)


# --- compiled form ---------------------------------------------------------------------------
class NodeKind(IntEnum):
    """What a node of a compiled tree does with its children (`CompiledTree.kinds`)."""

    LEAF = 0
    SUM = 1
    MAX = 2
    PARALLEL = 3
    SCALE = 4
    LABELED = 5


@dataclass
class CompiledTree:
    """Post-order program over node ids; leaves priced in bulk per kernel key."""

    kinds: list[NodeKind]
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
        rows = leaf_rows(self.leaves, steps, dtypes, CollectiveContext.of(pricer))
        leaf_t, leaf_s = price_rows(rows, len(steps), pricer)
        n_b = len(steps)
        node_t = np.zeros((len(self.kinds), n_b))
        node_s = np.zeros((len(self.kinds), n_b), dtype=np.int8)
        for i, kind in enumerate(self.kinds):
            if kind is NodeKind.LEAF:
                node_t[i] = leaf_t[self.leaf_of[i]]
                node_s[i] = leaf_s[self.leaf_of[i]]
                continue
            ch = self.children[i]
            ct, cs = node_t[ch], node_s[ch]
            node_s[i] = cs.max(axis=0)
            if kind is NodeKind.SUM:
                node_t[i] = ct.sum(axis=0)
            elif kind in (NodeKind.MAX, NodeKind.PARALLEL):
                node_t[i] = ct.max(axis=0)
            elif kind is NodeKind.SCALE:
                node_t[i] = self.scale[i] * ct[0]
            else:
                node_t[i] = ct[0]
        return Evaluation(self, steps, leaf_t, leaf_s, node_t, node_s, rows)


def compile_tree(tree: Tree) -> CompiledTree:
    c = CompiledTree([], [], [], [], [], [])
    mult: list[float] = []

    def visit(t: Tree, m: int) -> int:
        kind: NodeKind
        if isinstance(t, Leaf):
            kind, kids, scale, label = NodeKind.LEAF, [], 1, t.name
            c.leaves.append(t)
            mult.append(m)
            leaf_idx = len(c.leaves) - 1
        else:
            leaf_idx = -1
            if isinstance(t, Scale):
                kids, kind, scale, label = [visit(t.child, m * t.n)], NodeKind.SCALE, t.n, f"×{t.n}"
            elif isinstance(t, Labeled):
                kids, kind, scale, label = [visit(t.child, m)], NodeKind.LABELED, 1, t.label
            else:
                kind = {Sum: NodeKind.SUM, Max: NodeKind.MAX, Parallel: NodeKind.PARALLEL}[type(t)]
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
    rows: list[KernelRows] = field(default_factory=list)  # per leaf: the (key, coordinates) rows it was priced at
    _work: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def total_us(self) -> np.ndarray:
        return self.node_time_us[self.tree.root]

    def total_source(self, b: int = 0):
        return SOURCES[int(self.node_source[self.tree.root, b])]

    def leaf_work(self) -> tuple[np.ndarray, np.ndarray]:
        """FLOPs and DRAM bytes of one instance of each leaf per batch, (leaves, batches) each, from the
        rows its time was priced at (`costing.roofline.kernel_work`; zero for collectives and for
        kernels without a key). Computed once per evaluation."""
        if self._work is not None:
            return self._work
        n_b = len(self.steps)
        flops = np.zeros((len(self.rows), n_b))
        nbytes = np.zeros((len(self.rows), n_b))
        for i, kr in enumerate(self.rows):
            f, b = [], []
            for part in kr.parts:
                w = kernel_work(part.key, part.coords)
                f.append(np.zeros(len(part.coords)) if w is None else w.flops)
                b.append(np.zeros(len(part.coords)) if w is None else w.bytes)
            flops[i] = kr.sum_by_step(f, n_b)
            nbytes[i] = kr.sum_by_step(b, n_b)
        self._work = (flops, nbytes)
        return self._work


# --- bulk leaf pricing -----------------------------------------------------------------------
def leaf_rows(leaves: list[Leaf], steps: list[Step], dtypes: Dtypes,
              coll: CollectiveContext | None = None) -> list[KernelRows]:
    """Every leaf converted once to its (key, coordinates) rows for `steps` (collectives keyed by `coll`, see
    `costing.collectives`)."""
    arr = StepArrays.of(steps)
    return [composite_rows(leaf.block, arr, dtypes) if leaf.block is not None else kernel_rows(leaf.attrs, arr, dtypes, coll)
            for leaf in leaves]


def price_rows(rows: list[KernelRows], n_steps: int, pricer: KernelPricer) -> tuple[np.ndarray, np.ndarray]:
    """(times (leaves, batches) µs, NaN if missing; source codes) — one pricer call per key."""
    n_l = len(rows)
    times = np.zeros((n_l, n_steps))
    src = np.zeros((n_l, n_steps), dtype=np.int8)
    requests: dict[KernelKey, list[tuple[int, np.ndarray, np.ndarray, float]]] = {}
    for i, kr in enumerate(rows):
        if kr.missing:  # no table holds it (e.g. a bool mask op of the eager target): reported missing
            src[i] = MISSING
        for part in kr.parts:
            requests.setdefault(part.key, []).append((i, part.coords, part.step, part.weight))
    for key, reqs in requests.items():
        coords = np.concatenate([c for _, c, _, _ in reqs])
        t, s = pricer.times(key, coords)
        pos = 0
        for i, c, bidx, weight in reqs:
            k = len(c)
            np.add.at(times[i], bidx, t[pos:pos + k] * weight)  # NaN propagates: missing is never zero
            np.maximum.at(src[i], bidx, s[pos:pos + k])
            pos += k
    times[src == MISSING] = np.nan
    return times, src


def price_leaves(leaves: list[Leaf], steps: list[Step], pricer: KernelPricer, dtypes: Dtypes):
    """`price_rows` of `leaf_rows`: (times (leaves, batches) µs, NaN if missing; source codes)."""
    return price_rows(leaf_rows(leaves, steps, dtypes, CollectiveContext.of(pricer)), len(steps), pricer)
