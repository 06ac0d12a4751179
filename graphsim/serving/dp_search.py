"""Data-parallel attention + expert parallel in `graphsim search` (mode `dp`, MoE models): one `vllm serve
--data-parallel-size dp --tensor-parallel-size tp --enable-expert-parallel` instance spans dp × tp GPUs, its
experts spread over all of them (EP = dp × tp, FusedMoEParallelConfig.make), each DP rank with its own batch
(`max_num_seqs`, `max_num_batched_tokens` per rank, as vLLM applies them per engine core) and KV cache.

- Enumeration: (tp, dp) with dp ≥ 2, dp × tp within the GPU budget and dividing the routed experts; each rank's
  memory from `plan_deployment` (attention weights and 1/(dp × tp) of the experts); the instance's clients are
  dp × max_num_seqs.
- Steady state: every rank runs the same batch (vLLM's DP balancer spreads a closed loop evenly), so a rank's step
  is its own part at that batch + the MoE layers with every rank at it (`DpUnitCost`); the unit's rates are dp ×
  one rank's (`steady.aggregated_point`).
- Simulation: the lockstep simulator (serving/dp_simulator.py) on a closed loop of dp × max_num_seqs clients.
- The all2all backend is the base deployment's (`parallel.all2all_backend`, vLLM's default when unset).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphsim.errors import GraphsimError
from graphsim.serving.config import DeploymentConfig
from graphsim.serving.search_space import Candidate, PoolConfig, Pruned, SearchSpec


def dp_config(base: DeploymentConfig, pool: PoolConfig) -> DeploymentConfig:
    """The base deployment with one DP instance's settings (vLLM's names)."""
    config = base.derive(tensor_parallel_size=pool.tp, max_num_batched_tokens=pool.max_num_batched_tokens,
                              max_num_seqs=pool.max_num_seqs)
    data = config.model_dump()
    data["parallel"].update(data_parallel_size=pool.dp, enable_expert_parallel=True)
    return DeploymentConfig.parse(data)


def enumerate_dp(spec: SearchSpec, planner: Any, tps: list[int], experts: int, add, pruned: list[Pruned]) -> None:
    """Every DP×EP instance of the space that fits (added with `add`), the others pruned with the reason."""
    from graphsim.serving.deployment import plan_deployment

    for tp in tps:
        dp = 2
        while dp * tp <= spec.gpus:
            if experts % (dp * tp):
                dp *= 2
                continue
            for mnbt in sorted(set(spec.max_num_batched_tokens)):
                for seqs in sorted(set(spec.max_num_seqs)):
                    pool = PoolConfig("dp", tp, dp * tp, 1, seqs, mnbt, dp=dp)
                    label = pool.label()
                    if mnbt < seqs:
                        pruned.append(Pruned(label, f"max_num_batched_tokens {mnbt} < max_num_seqs {seqs} (vLLM "
                                                    "refuses)", "engine"))
                        continue
                    try:
                        dep = plan_deployment(dp_config(spec.base, pool), model=planner.model, hardware=planner.hardware)
                    except GraphsimError as e:
                        pruned.append(Pruned(label, str(e), "engine"))
                        continue
                    mem, why = planner.memory(dep, seqs, " a rank")
                    if why or mem is None:
                        pruned.append(Pruned(label, why, "memory"))
                        continue
                    add("dp", (pool,), dp * seqs, (mem,))
            dp *= 2


class DpUnitCost:
    """One DP rank's step when every rank runs the same batch: its own part + the MoE layers with all dp ranks at
    that batch (an `IterationCost` for the steady-state model)."""

    def __init__(self, own: Any, moe: Any, dp: int) -> None:
        self.own, self.moe, self.dp = own, moe, dp

    def step_us(self, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
                chunks: list[tuple[int, int]]) -> tuple[float, int]:
        t, s = self.own.step_us(tokens, seqs, dec_count, dec_ctx_mean, chunks)
        m, ms = self.moe.step_us([tokens] * self.dp)
        return t + m, max(s, ms)

    def decode_run_us(self, batch: int, ctx_mean0: float, k: int) -> tuple[np.ndarray, np.ndarray]:
        t, s = self.own.decode_run_us(batch, ctx_mean0, k)
        m, ms = self.moe.step_us([batch] * self.dp)
        return t + m, np.maximum(s, ms).astype(np.int8)


_SETUPS: dict[tuple, Any] = {}


def _setup(ctx: Any, pool: PoolConfig) -> Any:
    """The lockstep simulator's setup of one DP instance (memoised per context and pool)."""
    key = (ctx.key, pool.tp, pool.dp, pool.max_num_seqs, pool.max_num_batched_tokens)
    if key not in _SETUPS:
        from graphsim.serving.deployment import plan_deployment
        from graphsim.serving.dp_attention import plan_of
        from graphsim.serving.dp_simulator import DpSimulationSetup, MoeStepCost, own_part_cost

        cost_model = _cost_model(ctx, pool.tp)
        config = dp_config(ctx.base, pool)
        dep = plan_deployment(config, model=ctx.model, hardware=ctx.hardware)
        moe = MoeStepCost(cost_model, plan_of(config.parallel))
        own = own_part_cost(cost_model, ctx.max_tokens, ctx.max_seqs, ctx.max_context, moe)
        _SETUPS[key] = DpSimulationSetup(dep.simulation_setup(own, replicas=pool.dp), moe)
    return _SETUPS[key]


