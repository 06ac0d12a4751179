"""Read the analyzer's plain `Site` records off a kernel graph and its priced cost tree (one rank)."""

from __future__ import annotations

import math

from graphsim.analysis.performed import performed_work
from graphsim.costing.composite import MlaModuleBlock
from graphsim.costing.cost_tree import CompiledTree, Evaluation
from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.interpolate import SOURCES
from graphsim.costing.kernel_map import Dtypes, KernelRows, StepArrays, kernel_rows
from graphsim.costing.roofline import roofline_us
from graphsim.ir import Graph, Node, Op, split_value
from graphsim.ir.geometry import AttentionGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, MergedKernel, merged_of
from graphsim.work.analyzer import OUTSIDE, Performed, Site, location_ids, scope_role
from graphsim.work.analyzer.locations import Member
from graphsim.workload import Step


def _peak(hardware: HardwareSpec, dtypes: Dtypes, dtype: str) -> float | None:
    try:
        return hardware.peak_flops(dtypes.of(dtype))
    except ValueError:  # a dtype no kernel table holds
        return None


def _composite_shares(block: MlaModuleBlock, steps: list[Step], dtypes: Dtypes, hardware: HardwareSpec,
                      batch: int) -> tuple[list[KernelRows], list[float]]:
    """A composite leaf's kernels: their own (key, coordinates) rows, and each one's share of the composite's
    time — in proportion to its roofline (equal shares where a roofline is unavailable)."""
    arr = StepArrays.of(steps)
    rows = [kernel_rows(a, arr, dtypes) for a in block.parts]
    roof = []
    for kr in rows:
        times = [roofline_us(hardware, p.key, p.coords) for p in kr.parts]
        roof.append(math.nan if any(t is None for t in times)
                    else float(kr.sum_by_step([t for t in times if t is not None], len(steps))[batch]))
    total = sum(roof)
    if not math.isfinite(total) or total <= 0:
        return rows, [1.0 / len(rows)] * len(rows)
    return rows, [r / total for r in roof]


