"""`graphsim simulate`: iteration-level serving simulation (vLLM V1-like scheduler) on the cost tree."""

from __future__ import annotations

import json
import math

import typer

from graphsim.cli import afd_cli, cp_cli
from graphsim.cli import options as opt
from graphsim.cli import spec_cli
from graphsim.cli.app import app, console, err_console
from graphsim.versions import versions


def _bench_mode(dataset_name: str | None, trace: str | None, range_ratio: float, prefix_len: int, burstiness: float,
                warm: bool, synthetic_options: dict[str, bool] | None = None) -> bool:
    """--dataset-name random selects vllm bench serve's workload; its own options need it, and graphsim's synthetic
    workload options (`synthetic_options`: name -> given) do not apply to it."""
    from graphsim.serving.requests import WorkloadSpecError

    if dataset_name is not None and dataset_name != "random":
        raise WorkloadSpecError(f"--dataset-name {dataset_name}: graphsim models vllm bench serve's random dataset; "
                                "use --dataset-name random, or --trace FILE.jsonl for other request lengths")
    bench = dataset_name == "random"
    if bench and trace is not None:
        raise WorkloadSpecError("--dataset-name random and --trace are two workloads; give one")
    used = [n for n, on in (("--random-range-ratio", range_ratio != 0.0), ("--random-prefix-len", prefix_len != 0),
                            ("--burstiness", burstiness != 1.0), ("--warm-prefix-cache", warm)) if on]
    if used and not bench:
        raise WorkloadSpecError(f"{', '.join(used)} belong to vllm bench serve's random dataset; add --dataset-name random")
    own = [n for n, given in (synthetic_options or {}).items() if given]
    if bench and own:
        raise WorkloadSpecError(f"{', '.join(own)} shape graphsim's synthetic workloads, not --dataset-name random; use "
                                "--random-input-len, --random-output-len, --random-range-ratio, --random-prefix-len, "
                                "--request-rate, --burstiness")
    return bench


def _save_result(path: str, res, dep, note: str, model: str, num_prompts: int, rate: float | None,
                 concurrency: int | None, arrival: str, cv: float, bench: bool, burstiness: float,
                 pct_metrics: tuple[str, ...], pcts: tuple[float, ...], detailed: bool, slo, due, summary) -> None:
    """The simulation as `vllm bench serve --save-result` writes it, with a `graphsim` block (atomic write)."""
    from graphsim.cli.app import _version
    from graphsim.serving.bench_metrics import BenchSettings, bench_result, write_result

    # graphsim's own arrivals in vLLM's terms: gamma shape 1/cv² (Poisson: 1)
    b = burstiness if bench else 1.0 if arrival == "poisson" or rate is None else 1.0 / (cv * cv)
    goodput = {k: v for k, v in (("ttft", slo.ttft_ms), ("tpot", slo.tpot_ms), ("e2el", slo.e2e_ms)) if v is not None}
    settings = BenchSettings(model_id=model, num_prompts=len(res.requests) if not bench else num_prompts,
                             request_rate=math.inf if rate is None else rate, burstiness=b,
                             max_concurrency=concurrency, percentile_metrics=pct_metrics, metric_percentiles=pcts,
                             goodput_ms=goodput or None, save_detailed=detailed)
    extra = {"version": _version(), "predicted": True, "deployment": dep.to_json(), "data": note,
             "time_source": summary.source, "source_counts": summary.source_counts,
             "source_shares": getattr(summary, "source_shares", {})}
    write_result(path, bench_result(res, settings, due, extra))


