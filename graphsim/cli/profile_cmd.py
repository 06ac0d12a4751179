"""`graphsim profile`: measure the kernels a model needs on this machine into a profile.db."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from graphsim.cli import options as opt
from graphsim.cli.app import app, console, err_console


@app.command("profile")
def profile_cmd(
    model: str = typer.Option(..., "--model", "-m", help="Model: catalog name, HF id, config.json or model dir."),
    out: Path = typer.Option(..., "-o", "--output", help="profile.db to write (resumed if it exists for this device)."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda (cuda:N for one GPU)."),
    tp: opt.Tp = 1,
    target: opt.TargetOrAuto = None,
    kinds: str | None = typer.Option(None, "--kinds", help="Comma-separated kernel kinds, e.g. gemm,attention,rms_norm "
                                        "(also moe, norm, attention_prefill, attention_decode). Default: all."),
    dtype: opt.Dtype = None,
    kv_dtype: opt.KvDtype = None,
    quick: bool = typer.Option(False, "--quick", help="Trimmed generic grid and shorter timing (CPU-friendly)."),
    max_m: int | None = typer.Option(None, "--max-m", min=1, help="Largest GEMM m / token count to measure."),
    max_kv: int | None = typer.Option(None, "--max-kv", min=1, help="Largest attention kv_len to measure."),
    threads: int | None = typer.Option(None, "--threads", min=1, help="torch CPU threads (default: all cores)."),
    max_points: int | None = typer.Option(None, "--max-points", min=1, help="Stop after this many new rows (rerun to resume)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output file."),
    as_json: opt.Json = False,
) -> None:
    """Measure the model's kernels (GEMM, attention, norms, MoE, elementwise, ...) over generic grids."""
    from graphsim.atomic import check_writable
    from graphsim.profiles.profiler import profile_model

    check_writable(out, make_parents=True)  # before the trace and the measuring, not after them
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=err_console, transient=True,
                  disable=not err_console.is_terminal) as progress:  # on a pipe rich's bar still leaves a newline
        task = progress.add_task(f"profiling {model}", total=None)

        def on_graph(stage: str) -> None:
            progress.update(task, description=stage)

        def on_progress(what: str, done: int, total: int) -> None:
            progress.update(task, description=escape(what[:70]), completed=done, total=total)

        report = profile_model(model, out, device=device, tp=tp, target=target, kinds=kinds, dtype=dtype,
                               kv_dtype=kv_dtype, quick=quick, max_m=max_m, max_kv=max_kv, threads=threads,
                               max_points=max_points, overwrite=overwrite, progress=on_progress, on_graph=on_graph)
    if as_json:
        print(json.dumps(report.to_json(), indent=1))
        return
    _render(report)


def _render(report) -> None:
    per_table: dict[str, list[int]] = {}
    for k in report.keys:
        row = per_table.setdefault(k.table, [0, 0, 0, 0, 0])
        row[0] += 0 if k.unmeasurable else 1
        row[1] += k.written
        row[2] += k.existing
        row[3] += k.failed
        row[4] += 1 if k.unmeasurable else 0
    table = Table(title=f"{escape(report.model)} on {escape(report.device)} ({report.threads} threads, "
                        f"{report.pipeline}) → {escape(report.db_path)}")
    for col in ("table", "keys", "rows written", "already there", "points failed", "keys unmeasurable"):
        table.add_column(col, justify="left" if col == "table" else "right")
    for name, (keys, written, existing, failed, unmeasurable) in per_table.items():
        table.add_row(name, str(keys), f"{written:,}", f"{existing:,}", f"{failed:,}", str(unmeasurable))
    console.print(table)
    if report.unmeasurable:
        console.print("[bold]not measured[/]")
        for u in report.unmeasurable:
            console.print(f"  {escape(u['kernel'])} ×{u['nodes']}: {escape(u['reason'])}", soft_wrap=True)
    for f in report.failures:
        console.print(f"[yellow]skipped[/] {f['points']} point(s) of {escape(f['key'])} from {f['first']}: "
                      f"{escape(f['reason'])}", soft_wrap=True)
    for note in report.notes:
        console.print(f"[dim]note:[/] {escape(note)}", soft_wrap=True)
    if report.noisy:
        from graphsim.profiles.profiler.timer import RETRIES, SPREAD_LIMIT

        worst = max(report.noisy, key=lambda n: n["iqr_over_median"])
        console.print(f"[yellow]noisy:[/] {len(report.noisy):,} row(s) kept an interquartile range above "
                      f"{SPREAD_LIMIT:.0%} of the median after {RETRIES + 1} timings (a busy machine?); worst "
                      f"{worst['iqr_over_median']:.0%} at {escape(worst['key'])} {worst['point']}. They are stored with "
                      "their p10/p90; `graphsim profiles show` flags them", soft_wrap=True)
    state = "stopped at --max-points; rerun to continue" if report.stopped_early else "done"
    console.print(f"{report.rows_written:,} rows written, {report.rows_skipped_existing:,} already there, "
                  f"{report.elapsed_s:,.1f} s ({state})")
