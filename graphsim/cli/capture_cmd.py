"""`graphsim capture show FILE`: a captured kernel trace, folded per phase and sorted by share."""

from __future__ import annotations

import json

import typer

from graphsim.cli import options as opt
from graphsim.cli.app import app, console

capture_app = typer.Typer(help="Real kernel captures: torch profiler traces, nsys SQLite exports, JSON kernel lists.",
                          no_args_is_help=True)
app.add_typer(capture_app, name="capture")


@capture_app.command("show")
def capture_show_cmd(
    file: str = typer.Argument(..., help="torch.profiler Chrome trace (.json/.json.gz), nsys SQLite export, or a JSON kernel list."),
    phase: str | None = typer.Option(None, "--phase", help="Show one phase only (a range name without its counter)."),
    range_: opt.IterationRange = None,
    limit: opt.Limit = 25,
    as_json: opt.Json = False,
    launches: bool = typer.Option(False, "--launches", help="With --json: include every launch of every iteration."),
) -> None:
    """Show the launches of each phase: the repeating block and every launch name by share of time."""
    from graphsim.importers.captures import load_capture
    from graphsim.importers.captures.summary import summarize

    cap = load_capture(file, range_)
    summaries = summarize(cap, phase)
    if as_json:
        out = {k: v for k, v in cap.to_json().items() if k != "iterations" or launches}
        out["phases"] = [s.to_json() for s in summaries]
        print(json.dumps(out, indent=1))
        return
    from graphsim.render.capture_view import render_capture

    console.print(render_capture(cap, summaries, limit))
