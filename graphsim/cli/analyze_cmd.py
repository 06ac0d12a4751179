"""`graphsim analyze`: hold every predicted kernel of one batch against the work the model must do."""

from __future__ import annotations

import json

import typer

from graphsim.cli.app import app, console


@app.command("analyze")
def analyze_cmd(
    model: str = typer.Argument(..., help="Catalog name, HF id, config.json or model directory."),
    gpu: str = typer.Option("h200", "--gpu", help="Hardware spec id or alias (h100, h200, b200, a100, l40s) or a JSON spec."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel size: 1 or equal to --tp (experts over the TP ranks)."),
    batch: str = typer.Option("decode:64x2048", "--batch", "-b",
                              help="One exact batch: prefill:BxN[@P], decode:BxC or mixed:BxN@P+BxC."),
    profile: str | None = typer.Option(None, "--profile", help="profile.db with measured rows (default: "
                                          "$GRAPHSIM_HOME/profiles/<gpu>_vllm.db when present)."),
    kv_dtype: str | None = typer.Option(None, "--kv-dtype", help="KV-cache dtype (default: the model dtype)."),
    dtype: str | None = typer.Option(None, "--dtype", help="Override the model dtype."),
    maps: list[str] | None = typer.Option(None, "--map", help="Location map file(s) to use instead of the "
                                             "shipped ones (repeatable)."),
    draft_map: str | None = typer.Option(None, "--draft-map", help="Write a skeleton location map of this "
                                            "deployment (every location, no rows yet) to this file."),
    table: bool = typer.Option(True, "--table/--no-table", help="Show the per-location table."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Necessary-work coverage (R6) and redundancy (R7) of one batch on one deployment."""
    from graphsim.analysis import analyze_prepared, prepare_model, write_draft_map
    from graphsim.cli.app import err_console
    from graphsim.work.analyzer import load_map

    for path in maps or []:  # a broken map file fails before the trace
        load_map(path)
    with err_console.status(f"tracing {model} on the meta device, fusing and pricing…"):
        prepared = prepare_model(model, gpu=gpu, tp=tp, ep=ep, batch=batch, profile=profile, kv_dtype=kv_dtype,
                                 dtype=dtype)
    analysis = analyze_prepared(prepared, maps)
    if draft_map:
        write_draft_map(prepared, draft_map)
    if as_json:
        print(json.dumps(analysis.to_dict(), indent=1, default=str))
        return
    from graphsim.render.analysis_view import render_analysis

    console.print(render_analysis(analysis, table, console))
    if draft_map:
        console.print(f"draft location map written to {draft_map}")
