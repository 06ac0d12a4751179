"""A deployment: model + GPU + TP + engine settings → KV layout, memory budget, capacity, and the
iteration-cost model the simulator prices with.

`plan_deployment` is config-only (no torch); `Deployment.cost_model` / `build_cost` trace the model into a
fused, partitioned graph and compile its cost tree (`graphsim.cost_model.build_cost_model`, the flow of every
command), so they need the `trace` extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphsim.catalog import ResolvedModel, resolve_model
from graphsim.costing.cost_model import CostModel
from graphsim.costing.hardware import HardwareSpec, load_hardware
from graphsim.serving.capacity import CapacityError, KvCapacity, kv_capacity
from graphsim.serving.engine_config import EngineConfig, engine_config
from graphsim.serving.kv_layout import KvLayout, kv_layout
from graphsim.serving.memory import MemoryBudget, memory_budget
from graphsim.serving.pricing import IterationCost, iteration_cost
from graphsim.serving.simulator import SimulationSetup
from graphsim.work import accounting
from graphsim.work.api import Accounting


@dataclass(frozen=True)
class Deployment:
    model: ResolvedModel
    hardware: HardwareSpec
    tp: int
    acc: Accounting
    engine: EngineConfig
    layout: KvLayout
    budget: MemoryBudget
    capacity: KvCapacity
    kv_dtype: str | None
    dtype: str | None

    def simulation_setup(self, cost: IterationCost, replicas: int = 1, router: str = "round-robin",
                         fast_forward: bool = True) -> SimulationSetup:
        if not self.capacity.fits_one_request:
            raise CapacityError(
                f"the KV cache holds {self.capacity.num_blocks} blocks but one request of max_model_len "
                f"{self.engine.max_model_len} needs {self.capacity.blocks_per_request}; lower --max-model-len or raise "
                "--gpu-memory-utilization (or --kv-memory)")
        return SimulationSetup(self.engine, self.layout, self.capacity.num_blocks, cost, replicas, router, self.tp,
                               fast_forward)

    def cost_model(self, profile: str | None = None, target: str = "vllm") -> CostModel:
        """The deployment's cost model: its model traced with its dtype, fused for `target`, split over its TP
        ranks (no expert parallelism), priced with its KV dtype on its hardware from `profile` (default: the
        hardware's default profile.db when present). Needs the `trace` extra (torch)."""
        from graphsim.cost_model import build_cost_model

        return build_cost_model(self.model, self.hardware, tp=self.tp, dtype=self.dtype, kv_dtype=self.kv_dtype,
                                profile=profile, target=target)

    def to_json(self) -> dict[str, Any]:
        e = self.engine
        return {
            "model": self.model.name, "architecture": self.model.architecture, "hardware": self.hardware.id,
            "tp": self.tp, "precision": self.acc.precision.describe(),
            "engine": {"max_num_batched_tokens": e.max_num_batched_tokens, "max_num_seqs": e.max_num_seqs,
                       "max_model_len": e.max_model_len, "block_size": self.layout.block_size,
                       "enable_prefix_caching": e.enable_prefix_caching,
                       "prefix_caching_simulated": e.enable_prefix_caching and self.layout.prefix_cacheable,
                       "enable_chunked_prefill": e.enable_chunked_prefill,
                       "max_in_flight_tokens": e.max_in_flight_tokens,
                       "gpu_memory_utilization": e.gpu_memory_utilization},
            "layout": {
                "bytes_per_token_per_rank": self.layout.bytes_per_token,
                "state_bytes_per_request_per_rank": self.layout.state_bytes_per_request,
                "parts": [{"kind": p.layer.kind.value, "label": p.layer.label, "layers": p.layers,
                           "bytes_per_token_per_layer": p.layer.bytes_per_token,
                           "bytes_per_token": p.bytes_per_token, "state_bytes": p.state_bytes,
                           "window": p.layer.window, "detail": p.layer.detail} for p in self.layout.parts()],
                "groups": [{"kind": g.kind.value, "layers": g.layers, "real_layers": g.real_layers,
                            "block_size": g.block_size, "page_bytes": g.page_bytes, "window": g.window}
                           for g in self.layout.groups],
                "bytes_per_block": self.layout.bytes_per_block, "notes": list(self.layout.notes)},
            "memory": self.budget.to_json(),
            "capacity": self.capacity.to_json(),
        }


def plan_deployment(model: str | ResolvedModel, gpu: str | HardwareSpec = "h100", tp: int = 1, *,
                    kv_dtype: str | None = None, dtype: str | None = None, state_dtype: str | None = None, ignore_quant: bool = False,
                    max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
                    max_model_len: int | None = None, block_size: int | None = None,
                    gpu_memory_utilization: float = 0.9, enable_prefix_caching: bool = True,
                    enable_chunked_prefill: bool = True, max_concurrent_batches: int = 2,
                    kv_memory_bytes: int | None = None, activation_gib: float | None = None,
                    overhead_gib: float | None = None, cudagraph_gib: float | None = None) -> Deployment:
    resolved = model if isinstance(model, ResolvedModel) else resolve_model(model)
    hw = load_hardware(gpu) if isinstance(gpu, str) else gpu
    cfg = resolved.config
    acc = accounting(cfg, dtype=dtype, kv_dtype=kv_dtype, state_dtype=state_dtype, ignore_quant=ignore_quant)
    eng = engine_config(hw, cfg, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                        max_model_len=max_model_len, block_size=block_size,
                        enable_prefix_caching=enable_prefix_caching, enable_chunked_prefill=enable_chunked_prefill,
                        max_concurrent_batches=max_concurrent_batches, gpu_memory_utilization=gpu_memory_utilization)
    layout = kv_layout(acc.spec, acc.precision, tp, block_size)
    budget = memory_budget(acc.spec, cfg, acc.precision, tp, hw.memory_bytes, gpu_memory_utilization,
                           eng.max_num_batched_tokens, eng.max_num_seqs, activation_gib=activation_gib,
                           overhead_gib=overhead_gib, cudagraph_gib=cudagraph_gib, available_bytes=kv_memory_bytes)
    cap = kv_capacity(layout, budget.available_bytes, eng.max_model_len, eng.max_in_flight_tokens)
    return Deployment(resolved, hw, tp, acc, eng, layout, budget, cap, kv_dtype, dtype)


def build_cost(dep: Deployment, profile: str | None = None, target: str = "vllm") -> tuple[IterationCost, str, int]:
    """Trace, fuse and partition the model (`graphsim.cost_model.build_cost_model`), and wrap its cost tree for
    the simulator. Returns (cost, what the numbers rest on, kernels in the tree)."""
    cm = dep.cost_model(profile, target)
    e = dep.engine
    cost = iteration_cost(cm.tree, cm.pricer, cm.dtypes, e.max_num_batched_tokens, e.max_num_seqs, e.max_model_len)
    return cost, cm.data_note, cm.kernels
