"""`graphsim predict`: price explicit batch shapes (no scheduler) on a GPU."""

from __future__ import annotations

import json

import typer

from graphsim.cli import options as opt
from graphsim.cli.app import app, console
from graphsim.cli.sources import load_source


@app.command("predict")
def predict_cmd(
    model: opt.GraphModel,
    gpu: opt.Gpu = opt.DEFAULT_GPU,
    tp: opt.Tp = 1,
    ep: opt.Ep = 1,
    batch: opt.Batches = None,
    profile: opt.Profile = None,
    target: opt.Target = "vllm",
    kv_dtype: opt.KvDtype = None,
    dtype: opt.Dtype = None,
    tree: bool = typer.Option(True, "--tree/--no-tree", help="Show the cost tree."),
    limit: opt.Limit = 25,
    as_json: opt.Json = False,
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
