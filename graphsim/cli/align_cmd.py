"""`graphsim align MODEL --capture FILE [--profile DB]`: hold the fused kernels of one iteration
against a real capture (decision table), and with a profile, predicted vs measured per kernel."""

from __future__ import annotations

import json

import typer

from graphsim.cli import options as opt
from graphsim.cli.app import app, console
from graphsim.cli.sources import load_source
from graphsim.errors import GraphsimError


@app.command("align")
def align_cmd(
    model: opt.GraphModel,
    capture: str = typer.Option(..., "--capture", "-c", help="torch.profiler trace, nsys SQLite export or JSON kernel list."),
    profile: str | None = typer.Option(None, "--profile", help="profile.db: add predicted vs measured time per kernel."),
    batch: str | None = typer.Option(None, "--batch", "-b", help=f"The step the captured iteration ran ({opt.BATCH_SPEC}); "
                                                                 "default: the iteration's label when it is a batch spec."),
    target: opt.TargetOrAuto = None,
    tp: opt.Tp = 1,
    ep: opt.Ep = 1,
    dtype: opt.Dtype = None,
    gpu: opt.GpuOfProfile = None,
    iteration: int | None = typer.Option(None, "--iteration", "-i", help="Iteration index (default: the last "
                                            "of --phase, else the last of the capture)."),
    phase: str | None = typer.Option(None, "--phase", help="Phase whose last iteration to align."),
    range_: opt.IterationRange = None,
    limit: opt.Limit = 25,
    as_json: opt.Json = False,
) -> None:
    """Align one captured iteration with the fused kernel graph and print the decision table."""
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.align_report import build_report
    from graphsim.importers.captures import load_capture

    cap = load_capture(capture, range_)
    it = cap.select(iteration, phase)
    target = target or ("eager" if cap.device == "cpu" else "vllm")
    spec = batch or it.batch_spec()
    if profile and spec is None:
        raise GraphsimError(f"--profile needs the step the capture ran: give --batch (e.g. --batch decode:64x2048); "
                            f"the iteration's label '{it.label}' is not a batch spec")
    # only the given profile is priced from (no default db): without --profile nothing is priced
    cm = build_cost_model(lambda: load_source(model, dtype), gpu, tp=tp, ep=ep, dtype=dtype, profile=profile,
                          default_profile=False, target=target)
    graph = cm.graph
    predicted = total = None
    note = ""
    if profile and cm.db is not None:
        from graphsim.costing.predict import predict
        from graphsim.workload import parse_batch_spec

        assert spec is not None
        pred = predict(cm, [parse_batch_spec(spec)], [spec])
        b = pred.batches[0]
        predicted = {r.node: (r.total_us, r.source) for r in b.rows}
        total = (b.total_us, b.source)
        fallback = f"the {cm.hardware.id} roofline" if cm.hardware else "missing (no hardware spec for a roofline)"
        note = f"rows of {profile} ({cm.db.meta.device}); where the rows do not reach: {fallback}"
    report = build_report(graph, cap, it, target=target if not str(model).endswith(".json") else "saved graph",
                          predicted=predicted, batch=spec if profile else None, predicted_total=total, data_note=note)
    if as_json:
        print(json.dumps(report.to_json(), indent=1, default=str))
        return
    from graphsim.render.align_view import render_alignment

    console.print(render_alignment(report, limit))
