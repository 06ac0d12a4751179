"""The cost tree: leaves are kernels (the only place numbers come from); everything above wires them.

    Sum        one stream, no overlap: children add
    Max        parallel ranks: the slowest rank sets the time
    Parallel   concurrent streams on one device: the longest stream, never below the streams' shared
               roofline (their compute terms and their memory terms each add, `roofline_parts_us`);
               with `max_tokens`, overlapped only on steps of at most that many tokens and summed above
               (vLLM's shared-expert stream, `costing.streams`)
    Scale{n}   n identical copies of the child (a layer region)
    Labeled    a name for a subtree

`build_tree(graph)` makes the tree of a fused (and optionally partitioned) folded graph;
`compile_tree(tree)` flattens it once into a post-order program of `NodeKind`s;
`CompiledTree.evaluate(steps, pricer, dtypes)` prices many batches at once, vectorised per kernel
key. Each leaf is converted to (key, coordinates) rows once per evaluation
(`kernel_map.kernel_rows`); its time and its work (`Evaluation.leaf_work`) are read from the same
rows. A composed time carries the worst source of its leaves (roofline where an overlap's shared floor
binds); a missing leaf makes its ancestors' times NaN, never zero. A leaf with `max_tokens` is launched
only on steps of at most that many tokens (zero time and work above).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

import numpy as np

from graphsim.costing.collectives import CollectiveContext
from graphsim.costing.composite import HasRows, MlaModuleBlock, composite_rows, context_attention_rate, mla_block
from graphsim.costing.interpolate import MISSING, ROOFLINE, SOURCES, KernelPricer
from graphsim.costing.kernel_map import Dtypes, KernelRows, KeyRows, StepArrays, kernel_rows
from graphsim.costing.kernels import KernelKey
from graphsim.costing.roofline import kernel_work, roofline_parts_us
from graphsim.costing.routing_in_rows import RowLabels, routers_in_expert_rows
from graphsim.costing.streams import StreamSettings, shared_expert_overlaps
from graphsim.errors import GraphsimError
from graphsim.ir import Graph, Node, Op
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.workload import Step


@dataclass(frozen=True)
class ChunkView:
    """How a leaf sees a step under prefill context parallelism (`costing.context_parallel`): every prefill group's
    new tokens split in `parts` chunks of c = ceil(new / parts), the leaf pricing chunk `index` after the group's
    cached tokens plus index·c (the KV the ring has handed it so far), or with `marginal` the difference from chunk
    index − 1 (one full c × c block of attention). `groups`: which groups the leaf sees — "prefill" (new > 1),
    "decode" (new = 1) or "all" (decode groups unsplit); a step with none of them does not launch the leaf."""

    parts: int
    index: int = 0
    marginal: bool = False
    groups: str = "all"

    def arrays(self, arr: StepArrays) -> list[tuple[StepArrays, float]]:
        """The step arrays this view prices, each with the weight its time counts for."""
        keep = np.ones(len(arr.g_new), dtype=bool)
        if self.groups == "prefill":
            keep = arr.g_new > 1
        elif self.groups == "decode":
            keep = arr.g_new == 1
        new, cached, count, step = arr.g_new[keep], arr.g_cached[keep], arr.g_count[keep], arr.g_step[keep]
        pre = new > 1
        c = np.where(pre, np.ceil(new / self.parts), new)

        def at(i: int) -> StepArrays:
            n = arr.n_steps
            return StepArrays(np.bincount(step, weights=c * count, minlength=n).astype(np.float64),
                              np.bincount(step, weights=count, minlength=n).astype(np.float64), step, c,
                              cached + np.where(pre, i * c, 0.0), count)

        out = [(at(self.index), 1.0)]
        if self.marginal and self.index > 0:
            out.append((at(self.index - 1), -1.0))
        return out

    def absent(self, arr: StepArrays) -> np.ndarray:
        """Per step: True where none of the leaf's groups is in the step (the leaf is not launched)."""
        (a, _), *_ = self.arrays(arr)
        return a.seqs == 0


@dataclass(frozen=True)
class Leaf:
    name: str
    attrs: KernelAttrs
    layer: int | None = None
    block: MlaModuleBlock | None = None  # a composite leaf: the block its measured module rows replace
    max_tokens: int | None = None  # launched only on steps of at most this many tokens (None: always)
    kv_shards: int = 1  # attention over 1/kv_shards of each sequence's cached tokens (decode context parallel)
    view: ChunkView | None = None  # the step as a prefill-context-parallel rank sees it (None: the whole step)


