"""Rendering of `graphsim search --target-request-rate / --target-concurrency`: the fewest GPUs for the load,
the runners-up and why they lost; and the coarse-vs-refined line of a refined search."""

from __future__ import annotations

import math

from rich.console import Group
from rich.table import Table

from graphsim.render.search_view import _slo_text, _src
from graphsim.serving.search import SearchResult
from graphsim.serving.search_load import LoadOption, LoadResult


def _ms(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "–"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def _figures(o: LoadOption) -> tuple:
    f = o.fast
    return (o.gpus, o.replicas, round(o.capacity, 6), round(f.ttft_ms, 3), round(f.tpot_ms, 3), o.sim is None)


def render_load(res: LoadResult, units: SearchResult, top: int = 8) -> Group:
    t = res.target
    load = f"{t.load:,.4g} {t.unit}" + (" (open loop, Poisson arrivals)" if t.request_rate is not None
                                         else " (closed loop)")
    parts: list = [f"[bold]{units.model}[/] on {units.hardware}: the fewest GPUs for {load}; "
                   f"{_slo_text(units)}; units of up to {units.spec.gpus} GPUs, at most {t.max_gpus} GPUs"]
    if units.all_roofline:
        parts.append("[yellow]every time below is a roofline estimate (no profile.db)[/]")
    a = res.answer
    if a is None:
        why = "no option within --max-gpus meets the SLOs" if not res.options else (
            "no option was confirmed by simulation within the budget (--verify)")
        parts.append(f"[red]no answer[/]: {why}")
    else:
        how = ("simulated at its load: " + f"TTFT {_ms(a.sim.ttft_ms)} ms, TPOT {_ms(a.sim.tpot_ms)} ms "
               f"({_src(a.sim.ttft_source)})") if a.sim else "[yellow]not simulated (--verify 0): steady state only[/]"
        parts.append(f"[bold green]answer:[/] #{a.candidate.id} {a.candidate.label()} × {a.replicas} = "
                     f"[bold]{a.gpus} GPUs[/], {a.per_replica(t):,.3g} {t.unit} per replica "
                     f"({a.headroom(t):.2f}× headroom); {how}")
    table = Table(title=f"options (fewest GPUs first; {len(res.options)} in all, identical figures folded)")
    for col in ("#", "deployment (one replica)", "GPUs", "replicas", f"capacity/replica ({t.unit})",
                f"load/replica ({t.unit})", "TTFT ms at capacity", "TPOT ms at capacity", "simulated at load",
                "source", "why it lost"):
        table.add_column(col, justify="right" if col in ("GPUs", "replicas") else "left")
    shown, folded = 0, 0
    last = None
    for o in res.options:
        key = _figures(o)
        if key == last and o is not a:
            folded += 1
            continue
        last = key
        if shown > top:
            break
        shown += 1
        sim = (f"{_ms(o.sim.ttft_ms)} / {_ms(o.sim.tpot_ms)} ms" if o.sim else
               ("missed" if o.failed_sims else "–"))
        table.add_row(str(o.candidate.id), o.candidate.label(), str(o.gpus), str(o.replicas), f"{o.capacity:,.3g}",
                      f"{o.per_replica(t):,.3g}", _ms(o.fast.ttft_ms), _ms(o.fast.tpot_ms), sim,
                      _src(o.fast.ttft_source), o.reason or ("[green]answer[/]" if o is a else ""))
    parts.append(table)
    lost = res.to_json()["cannot_serve"]
    if lost:
        parts.append("cannot serve the load: " + "; ".join(f"{n} {why}" for why, n in sorted(lost.items())))
    line = refined_line(units)
    if line:
        parts.append(line)
    parts.append("[dim]capacity and TTFT/TPOT at capacity: steady state (closed loop, max_num_seqs clients per "
                 "(decode) instance); 'simulated at load': one replica at its share of the load[/]")
    return Group(*parts)


def refined_line(res: SearchResult) -> str:
    """What refinement gained: the best of the coarse grid against the best (empty without refinement)."""
    cmp = res.coarse_vs_refined()
    if not res.refinements:
        return ""
    rf = "; ".join(f"#{x.refined_from} {x.axis} {x.values[0]} → {x.values[1]} (next grid value {x.values[2]} misses, "
                   f"{x.gain:+.1%})" for x in res.refinements)
    out = f"refined to the SLO boundary (steady state): {rf}"
    if cmp and cmp.get("gain") is not None:
        out += (f"\nbest of the coarse grid #{cmp['coarse']} {cmp['coarse_tokens_per_s_per_gpu']:,.0f} tokens/s per GPU "
                f"({cmp['coarse_method']}) → best #{cmp['refined']} {cmp['refined_tokens_per_s_per_gpu']:,.0f} "
                f"({cmp['refined_method']}): {cmp['gain']:+.1%}")
    return out
