"""`graphsim sweep`: one deployment, several request rates or concurrencies; throughput against TTFT/TPOT/E2E.

The model is traced and its cost tables priced once (`build_cost`); every point runs `simulate` on that one
setup, so a point costs only its simulation."""

from __future__ import annotations

import json
from typing import Any

import typer

from graphsim.cli import options as opt
from graphsim.cli import spec_cli
from graphsim.cli.app import app, console, err_console


def _values(text: str | None, what: str, kind: type) -> list[Any] | None:
    from graphsim.serving.requests import WorkloadSpecError

    if text is None:
        return None
    try:
        vals = [kind(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise WorkloadSpecError(f"{what} '{text}': give comma-separated numbers, e.g. 1,2,4,8") from None
    if not vals or any(not v > 0 for v in vals):
        raise WorkloadSpecError(f"{what} '{text}': give one or more values > 0, e.g. 1,2,4,8")
    return vals


@app.command("sweep")
def sweep_cmd(
    model: opt.ConfigModel,
    trust_remote_code: opt.TrustRemoteCode = False,
    rates: str | None = typer.Option(None, "--rates", help="Open loop: request rates to sweep, req/s (e.g. 1,2,4,8)."),
    concurrencies: str | None = typer.Option(None, "--concurrencies",
                                             help="Closed loop: client counts to sweep (e.g. 1,8,32)."),
    gpu: opt.Gpu = opt.DEFAULT_GPU,
    tp: opt.Tp = 1,
    replicas: opt.Replicas = 1,
    data_parallel_size: opt.DataParallel = 1,
    enable_expert_parallel: opt.EnableExpertParallel = False,
    all2all_backend: opt.All2AllBackendOpt = None,
    router: opt.Router = "round-robin",
    arrival: opt.Arrival = "poisson",
    cv: opt.Cv = 1.0,
    num_requests: int = typer.Option(1000, "--num-requests", "--num-prompts", "-n", min=1, max=100_000_000, help="Requests per point (at most 10^8)."),
    input_len: opt.InputLen = opt.INPUT_LEN,
    output_len: opt.OutputLen = opt.OUTPUT_LEN,
    shared_prefix: opt.SharedPrefix = 0,
    prefix_groups: opt.PrefixGroups = 1,
    think_s: opt.ThinkS = 0.0,
    seed: opt.Seed = 0,
    gpu_memory_utilization: opt.GpuMemoryUtilization = opt.GPU_MEMORY_UTILIZATION,
    kv_memory: opt.KvMemory = None,
    max_model_len: opt.MaxModelLen = None,
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None,
    max_num_seqs: opt.MaxNumSeqs = None,
    block_size: opt.BlockSize = None,
    prefix_caching: opt.PrefixCaching = None,
    chunked_prefill: opt.ChunkedPrefill = None,
    engine: opt.Engine = opt.DEFAULT_ENGINE,
    async_scheduling: opt.AsyncScheduling = None,
    api_server_count: opt.ApiServerCount = None,
    frontend_us: opt.FrontendUs = None,
    host_time: opt.HostTime = True,
    kv_dtype: opt.KvDtype = None,
    dtype: opt.Dtype = None,
    moe_routing: opt.MoeRoutingSpec = None,
    profile: opt.Profile = None,
    interconnect: opt.Interconnect = None,
    link_bandwidth: opt.LinkBandwidth = None,
    gpus_per_node: opt.GpusPerNode = None,
    network_bandwidth: opt.NetworkBandwidth = None,
    network_latency_us: opt.NetworkLatency = None,
    slo_ttft_ms: opt.SloTtftMs = None,
    slo_tpot_ms: opt.SloTpotMs = None,
    slo_e2e_ms: opt.SloE2eMs = None,
    plot: str | None = typer.Option(None, "--plot", help="Write the throughput-latency curves to this PNG "
                                                        "(needs matplotlib)."),
    speculative_config: spec_cli.SpeculativeConfigOpt = None,
    spec_acceptance: spec_cli.SpecAcceptanceOpt = None,
    as_json: opt.Json = False,
) -> None:
    """Sweep request rates (open loop) or concurrencies (closed loop) on one traced model: throughput against
    TTFT/TPOT/E2E per point, each time with its source."""
    from graphsim.costing.moe_routing import parse_routing
    from graphsim.serving import SLO, ClosedLoop, parse_lengths, simulate, summarize, synthetic
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import build_cost, plan_deployment
    from graphsim.serving.requests import WorkloadSpecError

    rate_list = _values(rates, "--rates", float)
    conc_list = _values(concurrencies, "--concurrencies", int)
    if (rate_list is None) == (conc_list is None):
        raise WorkloadSpecError("give exactly one of --rates R1,R2,… (open loop) or --concurrencies N1,N2,… "
                                "(closed loop)")
    if plot:
        from graphsim.render.serving_plots import check_plot_path

        check_plot_path(plot)
    ins, outs = parse_lengths(input_len, "--input-len"), parse_lengths(output_len, "--output-len")
    spec_opts = spec_cli.options(model, speculative_config, spec_acceptance)
    config = DeploymentConfig.parse({**spec_cli.deployment_field(spec_opts), **opt.deployment_data(
        model, gpu, tp, replicas, dtype=dtype, kv_dtype=kv_dtype, gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        block_size=block_size, kv_memory=kv_memory, enable_prefix_caching=prefix_caching,
        enable_chunked_prefill=chunked_prefill, engine=engine, async_scheduling=async_scheduling,
        api_server_count=api_server_count, frontend_us=frontend_us,
        interconnect=opt.interconnect_data(interconnect, link_bandwidth, gpus_per_node, network_bandwidth,
                                           network_latency_us), data_parallel_size=data_parallel_size,
        enable_expert_parallel=enable_expert_parallel, all2all_backend=all2all_backend)})
    routing = parse_routing(moe_routing)
    dep = plan_deployment(config)
    dp_coupled = dep.dp_coupled  # a MoE model's -dp: lockstep ranks (serving/dp_simulator.py)
    if dp_coupled and spec_opts is not None:
        raise typer.BadParameter("data-parallel attention is not simulated with --speculative-config yet",
                                 param_hint="--data-parallel-size")
    workloads: list[tuple[str, float, Any]] = []  # (label, value, workload)
    if rate_list is not None:
        for r in rate_list:
            workloads.append((f"{r:g}/s", r, synthetic(num_requests, r, ins, outs, seed, arrival, cv, shared_prefix,
                                                       prefix_groups)))
        axis = "rate"
        what = (f"{num_requests} requests per point, {arrival} arrivals" + (f" (cv {cv:g})" if arrival == "gamma" else "")
                + f", input {ins.label()}, output {outs.label()}")
    else:
        assert conc_list is not None
        for c in conc_list:
            workloads.append((f"{c}", c, ClosedLoop(c, num_requests, ins, outs, seed, think_s, shared_prefix,
                                                    prefix_groups)))
        axis = "concurrency"
        what = f"closed loop, {num_requests} requests per point, input {ins.label()}, output {outs.label()}"
    if shared_prefix:
        what += f", {shared_prefix}-token shared prefix ({prefix_groups} group(s))"
    with err_console.status(f"tracing {model} and pricing its cost tables…"):
        if dp_coupled:
            from graphsim.serving.dp_attention import dp_simulation_setup
            from graphsim.serving.dp_simulator import simulate_dp

            dp_setup, note = dp_simulation_setup(dep, profile, routing, host_time, router)

            def run(workload):  # every point on the lockstep DP ranks
                return simulate_dp(dp_setup, workload)
        else:
            cost, note, _ = build_cost(dep, profile, moe_routing=routing)  # once for the whole sweep
            setup = spec_cli.with_acceptance(dep.simulation_setup(cost, router=router, host_time=host_time),
                                             spec_opts, seed)

            def run(workload):
                return simulate(setup, workload)
    slo = SLO(slo_ttft_ms, slo_tpot_ms, slo_e2e_ms)
    points: list[dict[str, Any]] = []
    for i, (label, value, workload) in enumerate(workloads):
        if as_json:
            res = run(workload)
        else:
            with err_console.status(f"simulating {axis} {label} ({i + 1} of {len(workloads)})…"):
                res = run(workload)
        points.append({axis: value, "label": label, **summarize(res, slo).to_json()})
    title = (f"{dep.model.name} on {dep.hardware.id} tp={dep.tp} × {replicas}: {what}")
    if plot:
        from graphsim.render.serving_plots import write_sweep_png

        write_sweep_png(points, plot, title, "request rate" if axis == "rate" else "concurrency")
    if as_json:
        from graphsim.versions import versions

        out = {"deployment": dep.to_json(), "workload": what, "axis": axis, "replicas": replicas, "router": router,
               "data": note, "slo": vars(slo), "points": points, "versions": versions(profile, gpu, engine)}
        print(json.dumps(out, indent=1, default=float))
        return
    console.print(_table(points, axis, title, note, slo.given))
    if plot:
        console.print(f"[dim]wrote the throughput-latency curves: {plot}[/]")


def _table(points: list[dict[str, Any]], axis: str, title: str, note: str, slo: bool) -> Any:
    from rich.console import Group
    from rich.table import Table

    from graphsim.render.serving_view import shares_markup

    t = Table(title=title, title_justify="left")
    cols = [axis, "req/s", "out tok/s/GPU", "TTFT ms mean/p90", "TPOT ms mean/p90", "E2E s mean/p90"]
    cols += ["SLOs met"] if slo else []
    for c in cols:
        t.add_column(c, justify="left" if c == axis else "right")
    for p in points:
        row = [p["label"], f"{p['requests_per_s']:,.2f}", f"{p['per_gpu']['output_tokens_per_s']:,.1f}",
               f"{p['ttft_ms']['mean']:,.1f} / {p['ttft_ms']['p90']:,.1f}",
               f"{p['tpot_ms']['mean']:,.2f} / {p['tpot_ms']['p90']:,.2f}",
               f"{p['e2e_ms']['mean'] / 1e3:,.2f} / {p['e2e_ms']['p90'] / 1e3:,.2f}"]
        if slo:
            row.append(f"{p['slo_attained']:.1%}" if p["slo_attained"] is not None else "–")
        t.add_row(*row)
    shares = [f"  {p['label']}: {shares_markup(p['source_shares'], p['source'])}" for p in points]
    return Group(t, f"[dim]data:[/] {note}",
                 "iteration times, share of predicted kernel time by source (the model traced once, each point "
                 "simulated):", *shares)
