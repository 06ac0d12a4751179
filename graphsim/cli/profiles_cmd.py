"""`graphsim profiles ...`: import measured kernel data, inspect profile.db files, hardware specs."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from graphsim.cli import options as opt
from graphsim.cli.app import app, console, err_console

profiles_app = typer.Typer(
    help="profile.db files: import measured kernel data, inspect them, list hardware specs.",
    no_args_is_help=True,
)
app.add_typer(profiles_app, name="profiles")


@profiles_app.command("import-aiconfigurator")
def import_aiconfigurator_cmd(
    system: str = typer.Option(..., "--system", help="aiconfigurator system, e.g. h200_sxm, h100_sxm, b200_sxm, a100_sxm, l40s."),
    backend: str = typer.Option(..., "--backend", help="Serving backend whose tables to read: vllm, sglang or trtllm."),
    version: str = typer.Option(None, "--version", help="Backend version (default: the package's current one for the system)."),
    out: Path = typer.Option(None, "-o", "--output", help="profile.db to write (merged into if it exists for the same device and backend; default: $GRAPHSIM_HOME/profiles/<system>_<backend>.db, where `graphsim predict` looks)."),
    tables: str = typer.Option(None, "--tables", help="Comma-separated table stems to import (default: all), e.g. gemm_perf,nccl_perf."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output file."),
    as_json: opt.Json = False,
) -> None:
    """Convert the measured GPU tables shipped in aiconfigurator-core into a profile.db."""
    from graphsim.costing.aiconfigurator_import import aiconfigurator_root, import_aiconfigurator

    root = aiconfigurator_root()  # a missing package fails here, before the progress bar starts
    if out is None:
        from graphsim.costing.predict import default_profile_path

        out = default_profile_path(system, backend)
    from graphsim.atomic import check_writable

    check_writable(out, make_parents=True)  # before the tables are read, not after
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=as_json or not err_console.is_terminal) as progress:
        task = progress.add_task("aiconfigurator import", total=None)

        def on_progress(what: str, done: int, total: int) -> None:
            progress.update(task, description=what, completed=done, total=total)

        wanted = [t.strip() for t in tables.split(",") if t.strip()] if tables else None
        report = import_aiconfigurator(system, backend, out, version=version, tables=wanted, overwrite=overwrite,
                                       progress=on_progress, root=root)

    if as_json:
        print(json.dumps({
            "db": str(report.db_path), "system": report.system, "backend": report.backend,
            "version": report.version, "package_version": report.package_version, "device": report.device,
            "tables": [{**asdict(t), "kind": t.kind.value} for t in report.tables],
            "not_found": list(report.not_found),
            "counts": {k.value: v for k, v in report.counts.items()},
        }, indent=1))
        return
    table = Table(title=f"{report.system} / {report.backend} {report.version} → {report.db_path} "
                        f"(aiconfigurator-core {report.package_version}, {report.device})")
    for col in ("table", "kind", "from version", "rows", "notes"):
        table.add_column(col, justify="right" if col == "rows" else "left")
    for t in report.tables:
        version_note = t.version + (" (back-filled)" if t.back_filled else "")
        table.add_row(t.table, t.kind.value, version_note, f"{t.rows_written:,}", t.summary)
    console.print(table)
    if report.not_found:
        console.print(f"not in the package for this system/backend: {', '.join(report.not_found)}")


@profiles_app.command("show")
def show_cmd(
    db: Path = typer.Argument(..., help="profile.db file."),
    as_json: opt.Json = False,
) -> None:
    """Print a profile.db's meta table, row counts per kernel table, and the launch floor and achieved bandwidth
    its rows give kernels without rows (`derived` prices)."""
    from graphsim.costing.derived import compute_rates
    from graphsim.costing.errors import HardwareSpecError
    from graphsim.costing.hardware import load_hardware
    from graphsim.costing.profile_db import ProfileDB
    from graphsim.costing.row_checks import check_rows

    with ProfileDB.open(db) as pdb:
        meta = pdb.meta
        counts = pdb.counts()
        invalid = pdb.invalid_rows()
        keys = {kind: len(pdb.keys(kind)) for kind, n in counts.items() if n}
        try:
            spec = load_hardware(meta.hardware) if meta.hardware else None
        except HardwareSpecError:  # a spec id this graphsim does not ship: no bandwidth to classify rows with
            spec = None
        rates = compute_rates(pdb, spec) if spec is not None else None
        checks = check_rows(pdb, spec, rates.floor_us if rates is not None else 0.0)
    meta_rows = dict(meta.to_rows())
    if as_json:
        print(json.dumps({
            "db": str(db),
            "meta": {**meta_rows, "provenance": meta.provenance, "schema_version": meta.schema_version},
            "rows": {k.value: n for k, n in counts.items()},
            "geometries": {k.value: n for k, n in keys.items()},
            "invalid_rows": {k.value: n for k, n in invalid.items()},
            "row_checks": checks.to_json(),
            "derived": None if rates is None else {
                "floor_us": rates.floor_us, "bandwidth_bytes_per_s": rates.bandwidth_bytes_per_s,
                "rows": rates.rows, "bandwidth_bound_rows": rates.bound_rows},
        }, indent=1))
        return
    mt = Table(title=f"{db} — meta", show_header=False)
    mt.add_column("field", style="bold")
    mt.add_column("value")
    for field_name, value in meta_rows.items():
        if field_name != "provenance":
            mt.add_row(field_name, value)
    for k, v in sorted(meta.provenance.items()):
        mt.add_row(f"provenance.{k}", v)
    console.print(mt)
    ct = Table(title="rows per kernel table")
    ct.add_column("table")
    ct.add_column("rows", justify="right")
    ct.add_column("geometries", justify="right")
    for kind, n in counts.items():
        ct.add_row(kind.value, f"{n:,}", f"{keys.get(kind, 0):,}")
    ct.add_row("[bold]total[/]", f"[bold]{sum(counts.values()):,}[/]", "")
    for kind, n in invalid.items():
        ct.add_row(f"[red]{kind.value}: invalid[/]", f"[red]{n:,}[/]", "time not a finite positive number: never used")
    console.print(ct)
    colour = "green" if checks.clean else "yellow"
    console.print(f"row checks: [{colour}]{escape(checks.describe())}[/]", soft_wrap=True)
    for example in checks.examples:
        console.print(f"  [yellow]suspect[/] {escape(example)}", soft_wrap=True)
    if rates is not None:
        console.print(f"kernels without rows, where memory-bound: [blue]derived[/] = {escape(rates.describe())}")
    else:
        console.print("kernels without rows: [magenta]roofline[/] (no hardware spec in the meta, or too few "
                      "bandwidth-bound rows for a derived price)")


@profiles_app.command("hardware")
def hardware_cmd(as_json: opt.Json = False) -> None:
    """List the shipped hardware specs (datasheet peaks used by the roofline fallback)."""
    from graphsim.costing.hardware import list_hardware

    specs = list_hardware()
    if as_json:
        print(json.dumps([s.to_json() for s in specs], indent=1))
        return
    table = Table(title="hardware specs (dense peaks)")
    for col in ("id", "name", "memory GiB", "HBM TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "link GB/s",
                "network GB/s"):
        table.add_column(col, justify="left" if col in ("id", "name") else "right", no_wrap=col == "id")

    def tf(v: float | None) -> str:
        return "—" if v is None else f"{v / 1e12:,.0f}"

    from graphsim.costing.dtypes import PeakClass

    for s in specs:
        table.add_row(s.id, s.name, f"{s.memory_bytes / 2**30:,.0f}", f"{s.memory_bandwidth_bytes_per_s / 1e12:.2f}",
                      tf(s.peak_flops_per_s.get(PeakClass.BF16)), tf(s.peak_flops_per_s.get(PeakClass.FP8)),
                      tf(s.peak_flops_per_s.get(PeakClass.FP4)),
                      f"{s.topology().link.value} {s.interconnect_bandwidth_bytes_per_s / 1e9:,.0f}",
                      f"{s.network_bandwidth_bytes_per_s / 1e9:,.0f}" if s.network_bandwidth_bytes_per_s else "—")
    console.print(table)


@profiles_app.command("measure-cpu")
def measure_cpu_cmd(
    out: Path = typer.Option(None, "-o", "--output", help="Write the spec JSON here (default: print it)."),
    spec_id: str = typer.Option("local_cpu", "--id", help="Spec id to record."),
) -> None:
    """Measure this machine's peak FP32 GEMM FLOP/s and memory bandwidth (numpy) as a hardware spec."""
    from graphsim.atomic import check_writable
    from graphsim.costing.hardware import measure_cpu_spec, save_hardware

    if out is not None:
        check_writable(out, make_parents=True)  # before the seconds of measuring, not after them
    spec = measure_cpu_spec(spec_id=spec_id)
    if out is None:
        print(json.dumps(spec.to_json(), indent=2))
        return
    save_hardware(spec, out)
    console.print(f"{spec.name}: fp32 {spec.peak_flops_per_s[next(iter(spec.peak_flops_per_s))] / 1e9:,.1f} GFLOP/s, "
                  f"memory {spec.memory_bandwidth_bytes_per_s / 1e9:,.1f} GB/s → {out}")
