"""Rich rendering of `graphsim simulate`: the deployment, latencies, throughput and where times come from."""

from __future__ import annotations

import math

from rich.console import Group
from rich.markup import escape
from rich.table import Table

from graphsim.render.cost_view import SOURCE_STYLE
from graphsim.render.kv_view import max_model_len_note
from graphsim.serving.deployment import Deployment
from graphsim.serving.metrics import SLO, Stats, Summary


def _src(s: str) -> str:
    return f"[{SOURCE_STYLE.get(s, '')}]{s}[/]"


def shares_markup(shares: dict[str, float], worst: str | None = None) -> str:
    """Source shares of predicted time, coloured: 'measured 71.2%, interpolated 20.1%, roofline 8.7%'."""
    if not shares:
        return f"worst source {_src(worst)}" if worst else "no iterations"
    if len(shares) == 1:
        return f"all {_src(next(iter(shares)))}"
    return ", ".join(f"{_src(k)} {v:.1%}" if v >= 0.001 else f"{_src(k)} <0.1%" for k, v in shares.items())


def _ms(v: float) -> str:
    if v is None or math.isnan(v):
        return "–"
    return f"{v / 1e3:,.2f} s" if v >= 1e4 else f"{v:,.2f} ms"


def latency_table(s: Summary) -> Table:
    t = Table(title=f"latency (iteration times: {shares_markup(s.source_shares, s.source)})", title_justify="left")
    for col in ("metric", "count", "mean", "p50", "p90", "p99"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    rows: list[tuple[str, Stats]] = [("TTFT", s.ttft_ms), ("TPOT", s.tpot_ms), ("ITL", s.itl_ms), ("E2E", s.e2e_ms)]
    for name, st in rows:
        t.add_row(name, f"{st.count:,}", _ms(st.mean), _ms(st.p50), _ms(st.p90), _ms(st.p99))
    return t


def throughput_table(s: Summary) -> Table:
    t = Table(title=f"throughput over {s.duration_s:,.1f} s simulated ({s.gpus} GPU{'s' if s.gpus > 1 else ''}; "
                    f"iteration times: {shares_markup(s.source_shares, s.source)})", title_justify="left")
    for col in ("", "total", "per GPU"):
        t.add_column(col, justify="left" if not col else "right")
    t.add_row("requests/s", f"{s.requests_per_s:,.3f}", f"{s.per_gpu(s.requests_per_s):,.3f}")
    t.add_row("output tokens/s", f"{s.output_tokens_per_s:,.1f}", f"{s.per_gpu(s.output_tokens_per_s):,.1f}")
    t.add_row("total tokens/s", f"{s.total_tokens_per_s:,.1f}", f"{s.per_gpu(s.total_tokens_per_s):,.1f}")
    if s.goodput_requests_per_s is not None:
        t.add_row(f"goodput req/s ({s.slo_attained:.1%} met the SLOs)", f"{s.goodput_requests_per_s:,.3f}",
                  f"{s.per_gpu(s.goodput_requests_per_s):,.3f}")
    return t


def _engine_line(dep: Deployment, host_time: bool) -> str:
    """The engine version modelled and its host time per iteration (graphsim/serving/host.py), with the source."""
    e, p = dep.engine, dep.engine.profile
    h = e.host
    policy = "prefill-first (V0)" if e.prefill_first else "decode-first"
    if not host_time:
        return f"engine: {p.name} ({p.family}, {policy}); host time off (--no-host-time): GPU kernels only"
    how = "overlapped with the GPU step (async scheduling)" if h.overlap else "added to the GPU step"
    return (f"engine: {p.name} ({p.family}, {policy}); host time per iteration {h.step_us:,.0f} µs + "
            f"{h.per_seq_us:.1f} µs per sequence + sampling, {how} (derived; docs/serving.md)")


def render_summary(dep: Deployment, s: Summary, note: str, replicas: int, router: str, workload: str,
                   slo: SLO, host_time: bool = True) -> Group:
    e = dep.engine
    head = [f"[bold]{dep.model.name}[/] on [bold]{dep.hardware.id}[/] tp={dep.tp} × {replicas} replica(s)"
            + (f" ({router})" if replicas > 1 else "") + f": {workload}",
            f"[dim]engine: max_num_batched_tokens {e.max_num_batched_tokens:,}, max_num_seqs {e.max_num_seqs}, "
            f"max_model_len {e.max_model_len:,}, {dep.capacity.num_blocks:,} KV blocks of {dep.layout.block_size} "
            f"tokens per replica, prefix caching "
            f"{'on' if e.enable_prefix_caching and dep.layout.prefix_cacheable else 'off'}, chunked prefill "
            f"{'on' if e.enable_chunked_prefill else 'off'}[/]",
            f"[dim]{_engine_line(dep, host_time)}[/]",
            f"[dim]data:[/] {note}"]
    head += max_model_len_note(e)
    if e.enable_prefix_caching and not dep.layout.prefix_cacheable:
        head.append("[dim]prefix caching is not simulated for hybrid KV layouts (sliding windows, state)[/]")
    if dep.budget.given_available is None and dep.budget.source != "derived":
        head.append(f"[dim]KV memory {dep.capacity.available_bytes / (1 << 30):,.2f} GiB per rank is "
                    f"{dep.budget.source} (see graphsim kv; --kv-memory gives it)[/]")
    if dep.graph is not None:  # no accountant model: layout and budget read off the traced graph
        head.append(f"[dim]KV layout and memory budget: {dep.layout.source} ({escape(dep.graph.reason)}; "
                    "docs/serving.md)[/]")
    tally = ", ".join(f"{_src(k)} {v:,}" for k, v in s.source_counts.items())  # iterations by their worst source
    lines = [f"{s.completed:,} of {s.requests:,} requests completed"
             + (f", {s.rejected} rejected (prompt ≥ max_model_len)" if s.rejected else "")
             + f"; {s.iterations:,} iterations (worst kernel source: {tally}); {s.preemptions:,} preemptions; "
             f"prefix-cache hit "
             f"{s.prefix_hit_rate:.1%}; mean batch {s.mean_batch_tokens:,.0f} tokens, {s.mean_running:,.1f} running",
             f"Little's law: {s.little_l_observed:,.2f} requests in the system on average (engine queues) vs "
             f"λ·W = {s.little_lambda_w:,.2f}"]
    if s.host_share:
        lines.append(f"host time (scheduling, input prep, sampling; derived, docs/serving.md): {s.host_share:.1%} of "
                     "the engine busy time")
    if s.source_shares:
        basis = ("share of the predicted kernel time by source" if s.source_basis == "kernel" else
                 "share of the predicted kernel time by each iteration's worst kernel source")
        lines.append(f"{basis}: {shares_markup(s.source_shares)}")
    if s.all_roofline:
        lines.append("[magenta]every iteration time is a roofline estimate (no measured kernel rows were used)[/]")
    elif s.source in ("extrapolated", "derived", "roofline"):
        lines.append(f"[yellow]some kernel times are {s.source}[/]: see the shares above")
    lines.append(f"[dim]simulated in {s.wall_s:,.2f} s wall[/]")
    return Group(*head, latency_table(s), throughput_table(s), *lines)
