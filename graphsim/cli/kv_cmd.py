"""`graphsim kv`: KV-cache layout, memory budget and capacity of a deployment, in vLLM's terms."""

from __future__ import annotations

import json

import typer

from graphsim.cli import options as opt
from graphsim.cli.app import app, console


@app.command("kv")
def kv_cmd(
    model: opt.ConfigModel,
    gpu: opt.Gpu = opt.DEFAULT_GPU,
    tp: opt.Tp = 1,
    gpu_memory_utilization: opt.GpuMemoryUtilization = opt.GPU_MEMORY_UTILIZATION,
    max_model_len: opt.MaxModelLen = None,
    kv_dtype: opt.KvDtype = None,
    dtype: opt.Dtype = None,
    block_size: opt.BlockSize = None,
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None,
    max_num_seqs: opt.MaxNumSeqs = None,
    kv_memory: opt.KvMemory = None,
    activation_gib: float | None = typer.Option(None, "--activation-gib", help="Activation peak instead of the estimate."),
    overhead_gib: float | None = typer.Option(None, "--overhead-gib", help="Non-torch runtime memory instead of the assumed 0.5 GiB."),
    cudagraph_gib: float | None = typer.Option(None, "--cudagraph-gib", help="CUDA-graph memory instead of the assumed 0.5 GiB."),
    as_json: opt.Json = False,
) -> None:
    """KV bytes per token per rank, the memory budget term by term, and the capacity vLLM would log."""
    from graphsim.serving.config import DeploymentConfig
    from graphsim.serving.deployment import plan_deployment

    config = DeploymentConfig.parse(opt.deployment_data(
        model, gpu, tp, dtype=dtype, kv_dtype=kv_dtype, gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        block_size=block_size, kv_memory=kv_memory,
        memory={"activation_gib": activation_gib, "overhead_gib": overhead_gib, "cudagraph_gib": cudagraph_gib}))
    dep = plan_deployment(config)
    if as_json:
        print(json.dumps(dep.to_json(), indent=1))
        return
    from graphsim.render.kv_view import render_kv

    console.print(render_kv(dep))
