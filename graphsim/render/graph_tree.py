"""Rich rendering of an IR graph: model → layer groups (×n) → modules → ops, then totals."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.tree import Tree

from graphsim.ir import Graph, Node, Op


def _fmt_count(n: int) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def _module_of(n: Node, layer_prefix: str) -> str:
    scope = n.scope
    if layer_prefix and scope.startswith(layer_prefix):
        scope = scope[len(layer_prefix):].lstrip(".")
    return scope or "(layer)"


def _op_line(n: Node) -> str:
    outs = ", ".join(str(s) for s in n.outputs)
    style = "bold red" if n.op is Op.OPAQUE else "cyan" if n.op.group.value in ("matmul", "attention", "moe") else ""
    label = n.op.value if n.op is not Op.OPAQUE else f"opaque({n.target})"
    return f"[{style}]{label}[/] → {outs}" if style else f"{label} → {outs}"


def _add_modules(parent: Tree, nodes: list[Node], layer_prefix: str, max_ops: int) -> None:
    groups: dict[str, list[Node]] = {}
    for n in nodes:
        groups.setdefault(_module_of(n, layer_prefix), []).append(n)
    for mod, ns in groups.items():
        cls = ns[0].module_type
        sub = parent.add(f"[bold]{mod}[/] [dim]{cls}[/] [dim]({len(ns)} ops)[/]")
        for n in ns[:max_ops]:
            sub.add(_op_line(n))
        if len(ns) > max_ops:
            sub.add(f"[dim]… {len(ns) - max_ops} more[/]")


def graph_tree(g: Graph, max_ops: int = 1000) -> Tree:
    meta = g.meta
    title = f"[bold]{g.name}[/] [dim]{meta.architecture} {meta.dtype}[/]"
    root = Tree(title)
    layer_nodes: dict[int, list[Node]] = {}
    pre: list[Node] = []
    post: list[Node] = []
    for n in g.nodes:
        if n.layer is not None:
            layer_nodes.setdefault(n.layer, []).append(n)
        elif layer_nodes:
            post.append(n)
        else:
            pre.append(n)
    if pre:
        _add_modules(root.add("[bold]before layers[/]"), pre, "", max_ops)
    sched = g.schedule
    stack = meta.layer_stack or "model.layers"
    if sched is None:  # every layer present (e.g. an ONNX file): one branch per layer
        for idx in sorted(layer_nodes):
            scope = layer_nodes[idx][0].scope
            prefix = scope[: scope.find(f".{idx}") + len(f".{idx}")] if f".{idx}" in scope else ""
            _add_modules(root.add(f"[bold magenta]layer {idx}[/]"), layer_nodes[idx], prefix, max_ops)
    else:
        for tag, rep in sched.representative.items():
            count = sched.count(tag)
            layers = [i for i, t in enumerate(sched.tags) if t == tag]
            span = _span(layers)
            branch = root.add(f"[bold magenta]{tag}[/] ×{count} [dim](layers {span}; traced layer {rep})[/]")
            _add_modules(branch, layer_nodes.get(rep, []), f"{stack}.{rep}", max_ops)
    if post:
        _add_modules(root.add("[bold]after layers[/]"), post, "", max_ops)
    return root


def _span(idx: list[int]) -> str:
    runs: list[str] = []
    start = prev = idx[0]
    for i in [*idx[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        runs.append(f"{start}" if start == prev else f"{start}–{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(runs) if len(runs) <= 4 else f"{', '.join(runs[:3])}, … ({len(idx)} layers)"


def graph_totals(g: Graph) -> dict[str, Any]:
    counts = g.count_by_op()
    layers = sorted({n.layer for n in g.nodes if n.layer is not None})
    return {
        "nodes": len(g.nodes),
        "layers": g.meta.num_layers if g.meta.num_layers is not None else len(layers),
        "traced_layers": g.meta.traced_layers or layers,
        "layer_types": {t: g.schedule.count(t) for t in g.schedule.representative} if g.schedule else {},
        "param_count": g.meta.param_count if g.meta.param_count is not None else g.param_count(),
        "traced_param_count": g.param_count(),
        "opaque_ops": g.meta.opaque_ops,
        "ops": {op.value: c for op, c in sorted(counts.items(), key=lambda kv: -kv[1])},
    }


def totals_table(g: Graph) -> Table:
    t = graph_totals(g)
    table = Table(show_header=False, box=None, title="totals", title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("nodes", f"{t['nodes']} (traced layers {t['traced_layers']})")
    types = ", ".join(f"{k} ×{v}" for k, v in t["layer_types"].items()) or "not folded (run `graphsim passes` with fold)"
    table.add_row("layers", f"{t['layers']}: {types}")
    table.add_row("parameters", f"{_fmt_count(int(t['param_count']))} ({t['param_count']:,}; full depth)")
    opaque = t["opaque_ops"]
    table.add_row("opaque ops", "none" if not opaque else f"[red]{len(opaque)}: {', '.join(opaque)}[/]")
    return table


def render_graph(g: Graph, max_ops: int = 1000) -> Group:
    return Group(graph_tree(g, max_ops), totals_table(g))
