"""Read the analyzer's plain `Site` records off a kernel graph and its priced cost tree (one rank)."""

from __future__ import annotations

import math

from graphsim.analysis.performed import performed_work
from graphsim.costing.cost_tree import CompiledTree, Evaluation
from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.interpolate import SOURCES
from graphsim.costing.kernel_map import Dtypes
from graphsim.ir import Graph
from graphsim.ir.geometry import AttentionGeometry
from graphsim.work.analyzer import OUTSIDE, Performed, Site, location_ids, scope_role
from graphsim.workload import Step


def _peak(hardware: HardwareSpec, dtypes: Dtypes, dtype: str) -> float | None:
    try:
        return hardware.peak_flops(dtypes.of(dtype))
    except ValueError:  # a dtype no kernel table holds
        return None


def read_sites(graph: Graph, tree: CompiledTree, ev: Evaluation, step: Step, dtypes: Dtypes,
               hardware: HardwareSpec, batch: int = 0) -> list[Site]:
    """One `Site` per cost-tree leaf, in tree order, with its location name, time, source and work
    (`ev` priced `step` as its batch number `batch`)."""
    nodes = {n.name: n for n in graph.nodes}
    stack = graph.meta.layer_stack
    tags = graph.schedule.tags if graph.schedule is not None else ()
    keys = []
    for leaf in tree.leaves:
        node = nodes[leaf.name]
        region = OUTSIDE if leaf.layer is None else tags[leaf.layer]
        keys.append((region, scope_role(node.scope, stack, leaf.layer is not None), leaf.attrs.name))
    sites = []
    n_steps = len(ev.steps)
    for i, (leaf, location) in enumerate(zip(tree.leaves, location_ids(keys), strict=False)):
        a = leaf.attrs
        count = int(tree.multiplicity[i])
        t = float(ev.leaf_time_us[i, batch])
        notes: tuple[str, ...] = ()
        replicas = a.geometry.kv_replicas if isinstance(a.geometry, AttentionGeometry) else 1
        if replicas > 1:
            notes = (f"KV heads replicated ×{replicas} across ranks (more ranks than KV heads; kv_replicas={replicas})",)
        rows = ev.rows[i]
        performed = performed_work(rows, n_steps)[batch].scaled(count)
        if rows.missing:  # no kernel table holds it (e.g. a complex-valued op): its work is unknown
            performed = Performed()
            notes += (f"performed work unknown: {rows.missing}",)
        sites.append(Site(
            location=location, kernel=a.name, kind=a.kind.value, communication=a.kind.is_collective, count=count,
            time_us=None if math.isnan(t) else t * count, source=SOURCES[int(ev.leaf_source[i, batch])].value,
            performed=performed, peak_flops_per_s=_peak(hardware, dtypes, a.dtype),
            notes=notes))
    return sites