@dataclass(frozen=True)
class Sum:
    children: tuple[Tree, ...]


@dataclass(frozen=True)
class Max:
    children: tuple[Tree, ...]


@dataclass(frozen=True)
class Parallel:
    children: tuple[Tree, ...]
    max_tokens: int | None = None  # overlapped on steps of at most this many tokens, summed above (None: always)
    label: str = ""


@dataclass(frozen=True)
class Scale:
    n: int
    child: Tree


@dataclass(frozen=True)
class Labeled:
    label: str
    child: Tree


Tree = Leaf | Sum | Max | Parallel | Scale | Labeled


def build_tree(graph: Graph, dtypes: Dtypes | None = None, has_rows: HasRows | None = None,
               streams: StreamSettings | None = None, row_labels: RowLabels | None = None) -> Tree:
    """iteration → ranks (Max over identical TP ranks) → [before layers, layer regions ×n, after].

    streams: vLLM's stream settings; with them (and `shared_experts_overlap`), each MoE block's shared
    experts overlap its routed experts (`costing.streams`). None: one stream, every kernel summed.
    row_labels: the profile rows' `kernel` labels of a key; with them, a MoE router whose experts' rows were
    timed from the router logits is no leaf (`costing.routing_in_rows`)."""
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
            nodes = [n for n in graph.nodes if n.layer == rep]
            leaves = _overlapped(nodes, _layer_leaves(nodes, leaf, dtypes, has_rows, row_labels), streams)
            parts.append(Labeled(f"{tag} ×{sched.count(tag)}", Scale(sched.count(tag), Sum(leaves))))
    elif any(n.layer is not None for n in graph.nodes):
        raise GraphsimError("the graph has layers but no layer schedule; run the fold pass first")
    if after:
        parts.append(Labeled("after layers", Sum(tuple(after))))
    tp = graph.meta.tp
    rank = Labeled(f"rank 0 of {tp} (TP ranks are identical)" if tp > 1 else "rank 0", Sum(tuple(parts)))
    return Labeled(f"iteration {graph.name}", Max((rank,)))


def _layer_leaves(nodes: list[Node], leaf, dtypes: Dtypes | None, has_rows: HasRows | None,
                  row_labels: RowLabels | None = None) -> tuple[Leaf, ...]:
    """A layer's leaves; with `has_rows`, an MLA block the profile has module rows for becomes one composite
    leaf in place of its kernels (`costing.composite`); with `row_labels`, a router whose experts' rows were
    timed from the router logits is no leaf (its top-k is in those rows: `costing.routing_in_rows`)."""
    if row_labels is not None:
        covered = routers_in_expert_rows(nodes, dtypes or Dtypes(), row_labels)
        nodes = [n for n in nodes if n.name not in covered]
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


