"""`graphsim search`: the deployment that serves the most per GPU under the SLOs, and the Pareto frontier."""

from __future__ import annotations

import typer

from graphsim.cli import options as opt
from graphsim.cli import spec_cli
from graphsim.cli.app import app, console, err_console
from graphsim.cli.json_out import print_json
from graphsim.versions import versions


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    from graphsim.serving.search_space import SearchSpecError

    if text is None:
        return None
    try:
        vals = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        raise SearchSpecError(f"{what} '{text}': give comma-separated integers, e.g. 1,2,4,8") from None
    if not vals:
        raise SearchSpecError(f"{what} '{text}': give at least one value")
    return vals


@app.command("search")
def search_cmd(
    ctx: typer.Context,
    model: opt.ConfigModel,
    revision: opt.Revision = None,
    trust_remote_code: opt.TrustRemoteCode = False,
    gpus: int = typer.Option(8, "--gpus", min=1, help="GPU budget."),
    gpu: opt.Gpu = opt.DEFAULT_GPU,
    isl: str = typer.Option("4000", "--isl", help="Input tokens per request: N or LO:HI."),
    osl: str = typer.Option("1000", "--osl", help="Output tokens per request: N or LO:HI."),
    ttft: float | None = typer.Option(None, "--ttft", callback=opt.positive_ms,
                                      help="SLO on mean time to first token, ms."),
    tpot: float | None = typer.Option(None, "--tpot", callback=opt.positive_ms,
                                      help="SLO on mean time per output token, ms."),
    mode: str = typer.Option("both", "--mode", help="agg, disagg, afd (attention–FFN disaggregation, MoE models), dp "
                                                    "(vLLM's -dp N --enable-expert-parallel, MoE models), a comma list "
                                                    "of them, both (agg,disagg) or all."),
    prefill_context_parallel_size: str | None = typer.Option(
        None, "--prefill-context-parallel-size", "-pcp",
        help="Prefill context-parallel sizes of aggregated instances and prefill pools, e.g. 1,2,4 (vLLM's option; "
             "pcp × the GPUs of an instance). Default: 1, and powers of two when one prompt cannot be prefilled within "
             "--ttft on one GPU at its peak (docs/search.md)."),
    decode_context_parallel_size: str | None = typer.Option(
        None, "--decode-context-parallel-size", "-dcp",
        help="Decode context-parallel sizes of aggregated instances and decode pools, e.g. 1,2,4,8 (vLLM's option; "
             "must divide the TP size). Default: 1, and the sizes that remove KV duplicated over the TP group."),
    tp: str | None = typer.Option(None, "--tp", "--tensor-parallel-size", "-tp",
                                  help="TP sizes to try, e.g. 1,2,4,8 (default: powers of two to a node)."),
    pp: str | None = typer.Option(None, "--pipeline-parallel-size", "-pp", "--pp",
                                  help="Pipeline-parallel sizes of aggregated candidates, e.g. 1,2,4 (default: 1, and "
                                       "powers of two whose tp × pp spans nodes; 1 explores none)."),
    max_num_seqs: str | None = typer.Option(None, "--max-num-seqs", help="Values to try (default 1,2,4,…,1024)."),
    max_num_batched_tokens: str | None = typer.Option(None, "--max-num-batched-tokens", help="Aggregated values to try (default 2048,4096,8192,16384)."),
    prefill_batched_tokens: str | None = typer.Option(None, "--prefill-batched-tokens", help="Prefill-pool values to try (default 4096,8192,16384)."),
    max_model_len: opt.MaxModelLen = None,
    kv_dtype: opt.KvDtype = None,
    dtype: opt.Dtype = None,
    moe_routing: opt.MoeRoutingSpec = None,
    gpu_memory_utilization: opt.GpuMemoryUtilization = opt.GPU_MEMORY_UTILIZATION,
    engine: str = typer.Option(
        opt.DEFAULT_ENGINE, "--engine", callback=lambda v: v if v == "auto" else opt._engine(v),
        metavar="ENGINE", help="vllm, sglang or trtllm (optionally ==X.Y), or auto: search each of the three and keep "
                               "the best under the SLOs, reported per engine (docs/engines.md)."),
    profile: opt.Profile = None,
    from_vllm_log: opt.FromVllmLog = None,
    interconnect: opt.Interconnect = None,
    link_bandwidth: opt.LinkBandwidth = None,
    gpus_per_node: opt.GpusPerNode = None,
    network_bandwidth: opt.NetworkBandwidth = None,
    network_latency_us: opt.NetworkLatency = None,
    kv_link_gbps: float | None = typer.Option(None, "--kv-link-gbps", help="KV transfer bandwidth per GPU, GB/s (default: the spec's interconnect)."),
    kv_link_latency_us: float | None = typer.Option(None, "--kv-link-latency-us", help="KV transfer latency, µs (default: the spec's)."),
    verify: int = typer.Option(4, "--verify", min=0, help="Simulate the best N under the SLOs (more while they fail); 0: steady state only."),
    seed: opt.Seed = 0,
    backend: str = typer.Option("local", "--backend", help="local (worker processes on this machine) or ray."),
    address: str | None = typer.Option(None, "--address", help="Ray cluster address (default: start a local Ray instance)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Local worker processes (1: in this process)."),
    top: int = typer.Option(8, "--top", min=0, help="Runners-up to show."),
    target_request_rate: float | None = typer.Option(
        None, "--target-request-rate", help="Find the fewest GPUs that serve this many req/s (Poisson arrivals) within the SLOs; --gpus is then the largest replica."),
    target_concurrency: int | None = typer.Option(
        None, "--target-concurrency", help="Find the fewest GPUs that serve this many concurrent clients (closed loop) within the SLOs."),
    max_gpus: int = typer.Option(64, "--max-gpus", min=1, help="With a target load: the most GPUs an answer may use."),
    refine: int = typer.Option(4, "--refine", min=0, help="Bisect max_num_seqs of the best N candidates to the SLO boundary; 0: the coarse grid only."),
    save_dir: str | None = typer.Option(None, "--save-dir", help="Write launch.sh, deployment.yaml and prediction.json for the chosen deployment here."),
    plot: str | None = typer.Option(None, "--plot", help="Write the Pareto plot to this PNG (needs matplotlib)."),
    speculative_config: spec_cli.SpeculativeConfigOpt = None,
    spec_acceptance: spec_cli.SpecAcceptanceOpt = None,
    as_json: opt.Json = False,
) -> None:
    """Search deployments (TP/EP, replicas, batch settings, aggregated or xPyD) for the most output tokens/s per GPU under the SLOs."""
    from graphsim.cli.from_log import apply_vllm_log
    from graphsim.serving import SLO, parse_lengths
    from graphsim.serving.backends import make_backend
    from graphsim.serving.search import run_search
    from graphsim.serving.search_space import (
        DEFAULT_BATCHED_TOKENS, DEFAULT_PREFILL_BATCHED_TOKENS, DEFAULT_SEQS, SearchSpec, SearchSpecError,
    )

    modes = {"both": ("agg", "disagg"), "all": ("agg", "disagg", "afd", "dp")}.get(mode) or tuple(
        dict.fromkeys(m.strip() for m in mode.split(",")))
    if not all(m in ("agg", "disagg", "afd", "dp") for m in modes):
        raise SearchSpecError(f"unknown --mode '{mode}'; use agg, disagg, afd, dp, a comma list of them, both or all")
    if engine == "auto" and (from_vllm_log or profile or plot or save_dir):
        raise SearchSpecError("--engine auto runs each engine's search on its own tables; drop --from-vllm-log, "
                              "--profile, --plot and --save-dir, or name one engine")
    from_log = apply_vllm_log(ctx, from_vllm_log, locals(),
                              not_searched=("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens"))
    if from_log is not None:
        max_model_len, kv_dtype, dtype, gpu_memory_utilization = from_log.get(
            "max_model_len", "kv_dtype", "dtype", "gpu_memory_utilization")
        (engine,) = from_log.get("engine")
        err_console.print(from_log.summary(), highlight=False, soft_wrap=True)
    base = opt.deployment_data(model, gpu, dtype=dtype, kv_dtype=kv_dtype, max_model_len=max_model_len,
                               gpu_memory_utilization=gpu_memory_utilization,
                               engine=opt.DEFAULT_ENGINE if engine == "auto" else engine,
                               interconnect=opt.interconnect_data(interconnect, link_bandwidth, gpus_per_node,
                                                                  network_bandwidth, network_latency_us))
    spec = SearchSpec.parse({
        "base": base, "gpus": gpus, "isl": parse_lengths(isl, "--isl"), "osl": parse_lengths(osl, "--osl"),
        "slo": SLO(ttft, tpot), "tp": _ints(tp, "--tp"), "pp": _ints(pp, "--pipeline-parallel-size"), "modes": modes,
        "pcp": _ints(prefill_context_parallel_size, "--prefill-context-parallel-size"),
        "dcp": _ints(decode_context_parallel_size, "--decode-context-parallel-size"),
        "max_num_seqs": _ints(max_num_seqs, "--max-num-seqs") or DEFAULT_SEQS,
        "max_num_batched_tokens": _ints(max_num_batched_tokens, "--max-num-batched-tokens") or DEFAULT_BATCHED_TOKENS,
        "prefill_batched_tokens": _ints(prefill_batched_tokens, "--prefill-batched-tokens") or DEFAULT_PREFILL_BATCHED_TOKENS,
        "profile": profile, "kv_link_gbps": kv_link_gbps, "kv_link_latency_us": kv_link_latency_us, "verify": verify,
        "seed": seed, "moe_routing": moe_routing, "refine": refine if spec_slo_given(ttft, tpot) else 0})
    if plot and not plot.lower().endswith(".png"):
        raise SearchSpecError(f"--plot '{plot}': give a .png path")
    if plot and (target_request_rate is not None or target_concurrency is not None):
        raise SearchSpecError("--plot draws the throughput search's Pareto frontier; drop it with "
                              "--target-request-rate / --target-concurrency")
    target = None
    if target_request_rate is not None or target_concurrency is not None:
        from graphsim.serving.search_load import LoadTarget

        target = LoadTarget(target_request_rate, target_concurrency, max_gpus)
    if save_dir is not None:
        from graphsim.serving.launch import prepare_save_dir

        prepare_save_dir(save_dir)
    spec_opts = spec_cli.options(model, speculative_config, spec_acceptance, revision)
    if spec_opts is not None and (engine == "auto" or target is not None or plot):
        raise SearchSpecError("--speculative-config searches with it off and on for one engine's throughput; drop "
                              "--engine auto, --target-request-rate/--target-concurrency and --plot with it")
    be = make_backend(backend, workers, address)
    if spec_opts is not None:  # speculative decoding off and on (cli/search_spec.py)
        from graphsim.cli.search_spec import speculative_search

        try:
            speculative_search(spec, spec_opts, be, as_json, top, save_dir, versions(profile, gpu, engine))
        finally:
            be.close()
        return
    if engine == "auto":
        from graphsim.cli.search_auto import auto_load_search, auto_search

        try:
            if target is not None:
                auto_load_search(spec, target, be, as_json, top)
            else:
                auto_search(spec, be, as_json, top)
        finally:
            be.close()
        return
    if target is not None:
        _load_search(spec, target, be, as_json, top, save_dir, profile, gpu, engine)
        return
    try:
        if as_json:
            res = run_search(spec, be)
        else:
            with err_console.status("searching…") as status:
                res = run_search(spec, be, progress=lambda msg: status.update(msg))
    finally:
        be.close()
    if plot:
        from graphsim.render.search_view import write_pareto_png

        write_pareto_png(res, plot)
    if as_json:
        out = {**res.to_json(), "versions": versions(profile, gpu, engine)}
        if from_log is not None:
            out["from_vllm_log"] = from_log.to_json()
        print_json(out)
        return
    from graphsim.render.search_view import render_search

    console.print(render_search(res, top))
    from graphsim.render.search_load_view import refined_line

    if refined_line(res):
        console.print(refined_line(res), highlight=False)
    if save_dir is not None and res.best is not None:
        _save(save_dir, spec, res.row(res.best).candidate, res.row(res.best).candidate.replicas,
              {"prediction": res.row(res.best).to_json(), "search": "most output tokens/s per GPU"})
    if plot:
        console.print(f"[dim]wrote the Pareto plot: {plot}[/]")


