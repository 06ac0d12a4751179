"""`graphsim search` over attention–FFN disaggregated units (serving/afd.py), the third kind beside aggregated
instances and xPyD sets: an AFD unit is one attention pool of A GPUs (d instances of tp a, A = d·a, each with its
own scheduler and KV cache) and one FFN pool of F GPUs (ep F where F divides the routed experts, else tp F), run with
m ping-pong micro-batches.

Explored for models with routed experts only (AFD exists to batch sparse experts, Step-3 arXiv 2507.19427 and
MegaScale-Infer arXiv 2504.02263), for every a and F of the TP sizes and d in `INSTANCES` with d·a + F within the
GPU budget, m in `MICRO_BATCHES`, every `max_num_seqs` whose KV fits an attention instance (`afd.afd_deployment`:
the FFN weights off the attention GPUs), at the search's `max_num_batched_tokens` values. Evaluated like an
aggregated instance (steady state: `steady.aggregated_point`; simulation: `simulator.simulate`) with the AFD
iteration times (`afd.AfdCost`), one attention instance standing for the d of a unit (lockstep, balanced); per-GPU
figures divide by A + F. Not refined (`--refine` skips AFD units).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphsim.errors import GraphsimError
from graphsim.serving.afd import AfdConfig, AfdCost, AfdError, afd_deployment, afd_setup, build_afd_model
from graphsim.serving.search_space import Candidate, PoolConfig, PoolMemory, Pruned, SearchSpec

MICRO_BATCHES = (2, 3)  # Step-3 runs a 3-stage pipeline; MegaScale-Infer needs m >= 2·(1 + T_c/T_f)


INSTANCES = (1, 2, 4)  # attention instances per unit (data parallel, each of tp a)


def afd_config_of(c: Candidate) -> AfdConfig:
    att, ffn = c.pools
    return AfdConfig(att.tp * att.instances, ffn.tp, c.micro_batches, ffn.ep > 1, att.tp)


def enumerate_afd(spec: SearchSpec, planner: Any, tps: list[int], experts: int,
                  add: Callable[..., None], pruned: list[Pruned]) -> None:
    """Add every AFD unit that fits (`add(mode, pools, clients, memory, micro_batches=m)`), prune the rest."""
    if not experts:
        pruned.append(Pruned("afd", "the model has no routed experts: AFD splits MoE layers", "engine"))
        return
    splits = [(a, d, f) for a in tps for d in INSTANCES for f in tps if a * d + f <= spec.gpus]
    for a, d, f in splits:
        ep = f if f > 1 and experts % f == 0 else 1
        for mnbt in sorted(set(spec.max_num_batched_tokens)):
            for seqs in sorted(set(spec.max_num_seqs)):
                label = f"afd {d}×tp{a}A:{f}F{' ep' if ep > 1 else ''} (seqs {seqs}, batch {mnbt})"
                if mnbt < seqs:
                    pruned.append(Pruned(label, f"max_num_batched_tokens {mnbt} < max_num_seqs {seqs} (vLLM refuses)",
                                         "engine"))
                    continue
                dep = planner.plan(a, mnbt, seqs)
                if isinstance(dep, GraphsimError):
                    pruned.append(Pruned(label, str(dep), "engine"))
                    continue
                try:
                    dep = afd_deployment(dep, AfdConfig(a * d, f, MICRO_BATCHES[0], ep > 1, a))
                except AfdError as e:
                    pruned.append(Pruned(label, str(e), "memory"))
                    continue
                mem, why = planner.memory(dep, seqs)
                if why or mem is None:
                    pruned.append(Pruned(label, why, "memory"))
                    continue
                pools = (PoolConfig("attention", a, 1, d, seqs, mnbt), PoolConfig("ffn", f, ep, 1, seqs, mnbt))
                for m in MICRO_BATCHES:
                    add("afd", pools, seqs * d, (mem, _ffn_memory(dep, f, ep)), micro_batches=m)


def _ffn_memory(dep: Any, f: int, ep: int) -> PoolMemory:
    from graphsim.serving.afd import ffn_weight_bytes

    w = ffn_weight_bytes(dep.accountant.spec, dep.accountant.precision, f)
    return PoolMemory(w, 0, 0, 0, 0)


# --- evaluation (search_eval's hooks) --------------------------------------------------------------------------
_COSTS: dict[tuple, AfdCost] = {}


def afd_cost(ctx: Any, c: Candidate) -> AfdCost:
    """The unit's AFD iteration cost, built once per process per (A, F, ep, m) from the context's fused graph."""
    cfg = afd_config_of(c)
    key = (ctx.key, cfg)
    cost = _COSTS.get(key)
    if cost is None:
        from graphsim.costing.profile_db import ProfileDB

        db = ProfileDB.open(ctx.profile) if ctx.profile else None
        model = build_afd_model(ctx.graph, ctx.hardware, cfg, dtype=ctx.base.dtype, kv_dtype=ctx.base.kv_cache_dtype,
                                profile=db, default_profile=False, moe_routing=ctx.routing)
        cost = _COSTS[key] = AfdCost(model)
    return cost


def afd_steady(ctx: Any, c: Candidate) -> Any:
    """The steady-state evaluation of an AFD unit (an aggregated instance with AFD iteration times)."""
    from graphsim.costing.interpolate import SOURCES
    from graphsim.serving.search_eval import Evaluation
    from graphsim.serving.steady import aggregated_point

    att, _ = c.pools
    isl, osl = round(ctx.isl.mean), round(ctx.osl.mean)
    d = att.instances  # one instance's steady state; the unit runs d of them in lockstep
    from graphsim.serving.search_eval import deployment

    sp = aggregated_point(afd_cost(ctx, c), isl, osl, att.max_num_seqs, att.max_num_batched_tokens,
                          host=deployment(ctx, att).engine_host())  # as its simulation (afd.py) charges it
    return Evaluation(c.id, "steady-state", sp.requests_per_s * d, sp.output_tokens_per_s * d / c.unit_gpus,
                      sp.tokens_per_s_per_user, sp.ttft_s * 1e3, sp.tpot_s * 1e3, SOURCES[sp.source].value, "roofline",
                      sp.bound, sp.decode_batch, 0.0,
                      source_us={SOURCES[k].value: v for k, v in enumerate(sp.source_us) if v > 0})


def afd_simulated(ctx: Any, c: Candidate, loop: Any) -> tuple[Any, str]:
    """Simulate one attention instance of an AFD unit on `loop` (the unit's other instances carry the same batch in
    lockstep, as its iteration times assume): (result, the link's source). Per-GPU figures divide by the unit's GPUs
    over its instances."""
    from graphsim.serving.search_eval import deployment
    from graphsim.serving.simulator import simulate

    cfg = afd_config_of(c)
    dep = afd_deployment(deployment(ctx, c.pools[0]), cfg)
    one = AfdConfig(cfg.tp, cfg.ffn_gpus, cfg.micro_batches, cfg.expert_parallel)  # one instance's engine
    setup = afd_setup(dep, afd_cost(ctx, c), one, replicas=1, router="least-outstanding")
    return simulate(setup, loop), "roofline"