def _cost_model(ctx: Any, tp: int) -> Any:
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.profile_db import ProfileDB
    from graphsim.serving.search_eval import _DBS

    if ctx.profile not in _DBS:
        _DBS[ctx.profile] = ProfileDB.open(ctx.profile) if ctx.profile else None
    return build_cost_model(ctx.graph, ctx.hardware, tp=tp, dtype=ctx.base.dtype, kv_dtype=ctx.base.kv_cache_dtype,
                            profile=_DBS[ctx.profile], default_profile=False, moe_routing=ctx.routing)


def dp_steady(ctx: Any, c: Candidate) -> Any:
    """The steady state of a DP×EP instance: dp × one rank's (every rank at the same batch)."""
    from graphsim.serving.pricing import SOURCES
    from graphsim.serving.search_eval import Evaluation
    from graphsim.serving.steady import aggregated_point

    (p,) = c.pools
    s = _setup(ctx, p)
    cost = DpUnitCost(s.ranks.cost, s.moe, p.dp)
    sp = aggregated_point(cost, round(ctx.isl.mean), round(ctx.osl.mean), p.max_num_seqs, p.max_num_batched_tokens,
                          host=s.ranks.host)  # the host time its simulation charges every rank
    return Evaluation(c.id, "steady-state", sp.requests_per_s * p.dp, sp.output_tokens_per_s * p.dp / c.unit_gpus,
                      sp.tokens_per_s_per_user, sp.ttft_s * 1e3, sp.tpot_s * 1e3, SOURCES[sp.source].value, None,
                      sp.bound, sp.decode_batch, 0.0,
                      source_us={SOURCES[k].value: v for k, v in enumerate(sp.source_us) if v > 0})


def dp_simulated(ctx: Any, c: Candidate) -> Any:
    """A DP×EP instance on the lockstep simulator, dp × max_num_seqs clients."""
    from graphsim.serving.dp_simulator import simulate_dp
    from graphsim.serving.pricing import SOURCES
    from graphsim.serving.requests import ClosedLoop
    from graphsim.serving.search_eval import SIM_GENERATIONS, WINDOW, Evaluation, window_metrics

    (p,) = c.pools
    clients = p.dp * p.max_num_seqs
    ramp = clients / dp_steady(ctx, c).requests_per_s
    loop = ClosedLoop(clients, SIM_GENERATIONS * clients, ctx.isl, ctx.osl, ctx.seed, ramp_s=ramp)
    res = simulate_dp(_setup(ctx, p), loop)
    m = window_metrics(res.requests, clients, WINDOW)
    worst = SOURCES[max(res.source_counts)].value if res.source_counts else "missing"
    its = res.iterations
    dec = its["decode_seqs"][its["decode_seqs"] > 0] if len(its["dur_s"]) else np.zeros(0)
    tpot = m["tpot_ms"]
    return Evaluation(c.id, "simulated", m["requests_per_s"], m["output_tokens_per_s"] / c.unit_gpus,
                      1e3 / tpot if tpot > 0 else math.inf if m["requests_per_s"] > 0 else 0.0, m["ttft_ms"], tpot, worst, None, "simulated",
                      float(dec.mean()) if len(dec) else 0.0, 0.0, m["ttft_p90_ms"], m["tpot_p90_ms"],
                      len(res.requests), float(res.wall_s),
                      {SOURCES[k].value: v for k, v in sorted(res.source_us.items())})
