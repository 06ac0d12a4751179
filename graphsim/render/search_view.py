"""Rendering of `graphsim search`: the best deployment, the Pareto frontier, the runners-up, why the others
lost, and a Pareto plot (PNG, matplotlib)."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Group
from rich.table import Table

from graphsim.errors import GraphsimError
from graphsim.render.cost_view import SOURCE_STYLE
from graphsim.render.serving_view import shares_markup
from graphsim.serving.search import Row, SearchResult


def _src(s: str) -> str:
    return f"[{SOURCE_STYLE.get(s, '')}]{s}[/]"


def _ms(v: float) -> str:
    if v is None or not math.isfinite(v):
        return "–"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def _slo_text(res: SearchResult) -> str:
    s = res.spec.slo
    parts = []
    if s.ttft_ms is not None:
        parts.append(f"TTFT ≤ {s.ttft_ms:,.0f} ms")
    if s.tpot_ms is not None:
        parts.append(f"TPOT ≤ {s.tpot_ms:,.1f} ms")
    return ("SLOs (means): " + ", ".join(parts)) if parts else "no SLOs: the best is the most tokens/s per GPU"


def _how(r: Row) -> str:
    return "[bold]simulated[/]" if r.sim is not None else "[dim]steady state[/]"


def _best_src(r: Row) -> str:
    """The row's shares of predicted kernel time by source (its simulation's, else its steady point's), else its
    worst source."""
    us = r.final.source_us
    total = sum(us.values())
    if total > 0:
        link = r.final.link_source
        return shares_markup({k: v / total for k, v in us.items() if v > 0}) + (f"; KV link {_src(link)}" if link else "")
    return _times_src(r)


def _times_src(r: Row) -> str:
    e = r.final
    if e.link_source and e.ttft_source != e.source:
        return f"{_src(e.source)} (TTFT {_src(e.ttft_source)}: link)"
    return _src(e.source)


def rows_table(title: str, rows: list[Row], res: SearchResult, why: bool = True) -> Table:
    t = Table(title=title, title_justify="left")
    cols = ["#", "deployment", "GPUs", "tok/s/GPU", "tok/s/user", "TTFT ms", "TPOT ms", "how", "times"]
    if why:
        cols.append("verdict")
    for c in cols:
        t.add_column(c, justify="right" if c in ("#", "GPUs", "tok/s/GPU", "tok/s/user", "TTFT ms", "TPOT ms") else "left",
                     overflow="fold")
    for r in rows:
        e = r.final
        c = r.candidate
        gpus = f"{c.gpus_used}" + (f" of {res.spec.gpus}" if c.gpus_used < res.spec.gpus else "")
        verdict = ("[bold green]best[/]" if r.verdict == "best" else
                   f"[red]{r.reason}[/]" if r.verdict == "misses SLOs" else f"[dim]{r.reason}[/]")
        ttft = _ms(e.ttft_ms) + (f" [dim](p90 {_ms(e.ttft_p90_ms)})[/]" if r.sim is not None else "")
        cells = [str(c.id), c.label(), gpus, f"{e.output_tokens_per_s_per_gpu:,.1f}", f"{e.tokens_per_s_per_user:,.1f}",
                 ttft, _ms(e.tpot_ms), _how(r), _times_src(r)]
        if why:
            cells.append(verdict)
        t.add_row(*cells)
    return t


def tally_table(res: SearchResult) -> Table:
    t = Table(title="why the others lost", title_justify="left")
    t.add_column("reason")
    t.add_column("count", justify="right")
    for reason, n in res.loss_tally().most_common():
        t.add_row(reason, f"{n:,}")
    return t


def render_search(res: SearchResult, top: int = 8) -> Group:
    s = res.spec
    isl = str(s.isl.lo) if s.isl.lo == s.isl.hi else s.isl.label()
    osl = str(s.osl.lo) if s.osl.lo == s.osl.hi else s.osl.label()
    tm = res.timings
    n_sim = len(res.verified)
    head = [f"[bold]{res.model}[/] on [bold]{s.gpus} × {res.hardware}[/]: input {isl}, output {osl} tokens; "
            f"{_slo_text(res)}",
            f"[dim]data:[/] {res.data_note}",
            f"[dim]KV link (disaggregated):[/] {res.link} [{_src('roofline') if 'given' not in res.link else 'given'}]",
            f"[dim]{len(res.rows):,} candidates evaluated in {tm['steady_state']:,.2f} s (steady state, {res.backend} "
            f"backend, {res.workers} worker(s)); {n_sim} simulated in {tm['simulate']:,.2f} s; {len(res.pruned):,} pool "
            f"configurations pruned (memory or engine limits); tracing and fusing {tm['trace']:,.2f} s; "
            f"total {tm['total']:,.2f} s[/]",
            "[dim]each candidate is one unit (an instance, or an xPyD set) under a closed loop of max_num_seqs clients "
            "per (decode) instance, copied ×N over the GPUs; tok/s/user = 1 / mean TPOT[/]"]
    if res.all_roofline:
        head.append("[magenta]every time below is a roofline estimate (no measured kernel rows were used)[/]")
    else:
        head.append(f"[dim]times carry the worst source of the iteration times they use; worst here: "
                    f"{_src(res.worst_source())}[/]")
        shares = res.source_shares()
        if shares:
            head.append(f"[dim]share of the predicted kernel time by source over the simulated candidates:[/] "
                        f"{shares_markup(shares)}")
    parts: list = list(head)
    if res.best is not None:
        b = res.row(res.best)
        e = b.final
        parts.append(
            f"[bold green]best under the SLOs:[/] #{b.candidate.id} [bold]{b.candidate.label()}[/] — "
            f"{e.output_tokens_per_s_per_gpu:,.1f} output tok/s per GPU "
            f"({e.output_tokens_per_s_per_gpu * b.candidate.gpus_used:,.0f} on {b.candidate.gpus_used} GPUs), "
            f"{e.tokens_per_s_per_user:,.1f} tok/s per user, TTFT {_ms(e.ttft_ms)} ms, TPOT {_ms(e.tpot_ms)} ms "
            f"({'simulated' if b.sim is not None else 'steady state'}; times {_best_src(b)})")
    else:
        parts.append("[bold red]no candidate meets the SLOs[/]: see the frontier for the trade-off")
    front = [res.row(i) for i in res.frontier]
    parts.append(rows_table(f"Pareto frontier: output tok/s per GPU against tok/s per user ({len(front)} points)",
                            front, res))
    ok = sorted((r for r in res.rows if r.verdict == "meets SLOs" and not r.on_frontier),
                key=lambda r: -r.final.output_tokens_per_s_per_gpu)[:top]
    if ok:
        parts.append(rows_table(f"runners-up under the SLOs (top {len(ok)})", ok, res))
    missed = sorted((r for r in res.rows if r.verdict == "misses SLOs" and not r.on_frontier),
                    key=lambda r: -r.final.output_tokens_per_s_per_gpu)[: max(3, top // 2)]
    if missed:
        parts.append(rows_table(f"fastest that miss the SLOs (top {len(missed)})", missed, res))
    parts.append(tally_table(res))
    cmp = res.fast_vs_sim()
    if cmp.get("simulated"):
        parts.append(
            f"[dim]steady state vs simulation over {int(cmp['simulated'])} simulated candidate(s): tok/s per GPU "
            f"within {cmp.get('output_tokens_per_s_per_gpu_max_abs', math.nan):.1%}, TPOT within "
            f"{cmp.get('tpot_ms_max_abs', math.nan):.1%}, TTFT within {cmp.get('ttft_ms_max_abs', math.nan):.0%} "
            "(TTFT is the loose one)[/]")
    return Group(*parts)


def write_pareto_png(res: SearchResult, path: str | Path) -> Path:
    """Scatter of every candidate (aggregated and disaggregated), the frontier, the best, and the SLO on TPOT."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise GraphsimError("--plot needs matplotlib: pip install 'graphsim[plot]'") from None
    p = Path(path)
    if not p.parent.is_dir():
        raise GraphsimError(f"cannot write '{path}': no directory {p.parent}")
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    names = {"agg": "aggregated", "disagg": "disaggregated", "afd": "attention–FFN disaggregated"}
    for mode, color in (("agg", "tab:blue"), ("disagg", "tab:orange"), ("afd", "tab:purple")):
        pts = [r.final for r in res.rows if r.candidate.mode == mode]
        if pts:
            ax.scatter([e.tokens_per_s_per_user for e in pts], [e.output_tokens_per_s_per_gpu for e in pts], s=8,
                       alpha=0.35, color=color, label=f"{names[mode]} ({len(pts)})")
    front = [res.row(i).final for i in res.frontier]
    ax.plot([e.tokens_per_s_per_user for e in front], [e.output_tokens_per_s_per_gpu for e in front], "-o",
            color="black", markersize=3, linewidth=1, label="Pareto frontier")
    ok = [res.row(i).final for i in res.frontier_slo]
    if ok and res.spec.slo.given:
        ax.plot([e.tokens_per_s_per_user for e in ok], [e.output_tokens_per_s_per_gpu for e in ok], "-o",
                color="tab:green", markersize=3, linewidth=1, label="frontier meeting the SLOs")
    if res.best is not None:
        e = res.row(res.best).final
        ax.scatter([e.tokens_per_s_per_user], [e.output_tokens_per_s_per_gpu], marker="*", s=220, color="tab:green",
                   edgecolor="black", zorder=5, label=f"best under the SLOs (#{res.best})")
    if res.spec.slo.tpot_ms:
        ax.axvline(1e3 / res.spec.slo.tpot_ms, color="tab:red", linestyle="--", linewidth=1,
                   label=f"TPOT SLO {res.spec.slo.tpot_ms:g} ms")
    ax.set_xlabel("tokens/s per user (1 / mean TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    src = "roofline" if res.all_roofline else f"worst source {res.worst_source()}"
    ax.set_title(f"{res.model} on {res.spec.gpus} × {res.hardware}, ISL {res.spec.isl.label()}, "
                 f"OSL {res.spec.osl.label()} ({src})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    from graphsim.atomic import atomic_path

    try:
        with atomic_path(p) as tmp:  # whole or not at all; a failed write is one line naming the path
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
    return p
