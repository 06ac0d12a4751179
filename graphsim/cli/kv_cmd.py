"""`graphsim kv`: KV-cache layout, memory budget and capacity of a deployment, in vLLM's terms."""

from __future__ import annotations

import json

import typer

from graphsim.cli.app import app, console


@app.command("kv")
def kv_cmd(
    model: str = typer.Argument(..., help="Catalog name, HF id, config.json or model dir."),
    gpu: str = typer.Option("h100", "--gpu", help="Hardware spec id or alias (h100, h200, b200, a100, l40s) or a JSON spec."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size."),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", help="Fraction of GPU memory vLLM may use."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Context length (default: the config's max_position_embeddings)."),
    kv_dtype: str | None = typer.Option(None, "--kv-dtype", help="KV-cache dtype, e.g. fp8 (default: the model dtype)."),
    dtype: str | None = typer.Option(None, "--dtype", help="Override the model dtype."),
    block_size: int | None = typer.Option(None, "--block-size", help="Tokens per block (default 16; 64 for MLA)."),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens", help="Token budget per iteration (default: vllm serve's for the GPU)."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Most sequences per iteration (default: vllm serve's for the GPU)."),
    kv_memory: str | None = typer.Option(None, "--kv-memory", help="Available KV memory per rank as vLLM logs it ('Available KV cache memory: 17.78 GiB'): 17.78GiB, 17.78 (GiB) or bytes with B."),
    activation_gib: float | None = typer.Option(None, "--activation-gib", help="Activation peak instead of the estimate."),
    overhead_gib: float | None = typer.Option(None, "--overhead-gib", help="Non-torch runtime memory instead of the assumed 0.5 GiB."),
    cudagraph_gib: float | None = typer.Option(None, "--cudagraph-gib", help="CUDA-graph memory instead of the assumed 0.5 GiB."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
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
