"""Rich rendering of a prediction: the cost tree, a flat kernel table, the source tally."""

from __future__ import annotations

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from graphsim.costing.predict import BatchReport, Prediction

SOURCE_STYLE = {"measured": "green", "interpolated": "cyan", "extrapolated": "yellow", "derived": "blue",
                "roofline": "magenta", "missing": "bold red"}


def fmt_us(v: float | None) -> str:
    if v is None:
        return "[bold red]missing[/]"
    if v >= 1e6:
        return f"{v / 1e6:.3f} s"
    if v >= 1e3:
        return f"{v / 1e3:.3f} ms"
    return f"{v:.1f} µs"


def _src(s: str) -> str:
    return f"[{SOURCE_STYLE.get(s, '')}]{s}[/]"


def _num(v: float | None, unit: str) -> str:
    return "–" if v is None else f"{v:,.1f} {unit}"


def batch_tree(p: Prediction, b: BatchReport) -> Tree:
    total = fmt_us(b.total_us) if b.total_us is not None else f"[bold red]incomplete[/] (≥ {fmt_us(b.known_us)} known)"
    root = Tree(f"[bold]{b.spec}[/] T={b.tokens} seqs={b.sequences}: {total} [{_src(b.source)}]")
    by_region: dict[str, list] = {}
    for r in b.rows:
        by_region.setdefault(r.region, []).append(r)
    for reg in b.regions:
        rows = by_region.get(reg["region"], [])
        share = reg["total_us"] / b.known_us if b.known_us else 0
        srcs = "/".join(_src(s) for s in reg["sources"])
        br = root.add(f"[bold magenta]{reg['region']}[/] {fmt_us(reg['total_us'])} ({share:.1%}) {srcs}")
        for ov in b.overlaps:
            if ov["region"] == reg["region"] and ov["hidden_us"]:
                br.add(f"[bold]overlap[/] {escape(ov['overlap'])}: hides {fmt_us(ov['hidden_us'])} of the kernel sum")
        for r in rows:
            each = f" = {r.count} × {fmt_us(r.time_us)}" if r.count > 1 else ""
            approx = " [dim]~placeholder[/]" if r.approximate else ""
            share_txt = f"{r.share:.1%}" if r.share is not None else "–"
            note = f" [dim]({escape(r.note)})[/]" if r.note else ""
            br.add(f"{r.kernel} [dim]{r.kind}[/] {fmt_us(r.total_us)}{each} ({share_txt}) {_src(r.source)}"
                   f"{approx} [dim]{_num(r.tflops_per_s, 'TFLOP/s')}, {_num(r.gb_per_s, 'GB/s')}[/]{note}")
    return root


def kernel_table(b: BatchReport, limit: int = 25) -> Table:
    t = Table(title=f"{b.spec}: kernels by share", title_justify="left")
    for col in ("kernel", "region", "count", "time", "share", "source", "GFLOP", "MB", "TFLOP/s", "GB/s"):
        t.add_column(col, justify="right" if col not in ("kernel", "region", "source") else "left")
    rows = sorted(b.rows, key=lambda r: -(r.total_us or 0))
    for r in rows[:limit]:
        t.add_row(r.kernel + (" ~" if r.approximate else ""), r.region, str(r.count), fmt_us(r.total_us),
                  f"{r.share:.1%}" if r.share is not None else "–", _src(r.source), f"{r.flops / 1e9:,.2f}",
                  f"{r.bytes / 1e6:,.2f}", _num(r.tflops_per_s, "").strip(), _num(r.gb_per_s, "").strip())
    if len(rows) > limit:
        t.caption = f"{len(rows) - limit} more kernels not shown (--json has all)"
    return t


def tally_line(b: BatchReport) -> str:
    parts = [f"{_src(k)} {v}" for k, v in sorted(b.tally.items())]
    line = "kernel sources: " + ", ".join(parts)
    if b.missing:
        line += "\n[bold red]missing:[/] " + "; ".join(b.missing[:10]) + (" …" if len(b.missing) > 10 else "")
    return line


def render_prediction(p: Prediction, show_tree: bool = True, limit: int = 25) -> Group:
    head = (f"[bold]{p.model}[/] on [bold]{p.hardware}[/] tp={p.tp} ep={p.ep}\n"
            f"[dim]data:[/] {p.data_note}")
    if p.moe_routing:
        head += f"\n[dim]MoE routing:[/] {escape(p.moe_routing)}"
    if p.streams:
        head += f"\n[dim]streams:[/] {escape(p.streams)}"
    if p.interconnect and p.tp * p.ep > 1:
        head += f"\n[dim]interconnect:[/] {escape(p.interconnect)}"
    parts: list = [head]
    for b in p.batches:
        if show_tree:
            parts.append(batch_tree(p, b))
        parts.append(kernel_table(b, limit))
        parts.append(tally_line(b))
    parts.append("[dim]~ = memory-bound placeholder for leftover ops; every time is labelled measured / "
                 "interpolated / extrapolated / derived / roofline / missing[/]")
    return Group(*parts)
