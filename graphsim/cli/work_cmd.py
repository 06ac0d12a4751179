"""`graphsim work`: the config-only work accountant — necessary FLOPs, bytes and parameters."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from graphsim.cli import options as opt
from graphsim.cli.app import app, console
from graphsim.versions import versions

if TYPE_CHECKING:  # imported when the command runs: the CLI starts without them
    from graphsim.work import ParamReport, WorkReport
    from graphsim.work.api import Accounting


def _si(value: float, unit: str = "") -> str:
    """Compact SI form: 3 significant digits and a prefix (`10.4 T`, `616 M`)."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            scaled = value / factor
            digits = 2 if scaled < 10 else 1 if scaled < 100 else 0
            return f"{scaled:.{digits}f} {prefix}{unit}"
    return f"{value:.0f} {unit}".rstrip()


def _count(value: float) -> str:
    return f"{value / 1e9:,.3f} B" if value >= 1e8 else f"{value:,.0f}"


def _schedule(acc: Accounting) -> str:
    kinds = Counter(acc.spec.stack.schedule())
    parts = ", ".join(f"{n}× {kind}" for kind, n in kinds.items())
    return f"{len(acc.spec.stack)} layers ({parts})"


def _header(name: str, location: str, acc: Accounting) -> None:
    p = acc.precision.describe()
    console.print(f"[bold]{escape(name)}[/] · {acc.spec.architecture} · {escape(_schedule(acc))}")
    console.print(
        f"[dim]config {escape(location)}; weights {p['weight']} ({p['weight_source']}), quantization {p['quantization']}, "
        f"KV {p['kv']} ({p['kv_source']}), state {p['state']}[/]",
        soft_wrap=True,
    )


def _render_params(report: ParamReport) -> None:
    table = Table(title="parameters")
    table.add_column("segment", no_wrap=True)
    for col in ("params", "activated / token", "stored"):
        table.add_column(col, justify="right", no_wrap=True)
    for s in report.segments:
        table.add_row(escape(s.name), _count(s.params), _count(s.params_activated), _si(s.stored_bytes, "B"))
    table.add_section()
    table.add_row("total", _count(report.total), _count(report.activated), _si(report.stored_bytes, "B"), style="bold")
    console.print(table)
    console.print(
        f"total {report.total:,} params; activated per token {report.activated:,} "
        f"({report.activated_with_embedding:,} counting the input embedding table)"
    )
    for note in report.notes:
        console.print(f"[dim]note: {escape(note)}[/]")


def _render_step(report: WorkReport) -> None:
    step = report.step
    show_worst = any(s.param_read_bytes_worst != s.param_read_bytes for s in report.segments)
    console.print(f"step {step.label()}: T = {step.tokens:,} new tokens, {step.sequences:,} sequences", soft_wrap=True)
    table = Table(title="necessary work per segment")
    table.add_column("segment", no_wrap=True)
    table.caption = "params: parameter bytes read" + (" (worst: all T·k expert picks distinct)" if show_worst else "")
    table.caption += "; state: KV/state bytes read, written"
    cols = ["FLOP", "params"] + (["worst"] if show_worst else []) + ["state rd", "state wr"]
    for col in cols:
        table.add_column(col, justify="right", no_wrap=True)

    def row(s, **kw) -> None:
        cells = [_si(s.flops), _si(s.param_read_bytes)]
        cells += [_si(s.param_read_bytes_worst)] if show_worst else []
        cells += [_si(s.state_read_bytes), _si(s.state_write_bytes)]
        table.add_row(escape(s.name), *cells, **kw)

    for s in report.segments:
        row(s)
    table.add_section()
    row(report.total, style="bold")
    console.print(table)
    total = report.total
    console.print(
        f"FLOPs {_si(total.flops, 'FLOP')} (matmul {_si(report.matmul_flops, 'FLOP')}, attention "
        f"{_si(report.attention_flops, 'FLOP')}); bytes {_si(total.bytes, 'B')} "
        f"(params {_si(total.param_read_bytes, 'B')}, KV/state {_si(total.state_read_bytes + total.state_write_bytes, 'B')}); "
        f"{total.flops / total.bytes:,.1f} FLOP/B"
    )
    for note in report.notes:
        console.print(f"[dim]note: {escape(note)}[/]")


@app.command("work")
def work(
    model: opt.ConfigModel,
    revision: opt.Revision = None,
    trust_remote_code: opt.TrustRemoteCode = False,
    prefill: list[str] | None = typer.Option(
        None, "--prefill", help="N@P: N new tokens after P cached (repeatable; K*N@P for K sequences)."
    ),
    decode: list[str] | None = typer.Option(
        None, "--decode", help="BxC: B sequences, one new token each after C cached (repeatable)."
    ),
    params: bool = typer.Option(False, "--params", help="Show parameter counts (the default without a workload)."),
    dtype: opt.Dtype = None,
    kv_dtype: opt.KvDtype = None,
    state_dtype: str | None = typer.Option(None, "--state-dtype", help="Recurrent-state dtype (default: --dtype)."),
    ignore_quant: bool = typer.Option(False, "--ignore-quant", help="Ignore quantization_config; weights in --dtype."),
    as_json: opt.Json = False,
) -> None:
    """Necessary work of a model from its config alone: FLOPs, bytes and parameters per segment.

    Several --prefill/--decode options together form one mixed step.
    """
    from graphsim.catalog import resolve_model
    from graphsim.work import accounting, parse_step

    resolved = resolve_model(model)
    acc = accounting(resolved.config, dtype, kv_dtype, state_dtype, ignore_quant)
    has_step = bool(prefill or decode)
    step_report = acc.step(parse_step(prefill or (), decode or ())) if has_step else None
    param_report = acc.params() if (params or not has_step) else None
    if as_json:
        out: dict = {"model": resolved.name, "architecture": acc.spec.architecture, "config": resolved.location}
        if param_report is not None:
            out["params"] = param_report.to_dict()
        if step_report is not None:
            out["work"] = step_report.to_dict()
        out["versions"] = versions(priced=False)
        print(json.dumps(out, indent=1))
        return
    _header(resolved.name, resolved.location, acc)
    if param_report is not None:
        _render_params(param_report)
    if step_report is not None:
        _render_step(step_report)
