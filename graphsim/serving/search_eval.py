"""Evaluating search candidates: the context a worker needs, cost models cached per partition, and the two
evaluations — the steady-state fast path (`steady.py`) and a simulation (`simulator.py` / `disagg.py`).

`SearchContext` is small and picklable (the model's fused kernel graph, not its weights), so a worker in
another process or on another machine builds what it needs itself: the graph is partitioned per (TP, EP)
(`tp{size}`, `ep{size}` passes), compiled and tabulated once per process (`TreeCost`, sized for the
largest batch any candidate uses), and reused by every candidate on that partition. Workers need neither
torch nor the model's code. Every evaluation is a pure function of (context, candidate): both backends,
and any order of tasks, give identical results.
"""

from __future__ import annotations

import hashlib
import math
import pickle
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from graphsim.catalog import ResolvedModel
from graphsim.costing import moe_routing
from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.interpolate import SOURCES
from graphsim.costing.moe_routing import RoutingModel
from graphsim.ir import Graph
from graphsim.serving.config import DeploymentConfig
from graphsim.serving.disagg import DisaggSetup, KvLink, simulate_disagg
from graphsim.serving.host import EngineHost
from graphsim.serving.pricing import IterationCost, TreeCost
from graphsim.serving.requests import ClosedLoop, Lengths
from graphsim.serving.search_space import Candidate, PoolConfig, SearchSpec
from graphsim.serving.simulator import SimulationSetup, simulate
from graphsim.serving.steady import SteadyPoint, aggregated_point, disaggregated_point

SIM_GENERATIONS = 6  # a simulation sends this many requests per client
WINDOW = (3, 5)  # metrics come from the requests completing between these generations (whole ones, settled)


@dataclass(frozen=True)
class SearchContext:
    model: ResolvedModel
    hardware: HardwareSpec
    graph: Graph  # fused for the engine, not partitioned
    profile: str | None  # profile.db path (None: roofline)
    data_note: str
    base: DeploymentConfig  # the search's base deployment (dtypes, max_model_len, gpu_memory_utilization, …)
    isl: Lengths
    osl: Lengths
    max_tokens: int  # cost-table sizes: the largest batch and sequence count of any candidate
    max_seqs: int
    link: KvLink
    seed: int
    routing: RoutingModel = moe_routing.DEFAULT  # the MoE routing model every candidate is priced with

    key: str = ""  # identifies the cost models this context builds (a worker's cache key); see make_context
    spec_acceptance: tuple[float, ...] = ()  # speculative decoding's acceptance per position (spec_search.py)

    @property
    def max_context(self) -> int:
        """The longest context a request of the search reaches: the cost tables' context grid ends there."""
        return self.isl.hi + self.osl.hi + 1


def make_context(spec: SearchSpec, model: ResolvedModel, hw: HardwareSpec, candidates: list[Candidate],
                 target: str | None = None, graph: Graph | None = None) -> SearchContext:
    """Trace the model once (or take its imported `graph`) and fuse it — tracing needs the `trace` extra; size
    the cost tables for the candidates. `target` None: the spec's engine's (vllm, sglang or trtllm), priced from
    that engine's own default tables when no profile is given."""
    from graphsim.cost_model import build_cost_model

    # fused, not partitioned (tp = ep = 1): the partitions are made per candidate (partition_cost)
    base = spec.base
    routing = moe_routing.parse_routing(spec.moe_routing)
    engine = base.engine.profile
    profile, default = spec.profile, True
    if profile is None and not engine.is_vllm:  # the engine's own tables, never vLLM's
        from graphsim.serving.engines import engine_profile

        profile, default = engine_profile(hw.id, engine.engine), False
    cm = build_cost_model(graph if graph is not None else model, hw, dtype=base.dtype, kv_dtype=base.kv_cache_dtype,
                          profile=profile, default_profile=default, target=target or engine.fuse_target,
                          moe_routing=routing, compiled=False)  # compiled per candidate, after its partition
    graph, profile, note = cm.graph, cm.profile, cm.data_note
    note = f"{note}; MoE routing: {cm.moe_routing}" if cm.moe_routing else note
    max_tokens = max(p.max_num_batched_tokens for c in candidates for p in c.pools)
    max_seqs = max(p.max_num_seqs for c in candidates for p in c.pools)
    link = KvLink.from_hardware(hw, spec.kv_link_gbps, spec.kv_link_latency_us)
    ctx = SearchContext(model, hw, graph, profile, note, base, spec.isl, spec.osl, max_tokens, max_seqs, link,
                        spec.seed, routing, spec_acceptance=tuple(spec.spec_acceptance or ()))
    return with_key(ctx)


