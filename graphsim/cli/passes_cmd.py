"""`graphsim passes`: run a pass pipeline on a model or saved graph and show what changed."""

from __future__ import annotations

import json

import typer

from graphsim.cli import options as opt
from graphsim.cli.app import app, console
from graphsim.cli.sources import load_source

DEFAULT_PIPELINE = "fold,fuse{target=vllm}"


@app.command("passes")
def passes(
    source: str | None = typer.Argument(None, help="A saved graph (.json), an ONNX file, or a model (catalog name, HF id, config)."),
    pipeline: str = typer.Option(DEFAULT_PIPELINE, "--pipeline", "-p",
                                 help="Passes to run, e.g. 'fold,fuse{target=vllm},tp{size=4},ep{size=8}'."),
    show: bool = typer.Option(True, "--show/--no-show", help="Show each pass and one layer of each type."),
    list_passes: bool = typer.Option(False, "--list", help="List the registered passes and their options."),
    output: opt.GraphOutput = None,
    as_json: opt.Json = False,
    trust_remote_code: opt.TrustRemoteCode = False,
) -> None:
    """Run passes (fold, fuse, tp, ep) and show counts per rule and the kernels of each layer type."""
    from graphsim.errors import GraphsimError
    from graphsim.passes import PASSES, parse_pipeline, run_pipeline

    if list_passes:
        parse_pipeline("fold")  # loads the built-in passes
        from dataclasses import fields

        rows = {name: {f.name: repr(f.default) for f in fields(cls)} for name, cls in sorted(PASSES.items())}
        if as_json:
            print(json.dumps(rows, indent=1))
        else:
            for name, opts in rows.items():
                console.print(f"[bold]{name}[/] " + " ".join(f"{k}={v}" for k, v in opts.items()))
        return
    if source is None:
        raise GraphsimError("pass a model or a saved graph, e.g. `graphsim passes llama-3.1-8b`")
    if output is not None:
        from graphsim.cli.import_cmd import _check_output

        _check_output(output)
    steps = parse_pipeline(pipeline)  # fail on a bad pipeline before any tracing
    graph = load_source(source)
    run = run_pipeline(graph, steps)
    if output is not None:
        from graphsim.ir import save_graph

        save_graph(run.graph, output)
    from graphsim.render.passes_view import render_summary, run_summary

    summary = run_summary(graph, run)
    if as_json:
        print(json.dumps(summary, indent=1, default=str))
    elif show:
        console.print(render_summary(summary))
    if output is not None and not as_json:
        console.print(f"[green]wrote[/] {output}")
