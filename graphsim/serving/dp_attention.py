"""A deployment's data-parallel attention (vLLM's `--data-parallel-size` on a MoE model): is it coupled, over
how many GPUs the routed experts spread, and the plan the step pricing takes (`costing.dp_attention`).

vLLM's rule (vllm/model_executor/layers/fused_moe/config.py `FusedMoEParallelConfig.make`): the MoE layers of a
model served with dp > 1 span dp × tp GPUs; the DP ranks' attention and KV caches stay their own (each rank an
engine core with its own scheduler and `KVCacheManager`, vllm/v1/engine/core.py `DPEngineCoreProc`), and the
KV cache each rank logs is its own (`GPU KV cache size`, vllm/v1/core/kv_cache_utils.py, per worker). A dense
model's DP ranks are independent engines (vllm/v1/engine/core.py: no dummy batches or wave sync unless the
model has MoE layers, `ParallelConfig.is_moe_model` / `reconfigure_for_independent_dp_rank`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from graphsim.costing.all2all import DEFAULT_ALL2ALL_BACKEND
from graphsim.costing.dp_attention import DataParallelMoe
from graphsim.serving.config import DeploymentConfigError, ParallelConfig
from graphsim.work.specs import ModelSpec, MoeFfn

if TYPE_CHECKING:
    from graphsim.costing.moe_routing import RoutingModel
    from graphsim.serving.deployment import Deployment
    from graphsim.serving.dp_simulator import DpSimulationSetup


def has_routed_experts(spec: ModelSpec) -> bool:
    return any(isinstance(layer.ffn, MoeFfn) for layer in spec.stack.layers)


def coupled(parallel: ParallelConfig, spec: ModelSpec) -> bool:
    """vLLM couples the DP ranks (data-parallel attention) of a MoE model with dp > 1."""
    return parallel.data_parallel_size > 1 and has_routed_experts(spec)


def expert_ranks(parallel: ParallelConfig, spec: ModelSpec) -> int | None:
    """GPUs the routed experts spread over when that is not the TP group (None: the TP group), checked as vLLM
    checks it: whole experts must divide over EP, and expert parallelism needs experts at all."""
    moe = [layer.ffn for layer in spec.stack.layers if isinstance(layer.ffn, MoeFfn)]
    dp, tp = parallel.data_parallel_size, parallel.tensor_parallel_size
    if not moe:
        if parallel.enable_expert_parallel or parallel.all2all_backend:
            raise DeploymentConfigError("enable_expert_parallel / all2all_backend: the model has no routed experts")
        return None
    if dp == 1:
        return None
    if parallel.enable_expert_parallel and moe[0].experts % (dp * tp):
        raise DeploymentConfigError(f"{moe[0].experts} routed experts do not divide over EP = data_parallel_size "
                                    f"{dp} × tensor_parallel_size {tp} = {dp * tp}")
    return dp * tp


def plan_of(parallel: ParallelConfig) -> DataParallelMoe:
    """The step pricing's view of a coupled deployment (dp >= 2)."""
    return DataParallelMoe(parallel.data_parallel_size, parallel.tensor_parallel_size, parallel.enable_expert_parallel,
                           parallel.all2all_backend or DEFAULT_ALL2ALL_BACKEND)


def dp_simulation_setup(dep: Deployment, profile: str | None = None, moe_routing: RoutingModel | None = None,
                        host_time: bool = True, router: str = "round-robin") -> tuple[DpSimulationSetup, str]:
    """The lockstep simulator's setup of a coupled deployment (serving/dp_simulator.py) and what its numbers rest on:
    the model traced for tp only, each rank's own-part cost, and the MoE layers' cost with vLLM's spread; its
    `replicas` DP groups behind `router`."""
    from graphsim.serving.dp_simulator import DpSimulationSetup, MoeStepCost, own_part_cost

    parallel = dep.config.parallel
    if not dep.dp_coupled:
        raise DeploymentConfigError("the lockstep simulator is for a MoE model with data_parallel_size >= 2")
    cm = dep.cost_model(profile, moe_routing=moe_routing)
    e = dep.engine
    plan = plan_of(parallel)
    moe = MoeStepCost(cm, plan)
    own = own_part_cost(cm, e.max_num_batched_tokens, e.max_num_seqs, e.max_model_len, moe)
    ranks = dep.simulation_setup(own, replicas=plan.dp, router=router, host_time=host_time)
    ranks = replace(ranks, parallel=ParallelConfig(tensor_parallel_size=parallel.tensor_parallel_size,
                                                   data_parallel_size=plan.dp, replicas=parallel.replicas))
    note = f"{cm.data_note}; MoE routing: {cm.moe_routing}" if cm.moe_routing else cm.data_note
    return DpSimulationSetup(ranks, moe), f"{note}; {plan.describe()} in lockstep"