def kv_link(ctx: SearchContext, gpus: int) -> KvLink:
    """The KV link of a disaggregated candidate of `gpus` GPUs: the one given, else its topology's (one node's
    link, or the network once the candidate spans nodes: `KvLink.from_hardware`)."""
    return ctx.link if ctx.link.source == "given" else KvLink.from_hardware(ctx.hardware, gpus=gpus)


def with_key(ctx: SearchContext) -> SearchContext:
    """The context with its cache key: a hash of everything the cost models depend on."""
    raw = pickle.dumps((ctx.graph, ctx.model.name, ctx.hardware, ctx.profile, ctx.base.kv_cache_dtype, ctx.base.dtype,
                        ctx.max_tokens, ctx.max_seqs, ctx.max_context, ctx.routing, ctx.base.speculative_config,
                        ctx.spec_acceptance))
    return replace(ctx, key=hashlib.sha1(raw).hexdigest()[:16])


# --- per-process caches ---------------------------------------------------------------------------------
_COSTS: dict[tuple[str | int, ...], IterationCost] = {}  # (context key, tp, ep[, pp])
_DBS: dict[str | None, Any] = {}
_DEPLOYMENTS: dict[tuple, Any] = {}


def _only(ctx_key: str) -> None:
    """Drop the cached cost models, deployments and transfer sizes of other contexts: a process runs one search at
    a time (`--engine auto` runs one per engine, one after another), and a finished search's tables would stay
    alive for nothing (search peak memory, benchmarks/search_memory.py)."""
    for cache in (_COSTS, _DEPLOYMENTS, _BYTES):
        for k in [k for k in cache if k[0] != ctx_key]:
            del cache[k]


def partition_cost(ctx: SearchContext, tp: int, ep: int, pp: int = 1, pcp: int | None = None,
                   dcp: int | None = None) -> IterationCost:
    """The cost tables of one partition; `pcp`/`dcp` a pool's context-parallel sizes (None: the base's)."""
    par = ctx.base.parallel
    pcp = par.prefill_context_parallel_size if pcp is None else pcp
    dcp = par.decode_context_parallel_size if dcp is None else dcp
    key = (ctx.key, tp, ep) if (pp, pcp, dcp) == (1, 1, 1) else (ctx.key, tp, ep, pp, pcp, dcp)
    cost = _COSTS.get(key)
    if cost is None:
        _only(ctx.key)
    if cost is None and ctx.base.speculative_config:  # target verification + draft passes (spec_search.py)
        from graphsim.serving.spec_search import context_speculation, spec_partition_cost

        sp = context_speculation(ctx)
        assert sp is not None
        cost = _COSTS[key] = spec_partition_cost(ctx, tp, ep, sp[0])
    if cost is None:
        from graphsim.cost_model import build_cost_model
        from graphsim.costing.profile_db import ProfileDB
        from graphsim.serving.pricing import iteration_cost

        if ctx.profile not in _DBS:
            _DBS[ctx.profile] = ProfileDB.open(ctx.profile) if ctx.profile else None
        # the fused graph gets only its partition passes; the profile is the one make_context chose (no default)
        cm = build_cost_model(ctx.graph, ctx.hardware, tp=tp, ep=ep, dtype=ctx.base.dtype, kv_dtype=ctx.base.kv_cache_dtype,
                              profile=_DBS[ctx.profile], default_profile=False, moe_routing=ctx.routing,
                              compiled=ctx.base.engine.profile.compiled, combo=ctx.base.engine.profile.combo_kernels)
        if pcp * dcp > 1:  # ring prefill over PCP ranks / the KV sharded over DCP ranks of the TP group
            from graphsim.costing.context_parallel import ContextParallel, with_context_parallel

            cm = with_context_parallel(cm, ContextParallel(pcp, dcp))
        if pp > 1:  # one table per pipeline stage; the engine keeps pp batches in flight (pipeline_engine.py)
            from graphsim.serving.pipeline_plan import stage_costs

            cost = stage_costs(cm, pp, ctx.max_tokens, ctx.max_seqs, ctx.max_context)
        else:
            cost = iteration_cost(cm.tree, cm.pricer, cm.dtypes, ctx.max_tokens, ctx.max_seqs, ctx.max_context)
        _COSTS[key] = cost
    return cost


