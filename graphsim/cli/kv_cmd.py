"""`graphsim kv`: KV-cache layout, memory budget and capacity of a deployment, in vLLM's terms."""

from __future__ import annotations

import json

import typer

from graphsim.cli.app import app, console
from graphsim.cli.options import (
    DEFAULT_GPU,
    GPU_MEMORY_UTILIZATION,
    BlockSize,
    ConfigModel,
    Dtype,
    Gpu,
    GpuMemoryUtilization,
    Json,
    KvDtype,
    KvMemory,
    MaxModelLen,
    MaxNumBatchedTokens,
    MaxNumSeqs,
    Tp,
)


@app.command("kv")
def kv_cmd(
    model: ConfigModel,
    gpu: Gpu = DEFAULT_GPU,
    tp: Tp = 1,
    gpu_memory_utilization: GpuMemoryUtilization = GPU_MEMORY_UTILIZATION,
    max_model_len: MaxModelLen = None,
    kv_dtype: KvDtype = None,
    dtype: Dtype = None,
    block_size: BlockSize = None,
    max_num_batched_tokens: MaxNumBatchedTokens = None,
    max_num_seqs: MaxNumSeqs = None,
    kv_memory: KvMemory = None,
    activation_gib: float | None = typer.Option(None, "--activation-gib", help="Activation peak instead of the estimate."),
    overhead_gib: float | None = typer.Option(None, "--overhead-gib", help="Non-torch runtime memory instead of the assumed 0.5 GiB."),
    cudagraph_gib: float | None = typer.Option(None, "--cudagraph-gib", help="CUDA-graph memory instead of the assumed 0.5 GiB."),
    as_json: Json = False,
) -> None:
    """KV bytes per token per rank, the memory budget term by term, and the capacity vLLM would log."""
    from graphsim.serving.capacity import parse_bytes
    from graphsim.serving.deployment import plan_deployment

    dep = plan_deployment(model, gpu, tp, kv_dtype=kv_dtype, dtype=dtype, max_num_batched_tokens=max_num_batched_tokens,
                          max_num_seqs=max_num_seqs, max_model_len=max_model_len, block_size=block_size,
                          gpu_memory_utilization=gpu_memory_utilization,
                          kv_memory_bytes=parse_bytes(kv_memory) if kv_memory else None,
                          activation_gib=activation_gib, overhead_gib=overhead_gib, cudagraph_gib=cudagraph_gib)
    if as_json:
        print(json.dumps(dep.to_json(), indent=1))
        return
    from graphsim.render.kv_view import render_kv

    console.print(render_kv(dep))