def spec_slo_given(ttft: float | None, tpot: float | None) -> bool:
    """Refinement needs an SLO to refine to."""
    return ttft is not None or tpot is not None


def _save(save_dir: str, spec, candidate, replicas: int, prediction: dict) -> None:
    from graphsim.costing.hardware import load_hardware
    from graphsim.serving.launch import write_launch_files

    hw = spec.base.interconnect.apply(load_hardware(spec.base.hardware))
    paths = write_launch_files(save_dir, spec, candidate, replicas, max(hw.devices_per_node, 1),
                               {**prediction, "slo": vars(spec.slo), "isl": vars(spec.isl), "osl": vars(spec.osl)})
    err_console.print("wrote " + ", ".join(str(p) for p in paths), highlight=False, soft_wrap=True)


def _load_search(spec, target, be, as_json: bool, top: int, save_dir: str | None, profile, gpu, engine) -> None:
    """--target-request-rate / --target-concurrency: the fewest GPUs for the load."""
    from graphsim.serving.search_load import run_load_search

    try:
        if as_json:
            res, units = run_load_search(spec, target, be)
        else:
            with err_console.status("searching…") as status:
                res, units = run_load_search(spec, target, be, progress=lambda msg: status.update(msg))
    finally:
        be.close()
    if save_dir is not None and res.answer is not None:
        a = res.answer
        _save(save_dir, spec, a.candidate, a.replicas, {"prediction": a.to_json(target), "target": target.to_json(),
                                                          "confirmed_by_simulation": res.confirmed})
    if as_json:
        out = {**res.to_json(top), "model": units.model, "hardware": units.hardware, "slo": vars(spec.slo),
               "data": units.data_note, "all_roofline": units.all_roofline, "unit_gpus_max": spec.gpus,
               "refinements": [x.to_json() for x in units.refinements], "candidates": len(units.rows),
               "timings_s": units.timings, "versions": versions(profile, gpu, engine)}
        print_json(out)
        return
    from graphsim.render.search_load_view import render_load

    console.print(render_load(res, units, top))
