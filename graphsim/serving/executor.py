"""The executor's per-step cost when vLLM's TP/PP group spans nodes: the Ray compiled graph's round trip.

vLLM runs a group larger than the node's GPUs on Ray (vllm/config/parallel.py `ParallelConfig.__post_init__`, 0.10.1:
`cuda_device_count_stateless() < world_size` → `distributed_executor_backend = "ray"`). The V1 engine core sends each
step's `SchedulerOutput` to every worker through a Ray compiled graph (vllm/executor/ray_distributed_executor.py
`_compiled_ray_dag`: one `execute_model_ray` node per worker, `MultiOutputNode` of all of them; the log line
"use_ray_spmd_worker: True") and blocks on the result (vllm/v1/executor/ray_distributed_executor.py `execute_model`:
`refs[0].get()` when `max_concurrent_batches` is 1, i.e. without async scheduling and without pipeline stages).
Ray reads every output channel of an execution before it returns one (ray python/ray/dag/compiled_dag_node.py
`CompiledDAG._execute_until`: `_dag_output_fetcher.read()`), so a step waits for the input to reach the workers on
the other nodes and for their outputs to come back: a cross-node round trip of Ray's channels (shared memory plus a
gRPC push between the nodes' raylets; ray-project/ray issue 48271) that the GPU step does not hide.

Its cost, `RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US`: Ray's own multi-node compiled-graph microbenchmark
(release/microbenchmark/experimental/compiled_graph_gpu_microbenchmark.py `exec_ray_dag_cpu --distributed`: the
driver, an actor on its node, an actor pinned to another node, a 100 kB CPU tensor between them and the result back
to the driver) ran 640.64 executions/s (ray-project/ray PR 49755, "Gpu multinode Perf Results", 2025-01-16):
1e6 / 640.64 = 1,560.9 µs an execution. A measurement of Ray on AWS nodes, not of the deployment priced; a step of
vLLM moves a few kB of scheduler output the same way.

With async scheduling (the Ray executor then keeps two batches in flight: `max_concurrent_batches` 2) the engine
overlaps its host time with the GPU step (`HostModel.overlap`), this term with it. With pipeline stages and no async
scheduling vLLM also keeps `pipeline_parallel_size` batches in flight; graphsim still adds the term to every step. V0 engines broadcast the step's inputs from the driver worker
over torch.distributed instead (not modelled: no term); SGLang and TensorRT-LLM do not run Ray (no term).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphsim.costing.hardware import HardwareSpec

if TYPE_CHECKING:
    from graphsim.serving.engine_config import EngineConfig

RAY_CGRAPH_MULTINODE_EXECUTIONS_PER_S = 640.6405325322876  # ray-project/ray PR 49755, exec_ray_dag_cpu, multi-node
RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US = 1e6 / RAY_CGRAPH_MULTINODE_EXECUTIONS_PER_S


def spans_nodes(hardware: HardwareSpec, world_size: int) -> bool:
    """Whether a group of `world_size` GPUs (TP × PP ranks of one engine) spans more than one node."""
    return hardware.topology().nodes(world_size) > 1


def executor_step_us(hardware: HardwareSpec, world_size: int, *, is_vllm: bool, family: str) -> float:
    """Per-step executor time of one engine whose `world_size` GPUs sit on `hardware`'s topology: the Ray compiled
    graph's cross-node round trip for a vLLM V1 engine (`family` v1 / v1-async) spanning nodes, else 0."""
    if not is_vllm or family == "v0" or not spans_nodes(hardware, world_size):
        return 0.0
    return RAY_CGRAPH_CROSS_NODE_ROUNDTRIP_US


def with_executor(engine: EngineConfig, hardware: HardwareSpec, world_size: int) -> EngineConfig:
    """`engine` with its executor's per-step time for `world_size` GPUs on `hardware` (`EngineConfig.host` adds it)."""
    step = executor_step_us(hardware, world_size, is_vllm=engine.profile.is_vllm, family=engine.profile.family)
    return engine.with_(executor_step_us=step) if step else engine


def executor_json(step_us: float) -> dict[str, object]:
    """The executor's per-step term as the deployment's JSON states it, with its source."""
    if not step_us:
        return {"step_us": 0.0, "source": "none: one node (multiprocessing executor), V0, or not vLLM"}
    return {"step_us": step_us, "source": "derived: Ray compiled graph round trip to workers on other nodes, "
                                          "1e6 / 640.64 executions/s (ray-project/ray PR 49755, exec_ray_dag_cpu "
                                          "multi-node)"}