def _overlapped(nodes: list[Node], leaves: tuple[Leaf, ...], streams: StreamSettings | None) -> tuple[Tree, ...]:
    """A layer's leaves with each MoE block's shared and routed experts as two streams (`costing.streams`):
    [..., clone (≤ threshold tokens), Parallel(routed, shared, max_tokens=threshold), ...]."""
    if streams is None or not streams.shared_experts_overlap:
        return leaves
    out: list[Tree] = list(leaves)
    routers = {n.name for n in nodes if n.kernel.kind is KernelKind.MOE_ROUTER}
    for ov in shared_expert_overlaps(nodes):
        names = [t.name if isinstance(t, Leaf) else "" for t in out]
        # a router priced inside its experts' rows (costing.routing_in_rows) is no leaf of either stream
        ov = replace(ov, routed=tuple(n for n in ov.routed if n in names or n not in routers))
        if not all(n in names for n in ov.routed + ov.shared):
            continue  # a kernel of the block was replaced (a composite leaf): keep it summed
        first = min(names.index(n) for n in ov.routed + ov.shared)
        pick = {n: out[names.index(n)] for n in ov.routed + ov.shared}
        thr = streams.shared_experts_token_threshold
        layer = next((t.layer for t in pick.values() if isinstance(t, Leaf)), None)
        block = [Leaf(f"{ov.shared[0]}.input_clone", ov.clone, layer, max_tokens=thr),
                 Parallel((Sum(tuple(pick[n] for n in ov.routed)), Sum(tuple(pick[n] for n in ov.shared))),
                          max_tokens=thr, label=f"routed ‖ shared experts (aux stream at ≤ {thr} tokens)")]
        rest = [t for t in out if not (isinstance(t, Leaf) and t.name in pick)]
        out = rest[:first] + block + rest[first:]
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
    node_multiplicity: list[int] = field(default_factory=list)  # per node: product of Scale above it
    max_tokens: list[float] = field(default_factory=list)  # per node: a Parallel's or a Leaf's limit (inf: none)
    under: dict[int, list[int]] = field(default_factory=dict)  # Parallel node → leaf indices below it

    @property
    def root(self) -> int:
        return len(self.kinds) - 1

    @property
    def overlaps(self) -> list[int]:
        """Node ids of the Parallel nodes with more than one stream."""
        return sorted(n for n in self.under if len(self.children[n]) > 1)

    def not_launched(self, steps: list[Step]) -> np.ndarray:
        """(leaves, steps): True where a leaf is not launched — over its token limit, or none of the groups its
        view sees is in the step."""
        tokens = np.asarray([s.tokens for s in steps], dtype=np.float64)
        off = tokens[None, :] > self.leaf_limit()[:, None]
        viewed = [i for i, lf in enumerate(self.leaves) if lf.view is not None]
        if viewed:
            arr = StepArrays.of(steps)
            for i in viewed:
                view = self.leaves[i].view
                assert view is not None
                off[i] |= view.absent(arr)
        return off

    def leaf_limit(self) -> np.ndarray:
        """Per leaf: the most tokens a step may have for it to be launched (inf: always)."""
        out = np.full(len(self.leaves), np.inf)
        for i, li in enumerate(self.leaf_of):
            if li >= 0:
                out[li] = self.max_tokens[i]
        return out

    def evaluate(self, steps: list[Step], pricer: KernelPricer, dtypes: Dtypes) -> Evaluation:
        rows = leaf_rows(self.leaves, steps, dtypes, CollectiveContext.of(pricer))
        leaf_t, leaf_s = price_rows(rows, len(steps), pricer)
        n_b = len(steps)
        off = self.not_launched(steps)
        leaf_t[off] = 0.0
        tokens = np.asarray([s.tokens for s in steps], dtype=np.float64)
        floors = self._overlap_floors(rows, off, n_b, pricer)
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
            elif kind is NodeKind.MAX:
                node_t[i] = ct.max(axis=0)
            elif kind is NodeKind.PARALLEL:
                t = ct.max(axis=0)
                floor = floors.get(i)
                if floor is not None:  # streams share the device: never below their joint roofline
                    binds = floor > t
                    t = np.where(binds, floor, t)
                    node_s[i] = np.where(binds, np.maximum(node_s[i], ROOFLINE), node_s[i])
                if np.isfinite(self.max_tokens[i]) and len(ch) > 1:  # above the limit: one after the other
                    t = np.where(tokens > self.max_tokens[i], ct.sum(axis=0), t)
                node_t[i] = t
            elif kind is NodeKind.SCALE:
                node_t[i] = self.scale[i] * ct[0]
            else:
                node_t[i] = ct[0]
        return Evaluation(self, steps, leaf_t, leaf_s, node_t, node_s, rows)

    def _overlap_floors(self, rows: list[KernelRows], off: np.ndarray, n_b: int,
                        pricer: KernelPricer) -> dict[int, np.ndarray]:
        """Per overlapping Parallel node: max(Σ compute µs, Σ memory µs) of the work below it (per node instance),
        the time the device needs for all its streams' work together (`roofline_parts_us`). Work adds through
        Sum, Scale and nested Parallel nodes; below a Max (alternatives: the slowest rank) it is the child whose
        own floor is largest, step by step, so the bound stays one."""
        hw = pricer.hardware
        if hw is None or not self.under:
            return {}
        leaf_parts: dict[int, tuple[np.ndarray, np.ndarray]] = {}

        def of_leaf(li: int) -> tuple[np.ndarray, np.ndarray]:
            if li not in leaf_parts:
                comp, mem = np.zeros(n_b), np.zeros(n_b)
                for part in rows[li].parts:
                    rp = roofline_parts_us(hw, part.key, part.coords)
                    if rp is None:
                        continue  # no work or no peak: adds nothing to the floor (a lower bound stays one)
                    on = ~off[li, part.step]
                    np.add.at(comp, part.step, rp[0] * part.weight * on)
                    np.add.at(mem, part.step, rp[1] * part.weight * on)
                leaf_parts[li] = (comp, mem)
            return leaf_parts[li]

        def parts(node: int) -> tuple[np.ndarray, np.ndarray]:
            kind = self.kinds[node]
            if kind is NodeKind.LEAF:
                return of_leaf(self.leaf_of[node])
            kids = [parts(k) for k in self.children[node]]
            if kind is NodeKind.MAX:
                comp, mem = kids[0]
                for c, m in kids[1:]:
                    take = np.maximum(c, m) > np.maximum(comp, mem)
                    comp, mem = np.where(take, c, comp), np.where(take, m, mem)
                return comp, mem
            comp = sum((c for c, _ in kids), np.zeros(n_b))
            mem = sum((m for _, m in kids), np.zeros(n_b))
            return comp * self.scale[node], mem * self.scale[node]

        return {node: np.maximum(*parts(node)) for node in self.under}


