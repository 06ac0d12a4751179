"""Rich rendering of a pass pipeline run: per pass what changed, then one layer of each type."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from graphsim.ir import Graph, Op
from graphsim.ir.kernel import KernelAttrs


def kernels_per_layer(g: Graph) -> dict[str, int]:
    counts: dict[str, int] = {}
    if g.schedule is None:
        return counts
    for tag, rep in g.schedule.representative.items():
        counts[tag] = sum(1 for n in g.nodes if n.layer == rep)
    return counts


def run_summary(before: Graph, run) -> dict[str, Any]:
    passes = []
    prev = before
    for p, res, secs in run.results:
        passes.append({
            "pass": p.spec(), "modified": res.modified, "seconds": round(secs, 4),
            "nodes_before": len(prev.nodes), "nodes_after": len(res.graph.nodes),
            "per_layer_after": kernels_per_layer(res.graph), "stats": res.stats, "notes": res.notes,
        })
        prev = res.graph
    g = run.graph
    layers = []
    if g.schedule is not None:
        for tag, rep in g.schedule.representative.items():
            layers.append({
                "tag": tag, "count": g.schedule.count(tag), "layer": rep,
                "kernels": [_kernel_row(n) for n in g.nodes if n.layer == rep],
            })
    outside = [_kernel_row(n) for n in g.nodes if n.layer is None]
    return {"model": g.name, "pipeline": ",".join(p.spec() for p, _, _ in run.results), "passes": passes,
            "layers": layers, "outside_layers": outside}


def _kernel_row(n) -> dict[str, Any]:
    a = n.attrs
    if isinstance(a, KernelAttrs):
        return {"name": n.name, "kind": a.kind.value, "kernel": a.name, "geometry": a.geometry.as_dict(),
                "dtype": a.dtype, "rows": a.rows.value, "approximate": a.approximate, "covers": len(a.covers),
                "rule": a.rule}
    return {"name": n.name, "kind": n.op.value, "kernel": n.target, "geometry": {}, "dtype": n.outputs[0].dtype.value,
            "rows": "", "approximate": n.op is Op.OPAQUE, "covers": 1, "rule": n.provenance}


def _geo(d: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items() if k not in ("group", "reason"))


def render_summary(s: dict[str, Any]) -> Group:
    parts = []
    t = Table(title=f"{s['model']}: {s['pipeline']}", title_justify="left")
    for col in ("pass", "nodes", "kernels/layer", "what changed"):
        t.add_column(col)
    for p in s["passes"]:
        per_layer = ", ".join(f"{k}: {v}" for k, v in p["per_layer_after"].items())
        stats = ", ".join(f"{k} ×{v}" for k, v in p["stats"].items())
        notes = ("\n" + "\n".join(f"[yellow]{x}[/]" for x in p["notes"])) if p["notes"] else ""
        t.add_row(p["pass"], f"{p['nodes_before']} → {p['nodes_after']}", per_layer, stats + notes)
    parts.append(t)
    for layer in s["layers"] + ([{"tag": "outside the layers", "count": 1, "layer": None,
                                  "kernels": s["outside_layers"]}] if s["outside_layers"] else []):
        lt = Table(title=f"{layer['tag']} ×{layer['count']}" + (f" (layer {layer['layer']})" if layer["layer"]
                                                                is not None else ""), title_justify="left")
        for col in ("#", "kernel", "kind", "geometry", "dtype", "rows", "covers"):
            lt.add_column(col)
        for i, k in enumerate(layer["kernels"]):
            name = f"[dim]{k['kernel']} ~[/]" if k["approximate"] else k["kernel"]
            lt.add_row(str(i), name, k["kind"], _geo(k["geometry"]), k["dtype"], k["rows"], str(k["covers"]))
        parts.append(lt)
    parts.append("[dim]~ = memory-bound placeholder for leftover ops (approximate); covers = aten ops replaced[/]")
    return Group(*parts)