def read_sites(graph: Graph, tree: CompiledTree, ev: Evaluation, step: Step, dtypes: Dtypes,
               hardware: HardwareSpec, batch: int = 0) -> list[Site]:
    """One `Site` per cost-tree leaf, in tree order, with its location name, time, source and work
    (`ev` priced `step` as its batch number `batch`). A composite leaf (`costing.composite`: one measured
    row for a block of kernels) gives one site per kernel it covers, so location maps keep naming the
    kernels: each has its own work and a share of the composite's time in proportion to its roofline."""
    nodes = {n.name: n for n in graph.nodes}
    stack = graph.meta.layer_stack
    tags = graph.schedule.tags if graph.schedule is not None else ()
    # (leaf index, node, the part's kernel or None for the leaf itself, its rows, its share of the leaf's time)
    entries: list[tuple[int, Node, KernelAttrs | None, KernelRows, float]] = []
    for i, leaf in enumerate(tree.leaves):
        if leaf.block is None:
            # A leaf the cost tree adds (`costing.cost_tree._overlapped`: the copy of the shared expert's
            # input before the aux stream, `<first shared kernel>.input_clone`) sits where that kernel's node is.
            node = nodes.get(leaf.name) or nodes[leaf.name.removesuffix(".input_clone")]
            entries.append((i, node, None, ev.rows[i], 1.0))
            continue
        part_rows, shares = _composite_shares(leaf.block, ev.steps, dtypes, hardware, batch)
        for name, part, kr, share in zip(leaf.block.part_names, leaf.block.parts, part_rows, shares, strict=True):
            entries.append((i, nodes[name], part, kr, share))
    # A router whose top-k the cost tree prices inside its experts' measured rows (costing/routing_in_rows.py) is no
    # leaf: the experts' site runs it too (a member before itself), so maps that name it still fit.
    placed = {n for _, node, part, _, _ in entries for n in ((node.name,) if part is None else ())} | {
        name for leaf in tree.leaves if leaf.block is not None for name in leaf.block.part_names}
    absorbed: dict[str, list[Node]] = {}
    for n in graph.nodes:
        if n.op is Op.KERNEL and n.kernel.kind is KernelKind.MOE_ROUTER and n.name not in placed:
            experts = [u for u in graph.nodes if u.op is Op.KERNEL and u.kernel.kind is KernelKind.MOE_EXPERTS
                       and u.name in placed and any(split_value(v)[0] == n.name for v in u.inputs)]
            if experts:
                absorbed.setdefault(experts[0].name, []).append(n)
    # A generated kernel (vLLM's compiled mode: the inductor pass's `triton_fused`) is located as itself, and each
    # kernel it replaced as the custom-op graph locates it, numbered in one sequence with the rest so that the
    # other kernels keep the custom-op graph's `#k`: location maps name those members, and the kernel takes their rows.
    # A member that `leads` (a next layer's input norm in a layer's trailing kernel) is numbered first in its layer.
    keys: list[tuple[str, str, str]] = []
    layer_of: list[int | None] = []
    own: list[int] = []  # per entry: its key's index
    merged: list[list[tuple[int, str, str, bool]]] = []  # per entry: its members' (key index, kind, kernel, leads)
    lead: list[int] = []
    one_node: dict[MergedKernel, int] = {}
    for i, node, part, _, _ in entries:
        leaf = tree.leaves[i]
        a = part or leaf.attrs
        in_layer = leaf.layer is not None
        region = OUTSIDE if leaf.layer is None else tags[leaf.layer]
        routers = absorbed.get(node.name, []) if part is None else []
        mine = []
        for m in a.merged or tuple(merged_of(r.kernel, r.scope)[0] for r in routers):
            if m.node and m in one_node:  # one custom-op kernel two generated kernels stand for: one location
                mine.append((one_node[m], m.kind.value, m.name, m.leads))
                continue
            one_node.update({m: len(keys)} if m.node else {})
            mine.append((len(keys), m.kind.value, m.name, m.leads))
            lead += [len(keys)] if m.leads else []
            keys.append((region, scope_role(m.scope, stack, in_layer), m.name))
            layer_of.append(leaf.layer)
        own.append(len(keys))
        if routers:  # the experts kernel is a member of its own site, after the router it absorbed
            mine.append((len(keys), a.kind.value, a.name, False))
        merged.append(mine)
        keys.append((region, scope_role(node.scope, stack, in_layer), a.name))
        layer_of.append(leaf.layer)
    order = [k for k in range(len(keys)) if k not in set(lead)]
    for k in lead:
        order.insert(next(j for j, x in enumerate(order) if layer_of[x] == layer_of[k]), k)
    ids = [""] * len(keys)
    for k, location in zip(order, location_ids([keys[k] for k in order]), strict=True):
        ids[k] = location
    sites = []
    n_steps = len(ev.steps)
    for (i, _, part, rows, share), k, mine in zip(entries, own, merged, strict=True):
        leaf = tree.leaves[i]
        a = part or leaf.attrs
        location = ids[k]
        members = tuple(Member(ids[j], kind, name, leads) for j, kind, name, leads in mine)
        count = int(tree.multiplicity[i])
        t = float(ev.leaf_time_us[i, batch]) * share
        notes: tuple[str, ...] = ()
        if part is not None:
            notes = (f"{share:.1%} of the {leaf.attrs.name} time (one measured row for the block), split over its "
                     "kernels by their rooflines",)
        if a.merged:
            notes += (f"one generated kernel (vLLM's compiled mode) for the custom-op kernels "
                      f"{', '.join(m.location.split('/', 1)[1] for m in members)}",)
        elif members:
            notes += (f"with the top-k of {', '.join(m.location.split('/', 1)[1] for m in members[:-1])}: the "
                      "profile's rows for these experts were timed from the router logits (costing/routing_in_rows.py)",)
        replicas = a.geometry.kv_replicas if isinstance(a.geometry, AttentionGeometry) else 1
        if replicas > 1:
            notes += (f"KV heads replicated ×{replicas} across ranks (more ranks than KV heads; kv_replicas={replicas})",)
        performed = performed_work(rows, n_steps)[batch].scaled(count)
        if rows.missing:  # no kernel table holds it (e.g. a complex-valued op): its work is unknown
            performed = Performed()
            notes += (f"performed work unknown: {rows.missing}",)
        sites.append(Site(
            location=location, kernel=a.name, kind=a.kind.value, communication=a.kind.is_collective, count=count,
            time_us=None if math.isnan(t) else t * count, source=SOURCES[int(ev.leaf_source[i, batch])].value,
            performed=performed, peak_flops_per_s=_peak(hardware, dtypes, a.dtype),
            notes=notes, members=members))
    return sites