def deployment(ctx: SearchContext, pool: PoolConfig):
    from graphsim.serving.deployment import plan_deployment

    key = (ctx.key, ctx.model.name, ctx.base, pool.tp, pool.max_num_batched_tokens, pool.max_num_seqs, pool.pp,
           pool.pcp, pool.dcp)
    dep = _DEPLOYMENTS.get(key)
    if dep is None:
        config = ctx.base.derive(tensor_parallel_size=pool.tp, max_num_batched_tokens=pool.max_num_batched_tokens,
                                 max_num_seqs=pool.max_num_seqs)
        if (pool.pcp, pool.dcp) != (1, 1):  # the pool's context-parallel sizes (cp_search.py)
            from graphsim.serving.context_parallel import with_context_parallel

            config = with_context_parallel(config, pool.pcp, pool.dcp)
        if pool.pp > 1:
            from graphsim.serving.pipeline_plan import with_pipeline_size

            config = with_pipeline_size(config, pool.pp)
        dep = _DEPLOYMENTS[key] = plan_deployment(config, model=ctx.model, hardware=ctx.hardware)
    return dep


# --- evaluations ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Evaluation:
    candidate: int
    method: str  # "steady-state" or "simulated"
    requests_per_s: float  # per unit
    output_tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float  # 1 / TPOT
    ttft_ms: float  # mean
    tpot_ms: float  # mean
    source: str  # worst source of the iteration times used
    link_source: str | None  # disaggregated: the KV transfer's source
    bound: str
    decode_batch: float
    transfer_ms: float = 0.0
    ttft_p90_ms: float = math.nan  # simulated only
    tpot_p90_ms: float = math.nan
    sim_requests: int = 0
    sim_wall_s: float = 0.0
    # predicted iteration time per time source, µs: simulated, over the run; steady state, over the steady point's
    # representative iterations (steady.SteadyPoint.source_us)
    source_us: dict[str, float] = field(default_factory=dict)

    @property
    def ttft_source(self) -> str:
        """TTFT includes the transfer in a disaggregated deployment: the worse of the two sources."""
        if self.link_source is None:
            return self.source
        order = [s.value for s in SOURCES]
        worst = max(order.index(self.source), order.index(self.link_source) if self.link_source in order else 0)
        return order[worst]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _steady(ctx: SearchContext, c: Candidate) -> Evaluation:
    isl, osl = round(ctx.isl.mean), round(ctx.osl.mean)
    if ctx.base.speculative_config and c.mode in ("agg", "disagg"):  # E tokens a decode step (spec_search.py)
        from graphsim.serving.spec_search import context_speculation, spec_steady

        sp_ = context_speculation(ctx)
        assert sp_ is not None
        return spec_steady(ctx, c, sp_[0], sp_[1], _steady_of)
    return _steady_of(ctx, c, isl, osl, partition_cost)


def _steady_of(ctx: SearchContext, c: Candidate, isl: int, osl: int, cost_of) -> Evaluation:
    """The steady state of `c` at `isl`/`osl` with the partitions' costs from `cost_of(ctx, tp, ep)`."""
    if c.mode == "afd":
        from graphsim.serving.afd_search import afd_steady

        return afd_steady(ctx, c)
    if c.mode == "dp":  # data-parallel attention + expert parallel (dp_search.py)
        from graphsim.serving.dp_search import dp_steady

        return dp_steady(ctx, c)
    if c.mode == "agg":
        (p,) = c.pools
        cost = cost_of(ctx, p.tp, p.ep, **_cp(p)) if p.pp == 1 else _cycle(ctx, p)
        sp: SteadyPoint = aggregated_point(cost, isl, osl, c.clients, p.max_num_batched_tokens, host=_host(ctx, p, cost))
        link_src = None
    else:
        pp, pd = c.pools
        setup_bytes = _transfer_bytes(ctx, pp, pd, isl)
        link = kv_link(ctx, c.unit_gpus)
        pc, dc = cost_of(ctx, pp.tp, pp.ep, **_cp(pp)), cost_of(ctx, pd.tp, pd.ep, **_cp(pd))
        sp = disaggregated_point(pc, dc, isl, osl,
                                 pp.instances, pd.instances, pd.max_num_seqs, pp.max_num_batched_tokens,
                                 pd.max_num_batched_tokens, link.transfer_s(setup_bytes),
                                 setup_bytes / link.bandwidth_bytes_per_s, pp.max_num_seqs, _host(ctx, pp, pc),
                                 _host(ctx, pd, dc))
        link_src = link.source
    return Evaluation(c.id, "steady-state", sp.requests_per_s, sp.output_tokens_per_s / c.unit_gpus,
                      sp.tokens_per_s_per_user, sp.ttft_s * 1e3, sp.tpot_s * 1e3, SOURCES[sp.source].value, link_src,
                      sp.bound, sp.decode_batch, sp.transfer_s * 1e3,
                      source_us={SOURCES[k].value: v for k, v in enumerate(sp.source_us) if v > 0})


