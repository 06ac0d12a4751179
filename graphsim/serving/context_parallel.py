"""Decode context parallel in a deployment (vLLM's `decode_context_parallel_size`, `ParallelConfig`): the KV cache
sharded along tokens over ranks of the TP group — capacity here, kernels in `costing.context_parallel`."""

from __future__ import annotations

from dataclasses import replace

from graphsim.costing.context_parallel import ContextParallel
from graphsim.serving.capacity import KvCapacity
from graphsim.serving.config import DeploymentConfig


def sharded_capacity(cap: KvCapacity, dcp: int, tp: int) -> KvCapacity:
    """The KV capacity with each rank holding 1/dcp of every sequence's tokens: vLLM's scheduler counts blocks of
    block_size × dcp tokens of which each rank stores block_size (vllm/v1/core/single_type_kv_cache_manager.py,
    `block_size *= dcp_world_size`); in graphsim's blocks of block_size tokens that is dcp× the blocks at 1/dcp of
    the bytes per rank — dcp× the tokens and the concurrency, the same memory."""
    ContextParallel(dcp=dcp).check(tp)
    if dcp == 1:
        return cap
    return replace(cap, bytes_per_block=-(-cap.bytes_per_block // dcp), num_blocks=cap.num_blocks * dcp)


def with_decode_context_parallel(config: DeploymentConfig, dcp: int) -> DeploymentConfig:
    """`config` with vLLM's --decode-context-parallel-size (checked against its TP size)."""
    ContextParallel(dcp=dcp).check(config.parallel.tensor_parallel_size)
    if dcp == config.parallel.decode_context_parallel_size:
        return config
    return config.model_copy(update={"parallel": config.parallel.model_copy(
        update={"decode_context_parallel_size": dcp})})
