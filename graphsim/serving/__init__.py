"""KV-cache capacity and iteration-level serving simulation (`graphsim.serving`).

    from graphsim.serving import plan_deployment, kv_capacity, simulate
    dep = plan_deployment("llama-3.1-8b", gpu="h100", tp=1)        # layout, memory budget, capacity
    dep.capacity.vllm_log_lines()
    setup = dep.simulation_setup(cost)                              # cost: an IterationCost (build_cost)
    result = simulate(setup, synthetic(1000, rate=5, ...))

The library imports neither torch nor the importers; `build_cost` (tracing the model into a cost tree)
does, lazily.
"""

from graphsim.serving.capacity import KvCapacity, kv_capacity, parse_bytes
from graphsim.serving.engine_config import EngineConfig, batch_defaults, engine_config
from graphsim.serving.kv_layout import KvKind, KvLayout, kv_layout
from graphsim.serving.memory import MemoryBudget, memory_budget, weight_bytes_per_rank
from graphsim.serving.metrics import SLO, Stats, Summary, summarize
from graphsim.serving.pricing import IterationCost, MemoCost, TreeCost, iteration_cost
from graphsim.serving.requests import (
    ClosedLoop,
    Lengths,
    RequestSpec,
    load_trace,
    parse_lengths,
    synthetic,
)
from graphsim.serving.router import Router, RouterPolicy
from graphsim.serving.simulator import SimulationResult, SimulationSetup, simulate

__all__ = [
    "SLO", "ClosedLoop", "EngineConfig", "IterationCost", "KvCapacity", "KvKind", "KvLayout", "Lengths",
    "MemoCost", "MemoryBudget", "RequestSpec", "Router", "RouterPolicy", "SimulationResult", "SimulationSetup",
    "Stats", "Summary", "TreeCost", "batch_defaults", "engine_config", "iteration_cost", "kv_capacity",
    "kv_layout", "load_trace", "memory_budget", "parse_bytes", "parse_lengths", "simulate", "summarize",
    "synthetic", "weight_bytes_per_rank",
]
