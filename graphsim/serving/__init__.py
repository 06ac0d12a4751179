"""KV-cache capacity and iteration-level serving simulation (`graphsim.serving`).

Plan a deployment (config only: KV layout, memory budget, capacity), price its iterations with a cost
model, and simulate a workload on one pool of replicas or on a prefill pool and a decode pool:

>>> from graphsim.serving import ClosedLoop, DeploymentConfig, Lengths, simulate, summarize, synthetic
>>> from graphsim.serving.deployment import build_cost, plan_deployment
>>> dep = plan_deployment(DeploymentConfig(model="llama-3.1-8b", hardware="h100"))
>>> print(dep.capacity.vllm_log_lines()[0])  # doctest: +ELLIPSIS
GPU KV cache size: ... tokens
>>> cost, data_note, kernels = build_cost(dep)  # traces the model (torch, the `trace` extra)
>>> setup = dep.simulation_setup(cost, replicas=2, router="least-outstanding")
>>> result = simulate(setup, synthetic(200, 5.0, Lengths(1024, 4096), Lengths(100, 500), seed=0))
>>> summary = summarize(result)  # TTFT, TPOT, ITL, E2E, throughput, goodput, each with its source
>>> summary.completed, summary.gpus
(200, 2)

Disaggregated (1P1D here), the KV cache going over the GPU's interconnect:

>>> from graphsim.serving.disagg import DisaggSetup, KvLink, simulate_disagg
>>> xpyd = DisaggSetup(dep.simulation_setup(cost), dep.simulation_setup(cost), KvLink.from_hardware(dep.hardware))
>>> summarize(simulate_disagg(xpyd, ClosedLoop(16, 100, Lengths(1024, 1024), Lengths(128, 128)))).completed
100

The library imports neither torch nor the importers; `build_cost` (tracing the model into a cost tree)
does, lazily.
"""

from graphsim.serving.capacity import KvCapacity, kv_capacity, parse_bytes
from graphsim.serving.config import DeploymentConfig, DeploymentConfigError, MemoryOverrides, ParallelConfig
from graphsim.serving.engine_config import EngineArgs, EngineConfig, batch_defaults
from graphsim.serving.kv_layout import KvKind, KvLayout, kv_layout
from graphsim.serving.memory import MemoryBudget, memory_budget, weight_bytes_per_rank
from graphsim.serving.metrics import SLO, Stats, Summary, summarize
from graphsim.serving.pricing import IterationCost, MemoCost, TreeCost, iteration_cost
from graphsim.serving.requests import ClosedLoop, Lengths, RequestSpec, load_trace, parse_lengths, synthetic
from graphsim.serving.router import Router, RouterPolicy
from graphsim.serving.simulator import SimulationResult, SimulationSetup, simulate, simulate_after

__all__ = [
    "SLO", "ClosedLoop", "DeploymentConfig", "DeploymentConfigError", "EngineArgs", "EngineConfig", "IterationCost",
    "KvCapacity", "KvKind", "KvLayout", "Lengths", "MemoCost", "MemoryBudget", "MemoryOverrides", "ParallelConfig",
    "RequestSpec", "Router", "RouterPolicy", "SimulationResult", "SimulationSetup", "Stats", "Summary", "TreeCost",
    "batch_defaults", "iteration_cost", "kv_capacity", "kv_layout", "load_trace", "memory_budget", "parse_bytes",
    "parse_lengths", "simulate", "simulate_after", "summarize", "synthetic", "weight_bytes_per_rank",
]
