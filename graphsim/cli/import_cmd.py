"""`graphsim import` and `graphsim show`: trace a model into the IR, render a saved graph."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from graphsim.cli import options as opt
from graphsim.cli.app import app, console, err_console
from graphsim.errors import GraphsimError


def _check_output(path: Path) -> None:
    """Fail before any work if the output cannot be written (nothing half-written later)."""
    from graphsim.atomic import check_writable

    try:
        is_dir = path.is_dir()
    except (OSError, ValueError):  # a name the OS refuses (too long, a NUL byte): check_writable names it
        is_dir = False
    if is_dir:
        raise GraphsimError(f"cannot write {path}: it is a directory; pass a file path such as {path}/graph.json")
    check_writable(path.expanduser())  # a missing or unwritable directory, a read-only or pseudo file system


@app.command("import")
def import_model(
    model: str = typer.Argument(..., help="Catalog name, HF id, config.json, model directory, or .onnx file."),
    revision: opt.Revision = None,
    trust_remote_code: opt.TrustRemoteCode = False,
    output: opt.GraphOutput = None,
    dtype: opt.Dtype = None,
    as_json: opt.Json = False,
    max_ops: opt.MaxOps = 40,
    text: opt.Text = False,
) -> None:
    """Trace a model on the meta device (no weights) into graphsim's IR and show it as a tree."""
    if output is not None:
        _check_output(output)
    from graphsim.ir import graph_to_text, save_graph

    if model.endswith(".onnx"):
        from graphsim.importers.onnx_importer import import_onnx

        graph = import_onnx(model)
        report = {"model": graph.name, "source_format": "onnx", "nodes": len(graph.nodes),
                  "opaque_ops": graph.meta.opaque_ops}
    else:
        from graphsim.importers.hf import import_hf

        with err_console.status(f"tracing {model} on the meta device…"):
            graph, rep = import_hf(model, dtype=dtype)
        report = rep.to_json()
    if output is not None:
        save_graph(graph, output)
        report["output"] = str(output)
    if as_json:
        print(json.dumps(report, indent=1, default=str))
        return
    if text:
        print(graph_to_text(graph), end="")
        return
    from graphsim.render.graph_tree import render_graph

    console.print(render_graph(graph, max_ops))
    if report.get("remote_code"):
        console.print(f"built from the model's own code in {report['remote_code']} (--trust-remote-code)",
                      highlight=False)
    if output is not None:
        console.print(f"[green]wrote[/] {output}")


@app.command("show")
def show(
    file: Path = typer.Argument(..., help="A graph JSON written by `graphsim import -o`."),
    as_json: opt.Json = False,
    max_ops: opt.MaxOps = 40,
    text: opt.Text = False,
) -> None:
    """Render a saved graph."""
    from graphsim.ir import graph_to_text, load_graph
    from graphsim.render.graph_tree import graph_totals, render_graph

    graph = load_graph(file)
    if as_json:
        print(json.dumps(graph_totals(graph), indent=1, default=str))
    elif text:
        print(graph_to_text(graph), end="")
    else:
        console.print(render_graph(graph, max_ops))