@app.command("simulate")
def simulate_cmd(
    ctx: typer.Context,
    model: opt.ConfigModel,
    revision: opt.Revision = None,
    trust_remote_code: opt.TrustRemoteCode = False,
    gpu: opt.Gpu = opt.DEFAULT_GPU,
    tp: opt.Tp = 1,
    pipeline_parallel_size: opt.PipelineParallel = 1,
    pp_layer_partition: opt.PpLayerPartition = None,
    decode_context_parallel_size: cp_cli.DecodeContextParallel = 1,
    prefill_context_parallel_size: cp_cli.PrefillContextParallel = 1,
    replicas: opt.Replicas = 1,
    data_parallel_size: opt.DataParallel = 1,
    enable_expert_parallel: opt.EnableExpertParallel = False,
    all2all_backend: opt.All2AllBackendOpt = None,
    router: opt.Router = "round-robin",
    rate: float | None = typer.Option(None, "--rate", "--request-rate",
                                      help="Open loop: requests per second (inf: all at t = 0, as vllm bench serve)."),
    arrival: opt.Arrival = "poisson",
    cv: opt.Cv = 1.0,
    concurrency: int | None = typer.Option(None, "--concurrency", "--max-concurrency", min=1, max=100_000_000, help="Closed loop: clients, each sending its next request when the last one finishes (vllm bench serve's --max-concurrency: at most N in flight)."),
    trace: str | None = typer.Option(None, "--trace", help="Replay a JSONL trace (arrival_s, input_tokens, output_tokens[, prefix_id, prefix_tokens])."),
    num_requests: int = typer.Option(1000, "--num-requests", "--num-prompts", "-n", min=1, max=100_000_000, help="Requests to send (synthetic workloads; at most 10^8)."),
    input_len: opt.InputLen = opt.INPUT_LEN,
    output_len: opt.OutputLen = opt.OUTPUT_LEN,
    shared_prefix: opt.SharedPrefix = 0,
    prefix_groups: opt.PrefixGroups = 1,
    think_s: opt.ThinkS = 0.0,
    dataset_name: str | None = typer.Option(None, "--dataset-name", help="random: vllm bench serve's random dataset and "
                                            "arrivals (--random-*, --request-rate default inf, --burstiness, --max-concurrency)."),
    random_input_len: int = typer.Option(1024, "--random-input-len", min=1, help="--dataset-name random: input tokens."),
    random_output_len: int = typer.Option(128, "--random-output-len", min=1, help="--dataset-name random: output tokens."),
    random_range_ratio: float = typer.Option(0.0, "--random-range-ratio", help="--dataset-name random: lengths uniform "
                                             "in [L·(1−r), L·(1+r)], 0 <= r < 1."),
    random_prefix_len: int = typer.Option(0, "--random-prefix-len", min=0, help="--dataset-name random: tokens of a "
                                          "prefix every prompt shares."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="--dataset-name random: gamma shape of the gaps "
                                     "(1: Poisson; < 1 burstier; inf: constant)."),
    warm_prefix_cache: bool = typer.Option(False, "--warm-prefix-cache", help="--dataset-name random: the server "
                                           "already saw these prompts (an earlier run, same --seed): they start "
                                           "in its prefix cache."),
    save_result: str | None = typer.Option(None, "--save-result", help="Write the result as vllm bench serve "
                                           "--save-result does (same keys and units) to this .json file."),
    save_detailed: bool = typer.Option(False, "--save-detailed", help="With --save-result: the per-request lists too."),
    percentile_metrics: str = typer.Option("ttft,tpot,itl", "--percentile-metrics", help="Metrics whose "
                                           "percentiles --save-result stores (ttft,tpot,itl,e2el)."),
    metric_percentiles: str = typer.Option("99", "--metric-percentiles", help="Percentiles --save-result stores, "
                                           "e.g. 50,90,99."),
    seed: opt.Seed = 0,
    temperature: float | None = typer.Option(None, "--temperature", help="vllm bench serve's --temperature, as every "
                                             "request sends it (0: greedy; 1.0 when only --top-k/--top-p is given). "
                                             "Default greedy, what vllm bench serve sent before vLLM PR 32723; a newer "
                                             "bench sends none and the server applies the model's "
                                             "generation_config.json (Qwen3: 0.6, top-k 20, top-p 0.95)."),
    top_k: int | None = typer.Option(None, "--top-k", help="vllm bench serve's --top-k (0 or -1: off)."),
    top_p: float | None = typer.Option(None, "--top-p", help="vllm bench serve's --top-p (1: off)."),
    gpu_memory_utilization: opt.GpuMemoryUtilization = opt.GPU_MEMORY_UTILIZATION,
    kv_memory: opt.KvMemory = None,
    from_vllm_log: opt.FromVllmLog = None,
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
    afd: afd_cli.Afd = None,
    afd_micro_batches: afd_cli.AfdMicroBatches = 2,
    afd_ffn_parallel: afd_cli.AfdFfnParallel = "tp",
    afd_link_gbps: afd_cli.AfdLinkGbps = None,
    afd_link_latency_us: afd_cli.AfdLinkLatencyUs = None,
    afd_attention_tp: afd_cli.AfdAttentionTp = 0,
    speculative_config: spec_cli.SpeculativeConfigOpt = None,
    spec_acceptance: spec_cli.SpecAcceptanceOpt = None,
    iteration_log: str | None = typer.Option(None, "--iteration-log", help="Write one row per iteration (.jsonl or .csv)."),
    chrome_trace: str | None = typer.Option(None, "--chrome-trace", help="Write a Chrome/Perfetto trace (.json): every request, or --trace-sample of them."),
    trace_sample: int | None = typer.Option(None, "--trace-sample", min=1, help="Show only this many requests (evenly spaced by id) in the --chrome-trace; stated in the file's otherData."),
    requests_out: str | None = typer.Option(None, "--requests-out", help="Write one row per request (.csv or .parquet): lengths, times, TTFT/TPOT/E2E, preemptions, prefix hits."),
    plot: str | None = typer.Option(None, "--plot", help="Write the TTFT and TPOT distributions to this PNG "
                                                        "(needs matplotlib)."),
    as_json: opt.Json = False,
) -> None:
    """Simulate serving a workload; TTFT/TPOT/ITL/E2E, throughput and goodput, each time with its source."""
    from graphsim.cli.from_log import apply_vllm_log
    from graphsim.costing.moe_routing import parse_routing
    from graphsim.serving import SLO, ClosedLoop, load_trace, parse_lengths, summarize, synthetic
    from graphsim.serving.bench_metrics import parse_percentile_metrics, parse_percentiles
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import build_cost, plan_deployment
    from graphsim.serving.requests import WorkloadSpecError

    bench = _bench_mode(dataset_name, trace, random_range_ratio, random_prefix_len, burstiness, warm_prefix_cache, {
        "--input-len": input_len != opt.INPUT_LEN, "--output-len": output_len != opt.OUTPUT_LEN,
        "--shared-prefix": shared_prefix != 0, "--prefix-groups": prefix_groups != 1, "--think-s": think_s != 0.0,
        "--arrival": arrival != "poisson", "--cv": cv != 1.0})
    pct_metrics, pcts = parse_percentile_metrics(percentile_metrics), parse_percentiles(metric_percentiles)
    modes = [x is not None for x in (rate, concurrency, trace)]
    if not bench and sum(modes) != 1:
        raise WorkloadSpecError("give exactly one workload: --rate R (open loop), --concurrency N (closed loop) "
                                "or --trace FILE.jsonl")
    from_log = apply_vllm_log(ctx, from_vllm_log, locals())
    if from_log is not None:
        (tp, gpu_memory_utilization, kv_memory, max_model_len, max_num_batched_tokens, max_num_seqs, block_size,
         prefix_caching, chunked_prefill, kv_dtype, dtype) = from_log.get(
            "tp", "gpu_memory_utilization", "kv_memory", "max_model_len", "max_num_batched_tokens", "max_num_seqs",
            "block_size", "prefix_caching", "chunked_prefill", "kv_dtype", "dtype")
        (engine, speculative_config, data_parallel_size, enable_expert_parallel, api_server_count) = from_log.get(
            "engine", "speculative_config", "data_parallel_size", "enable_expert_parallel", "api_server_count")
        err_console.print(from_log.summary(), highlight=False, soft_wrap=True)
    afd_config = afd_cli.afd_config(afd, afd_micro_batches, afd_ffn_parallel, afd_link_gbps, afd_link_latency_us,
                                    afd_attention_tp)
    if afd_config is not None:  # attention–FFN disaggregation: the engine is the attention pool (serving/afd.py)
        afd_cli.check_parallel(afd_config, tp)
        tp = afd_config.tp
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
    config = cp_cli.with_cp(config, prefill_context_parallel_size, decode_context_parallel_size)
    from graphsim.cli.pp_cli import with_pp

    if afd_config is not None and (pipeline_parallel_size > 1 or pp_layer_partition):
        raise typer.BadParameter("--afd with pipeline parallelism is not modelled", param_hint="--pipeline-parallel-size")
    dep = plan_deployment(with_pp(config, pipeline_parallel_size, pp_layer_partition))
    dp_coupled = dep.dp_coupled  # a MoE model's -dp: lockstep ranks (serving/dp_simulator.py)
    if dp_coupled and (afd_config is not None or spec_opts is not None):
        raise typer.BadParameter("data-parallel attention is not simulated with --afd or --speculative-config yet",
                                 param_hint="--data-parallel-size")
    if afd_config is not None:
        from graphsim.serving.afd import afd_deployment

        dep = afd_deployment(dep, afd_config)
    ins, outs = parse_lengths(input_len, "--input-len"), parse_lengths(output_len, "--output-len")
    due: list[float] | None = None
    if bench:
        from graphsim.serving.requests import bench_arrivals, bench_random

        request_rate = math.inf if rate is None else rate
        workload = bench_random(num_requests, random_input_len, random_output_len, random_range_ratio,
                                random_prefix_len, request_rate, burstiness, concurrency, seed,
                                warm_prompts=num_requests if warm_prefix_cache else 0)
        due = list(bench_arrivals(num_requests, request_rate, burstiness, seed))
        label = (f"vllm bench serve random dataset: {num_requests} prompts, input {random_input_len}, output "
                 f"{random_output_len}" + (f" (range ratio {random_range_ratio:g})" if random_range_ratio else "")
                 + f", request rate {request_rate:g}" + ("" if math.isinf(request_rate) else f" (burstiness {burstiness:g})")
                 + (f", max concurrency {concurrency}" if concurrency else "")
                 + (f", {random_prefix_len}-token shared prefix" if random_prefix_len else "")
                 + (", prompts already in the prefix cache" if warm_prefix_cache else ""))
    elif trace is not None:
        workload = load_trace(trace)
        label = f"trace {trace} ({len(workload)} requests)"
    elif concurrency is not None:
        workload = ClosedLoop(concurrency, num_requests, ins, outs, seed, think_s, shared_prefix, prefix_groups)
        label = f"closed loop, {concurrency} clients, {num_requests} requests, input {ins.label()}, output {outs.label()}"
        due = [0.0] * num_requests  # as vllm bench serve --max-concurrency at rate inf: each waits for a client
    else:
        assert rate is not None
        workload = synthetic(num_requests, rate, ins, outs, seed, arrival, cv, shared_prefix, prefix_groups)
        label = (f"{num_requests} requests, {arrival} arrivals at {rate:g}/s" + (f" (cv {cv:g})" if arrival == "gamma" else "")
                 + f", input {ins.label()}, output {outs.label()}")
    if shared_prefix and trace is None and not bench:
        label += f", {shared_prefix}-token shared prefix ({prefix_groups} group(s))"
    from graphsim.serving.requests import check_servable

    check_servable(workload, dep.engine.max_model_len)  # every prompt refused: nothing to simulate
    from graphsim.atomic import check_writable
    from graphsim.serving.trace_export import check_suffix

    if requests_out:
        check_suffix(requests_out, "--requests-out", (".csv", ".parquet"))
    if trace_sample is not None and not chrome_trace:
        raise typer.BadParameter("--trace-sample needs --chrome-trace FILE.json", param_hint="--trace-sample")
    for out_path in (iteration_log, chrome_trace, requests_out, save_result):  # fail before the run, not after it
        if out_path:
            check_writable(out_path)
    if plot:
        from graphsim.render.serving_plots import check_plot_path

        check_plot_path(plot)
    from graphsim.serving.sampler import parse_sampling, with_sampling

    sampling = parse_sampling(temperature, top_k, top_p)  # bad values fail here, before the trace
    with err_console.status(f"tracing {model} and pricing its cost tables…"):
        if dp_coupled:
            from graphsim.serving.dp_attention import dp_simulation_setup

            setup, note = dp_simulation_setup(dep, profile, parse_routing(moe_routing), host_time, router)
        else:
            cost, note, _ = build_cost(dep, profile, moe_routing=parse_routing(moe_routing)) if afd_config is None \
                else afd_cli.afd_cost(dep, afd_config, profile, parse_routing(moe_routing), afd_link_gbps,
                                      afd_link_latency_us)
            if afd_config is None:
                setup = spec_cli.with_acceptance(dep.simulation_setup(cost, router=router, host_time=host_time),
                                                 spec_opts, seed)
            else:
                from graphsim.serving.afd import afd_setup

                setup = afd_setup(dep, cost, afd_config, router=router, host_time=host_time)
    setup = with_sampling(setup, sampling, dep.vocab, dep.hardware.memory_bandwidth_bytes_per_s)
    slo = SLO(slo_ttft_ms, slo_tpot_ms, slo_e2e_ms)
    total = workload.num_requests if isinstance(workload, ClosedLoop) else len(workload)
    res = _run_streamed(setup, workload, total, as_json, iteration_log, chrome_trace, trace_sample, requests_out)
    summary = summarize(res, slo)
    if plot:
        from graphsim.render.serving_plots import request_latencies, write_distribution_png

        write_distribution_png(*request_latencies(res), plot,
                               f"{dep.model.name} on {dep.hardware.id} tp={dep.tp} × {replicas}: {label}")
    if save_result:
        _save_result(save_result, res, dep, note, model, num_requests, rate, concurrency, arrival, cv, bench,
                     burstiness, pct_metrics, pcts, save_detailed, slo, due, summary)
    if as_json:
        if dp_coupled:  # the engines are the DP ranks behind vLLM's balancer (serving/dp_simulator.py)
            router = f"dp-lockstep: {replicas} group(s) behind {router}, ranks by vLLM's DP balancer (waiting × 4 + running)"
        out = {"deployment": dep.to_json(), "workload": label, "replicas": replicas, "router": router,
               "data": note, "slo": vars(slo), "summary": summary.to_json(), "per_replica": res.per_replica,
               "versions": versions(profile, gpu, engine)}
        if sampling is not None:
            out["sampling"] = sampling.to_json()
        if afd_config is not None:
            out["afd"] = afd_config.to_json()
        if (spec_sim := getattr(setup, "speculative", None)) is not None:
            out["speculative"] = spec_sim.to_json()
        if from_log is not None:
            out["from_vllm_log"] = from_log.to_json()
        print(json.dumps(out, indent=1, default=float))
        return
    from graphsim.render.serving_view import render_summary

    if dp_coupled:  # the engines are the DP ranks behind vLLM's balancer (serving/dp_simulator.py)
        router = f"{replicas} group(s) of {config.parallel.data_parallel_size} DP ranks in lockstep behind {router}"
        replicas = config.parallel.data_parallel_size * replicas
    console.print(render_summary(dep, summary, note, replicas, router, label, slo, host_time))
    if (spec_sim := getattr(setup, "speculative", None)) is not None:
        console.print(spec_sim.describe(), highlight=False, markup=False)
    trace_what = "Chrome trace (open at ui.perfetto.dev), " + (f"{trace_sample} requests sampled" if trace_sample
                                                                else "every request")
    for path, what in ((iteration_log, "iteration log"), (requests_out, "per-request results"),
                       (chrome_trace, trace_what), (save_result, "vllm bench serve result (predicted)"),
                       (plot, "the TTFT/TPOT distributions")):
        if path:
            console.print(f"[dim]wrote {what}: {path}[/]")


