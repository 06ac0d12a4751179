"""Context parallel in a deployment (vLLM's `prefill_context_parallel_size` and `decode_context_parallel_size`,
`ParallelConfig`): the KV cache sharded along tokens over the context-parallel ranks — capacity here, kernels in
`costing.context_parallel`."""

from __future__ import annotations

from dataclasses import replace

from graphsim.costing.context_parallel import ContextParallel, ContextParallelError
from graphsim.serving.capacity import KvCapacity
from graphsim.serving.config import DeploymentConfig, ParallelConfig
from graphsim.work.api import ModelSpec, Precision


def kv_copies(spec: ModelSpec, precision: Precision, tp: int) -> int:
    """Ranks of a TP group holding the same KV (the fewest over the model's attention layers): a layer's KV bytes a
    rank × tp over its bytes at tp 1 — 1 while tp splits the KV heads, tp / kv_heads beyond, tp for MLA."""
    from graphsim.serving.kv_layout import KvKind, layer_kv

    split, whole = layer_kv(spec, tp, precision), layer_kv(spec, 1, precision)
    if any(a.kind is KvKind.STATE for a in split):
        raise ContextParallelError("context parallel with linear-attention or Mamba state layers is not modelled "
                                   "(their per-request state is not sharded along tokens); drop -pcp/-dcp")
    copies = [a.bytes_per_token * tp // b.bytes_per_token for a, b in zip(split, whole, strict=True)
              if a.kind is not KvKind.STATE and b.bytes_per_token]
    return max(1, min(copies)) if copies else 1


def sharded_capacity(cap: KvCapacity, parallel: ParallelConfig, tp: int, copies: int | None = None) -> KvCapacity:
    """The KV capacity with each rank holding 1/(pcp·dcp) of every sequence's tokens: vLLM's scheduler counts
    blocks of block_size × the CP world of tokens of which each rank stores block_size
    (vllm/v1/core/single_type_kv_cache_manager.py, `block_size *= dcp_world_size * pcp_world_size`); in graphsim's
    blocks of block_size tokens that is that many times the blocks at that fraction of the bytes per rank — more
    tokens and concurrency in the same memory."""
    cp = ContextParallel(parallel.prefill_context_parallel_size, parallel.decode_context_parallel_size)
    cp.check(tp)
    if copies is not None and cp.dcp > copies:  # the same bound costing.context_parallel.dcp_attention checks
        raise ContextParallelError(
            f"--decode-context-parallel-size {cp.dcp}: at tp={tp} each KV head is held by {copies} rank(s); DCP shards "
            f"those copies along tokens, so it can be at most {copies} (vLLM's "
            "ModelConfig.verify_with_parallel_config)")
    n = cp.kv_capacity_factor
    if n == 1:
        return cap
    return replace(cap, bytes_per_block=-(-cap.bytes_per_block // n), num_blocks=cap.num_blocks * n)


def with_context_parallel(config: DeploymentConfig, pcp: int, dcp: int) -> DeploymentConfig:
    """`config` with vLLM's --prefill-context-parallel-size and --decode-context-parallel-size (checked)."""
    ContextParallel(pcp, dcp).check(config.parallel.tensor_parallel_size)
    p = config.parallel
    if (pcp, dcp) == (p.prefill_context_parallel_size, p.decode_context_parallel_size):
        return config
    return config.model_copy(update={"parallel": p.model_copy(
        update={"prefill_context_parallel_size": pcp, "decode_context_parallel_size": dcp})})
