"""Rich rendering of `graphsim capture show`: per phase, the folded launch sequence and the
launches grouped by name, sorted by their share of the captured time."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.tree import Tree

from graphsim.capture import Capture
from graphsim.importers.captures.summary import PhaseSummary
from graphsim.render.cost_view import fmt_us

CLASS_STYLE = {"plumbing": "dim", "other": "yellow", "gemm": "bold", "attention": "bold cyan"}


def _cls(c: str) -> str:
    style = CLASS_STYLE.get(c, "")
    return f"[{style}]{c}[/]" if style else c


def _fold_tree(s: PhaseSummary, max_items: int) -> Tree:
    seq, f = s.sequence, s.fold
    title = f"[bold]launch sequence[/] of iteration '{s.iterations[0].label}' (plumbing left out; times measured)"
    root = Tree(title)

    def add(branch: Tree, items, repeats: int = 1) -> None:
        for k, x in enumerate(items):
            if k == max_items:
                branch.add(f"[dim]… {len(items) - max_items} more[/]")
                break
            branch.add(f"{x.key} [dim]{x.klass.value}[/] {fmt_us(x.duration_us)}")

    if f is None:
        add(root.add(f"no repeating block: {len(seq)} launches"), seq)
        return root
    if f.start:
        add(root.add(f"before: {f.start} launches"), seq[:f.start])
    block = root.add(f"[bold magenta]repeated block[/] of {f.period} launches ×{f.repeats} "
                     f"(launches {f.start}–{f.end - 1}); times of the first repeat")
    add(block, seq[f.start:f.start + f.period])
    if f.end < len(seq):
        add(root.add(f"after: {len(seq) - f.end} launches"), seq[f.end:])
    return root


def _table(s: PhaseSummary, limit: int) -> Table:
    n = len(s.iterations)
    t = Table(title=f"phase {s.phase}: launches by share of captured time (per iteration, mean of {n})",
              title_justify="left")
    for col in ("launch", "class", "count", "time (measured)", "mean each", "share"):
        t.add_column(col, justify="left" if col in ("launch", "class") else "right")
    for g in s.groups[:limit]:
        count, per = g.per_iteration(n)
        cls = g.klass + (f" ({g.plumbing})" if g.plumbing and g.plumbing != g.klass else "")
        t.add_row(g.label, _cls(cls), f"{count:g}", fmt_us(per), fmt_us(g.mean_us), f"{s.share(g):.1%}")
    if len(s.groups) > limit:
        rest = s.groups[limit:]
        t.caption = (f"{len(rest)} more launch names, {sum(g.total_us for g in rest) / n / (s.launch_us or 1):.1%} "
                     "of the time (--limit, --json has all)")
    return t


def render_capture(cap: Capture, summaries: list[PhaseSummary], limit: int = 25, max_items: int = 40) -> Group:
    head = [f"[bold]{cap.path}[/] — {cap.format}, device [bold]{cap.device}[/], {len(cap.iterations)} iterations",
            f"[dim]every time below is measured in the capture: {cap.timebase}[/]"]
    for note in cap.notes:
        head.append(f"[yellow]note:[/] {note}")
    parts: list = ["\n".join(head)]
    for s in summaries:
        n = len(s.iterations)
        labels = sorted({it.label for it in s.iterations})
        lab = labels[0] if len(labels) == 1 else f"{labels[0]} … {labels[-1]}"
        parts.append(f"\n[bold]phase {s.phase}[/]: {n} iteration{'s' if n > 1 else ''} ({lab}), "
                     f"{sum(len(it.launches) for it in s.iterations) / n:g} launches each; per iteration "
                     f"{fmt_us(s.launch_us)} of launches (plumbing {fmt_us(s.plumbing_us)}), range wall time "
                     f"{fmt_us(s.wall_us)} (measured)")
        parts.append(_fold_tree(s, max_items))
        parts.append(_table(s, limit))
    return Group(*parts)
