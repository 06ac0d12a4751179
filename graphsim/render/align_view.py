"""Rich rendering of `graphsim align`: the decision table, the measured launches no graph kernel
claims, completeness both ways, and — with a profile — predicted vs measured per kernel."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from graphsim.costing.align_report import ABSENT, MATCHED, PARTLY, PLUMBING, UNMATCHED, AlignReport
from graphsim.render.cost_view import SOURCE_STYLE, fmt_us

VERDICT_STYLE = {MATCHED: "green", PARTLY: "yellow", ABSENT: "bold red", UNMATCHED: "bold yellow", PLUMBING: "dim"}


def _v(v: str) -> str:
    return f"[{VERDICT_STYLE.get(v, '')}]{v}[/]"


def _src(s: str) -> str:
    return f"[{SOURCE_STYLE.get(s, '')}]{s}[/]" if s else ""


def _counterparts(c: dict[str, int], width: int = 3) -> str:
    items = list(c.items())
    text = ", ".join(f"{k}" + (f" ×{n}" if n > 1 else "") for k, n in items[:width])
    return text + (f", … {len(items) - width} more" if len(items) > width else "") if items else "–"


def _err(e: float | None) -> str:
    if e is None:
        return "–"
    style = "green" if abs(e) <= 0.1 else "yellow" if abs(e) <= 0.3 else "red"
    return f"[{style}]{e:+.1%}[/]"


def decision_table(r: AlignReport) -> Table:
    t = Table(title="decision table: graph kernels (n = instances in the iteration) and their measured counterparts",
              title_justify="left")
    cols = ["graph kernel", "region", "n", "measured counterpart(s)", "measured", "share", "verdict", "reason"]
    if r.has_prediction:
        cols[5:5] = ["predicted", "error"]
    for c in cols:
        t.add_column(c, justify="right" if c in ("n", "measured", "share", "predicted", "error") else "left",
                     overflow="fold")
    for k in r.kernels:
        name = k.kernel + (" ~" if k.approximate else "") + (f" [dim]({k.node})[/]" if k.node != k.kernel else "")
        row = [name, k.region, str(k.instances), _counterparts(k.counterparts), fmt_us(k.measured_us) if k.launches else "–",
               f"{k.share:.1%}", _v(k.verdict), k.reason]
        if r.has_prediction:
            pred = (f"{fmt_us(k.predicted_us)} {_src(k.predicted_source)}" if k.predicted_us is not None
                    else f"{fmt_us(None)}")
            row[5:5] = [pred, _err(k.error)]
        t.add_row(*row)
    return t


def measured_table(r: AlignReport, limit: int) -> Table:
    t = Table(title="measured launches no graph kernel claims", title_justify="left")
    for c in ("measured launch", "class", "count", "measured", "share", "verdict", "reason / position"):
        t.add_column(c, justify="right" if c in ("count", "measured", "share") else "left", overflow="fold")
    for g in r.measured[:limit]:
        t.add_row(g.label, g.klass, str(g.count), fmt_us(g.measured_us), f"{g.share:.1%}", _v(g.verdict), g.reason)
    if len(r.measured) > limit:
        rest = r.measured[limit:]
        t.caption = (f"{len(rest)} more groups ({sum(g.count for g in rest)} launches, "
                     f"{sum(g.measured_us for g in rest) / (r.measured_us or 1):.1%} of the time; --json has all)")
    return t


def completeness_lines(r: AlignReport) -> str:
    c = r.completeness
    tot = c["launch_us"] or 1.0
    lines = [
        f"[bold]measured[/] ({c['launches']} launches, {fmt_us(c['launch_us'])}): matched {c['matched_launches']} "
        f"({c['matched_us'] / tot:.1%} of the time), unmatched {c['unmatched_launches']} ({c['unmatched_us'] / tot:.1%}), "
        f"plumbing {c['plumbing_launches']} ({c['plumbing_us'] / tot:.1%}) — every launch is in a row above",
        f"[bold]graph[/] ({c['graph_kernels']} kernels, {c['graph_instances']} instances in the iteration): "
        f"{c['graph_matched']} with a counterpart, {c['graph_absent']} absent (each with its reason)",
    ]
    return "\n".join(lines)


def deviation_table(r: AlignReport, limit: int) -> Table:
    t = Table(title=f"largest deviations for {r.batch} (predicted − measured, by absolute time): what to profile or "
                    "model next", title_justify="left")
    for c in ("#", "kernel", "region", "predicted", "source", "measured", "difference", "error", "verdict"):
        t.add_column(c, justify="right" if c in ("#", "predicted", "measured", "difference", "error") else "left",
                     overflow="fold")
    for i, d in enumerate(r.deviations(limit), 1):
        diff = d["deviation_us"]
        t.add_row(str(i), d["what"], d["region"], fmt_us(d["predicted_us"]) if d["predicted_us"] is not None else fmt_us(None),
                  _src(d["source"]) if d["source"] != "not modelled" else "[dim]not modelled[/]", fmt_us(d["measured_us"]),
                  ("+" if diff and diff > 0 else "−" if diff else "") + fmt_us(abs(diff)) if diff is not None else "–",
                  _err(d["error"]), _v(d["verdict"]))
    return t


def render_alignment(r: AlignReport, limit: int = 25) -> Group:
    head = [f"[bold]{r.model}[/] (fuse target {r.target or '?'}) against [bold]{r.capture}[/] "
            f"({r.capture_format}, {r.device}), iteration #{r.iteration_index} '{r.iteration}'",
            f"[dim]measured = from the capture ({r.timebase}); share = of the iteration's measured launch time; "
            "verdicts: matched, partly matched, absent (from the capture), unmatched (a measured kernel no graph "
            "kernel claims), plumbing (engine plumbing)[/]"]
    if r.has_prediction:
        head.append(f"[dim]predicted ({r.batch}) = {r.data_note}[/]")
    for note in r.notes:
        head.append(f"[yellow]note:[/] {note}")
    parts: list = ["\n".join(head), decision_table(r)]
    if r.measured:
        parts.append(measured_table(r, limit))
    parts.append(completeness_lines(r))
    tail = (f"iteration: launches sum to {fmt_us(r.measured_us)} measured; the range spans {fmt_us(r.wall_us)} "
            f"measured ({fmt_us(max(0.0, r.wall_us - r.measured_us))} outside launches)")
    if r.has_prediction:
        tail += (f"; predicted {fmt_us(r.predicted_us)} {_src(r.predicted_source)}" if r.predicted_us is not None
                 else "; predicted [bold red]incomplete[/] (missing kernels)")
        if r.predicted_us is not None and r.measured_us > 0:
            tail += (f" → {_err(r.predicted_us / r.measured_us - 1)} vs launches, "
                     f"{_err(r.predicted_us / r.wall_us - 1) if r.wall_us > 0 else '–'} vs the range")
        parts.append(deviation_table(r, min(limit, 15)))
    parts.append(tail)
    return Group(*parts)