def _host(ctx: SearchContext, pool: PoolConfig, cost: IterationCost | None = None) -> EngineHost:
    """The pool's engine host time, as its simulation charges it (Deployment.simulation_setup: with `cost`, the
    dispatch of steps past the CUDA-graph bound and FlashAttention's KV-cache writes too)."""
    return deployment(ctx, pool).engine_host(cost)


def _cp(pool: PoolConfig) -> dict[str, int]:
    """A pool's context-parallel sizes as `partition_cost` keywords ({} without: the base's)."""
    return {} if (pool.pcp, pool.dcp) == (1, 1) else {"pcp": pool.pcp, "dcp": pool.dcp}


_BYTES: dict[tuple, int] = {}


def _transfer_bytes(ctx: SearchContext, pp: PoolConfig, pd: PoolConfig, isl: int) -> int:
    """KV bytes of one prompt a GPU sends or receives: a rank of a context-parallel pool holds 1/pcp (1/dcp) of
    every sequence's tokens, and its ranks transfer their shards side by side."""
    key = (ctx.key, pp.tp, pd.tp, isl, pp.pcp, pd.dcp)
    if key not in _BYTES:
        _BYTES[key] = max(-(-deployment(ctx, pp).layout.bytes_for_request(isl) // pp.pcp),
                          -(-deployment(ctx, pd).layout.bytes_for_request(isl) // pd.dcp))
    return _BYTES[key]


def _cycle(ctx: SearchContext, pool: PoolConfig) -> IterationCost:
    """A pipelined pool's steady-state step: one cycle of its pp micro-batches (pipeline_engine.PipelineCycleCost)."""
    from graphsim.serving.pipeline_engine import PipelineCost, PipelineCycleCost

    cost = partition_cost(ctx, pool.tp, pool.ep, pool.pp, **_cp(pool))
    assert isinstance(cost, PipelineCost)
    return PipelineCycleCost(cost)


def _setup(ctx: SearchContext, pool: PoolConfig, router: str = "least-outstanding") -> SimulationSetup:
    dep = deployment(ctx, pool)
    setup = dep.simulation_setup(partition_cost(ctx, pool.tp, pool.ep, pool.pp, **_cp(pool)), pool.instances, router)
    if ctx.base.speculative_config:  # speculative steps, acceptance sampled (spec_search.py)
        from graphsim.serving.spec_search import with_speculation

        setup = with_speculation(ctx, setup)
    return setup


def window_metrics(requests, clients: int, window: tuple[int, int] = (1, 3)) -> dict[str, float]:
    """Steady-state metrics of a closed-loop run: the requests that completed between the `window[0]·clients`-th
    and the `window[1]·clients`-th completion (whole generations: the start-up transient and the draining tail
    left out)."""
    done = sorted((r for r in requests if not r.rejected and not math.isnan(r.finish_t)), key=lambda r: r.finish_t)
    if not done:  # nothing completed (every request rejected or unfinished): no rate, no latency
        return {"requests_per_s": 0.0, "output_tokens_per_s": 0.0, "ttft_ms": math.nan, "ttft_p90_ms": math.nan,
                "tpot_ms": math.nan, "tpot_p90_ms": math.nan}
    lo, hi = window[0] * clients - 1, min(window[1] * clients - 1, len(done) - 1)
    if hi <= lo:
        lo, hi = 0, len(done) - 1
    ta, tb = done[lo].finish_t, done[hi].finish_t
    win = [r for r in done[lo + 1:hi + 1]] or done
    span = tb - ta if tb > ta else max(done[-1].finish_t - done[0].arrival, 1e-9)
    ttft = np.asarray([r.first_token_t - r.arrival for r in win]) * 1e3
    multi = [r for r in win if r.max_tokens > 1]
    tpot = np.asarray([(r.finish_t - r.first_token_t) / (r.max_tokens - 1) for r in multi]) * 1e3
    return {"requests_per_s": len(win) / span, "output_tokens_per_s": sum(r.max_tokens for r in win) / span,
            "ttft_ms": float(ttft.mean()), "ttft_p90_ms": float(np.percentile(ttft, 90)),
            "tpot_ms": float(tpot.mean()) if len(tpot) else math.nan,
            "tpot_p90_ms": float(np.percentile(tpot, 90)) if len(tpot) else math.nan}


def _warm(ctx: SearchContext, c: Candidate) -> None:
    """Price the table rows a simulation will use in bulk calls (the same numbers, in less time): decode attention
    for every batch size up to max_num_seqs; prefill attention after a cached prefix for a prefill pool."""
    for pool in () if c.mode == "afd" else c.pools:  # an AFD unit prices through its own cost (afd_search.py)
        cost = partition_cost(ctx, pool.tp, pool.ep, pool.pp, **_cp(pool))
        if not isinstance(cost, TreeCost):
            continue
        if pool.role != "prefill":
            cost.warm_decode_rows(range(1, pool.max_num_seqs + 1))
        if pool.role == "prefill":  # packed prompts split at every position: nearly every row is used
            cost.warm_prefill_rows(ctx.isl.hi)


def _simulated(ctx: SearchContext, c: Candidate) -> Evaluation:
    if c.mode == "dp":  # lockstep DP ranks (dp_search.py)
        from graphsim.serving.dp_search import dp_simulated

        return dp_simulated(ctx, c)
    clients = c.clients if c.mode == "disagg" else c.pools[0].max_num_seqs  # agg: one instance stands for all
    _warm(ctx, c)
    ramp = clients / _steady(ctx, c).requests_per_s  # clients start over one predicted cycle, not all at once
    loop = ClosedLoop(clients, SIM_GENERATIONS * clients, ctx.isl, ctx.osl, ctx.seed, ramp_s=ramp)
    if c.mode == "agg":
        (p,) = c.pools
        res = simulate(_setup(ctx, replace(p, instances=1)), loop)
        unit_gpus, link_src, xfer = p.gpus // p.instances, None, 0.0
    elif c.mode == "afd":
        from graphsim.serving.afd_search import afd_simulated

        res, link_src = afd_simulated(ctx, c, loop)
        unit_gpus, xfer = c.unit_gpus / c.pools[0].instances, 0.0  # one of the unit's attention instances
    else:
        pp, pd = c.pools
        link = kv_link(ctx, c.unit_gpus)
        setup = DisaggSetup(_setup(ctx, pp), _setup(ctx, pd), link)
        res = simulate_disagg(setup, loop)
        unit_gpus, link_src = c.unit_gpus, link.source
        xfer = res.transfer_stats_ms()["mean"]
    m = window_metrics(res.requests, clients, WINDOW)
    worst = SOURCES[max(res.source_counts)].value if res.source_counts else "missing"
    its = res.iterations
    dec = its["decode_seqs"][its["decode_seqs"] > 0] if len(its["dur_s"]) else np.zeros(0)
    tpot = m["tpot_ms"]
    return Evaluation(c.id, "simulated", m["requests_per_s"], m["output_tokens_per_s"] / unit_gpus,
                      1e3 / tpot if tpot > 0 else math.inf if m["requests_per_s"] > 0 else 0.0, m["ttft_ms"], tpot, worst, link_src,
                      "simulated", float(dec.mean()) if len(dec) else 0.0, float(xfer), m["ttft_p90_ms"],
                      m["tpot_p90_ms"], len(res.requests), float(res.wall_s),
                      {SOURCES[k].value: v for k, v in sorted(res.source_us.items())})


@dataclass(frozen=True)
class Task:
    kind: str  # "steady" or "simulate"
    candidates: tuple[Candidate, ...]


def run_task(ctx: SearchContext, task: Task) -> list[Evaluation]:
    """What a worker runs: evaluate the task's candidates, in order."""
    fn = _steady if task.kind == "steady" else _simulated
    return [fn(ctx, c) for c in task.candidates]