def _run_streamed(setup, workload, total: int, quiet: bool, iteration_log: str | None, chrome_trace: str | None,
                  trace_sample: int | None, requests_out: str | None):
    """Simulate with the iteration rows streamed, not kept (memory stays bounded however many requests): to a
    spill beside --iteration-log (merged into time order at the end) and straight into --chrome-trace; each
    output is published whole when the run completes, and none is left partial if it does not."""
    import contextlib

    from graphsim.atomic import atomic_writer, scratch_dir
    from graphsim.serving import simulate
    from graphsim.serving.dp_simulator import DpSimulationSetup, simulate_dp

    def run(setup, workload, progress=None, log=None):  # a MoE model's DP ranks run in lockstep (dp_simulator.py)
        if isinstance(setup, DpSimulationSetup):
            return simulate_dp(setup, workload, progress, log)
        return simulate(setup, workload, progress, log)
    from graphsim.serving.records import IterationLog
    from graphsim.serving.trace_export import (
        ChromeTraceWriter, IterationSpill, fan_out, write_iteration_rows, write_requests,
    )

    with contextlib.ExitStack() as stack:
        spill = IterationSpill(stack.enter_context(scratch_dir(iteration_log))) if iteration_log else None
        trace = None
        if chrome_trace:
            trace = ChromeTraceWriter(stack.enter_context(atomic_writer(chrome_trace)), setup.replicas, trace_sample)
        log = IterationLog(keep=False, sink=fan_out(spill, trace.iterations if trace else None))
        if quiet:
            res = run(setup, workload, log=log)
        else:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            with Progress("simulating", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console,
                          transient=True, disable=not err_console.is_terminal) as bar:  # no stray newline on a pipe
                task = bar.add_task("requests", total=total)
                res = run(setup, workload, progress=lambda done, _t: bar.update(task, completed=done), log=log)
        if trace is not None:
            trace.finish(res.requests)
        if spill is not None and iteration_log:
            write_iteration_rows(spill.rows(), iteration_log)
        if requests_out:
            write_requests(res, requests_out)
    return res
