"""`graphsim predict`: price explicit batch shapes (no scheduler) on a GPU."""

from __future__ import annotations

import json

import typer

from graphsim.cli.app import app, console
from graphsim.cli.sources import load_source


@app.command("predict")
def predict_cmd(
    model: str = typer.Argument(..., help="Catalog name, HF id, config.json, model dir, ONNX file, or a saved graph (.json)."),
    gpu: str = typer.Option("h200", "--gpu", help="Hardware spec id or alias (h100, h200, b200, a100, l40s) or a JSON spec."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel size (MoE models)."),
    batch: list[str] | None = typer.Option(None, "--batch", "-b",
                                              help="prefill:BxN[@P], decode:BxC or mixed:BxN@P+BxC (repeatable)."),
    profile: str | None = typer.Option(None, "--profile", help="profile.db with measured rows (default: "
                                          "$GRAPHSIM_HOME/profiles/<gpu>_vllm.db when present)."),
    target: str = typer.Option("vllm", "--target", help="Fuse target: vllm or eager."),
    kv_dtype: str | None = typer.Option(None, "--kv-dtype", help="KV-cache dtype (default: the model dtype)."),
    dtype: str | None = typer.Option(None, "--dtype", help="Override the model dtype."),
    tree: bool = typer.Option(True, "--tree/--no-tree", help="Show the cost tree."),
    limit: int = typer.Option(25, "--limit", help="Rows in the per-kernel table."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Predict iteration times for explicit batches; every number says where it came from."""
    from graphsim.costing.hardware import load_hardware
    from graphsim.costing.predict import choose_data, predict
    from graphsim.passes import run_pipeline
    from graphsim.workload import parse_batch_spec

    specs = batch or ["prefill:1x2048", "decode:64x2048"]
    steps = [parse_batch_spec(s) for s in specs]
    hw = load_hardware(gpu)
    db, note = choose_data(hw, profile)
    graph = load_source(model, dtype)
    from graphsim.ir import Op

    if not any(n.op is Op.KERNEL for n in graph.nodes):
        pipe = f"fold,fuse{{target={target}}}" + (f",tp{{size={tp}}}" if tp > 1 else "") + (f",ep{{size={ep}}}" if ep > 1 else "")
        graph = run_pipeline(graph, pipe).graph
    pred = predict(graph, hw, db, steps, specs, kv_dtype, note)
    if as_json:
        print(json.dumps(pred.to_json(), indent=1, default=str))
        return
    from graphsim.render.cost_view import render_prediction

    console.print(render_prediction(pred, tree, limit))
