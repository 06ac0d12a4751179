"""Context parallel in a deployment (vLLM's `prefill_context_parallel_size` and `decode_context_parallel_size`,
`ParallelConfig`): the KV cache sharded along tokens over the context-parallel ranks — capacity here, kernels in
`costing.context_parallel`."""

from __future__ import annotations

from dataclasses import replace

from graphsim.costing.context_parallel import ContextParallel
from graphsim.serving.capacity import KvCapacity
from graphsim.serving.config import DeploymentConfig, ParallelConfig


def sharded_capacity(cap: KvCapacity, parallel: ParallelConfig, tp: int) -> KvCapacity:
    """The KV capacity with each rank holding 1/(pcp·dcp) of every sequence's tokens: vLLM's scheduler counts
    blocks of block_size × the CP world of tokens of which each rank stores block_size
    (vllm/v1/core/single_type_kv_cache_manager.py, `block_size *= dcp_world_size * pcp_world_size`); in graphsim's
    blocks of block_size tokens that is that many times the blocks at that fraction of the bytes per rank — more
    tokens and concurrency in the same memory."""
    cp = ContextParallel(parallel.prefill_context_parallel_size, parallel.decode_context_parallel_size)
    cp.check(tp)
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
