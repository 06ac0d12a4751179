"""`graphsim analyze`: hold every predicted kernel of one batch against the work the model must do."""

from __future__ import annotations

import json

import typer

from graphsim.cli import options as opt
from graphsim.cli.app import app, console
from graphsim.versions import versions


@app.command("analyze")
def analyze_cmd(
    model: opt.ConfigModel,
    revision: opt.Revision = None,
    trust_remote_code: opt.TrustRemoteCode = False,
    gpu: opt.Gpu = opt.DEFAULT_GPU,
    tp: opt.Tp = 1,
    ep: opt.Ep = 1,
    batch: opt.Batch = "decode:64x2048",
    profile: opt.Profile = None,
    kv_dtype: opt.KvDtype = None,
    dtype: opt.Dtype = None,
    maps: list[str] | None = typer.Option(None, "--map", help="Location map file(s) to use instead of the "
                                             "shipped ones and the one derived from kernel order (repeatable)."),
    draft_map: str | None = typer.Option(None, "--draft-map", help="Write a skeleton location map of this "
                                            "deployment (every location, no rows yet) to this file."),
    table: bool = typer.Option(True, "--table/--no-table", help="Show the per-location table."),
    as_json: opt.Json = False,
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
    analysis = analyze_prepared(prepared, [*maps] if maps else None)
    if draft_map:
        write_draft_map(prepared, draft_map)
    if as_json:
        print(json.dumps({**analysis.to_dict(), "versions": versions(profile, gpu)}, indent=1, default=str))
        return
    from graphsim.render.analysis_view import render_analysis

    console.print(render_analysis(analysis, table, console))
    if draft_map:
        console.print(f"draft location map written to {draft_map}")