def compile_tree(tree: Tree) -> CompiledTree:
    c = CompiledTree([], [], [], [], [], [])
    mult: list[float] = []

    def visit(t: Tree, m: int) -> int:
        kind: NodeKind
        limit: int | None = None
        first_leaf = len(c.leaves)
        if isinstance(t, Leaf):
            kind, kids, scale, label = NodeKind.LEAF, [], 1, t.name
            c.leaves.append(t)
            mult.append(m)
            leaf_idx = len(c.leaves) - 1
            limit = t.max_tokens
        else:
            leaf_idx = -1
            if isinstance(t, Scale):
                kids, kind, scale, label = [visit(t.child, m * t.n)], NodeKind.SCALE, t.n, f"×{t.n}"
            elif isinstance(t, Labeled):
                kids, kind, scale, label = [visit(t.child, m)], NodeKind.LABELED, 1, t.label
            else:
                kind = {Sum: NodeKind.SUM, Max: NodeKind.MAX, Parallel: NodeKind.PARALLEL}[type(t)]
                kids, scale, label = [visit(x, m) for x in t.children], 1, type(t).__name__.lower()
                if isinstance(t, Parallel):
                    limit, label = t.max_tokens, t.label or label
        c.kinds.append(kind)
        c.children.append(kids)
        c.scale.append(scale)
        c.labels.append(label)
        c.leaf_of.append(leaf_idx)
        c.node_multiplicity.append(m)
        c.max_tokens.append(np.inf if limit is None else float(limit))
        if kind is NodeKind.PARALLEL:  # its floor: the joint roofline of the leaves below (one stream: their own)
            c.under[len(c.kinds) - 1] = list(range(first_leaf, len(c.leaves)))
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

    def hidden_us(self) -> np.ndarray:
        """Per overlapping Parallel node (`CompiledTree.overlaps` order) and batch: µs of its streams' time that
        the overlap hides in one iteration (Σ streams − the node's time, × the node's multiplicity); 0 where
        the step is over the node's token limit, and where the node is held at its streams' joint roofline above
        their sum (a stream priced as a marginal time below its own roofline, e.g. a context-parallel ring block:
        nothing is hidden there, the floor adds time)."""
        t = self.tree
        out = np.zeros((len(t.overlaps), len(self.steps)))
        for k, node in enumerate(t.overlaps):
            streams = self.node_time_us[t.children[node]].sum(axis=0)
            out[k] = np.maximum(streams - self.node_time_us[node], 0.0) * t.node_multiplicity[node]
        return out

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
        off = self.tree.not_launched(self.steps)  # not launched at that step: no work
        flops[off] = 0.0
        nbytes[off] = 0.0
        self._work = (flops, nbytes)
        return self._work


