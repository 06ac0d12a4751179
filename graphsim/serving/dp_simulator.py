"""The serving simulator for data-parallel attention (vLLM `--data-parallel-size N` on a MoE model): N DP ranks, each
an engine core with its own scheduler, batch and KV cache (scheduler.py `Engine`), behind vLLM's DP load balancer,
stepping in lockstep.

- Routing: vLLM's `DPLBAsyncMPClient.get_core_engine_for_request` (vllm/v1/engine/core_client.py) sends a request
  to the rank with the lowest `waiting × 4 + running`, ties to the lowest index. graphsim reads the ranks' counts at
  the arrival instant; vLLM's front end sees them through the coordinator's ~100 ms stats (vllm/v1/engine/
  coordinator.py `DPCoordinator`) plus its own increments, so a burst may spread differently there.
- Lockstep: while any rank has work every rank steps (an idle rank runs vLLM's dummy batch, `execute_dummy_batch`,
  so the MoE collectives match; vllm/v1/engine/core.py `DPEngineCoreProc`); all ranks start a step together and
  it ends for all of them after Max over ranks of each rank's own part + the MoE layers at the global batch
  (`costing.dp_attention`), since every MoE layer's dispatch waits for the slowest rank. When no rank has work the
  wave ends and the ranks sleep until the next arrival.
- A rank's own part is priced by its own iteration cost (the cost tree without the routed experts, with the
  engine's host time); the MoE part by `MoeStepCost` from the ranks' token counts. The step takes the Max of the
  ranks' whole own parts (predict takes it per region of layers: the same unless the slowest rank differs between
  layer kinds, e.g. full and sliding-window attention). Iteration rows are logged per
  rank with the lockstep duration; their source is the worse of the two parts'.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from graphsim.costing.all2all import MoeExchange
from graphsim.costing.cost_model import CostModel
from graphsim.costing.cost_tree import price_leaves
from graphsim.costing.dp_attention import (
    DataParallelMoe, activation_dtype, check_graph, moe_leaf_indices, shared_overlaps, spread_experts,
)
from graphsim.costing.interpolate import SOURCES
from graphsim.ir import Op
from graphsim.ir.geometry import MoeExpertsGeometry
from graphsim.ir.kernel import KernelKind
from graphsim.serving.config import ParallelConfig
from graphsim.serving.pricing import IterationCost, iteration_cost
from graphsim.serving.records import IterationLog, Request, RequestTable, Samples
from graphsim.serving.requests import ClosedLoop, RequestSpec
from graphsim.serving.router import Router
from graphsim.serving.scheduler import Engine, StepPlan
from graphsim.serving.simulator import Arrivals, SimulationError, SimulationResult, SimulationSetup
from graphsim.workload import SeqGroup, Step

WAITING_WEIGHT = 4  # vllm/v1/engine/core_client.py DPLBAsyncMPClient: score = waiting * 4 + running
_ORDER = [s.value for s in SOURCES]


class MoeStepCost:
    """The MoE layers of one lockstep step from the DP ranks' token counts: the routed experts at the global tokens
    with vLLM's (moe tp, ep) spread, every layer's dispatch and combine, and the shared experts, which run beside
    that routed path on vLLM's aux stream up to the cost tree's token limit (costing/streams.py) and after it above
    (`costing.dp_attention.shared_overlaps`; they are taken out of the ranks' own part, `own_part_cost`). Shared
    experts are per-token kernels, so a rank's share depends on its token count only. Memoised by the tokens."""

    def __init__(self, cm: CostModel, plan: DataParallelMoe) -> None:
        check_graph(cm, plan)
        self.cm, self.plan = cm, plan
        tree = cm.tree
        idx = moe_leaf_indices(tree)
        self.leaves = [spread_experts(tree.leaves[i], plan) for i in idx]
        self.mult = tree.multiplicity[idx]
        self.exchanges = []
        for leaf in self.leaves:
            g = leaf.attrs.geometry
            assert isinstance(g, MoeExpertsGeometry)
            self.exchanges.append(MoeExchange(plan.all2all_backend, plan.dp, plan.world_size, g.hidden_size,
                                              g.top_k, g.num_experts, activation_dtype(cm)))
        pos = {li: j for j, li in enumerate(idx)}
        # per overlap: (positions of its routed experts in self.leaves, its shared leaves, instances, token limit)
        self.overlaps = [([pos[li] for li in routed], [tree.leaves[li] for li in shared], tree.node_multiplicity[p],
                          tree.max_tokens[p]) for p, routed, shared in shared_overlaps(tree, idx) if shared]
        self.shared_names = {leaf.name for _, sh, _, _ in self.overlaps for leaf in sh}
        # leaves launched only up to a token limit (the shared experts' input clone, made for the overlap): they go
        # with the shared experts, out of the ranks' own part
        limits = tree.leaf_limit()
        self.clones = [(tree.leaves[li], float(tree.multiplicity[li]), float(limits[li]))
                       for li in np.flatnonzero(np.isfinite(limits))] if self.overlaps else []
        self._memo: dict[tuple[int, ...], tuple[float, int]] = {}

    def step_us(self, rank_tokens: Sequence[int]) -> tuple[float, int]:
        """(µs, worst source code) of the MoE layers when DP rank r computes rank_tokens[r] tokens (an idle
        rank's dummy batch counts 1)."""
        tokens = [max(1, int(t)) for t in rank_tokens]
        key = tuple(sorted(tokens)) if self.overlaps else (sum(tokens), max(tokens))
        hit = self._memo.get(key)
        if hit is None:
            t, s = price_leaves(self.leaves, [Step((SeqGroup(sum(tokens), 0, 1),))], self.cm.pricer, self.cm.dtypes)
            src = int(s[:, 0].max()) if len(s) else 0
            path = t[:, 0].copy()  # one instance of each MoE layer's routed path
            for j, ex in enumerate(self.exchanges):
                d, c = ex.price(tokens, self.cm.pricer)
                path[j] += d.time_us + c.time_us
                src = max(src, _ORDER.index(d.source), _ORDER.index(c.source))
            us = float(np.sum(path * self.mult))
            for routed, shared, m, limit in self.overlaps:
                st, ss = price_leaves(shared, [Step((SeqGroup(x, 0, 1),)) for x in sorted(set(tokens))],
                                      self.cm.pricer, self.cm.dtypes)
                side = float(st.sum(axis=0).max())  # the slowest rank's shared experts
                src = max(src, int(ss.max()))
                hide = min(side, float(path[routed].sum())) if max(tokens) <= limit else 0.0
                us += (side - hide) * m
            for leaf, m, limit in self.clones:
                if max(tokens) <= limit:
                    ct, cs = price_leaves([leaf], [Step((SeqGroup(max(tokens), 0, 1),))], self.cm.pricer, self.cm.dtypes)
                    us += float(ct[0, 0]) * m
                    src = max(src, int(cs[0, 0]))
            hit = self._memo[key] = (us, src)
        return hit


def own_part_cost(cm: CostModel, max_tokens: int, max_seqs: int, max_context: int,
                  moe: MoeStepCost | None = None) -> IterationCost:
    """A rank's own iteration cost: the cost model's graph without its routed experts (and without the shared
    experts `moe` prices beside them), compiled and wrapped for the simulator like any deployment's
    (`pricing.iteration_cost`)."""
    drop = moe.shared_names if moe is not None else set()
    nodes = [n for n in cm.graph.nodes
             if not (n.op is Op.KERNEL and n.kernel.kind is KernelKind.MOE_EXPERTS) and n.name not in drop]
    own = CostModel.of_kernel_graph(cm.graph.copy(nodes), cm.hardware, cm.db, kv_dtype=cm.kv_dtype, dtype=cm.dtype,
                                    routing=cm.dtypes.routing, collectives=cm.pricer.collectives)
    return iteration_cost(own.tree, own.pricer, own.dtypes, max_tokens, max_seqs, max_context)


@dataclass(frozen=True)
class DpSimulationSetup:
    """`ranks`: one DP rank's setup (its own-part cost, per-rank KV blocks; `parallel`: the deployment's dp, tp and
    replicas); `moe`: the MoE layers' cost. `parallel.replicas` independent DP groups (graphsim's --replicas, each a
    `vllm serve -dp N`) sit behind `ranks.router`."""

    ranks: SimulationSetup
    moe: MoeStepCost

    @property
    def dp(self) -> int:
        return self.ranks.parallel.data_parallel_size

    @property
    def groups(self) -> int:
        return self.ranks.parallel.replicas

    @property
    def replicas(self) -> int:  # engines the traces and per-replica tables list: every group's DP ranks
        return self.dp * self.groups

    @property
    def gpus(self) -> int:
        return self.ranks.gpus


class _LastRow:
    """Stands in for an engine's IterationLog: keeps the row its last iteration logged (the lockstep loop logs it
    again with the step's real duration)."""

    def __init__(self) -> None:
        self.values: tuple | None = None

    def row(self, *values) -> None:
        self.values = values

    def block(self, *columns) -> None:  # pragma: no cover - segments are off for DP ranks
        raise SimulationError("a DP rank planned a decode segment; lockstep ranks step one iteration at a time")


class _Group:
    """One DP group (a `vllm serve -dp N`) as graphsim's router sees it: its requests waiting or running."""

    def __init__(self, ranks: list[Engine]) -> None:
        self.ranks = ranks
        self.end: float | None = None  # when its step in flight ends (None: asleep)

    @property
    def outstanding(self) -> int:
        return sum(e.outstanding for e in self.ranks)


class DpLoop:
    """The DP groups of one deployment, each a set of DP ranks in lockstep."""

    def __init__(self, setup: DpSimulationSetup, workload: list[RequestSpec] | ClosedLoop,
                 progress: Callable[[int, int], None] | None, log: IterationLog | None) -> None:
        s = setup.ranks
        self.setup, self.progress = setup, progress
        self.arrivals = Arrivals(workload)
        self.log, self.itl = log if log is not None else IterationLog(), Samples()
        self.table = RequestTable(self.arrivals.total)
        self.finished = self.rejected = self.arrived = 0
        self.rows = [_LastRow() for _ in range(setup.replicas)]
        self.ranks: list[Engine] = []
        for i in range(setup.replicas):
            e = Engine(i, s.engine, s.layout, s.num_blocks, s.cost, self.rows[i], self.itl, self._on_done)  # type: ignore[arg-type]
            e.fast_forward = False  # one iteration at a time: every step's length depends on all ranks
            e.host = s.host
            self.ranks.append(e)
        self.groups = [_Group(self.ranks[g * setup.dp:(g + 1) * setup.dp]) for g in range(setup.groups)]
        self.router = Router(s.router)
        self.dummy_us = s.cost.step_us(1, 1, 0, 0.0, [(1, 0)])[0]
        self.source_us = np.zeros(len(SOURCES))
        self.steps = 0
        self.idle_rank_steps = 0

    def _on_done(self, r: Request) -> None:
        self.table.record(r)
        self.finished += 1
        self.arrivals.on_finish(r.finish_t)
        total = self.finished + self.rejected
        if self.progress is not None and (total % 250 == 0 or total == self.arrivals.total):
            self.progress(total, self.arrivals.total)

    def _arrive(self) -> None:
        reached = self.arrivals.next_time()
        spec = self.arrivals.pop()
        r = Request(self.arrived, spec.arrival_s, spec.input_tokens, spec.output_tokens, spec.prefix_id,
                    spec.prefix_tokens, self.setup.ranks.engine.max_model_len)
        r.reached_t = reached  # after the front end (frontend.py)
        self.arrived += 1
        if r.rejected:
            self.table.record(r)
            self.rejected += 1
            self.arrivals.on_finish(spec.arrival_s)
            return
        ranks = self.groups[self.router.pick(self.groups) if len(self.groups) > 1 else 0].ranks
        scores = [WAITING_WEIGHT * len(e.waiting) + e.running.size for e in ranks]
        ranks[int(np.argmin(scores))].add(r)

    def _step(self, group: _Group, t: float) -> float | None:
        """Start a lockstep step of `group` at t; its end, or None when none of its ranks has anything to run (the
        wave ends)."""
        own, tokens, started = [], [], []
        for e in group.ranks:
            end = e.start(t, math.inf) if e.has_work() else None
            if end is None:
                own.append(self.dummy_us)
                tokens.append(0)
            else:
                assert isinstance(e.plan, StepPlan)  # fast_forward is off: never a decode segment
                own.append((end - t) * 1e6)
                tokens.append(int(np.sum(e.plan.num_scheduled_tokens)))
                started.append(e)
        if not started:
            if any(e.has_work() for e in group.ranks):
                raise SimulationError("a DP rank cannot admit its next request with an empty batch (KV cache too "
                                      "small); raise --gpu-memory-utilization or lower --max-model-len")
            return None
        moe_us, moe_src = self.setup.moe.step_us(tokens)
        slowest = max(own)
        end = t + (slowest + moe_us) * 1e-6
        self.steps += 1
        self.idle_rank_steps += sum(1 for x in tokens if x == 0)
        own_src = 0
        for e in started:
            assert e.plan is not None
            e.plan = replace(e.plan, end_t=end)
            e.busy_until = end
            values = self.rows[e.index].values
            assert values is not None
            own_src = max(own_src, int(values[10]))
            self.log.row(values[0], end - t, *values[2:10], max(int(values[10]), moe_src), *values[11:])
        self.source_us[own_src] += slowest
        self.source_us[moe_src] += moe_us
        return end

    def run(self) -> None:
        while True:
            t_arr = self.arrivals.next_time()
            busy = [g for g in self.groups if g.end is not None]
            first = min(busy, key=lambda g: g.end or math.inf) if busy else None
            if first is not None and first.end is not None and first.end <= t_arr:
                for e in first.ranks:
                    if e.busy_until is not None:
                        e.finish()
                first.end = self._step(first, first.end)
                continue
            if t_arr == math.inf:
                break
            self._arrive()
            if self.arrivals.next_time() > t_arr:  # every arrival of this instant is routed: asleep groups wake
                for g in self.groups:
                    if g.end is None:
                        g.end = self._step(g, t_arr)


def simulate_dp(setup: DpSimulationSetup, workload: list[RequestSpec] | ClosedLoop,
                progress: Callable[[int, int], None] | None = None, log: IterationLog | None = None) -> SimulationResult:
    """Run the workload on the lockstep DP ranks; the result as `simulator.simulate`'s (per_replica: one row per
    DP rank)."""
    wall0 = time.perf_counter()
    loop = DpLoop(setup, workload, progress, log)
    loop.run()
    counts: dict[int, int] = {}
    for e in loop.ranks:
        for k, v in e.source_counts.items():
            counts[k] = counts.get(k, 0) + v
    r = setup.ranks  # as the result's setup: every rank an engine (tables, traces), the deployment's GPUs
    engines = replace(r, parallel=ParallelConfig(tensor_parallel_size=r.parallel.tensor_parallel_size,
                                                 data_parallel_size=setup.replicas))
    return SimulationResult(
        setup=engines, requests=loop.table, iterations=loop.log.arrays(), itl_runs=loop.itl.runs(),
        iteration_totals=loop.log.totals(), source_counts=counts, preemptions=sum(e.preemptions for e in loop.ranks),
        wall_s=time.perf_counter() - wall0,
        per_replica=[{"replica": e.index, "iterations": e.iterations, "preemptions": e.preemptions,
                      "evicted_blocks": e.pool.evicted} for e in loop.ranks],
        source_us={k: float(v) for k, v in enumerate(loop.source_us) if v > 0}, source_basis="iteration worst source")
