"""`graphsim kv`: KV-cache layout, memory budget and capacity of a deployment, in vLLM's terms."""

from __future__ import annotations

import json

import typer

from graphsim.cli import cp_cli
from graphsim.cli import options as opt
from graphsim.cli import spec_cli
from graphsim.cli.app import app, console, err_console
from graphsim.versions import versions


@app.command("kv")
def kv_cmd(
    ctx: typer.Context,
    model: opt.ConfigModel,
    revision: opt.Revision = None,
    trust_remote_code: opt.TrustRemoteCode = False,
    gpu: opt.Gpu = opt.DEFAULT_GPU,
    tp: opt.Tp = 1,
    prefill_context_parallel_size: cp_cli.PrefillContextParallel = 1,
    decode_context_parallel_size: cp_cli.DecodeContextParallel = 1,
    pipeline_parallel_size: opt.PipelineParallel = 1,
    pp_layer_partition: opt.PpLayerPartition = None,
    data_parallel_size: opt.DataParallel = 1,
    enable_expert_parallel: opt.EnableExpertParallel = False,
    gpu_memory_utilization: opt.GpuMemoryUtilization = opt.GPU_MEMORY_UTILIZATION,
    max_model_len: opt.MaxModelLen = None,
    kv_dtype: opt.KvDtype = None,
    dtype: opt.Dtype = None,
    block_size: opt.BlockSize = None,
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None,
    max_num_seqs: opt.MaxNumSeqs = None,
    kv_memory: opt.KvMemory = None,
    engine: opt.Engine = opt.DEFAULT_ENGINE,
    mem_fraction_static: float | None = typer.Option(
        None, "--mem-fraction-static", min=0.01, max=1.0,
        help="--engine sglang: SGLang's --mem-fraction-static (default: the one SGLang derives; docs/engines.md)."),
    free_gpu_memory_fraction: float | None = typer.Option(
        None, "--kv-cache-free-gpu-memory-fraction", "--free-gpu-memory-fraction", min=0.01, max=1.0,
        help="--engine trtllm: trtllm-serve's --kv_cache_free_gpu_memory_fraction (default 0.9)."),
    from_vllm_log: opt.FromVllmLog = None,
    activation_gib: float | None = typer.Option(None, "--activation-gib", help="Activation peak instead of the estimate."),
    overhead_gib: float | None = typer.Option(None, "--overhead-gib", help="Non-torch runtime memory (GiB) instead of the median of public vLLM start-up logs for the TP group (0.07 TP1, 1.38 TP>1 on NVLink, 0.21 on PCIe; SGLang/TRT-LLM: 0.5)."),
    cudagraph_gib: float | None = typer.Option(None, "--cudagraph-gib", help="CUDA-graph memory instead of the assumed 0.5 GiB."),
    speculative_config: spec_cli.SpeculativeConfigOpt = None,
    as_json: opt.Json = False,
) -> None:
    """KV bytes per token per rank, the memory budget term by term, and the capacity vLLM would log."""
    from graphsim.cli.from_log import apply_vllm_log
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import plan_deployment

    from_log = apply_vllm_log(ctx, from_vllm_log, locals())
    if from_log is not None:
        tp, gpu_memory_utilization, max_model_len, kv_dtype, dtype, block_size, max_num_batched_tokens, max_num_seqs, \
            kv_memory = from_log.get("tp", "gpu_memory_utilization", "max_model_len", "kv_dtype", "dtype", "block_size",
                                     "max_num_batched_tokens", "max_num_seqs", "kv_memory")
        (engine, speculative_config, data_parallel_size, enable_expert_parallel) = from_log.get(
            "engine", "speculative_config", "data_parallel_size", "enable_expert_parallel")
        err_console.print(from_log.summary(), highlight=False, soft_wrap=True)
    spec_opts = spec_cli.options(model, speculative_config, None, need_acceptance=False)  # capacity only
    config = DeploymentConfig.parse({**spec_cli.deployment_field(spec_opts), **opt.deployment_data(
        model, gpu, tp, dtype=dtype, kv_dtype=kv_dtype, gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        block_size=block_size, kv_memory=kv_memory, engine=engine, data_parallel_size=data_parallel_size,
        mem_fraction_static=mem_fraction_static, free_gpu_memory_fraction=free_gpu_memory_fraction,
        enable_expert_parallel=enable_expert_parallel,
        memory={"activation_gib": activation_gib, "overhead_gib": overhead_gib, "cudagraph_gib": cudagraph_gib})})
    from graphsim.cli.pp_cli import print_kv_stages, with_pp

    config = cp_cli.with_cp(config, prefill_context_parallel_size, decode_context_parallel_size)  # the KV sharded
    config = with_pp(config, pipeline_parallel_size, pp_layer_partition)
    if _graph_kv(config, as_json, engine):  # an architecture the accountant lacks: the layout from its traced graph
        return
    dep = plan_deployment(config)
    check = from_log.capacity_check(dep.capacity.tokens) if from_log is not None else None
    if as_json:
        out = dep.to_json()
        out["versions"] = versions(engine=engine, priced=False)
        if from_log is not None:
            out["from_vllm_log"] = {**from_log.to_json(), "capacity_check": check}
        print(json.dumps(out, indent=1))
        return
    from graphsim.render.kv_view import render_kv

    console.print(render_kv(dep))
    print_kv_stages(console, dep)
    if check:
        console.print(check, highlight=False)


def _graph_kv(config, as_json: bool, engine: str) -> bool:
    """`graphsim kv --kv-memory …` from the traced graph when the work accountant has no builder
    (serving/graph_kv.py), said on stderr; False when the accountant has one, or when no --kv-memory is given: the
    deployment then takes its memory budget from the traced graph too (serving/graph_deployment.py), as simulate
    and search do."""
    from graphsim.catalog import resolve_model
    from graphsim.serving.graph_kv import accountant_lacks, plan_graph_kv

    if config.engine.kv_cache_memory_bytes is None:
        return False
    model = resolve_model(config.model)
    reason = accountant_lacks(model.config)
    if reason is None:
        return False
    err_console.print(f"note: {reason}; the KV layout comes from the model's traced graph (no memory budget)",
                      highlight=False, soft_wrap=True)
    plan = plan_graph_kv(config, model, reason)
    if as_json:
        out = plan.to_json()
        out["versions"] = versions(engine=engine, priced=False)
        print(json.dumps(out, indent=1))
        return True
    from graphsim.render.graph_kv_view import render_graph_kv

    console.print(render_graph_kv(plan))
    return True