# --- bulk leaf pricing -----------------------------------------------------------------------
def leaf_rows(leaves: list[Leaf], steps: list[Step], dtypes: Dtypes,
              coll: CollectiveContext | None = None) -> list[KernelRows]:
    """Every leaf converted once to its (key, coordinates) rows for `steps` (collectives keyed by `coll`, see
    `costing.collectives`)."""
    arr = StepArrays.of(steps)

    def shard(leaf: Leaf, a: StepArrays) -> StepArrays:  # a KV shard holds ceil(cached / shards) of each sequence
        return a if leaf.kv_shards == 1 else replace(a, g_cached=np.ceil(a.g_cached / leaf.kv_shards))

    def one(leaf: Leaf, a: StepArrays) -> KernelRows:
        a = shard(leaf, a)
        return composite_rows(leaf.block, a, dtypes) if leaf.block is not None else kernel_rows(leaf.attrs, a, dtypes, coll)

    def rows(leaf: Leaf) -> KernelRows:
        if leaf.view is None:
            return one(leaf, arr)
        parts: list[KeyRows] = []
        missing = ""
        for a, w in leaf.view.arrays(arr):  # a marginal view: the later chunk's rows less the earlier's
            kr = one(leaf, a)
            missing = missing or kr.missing
            parts.extend(p if w == 1.0 else replace(p, weight=p.weight * w) for p in kr.parts)
        return KernelRows(tuple(parts), missing)

    return [rows(leaf) for leaf in leaves]


def price_rows(rows: list[KernelRows], n_steps: int, pricer: KernelPricer) -> tuple[np.ndarray, np.ndarray]:
    """(times (leaves, batches) µs, NaN if missing; source codes) — one pricer call per key."""
    n_l = len(rows)
    times = np.zeros((n_l, n_steps))
    src = np.zeros((n_l, n_steps), dtype=np.int8)
    _add_rows([kr.parts for kr in rows], times, src, pricer)
    floored = [i for i, kr in enumerate(rows) if kr.floor]
    if floored:  # a leaf's lower bound, priced from its floor rows (KernelRows.floor), step by step
        f_t = np.zeros((len(floored), n_steps))
        f_s = np.zeros((len(floored), n_steps), dtype=np.int8)
        _add_rows([rows[i].floor for i in floored], f_t, f_s, pricer)
        _add_attention_floor([rows[i] for i in floored], f_t, f_s, pricer)
        for j, i in enumerate(floored):
            binds = f_t[j] > times[i]
            times[i] = np.where(binds, f_t[j], times[i])
            src[i] = np.where(binds, np.maximum(src[i], f_s[j]), src[i])
    for i, kr in enumerate(rows):
        if kr.missing:  # no table holds it (e.g. a bool mask op of the eager target): reported missing
            src[i] = MISSING
    times[src == MISSING] = np.nan
    return times, src


def _add_attention_floor(rows: list[KernelRows], times: np.ndarray, src: np.ndarray, pricer: KernelPricer) -> None:
    """Add each floor's attention FLOPs (`KernelRows.floor_attention_flops`) at the fastest attention rate the GPU
    was measured at (`composite.context_attention_rate`) into `times[i]`, its source into `src[i]`."""
    if all(kr.floor_attention_flops is None for kr in rows):
        return
    rate = context_attention_rate(pricer.db, pricer.hardware)
    if rate is None:
        return
    per_us, code = rate
    for i, kr in enumerate(rows):
        if kr.floor_attention_flops is not None:
            add = kr.floor_attention_flops > 0
            times[i][add] += kr.floor_attention_flops[add] / per_us
            src[i][add] = np.maximum(src[i][add], code)


def _add_rows(parts: list[tuple[KeyRows, ...]], times: np.ndarray, src: np.ndarray, pricer: KernelPricer) -> None:
    """Add each leaf's rows (`parts[i]`, weighted) into `times[i]` per step, their worst source into `src[i]`; one
    pricer call per key."""
    requests: dict[KernelKey, list[tuple[int, np.ndarray, np.ndarray, float]]] = {}
    for i, leaf_parts in enumerate(parts):
        for part in leaf_parts:
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


def price_leaves(leaves: list[Leaf], steps: list[Step], pricer: KernelPricer, dtypes: Dtypes):
    """`price_rows` of `leaf_rows`: (times (leaves, batches) µs, NaN if missing; source codes)."""
    return price_rows(leaf_rows(leaves, steps, dtypes, CollectiveContext.of(pricer)), len(steps), pricer)
