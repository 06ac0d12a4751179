"""The discrete-event loop: arrivals, a router, and replicas that run iterations.

Events are processed in time order: an arrival is routed (at its instant, with the replicas' state at
that instant) and wakes an idle replica; a replica's iteration end applies the iteration and plans
the next one. Each replica is an `Engine` (scheduler.py). A decode segment (several iterations priced
at once) never runs past the next arrival, and never past a completion; in closed-loop runs with
several replicas not past another replica's next iteration end either (a completion there may send a
new request here).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from graphsim.errors import GraphsimError
from graphsim.serving.engine_config import EngineConfig
from graphsim.serving.kv_layout import KvLayout
from graphsim.serving.pricing import IterationCost
from graphsim.serving.records import IterationLog, Request, Samples
from graphsim.serving.requests import ClosedLoop, RequestSpec
from graphsim.serving.router import Router
from graphsim.serving.scheduler import Engine


class SimulationError(GraphsimError):
    pass


@dataclass(frozen=True)
class SimulationSetup:
    engine: EngineConfig
    layout: KvLayout
    num_blocks: int  # per replica
    cost: IterationCost
    replicas: int = 1
    router: str = "round-robin"
    tp: int = 1
    fast_forward: bool = True


@dataclass
class SimulationResult:
    setup: SimulationSetup
    requests: list[Request]  # all, in arrival order (rejected ones included)
    iterations: dict[str, np.ndarray]
    itl_values: np.ndarray
    itl_weights: np.ndarray
    source_counts: dict[int, int]
    preemptions: int
    wall_s: float
    per_replica: list[dict[str, int]] = field(default_factory=list)

    @property
    def completed(self) -> list[Request]:
        return [r for r in self.requests if not r.rejected and not math.isnan(r.finish_t)]

    @property
    def gpus(self) -> int:
        return self.setup.replicas * self.setup.tp


class _Arrivals:
    """Open loop (a sorted list) or closed loop (a heap fed by completions)."""

    def __init__(self, workload: list[RequestSpec] | ClosedLoop) -> None:
        self.closed = isinstance(workload, ClosedLoop)
        self._heap: list[tuple[float, int, RequestSpec]] = []
        self._seq = 0
        if isinstance(workload, ClosedLoop):
            self.loop = workload
            self.total = workload.num_requests
            self._sent = 0
            for i in range(min(workload.concurrency, workload.num_requests)):
                self._emit(workload.start_s(i))
        else:
            self.loop = None
            specs = sorted(workload, key=lambda s: s.arrival_s)
            self.total = len(specs)
            for s in specs:
                self._push(s)

    def _push(self, spec: RequestSpec) -> None:
        heapq.heappush(self._heap, (spec.arrival_s, self._seq, spec))
        self._seq += 1

    def _emit(self, t: float) -> None:
        assert self.loop is not None
        if self._sent < self.total:
            self._push(self.loop.spec(self._sent, t))
            self._sent += 1

    def next_time(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def pop(self) -> RequestSpec:
        return heapq.heappop(self._heap)[2]

    def on_finish(self, t: float) -> None:
        if self.loop is not None:
            self._emit(t + self.loop.think_s)


def simulate(setup: SimulationSetup, workload: list[RequestSpec] | ClosedLoop,
             progress: Callable[[int, int], None] | None = None) -> SimulationResult:
    """Run the workload to completion; deterministic for a given setup and workload."""
    if setup.replicas < 1:
        raise SimulationError(f"{setup.replicas} replicas; give --replicas >= 1")
    wall0 = time.perf_counter()
    cfg = setup.engine
    arrivals = _Arrivals(workload)
    log, itl = IterationLog(), Samples()
    requests: list[Request] = []
    finished = [0]
    rejected = [0]

    def on_finish(r: Request) -> None:
        finished[0] += 1
        arrivals.on_finish(r.finish_t)
        if progress is not None and (finished[0] % 250 == 0 or finished[0] + rejected[0] == arrivals.total):
            progress(finished[0] + rejected[0], arrivals.total)

    engines = [Engine(i, cfg, setup.layout, setup.num_blocks, setup.cost, log, itl, on_finish)
               for i in range(setup.replicas)]
    for e in engines:
        e.fast_forward = setup.fast_forward
    router = Router(setup.router)
    multi_closed = arrivals.closed and len(engines) > 1

    def horizon(e: Engine) -> float:
        h = arrivals.next_time()
        if multi_closed:
            for o in engines:
                if o is not e and o.busy_until is not None:
                    h = min(h, o.busy_until)
        return h

    def start(e: Engine, t: float) -> None:
        if e.start(t, horizon(e)) is None and e.has_work():
            raise SimulationError(f"replica {e.index} cannot admit its next request with an empty batch "
                                  "(KV cache too small); raise --gpu-memory-utilization or lower --max-model-len")

    single = len(engines) == 1
    ready: dict[int, float] = {}  # idle replicas with work, by index → time they may start
    while True:
        na = arrivals.next_time()
        if single:
            nb = engines[0] if engines[0].busy_until is not None else None
        else:
            busy = [e for e in engines if e.busy_until is not None]
            nb = min(busy, key=lambda e: (e.busy_until, e.index)) if busy else None
        tb = nb.busy_until if nb is not None else math.inf
        tr = min(ready.values()) if ready else math.inf
        if min(na, tb, tr) == math.inf:
            break
        if nb is not None and tb <= na and tb <= tr:  # iteration ends first: frees before arrivals route
            nb.finish()
            if nb.has_work():
                ready[nb.index] = tb
        elif na <= tr:
            spec = arrivals.pop()
            r = Request(len(requests), spec.arrival_s, spec.input_tokens, spec.output_tokens, spec.prefix_id,
                        spec.prefix_tokens, cfg.max_model_len)
            requests.append(r)
            if r.rejected:  # vLLM rejects prompts that do not fit max_model_len
                rejected[0] += 1
                arrivals.on_finish(na)
                continue
            e = engines[router.pick(engines)]
            e.add(r)
            if e.busy_until is None and e.index not in ready:
                ready[e.index] = na
        else:
            i = min(ready, key=lambda j: (ready[j], j))
            start(engines[i], ready.pop(i))
    counts: dict[int, int] = {}
    for e in engines:
        for k, v in e.source_counts.items():
            counts[k] = counts.get(k, 0) + v
    values, weights = itl.arrays()
    per = [{"replica": e.index, "iterations": e.iterations, "preemptions": e.preemptions,
            "evicted_blocks": e.pool.evicted} for e in engines]
    return SimulationResult(setup, requests, log.arrays(), values, weights, counts,
                            sum(e.preemptions for e in engines), time.perf_counter() - wall0, per)
