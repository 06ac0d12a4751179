"""Rich rendering of `graphsim analyze`: per-location necessary vs performed work and time, R6, R7."""

from __future__ import annotations

from collections.abc import Iterator

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from graphsim.render.cost_view import SOURCE_STYLE, fmt_us
from graphsim.work.analyzer import Analysis, LocationResult


def si(value: float | None, unit: str = "") -> str:
    """3 significant digits with an SI prefix (`10.4 G`, `616 M`); `–` for None."""
    if value is None:
        return "–"
    if value == 0:
        return f"0 {unit}".rstrip()
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            scaled = value / factor
            digits = 2 if abs(scaled) < 10 else 1 if abs(scaled) < 100 else 0
            return f"{scaled:.{digits}f} {prefix}{unit}".rstrip()
    return f"{value:.0f} {unit}".rstrip()


def _src(source: str) -> str:
    return f"[{SOURCE_STYLE.get(source, '')}]{source}[/]"


def _time(us: float | None, source: str) -> str:
    return f"{fmt_us(us)} {_src(source)}" if us is not None else fmt_us(None)


def _parts(r: LocationResult) -> str:
    seen: list[str] = []
    for row in r.rows:
        part = row.split(":", 1)[0]
        if part not in seen:
            seen.append(part)
    return ", ".join(seen) or "[dim]none[/]"


def _excess(r: LocationResult, flop_unit: str = "FLOP") -> str:
    red = r.redundancy
    out = []
    if red.flops:
        out.append(f"{si(red.flops, flop_unit)}")
    if red.param_bytes:
        out.append(f"{si(red.param_bytes, 'B')} w")
    if red.state_bytes:
        out.append(f"{si(red.state_bytes, 'B')} kv")
    text = ", ".join(out)
    if not text:
        return ""
    return f"[red]{text}[/]" if (red.flops > 0 or red.param_bytes > 0 or red.state_bytes > 0) else f"[dim]{text}[/]"


def _pair(flops: float, nbytes: float, unit: str = "") -> str:
    return f"{si(flops, unit)} · {si(nbytes, 'B')}"


def _by_region(a: Analysis) -> Iterator[tuple[str, LocationResult, str]]:
    """Each location with its place inside its region, and its region's heading where the region starts ("")."""
    region = None
    for r in a.locations:
        here, at = r.location.split("/", 1)
        heading = ""
        if here != region:
            region = here
            heading = f"[bold magenta]{escape(region)}[/] ×{r.count}"
        yield heading, r, at


def location_table(a: Analysis) -> Table:
    t = Table(title=f"{a.batch}: necessary work (accountant) vs work performed (kernel geometry, all {a.gpus} "
                    f"rank(s)) and predicted time (one rank), per location", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for col, right in (("location", False), ("rows", False), ("necessary", True), ("performed", True),
                       ("predicted", True), ("nec. roofline", True), ("perf − nec", True)):
        t.add_column(col, justify="right" if right else "left", no_wrap=True)
    for heading, r, at in _by_region(a):
        if heading:
            t.add_row(heading)
        performed = r.performed.param_bytes + r.performed.state_bytes
        t.add_row(escape(at), _parts(r), _pair(r.necessary.flops, r.necessary.bytes) if r.mapped else "",
                  _pair(r.performed.flops, performed) if (r.mapped or r.performed.flops or performed) else "",
                  _time(r.time_us, r.source), fmt_us(r.necessary_roofline_us) if r.mapped else "", _excess(r, ""),
                  style="" if r.mapped else "dim")
    if a.communication:
        t.add_row("[bold magenta]communication[/]")
    for c in a.communication:
        t.add_row(f"{escape(c.location)} ×{c.count}", "", "", "", _time(c.time_us, c.source), "", "", style="dim")
    t.caption = ("rows: accountant parts the location map assigns (none: no compulsory work); necessary, performed: "
                 "FLOP · bytes of weights and KV/state (activations are not necessary work; --json has them); "
                 "predicted: one rank, with its source; nec. roofline: max(FLOP / peak, bytes / bandwidth) of the "
                 f"necessary work on {a.gpus} GPU(s) of the {escape(a.hardware)} spec (source: roofline); "
                 "perf − nec: FLOP, w = weight bytes, kv = KV/state bytes; red = excess, dim = deficit")
    return t


def location_lines(a: Analysis) -> str:
    """The same content as `location_table`, one line per location, for narrow terminals."""
    out = [f"[bold]{escape(a.batch)}: per location[/] — predicted time of one rank (source); necessary work from the "
           f"accountant and its roofline on {a.gpus} GPU(s) of the {escape(a.hardware)} spec (source: roofline); "
           f"work performed by all {a.gpus} rank(s) from kernel geometry (FLOP · weight + KV/state bytes)"]
    for heading, r, at in _by_region(a):
        if heading:
            out.append(heading)
        extra = _excess(r)
        if r.mapped:
            out.append(f"  {escape(at)} \\[{escape(_parts(r))}]: {_time(r.time_us, r.source)}; necessary "
                       f"{_pair(r.necessary.flops, r.necessary.bytes, 'FLOP')} → {fmt_us(r.necessary_roofline_us)}; performed "
                       f"{_pair(r.performed.flops, r.performed.param_bytes + r.performed.state_bytes, 'FLOP')}"
                       + (f"; perf − nec {extra}" if extra else ""))
        else:
            out.append(f"  [dim]{escape(at)} \\[no compulsory work]: {_time(r.time_us, r.source)}[/]"
                       + (f"; perf − nec {extra}" if extra else ""))
    if a.communication:
        out.append("[bold magenta]communication[/]")
        out += [f"  [dim]{escape(c.location)} ×{c.count}: {_time(c.time_us, c.source)}[/]" for c in a.communication]
    return "\n".join(out)


def summary(a: Analysis) -> str:
    cov, red, rec, n = a.coverage, a.redundancy, a.reconciliation, a.necessary_total
    assert cov is not None and red is not None and rec is not None and n is not None
    lines = []
    if cov.share is None:
        lines.append(f"[bold]R6 necessary-work coverage:[/] not computed — {len(cov.missing)} location(s) have no "
                     f"predicted time: {escape(', '.join(cov.missing[:6]))}")
    else:
        lines.append(
            f"[bold]R6 necessary-work coverage:[/] {cov.share:.1%} of the predicted iteration "
            f"({fmt_us(cov.mapped_us)} of {fmt_us(cov.iteration_us)}, {_src(a.iteration_source)}) is spent at "
            f"locations that hold necessary work; {fmt_us(cov.unmapped_us)} at locations with none, "
            f"{fmt_us(cov.communication_us)} in communication")
    share_f = f" ({red.flops_share:.1%} of performed)" if red.flops_share is not None else ""
    share_b = f" ({red.bytes_share:.1%} of weight + KV bytes performed)" if red.bytes_share is not None else ""
    lines.append(
        f"[bold]R7 redundancy[/] (performed − necessary, all {a.gpus} rank(s)): excess {si(red.excess.flops, 'FLOP')}"
        f"{share_f}, {si(red.excess.param_bytes, 'B')} weights, {si(red.excess.state_bytes, 'B')} KV/state"
        f"{share_b}; roofline time of the excess {fmt_us(red.excess_roofline_us)} [{_src('roofline')}]")
    for r in red.top:
        cause = "; ".join(c for c in r.causes if not c.startswith("deficit")) or "see the location"
        lines.append(f"  [red]+[/] {escape(r.location)}: {_excess(r)} — {escape(cause)}")
    deficit = [text for value, text in ((red.deficit.flops, si(-red.deficit.flops, "FLOP")),
                                        (red.deficit.param_bytes, f"{si(-red.deficit.param_bytes, 'B')} weights"),
                                        (red.deficit.state_bytes, f"{si(-red.deficit.state_bytes, 'B')} KV/state"))
               if value]
    if deficit:
        lines.append("  deficit (work the accountant counts that the kernels' cost models leave out): "
                     + ", ".join(deficit))
    lines.append(
        f"[bold]necessary work:[/] {si(n.flops, 'FLOP')}, {si(n.param_bytes, 'B')} weights "
        f"(worst case {si(n.param_bytes_worst, 'B')}), {si(n.state_bytes, 'B')} KV/state; its roofline on "
        f"{a.gpus} GPU(s) is {fmt_us(a.necessary_roofline_us)} [{_src('roofline')}] (Σ per location) against "
        f"{_time(a.iteration_us, a.iteration_source)} predicted")
    verdict = "[green]reconciled[/]" if rec.ok else "[bold red]NOT reconciled[/]"
    lines.append(f"[bold]accountant:[/] {verdict} with `{escape(a.work_command)}` (every segment, every field; "
                 f"max relative deviation {rec.max_relative_deviation:.1e})")
    for m in rec.mismatches[:5]:
        lines.append(f"  [red]{escape(m)}[/]")
    for note in a.notes:
        lines.append(f"[dim]note: {escape(note)}[/]")
    return "\n".join(lines)


def render_analysis(a: Analysis, show_table: bool = True, console: Console | None = None) -> Group:
    """Header, per-location table (one line per location where the table does not fit `console`), R6/R7 summary."""
    step = a.step
    head = [f"[bold]{escape(a.model)}[/] ({escape(a.architecture)}) on [bold]{escape(a.hardware)}[/] tp={a.tp} "
            f"ep={a.ep} ({a.gpus} GPU(s)); batch {escape(a.batch)}: {step.tokens} token(s), {step.sequences} "
            f"sequence(s)",
            f"[dim]data:[/] {escape(a.data_note)}",
            f"predicted iteration (one rank): {_time(a.iteration_us, a.iteration_source)}"]
    if not a.necessary_work_available:
        head.append(f"[bold]necessary work: unavailable[/] — deployment unsupported by the analyzer: {escape(a.reason)}")
        return Group(*head)
    head.append(f"[bold]necessary work: available[/] · location map [bold]{escape(a.map_id)}[/] "
                f"[dim]({escape(a.map_path)})[/]")
    parts: list = ["\n".join(head)]
    if show_table:
        table = location_table(a)
        fits = console is None or Measurement.get(
            console, console.options.update(max_width=100_000), table).maximum <= console.width
        parts.append(table if fits else location_lines(a))
    parts.append(summary(a))
    return Group(*parts)
