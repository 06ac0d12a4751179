"""The discrete-event loop: arrivals, routers, replicas that run iterations and, in a disaggregated
deployment, the KV transfers between a prefill pool and a decode pool.

One loop runs both deployments. Aggregated: one pool of replicas takes the arrivals and finishes the
requests. Disaggregated (disagg.py): the prefill pool takes the arrivals; a request whose prefill ends
goes over the link (`KvLink`) to a decode instance picked by the decode router, which finishes it.

Events are processed in time order, at equal times: an iteration end, then a transfer end, then an
arrival, then an idle engine starting. An arrival is routed at its instant, with the engines' state at
that instant, and wakes an idle engine; an engine's iteration end applies the iteration and plans the
next one. Each engine is an `Engine` (scheduler.py). A decode segment (several iterations priced at
once) never runs past the next instant a request may be added to its engine (`EventLoop.horizon`).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from graphsim.errors import GraphsimError
from graphsim.serving.api_server import ApiServers
from graphsim.serving.blocks import PrefixCache
from graphsim.serving.config import ParallelConfig
from graphsim.serving.engine_config import EngineConfig
from graphsim.serving.frontend import FrontEnd, FrontEndQueue
from graphsim.serving.host import EngineHost
from graphsim.serving.kv_layout import KvLayout
from graphsim.serving.pipeline_engine import PipelineCost, PipelineEngine
from graphsim.serving.pricing import SOURCES, IterationCost, new_meter
from graphsim.serving.records import (
    IterationLog, IterationTotals, Request, RequestRecord, RequestTable, Samples, TokenGaps,
)
from graphsim.serving.requests import ClosedLoop, RequestSpec, warm_prefixes
from graphsim.serving.router import Router
from graphsim.serving.scheduler import DecodeEngine, Engine, SegmentPlan
from graphsim.serving.speculative import SpecSimulation

if TYPE_CHECKING:
    from graphsim.serving.disagg import DisaggSetup

PROGRESS_EVERY = 250  # requests between progress calls
EngineT = TypeVar("EngineT", bound=Engine)


class SimulationError(GraphsimError):
    pass


@dataclass(frozen=True)
class SimulationSetup:
    engine: EngineConfig
    layout: KvLayout
    num_blocks: int  # per replica
    cost: IterationCost
    parallel: ParallelConfig = field(default_factory=ParallelConfig)  # data_parallel_size replicas of tp ranks
    router: str = "round-robin"
    fast_forward: bool = True
    source_shares: bool = True  # meter per-source shares of the iteration times (pricing.new_meter)
    host: EngineHost | None = None  # engine host time per iteration (host.py); None: GPU kernels only
    speculative: SpecSimulation | None = None  # speculative decoding (speculative.py); None: off
    # the engines' prefix cache as an earlier workload on the same server left it (SimulationResult.prefix_cache;
    # None: empty); see simulate_after
    prefix_cache: PrefixCache | None = None

    @property
    def replicas(self) -> int:
        return self.parallel.data_parallel_size

    @property
    def tp(self) -> int:
        return self.parallel.tensor_parallel_size

    @property
    def gpus(self) -> int:
        return self.parallel.world_size


@dataclass(frozen=True)
class SimulationResult:
    setup: SimulationSetup | DisaggSetup
    requests: RequestTable  # every request's outcome, by id = arrival order (rejected ones included)
    iterations: dict[str, np.ndarray]  # per-iteration columns in time order; empty when not kept (IterationLog(keep=False))
    itl_runs: tuple[np.ndarray, np.ndarray, np.ndarray]  # inter-token latencies: (values, weights, counts), Samples.runs
    iteration_totals: IterationTotals
    source_counts: dict[int, int]
    preemptions: int
    wall_s: float
    per_replica: list[dict[str, int | str]] = field(default_factory=list)
    source_us: dict[int, float] = field(default_factory=dict)  # predicted µs per SOURCES code, all engines
    source_basis: str | None = None  # "kernel" (leaf sources) or "iteration worst source"; None: not metered
    prefix_cache: PrefixCache | None = None  # the entry engines' cached content when the run ended (aggregated runs)

    @property
    def completed(self) -> list[RequestRecord]:
        """The finished requests as records (Python objects: for small runs; use `requests.column` at scale)."""
        return [r for r in self.requests if not r.rejected and not math.isnan(r.finish_t)]

    @property
    def itl_values(self) -> np.ndarray:
        """Every inter-token latency sample, expanded from `itl_runs` (large for a long run)."""
        v, _, c = self.itl_runs
        return np.repeat(v, c)

    @property
    def itl_weights(self) -> np.ndarray:
        _, w, c = self.itl_runs
        return np.repeat(w, c)

    def to_pandas(self) -> Any:
        """One row per request (`trace_export.request_columns`: lengths, times, TTFT/TPOT/E2E in ms,
        preemptions, prefix hits) as a pandas DataFrame; needs pandas."""
        try:
            import pandas as pd
        except ModuleNotFoundError:
            raise SimulationError("to_pandas() needs pandas (pip install pandas)") from None
        from graphsim.serving.trace_export import request_columns

        return pd.DataFrame(request_columns(self))

    def __repr__(self) -> str:  # a few lines, not every request
        done = int(self.requests.completed_mask.sum())
        return (f"{type(self).__name__}({done:,} of {len(self.requests):,} requests completed, "
                f"{self.iteration_totals.iterations:,} iterations on {self.gpus} GPU(s), {self.preemptions:,} "
                f"preemptions, simulated in {self.wall_s:.2f} s wall; summarize(result) for the metrics, "
                ".to_pandas() for one row per request)")

    def __rich__(self) -> Any:
        """A short table of the headline metrics (rich display in a terminal or notebook)."""
        from rich.table import Table

        from graphsim.serving.metrics import summarize

        s = summarize(self)
        t = Table(title=f"{type(self).__name__}: {s.completed:,} of {s.requests:,} requests on {s.gpus} GPU(s) "
                        f"(iteration times: worst source {s.source})", show_header=True)
        for col in ("metric", "mean", "p50", "p90", "p99"):
            t.add_column(col, justify="left" if col == "metric" else "right")
        for name, st in (("TTFT ms", s.ttft_ms), ("TPOT ms", s.tpot_ms), ("ITL ms", s.itl_ms), ("E2E ms", s.e2e_ms)):
            t.add_row(name, *(f"{getattr(st, k):.2f}" for k in ("mean", "p50", "p90", "p99")))
        t.caption = (f"{s.requests_per_s:.2f} req/s, {s.output_tokens_per_s:,.0f} output tok/s over {s.duration_s:.1f} s "
                     f"simulated; {s.preemptions:,} preemptions")
        return t

    @property
    def gpus(self) -> int:
        return self.setup.gpus


class Arrivals:
    """Open loop (a sorted list, read in order: no per-request heap entry) or closed loop (a heap fed by
    completions)."""

    def __init__(self, workload: list[RequestSpec] | ClosedLoop, frontend: FrontEnd | None = None,
                 api: ApiServers | None = None) -> None:
        self.closed = isinstance(workload, ClosedLoop)
        self.api = api  # the API servers (api_server.py): front end and streaming on one loop; replaces `frontend`
        self._sent: deque[RequestSpec] = deque()  # with `api`: requests sent, not yet at the engine (FIFO)
        self._heap: list[tuple[float, int, RequestSpec]] = []
        self._seq = 0
        self._specs: list[RequestSpec] = []  # open loop, by arrival (ties in the given order, as the heap had them)
        self._reach: list[float] = []  # open loop with a front end: when each of _specs reaches the engine
        self._next = 0
        self.frontend = FrontEndQueue(frontend) if frontend is not None and api is None else None
        if isinstance(workload, ClosedLoop):
            self.loop = workload
            self.total = workload.num_requests
            self._emitted = 0
            for i in range(min(workload.concurrency, workload.num_requests)):
                self._emit(workload.start_s(i))
        else:
            self.loop = None
            self._specs = sorted(workload, key=lambda s: s.arrival_s)
            self.total = len(self._specs)
            if api is not None:
                for spec in self._specs:
                    api.send(spec.arrival_s, spec.input_tokens)
                self._sent.extend(self._specs)
            elif self.frontend is not None:  # served in the order sent; several servers may reorder them
                fe = self.frontend
                reach = [fe.reach_s(s.arrival_s, s.input_tokens) for s in self._specs]
                order = sorted(range(self.total), key=reach.__getitem__)
                self._specs = [self._specs[i] for i in order]
                self._reach = [reach[i] for i in order]

    def _push(self, spec: RequestSpec) -> None:
        if self.api is not None:
            self.api.send(spec.arrival_s, spec.input_tokens)
            self._sent.append(spec)
            return
        t = spec.arrival_s if self.frontend is None else self.frontend.reach_s(spec.arrival_s, spec.input_tokens)
        heapq.heappush(self._heap, (t, self._seq, spec))
        self._seq += 1

    def _emit(self, t: float) -> None:
        assert self.loop is not None
        if self._emitted < self.total:  # sent when a client is free and the request is due
            self._push(self.loop.spec(self._emitted, max(t, self.loop.due_s(self._emitted))))
            self._emitted += 1

    def next_time(self) -> float:
        if self.api is not None:
            return self.api.peek()
        if self.loop is None:
            if self._next >= self.total:
                return math.inf
            return self._reach[self._next] if self._reach else self._specs[self._next].arrival_s
        return self._heap[0][0] if self._heap else math.inf

    def pop(self) -> RequestSpec:
        if self.api is not None:
            self.api.take()
            return self._sent.popleft()
        if self.loop is None:
            self._next += 1
            return self._specs[self._next - 1]
        return heapq.heappop(self._heap)[2]

    def on_finish(self, t: float) -> None:
        if self.loop is not None:
            self._emit(t + self.loop.think_s)


class _DecodeLoad:
    """A decode instance as the decode router sees it: queued and running requests plus those on the link."""

    __slots__ = ("engine", "incoming")

    def __init__(self, engine: Engine) -> None:
        self.engine, self.incoming = engine, 0

    @property
    def outstanding(self) -> int:
        return self.engine.outstanding + self.incoming


@dataclass
class KvTransfers:
    """Per request id (NaN where none): when its prefill ended, its KV transfer started and ended, and the
    bytes it moved."""

    prefill_done_s: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    bytes: np.ndarray

    @classmethod
    def empty(cls, n: int) -> KvTransfers:
        return cls(*(np.full(n, np.nan) for _ in range(4)))


def _api_servers(setup: SimulationSetup | DisaggSetup, frontend: FrontEnd | None) -> ApiServers | None:
    """The API servers (api_server.py) when the host model streams at a cost: aggregated deployments of
    single-stage engines (a disaggregated or pipelined deployment keeps the front-end queue alone)."""
    if not isinstance(setup, SimulationSetup) or setup.host is None or isinstance(setup.cost, PipelineCost):
        return None
    m = setup.host.model
    if m.api_per_chunk_us <= 0:
        return None
    share = setup.host.api_servers_per_engine  # several API servers split an engine's stream evenly
    return ApiServers(frontend or FrontEnd(0.0, 0.0, 0.0), m.api_per_chunk_us / share, setup.replicas,
                      m.api_per_output_us / share)


def _frontend(setup: SimulationSetup | DisaggSetup) -> FrontEnd | None:
    """The front end requests pass before the entry pool (one per API server process: `--api-server-count` per
    deployment, by default one per engine replica); None without host time."""
    entry = setup if isinstance(setup, SimulationSetup) else getattr(setup, "prefill", setup)
    host = getattr(entry, "host", None)
    if host is None:
        return None
    m = host.model
    servers = max(1, round(getattr(entry, "replicas", 1) * host.api_servers_per_engine))  # API server processes
    fe = FrontEnd(m.frontend_us, m.frontend_per_token_us, m.frontend_latency_us, servers)
    return fe if fe.active or fe.latency_us > 0 else None


class EventLoop:
    """The engines of a deployment and the state between them; `run()` processes every event."""

    def __init__(self, setup: SimulationSetup | DisaggSetup, workload: list[RequestSpec] | ClosedLoop,
                 progress: Callable[[int, int], None] | None, log: IterationLog | None = None) -> None:
        frontend = _frontend(setup)
        self.api = _api_servers(setup, frontend)
        self.arrivals = Arrivals(workload, frontend, self.api)
        self.progress = progress
        self.log, self.itl = log if log is not None else IterationLog(), Samples()
        self.gaps = TokenGaps()  # with API servers: the engines' gaps as engine times, read as the client's at the end
        self.table = RequestTable(self.arrivals.total)  # outcomes as the clients see them, by id (arrival order)
        self.arrived = 0
        self.inflight: dict[int, Request] = {}  # disaggregated: client requests whose prefill has not ended
        self.finished = self.rejected = 0
        self.ready: dict[int, float] = {}  # idle engines with work, by index → time they may start
        self.transfers: list[tuple[float, int, int, Request]] = []  # (end, seq, decode instance, request)
        # closed-loop clients behind API servers send their next request when they get the last chunk (api_server.py):
        # finishes whose chunk's output turn has not started (engine index, engine time), and the clients' send times
        self._unseen: list[tuple[int, float]] = []
        self._due: list[float] = []
        if isinstance(setup, SimulationSetup):
            self.disaggregated = None
            self.max_model_len = setup.engine.max_model_len
            self.entry = [self._engine(Engine, i, setup, self.itl, self._on_done) for i in range(setup.replicas)]
            self.exit: Sequence[Engine] = self.entry
            self.engines = self.entry
            self.roles = ["replica"] * setup.replicas
            self.entry_router = Router(setup.router)
            if setup.prefix_cache is not None:  # the cache an earlier workload on these engines left
                if len(setup.prefix_cache.engines) != setup.replicas:
                    raise SimulationError(f"a prefix cache of {len(setup.prefix_cache.engines)} engines for "
                                          f"{setup.replicas} replicas; hand over the state of the same deployment")
                for e, entries in zip(self.entry, setup.prefix_cache.engines, strict=True):
                    e.pool.restore(entries)
            warm = warm_prefixes(workload)
            for e in self.entry if warm else ():  # prompts the server saw before (vllm bench serve reruns)
                e.pool.warm((pid, i) for pid, tokens in warm for i in range(tokens // e.block_size))
        else:  # disaggregated: the prefill pool's first tokens are discarded (its own inter-token samples)
            p, d = setup.prefill, setup.decode
            self.disaggregated = setup
            self.max_model_len = min(p.engine.max_model_len, d.engine.max_model_len)
            prefill_itl = Samples()
            self.entry = [self._engine(Engine, i, p, prefill_itl, self._on_prefilled) for i in range(p.replicas)]
            self.decode = [self._engine(DecodeEngine, p.replicas + j, d, self.itl, self._on_done)
                           for j in range(d.replicas)]
            self.exit = self.decode
            self.engines = self.entry + self.decode
            self.roles = ["prefill instance"] * p.replicas + ["decode instance"] * d.replicas
            self.entry_router, self.exit_router = Router(p.router), Router(d.router)
            self.loads = [_DecodeLoad(e) for e in self.decode]
            self.transfer_seq = 0
            self.kv = KvTransfers.empty(self.arrivals.total)
            self.egress_free_s = [0.0] * p.replicas  # when each prefill instance's link is next free
            self.ingress_free_s = [0.0] * d.replicas
            # A request reaches a decode instance no sooner than its prefill and the link latency after it reaches
            # the prefill pool. Lower bounds on that delay, with a factor 2 of margin (iteration times are near
            # affine in tokens, so splitting a prompt over iterations does not make it faster): one token for a
            # request already in the prefill pool; in a closed loop, a new request's shortest prompt less its
            # shareable prefix.
            self.lead_s = self._lower_bound_s(1)
            self.lead_new_s = (self._lower_bound_s(workload.input_len.lo - workload.prefix_tokens)
                               if isinstance(workload, ClosedLoop) else self.lead_s)

    def _engine(self, kind: type[EngineT], index: int, setup: SimulationSetup, itl: Samples,
                on_finish: Callable[[Request], None]) -> EngineT:
        if isinstance(setup.cost, PipelineCost):  # pp > 1: vLLM's batch queue (pipeline_engine.py)
            if kind is not Engine:
                raise SimulationError("pipeline parallelism is simulated for aggregated engines only, not for a "
                                      "disaggregated pool")
            kind = cast("type[EngineT]", PipelineEngine)
        e = kind(index, setup.engine, setup.layout, setup.num_blocks, setup.cost, self.log, itl, on_finish)
        e.fast_forward = setup.fast_forward
        e.host = setup.host
        if self.api is not None:
            e.gaps = self.gaps
        e.spec = setup.speculative.state(index) if setup.speculative is not None else None
        if setup.source_shares:
            e.meter = new_meter(setup.cost)
        return e

    def _lower_bound_s(self, tokens: int) -> float:
        assert self.disaggregated is not None
        p = self.disaggregated.prefill
        tokens = max(1, min(tokens, p.engine.max_num_batched_tokens))
        one = min(p.cost.step_us(1, 1, 1, 0.0, [])[0], p.cost.step_us(1, 1, 0, 0.0, [(1, 0)])[0])
        t_us = one if tokens == 1 else max(one, p.cost.step_us(tokens, 1, 0, 0.0, [(tokens, 0)])[0])
        return 0.5 * t_us * 1e-6 + self.disaggregated.link.latency_s

    # --- what happens to a request -------------------------------------------------------------------
    def _on_done(self, r: Request) -> None:
        self.table.record(r)
        self.finished += 1
        if self.api is not None and self.arrivals.closed:  # sent when the client gets the last chunk (_see)
            self._unseen.append((r.replica, r.finish_t))
        else:
            self.arrivals.on_finish(r.finish_t)
        total = self.finished + self.rejected
        if self.progress is not None and (self.finished % PROGRESS_EVERY == 0 or total == self.arrivals.total):
            self.progress(total, self.arrivals.total)

    def _on_prefilled(self, prefilled: Request) -> None:
        """Its prefill ended: its KV goes to the decode instance the decode router picks now, after the
        transfers ahead of it on either end of the link."""
        setup = self.disaggregated
        assert setup is not None
        r = self.inflight.pop(prefilled.id)
        j = self.exit_router.pick(self.loads)
        self.loads[j].incoming += 1
        t = prefilled.finish_t
        start = max(t, self.egress_free_s[prefilled.replica], self.ingress_free_s[j])
        nbytes = setup.transfer_bytes(r.num_prompt_tokens)
        end = start + setup.link.transfer_s(nbytes)
        self.egress_free_s[prefilled.replica] = self.ingress_free_s[j] = end
        kv, i = self.kv, prefilled.id
        kv.prefill_done_s[i], kv.start_s[i], kv.end_s[i], kv.bytes[i] = t, start, end, nbytes
        self.transfer_seq += 1
        heapq.heappush(self.transfers, (end, self.transfer_seq, j, r))

    def _arrive(self, t: float) -> None:
        spec = self.arrivals.pop()
        rid = self.arrived
        self.arrived += 1
        if self.disaggregated is None:
            r = Request(rid, spec.arrival_s, spec.input_tokens, spec.output_tokens, spec.prefix_id,
                        spec.prefix_tokens, self.max_model_len)
            routed = r
        else:  # the prefill pool gets it as a request for one token; the client's request waits for it
            r = Request(rid, spec.arrival_s, spec.input_tokens, spec.output_tokens, None, 0, self.max_model_len)
            routed = Request(rid, spec.arrival_s, spec.input_tokens, 1, spec.prefix_id, spec.prefix_tokens,
                             self.max_model_len)
        r.reached_t = routed.reached_t = t  # after the front end (frontend.py)
        if r.rejected:  # vLLM rejects prompts that do not fit max_model_len
            self.table.record(r)
            self.rejected += 1
            self.arrivals.on_finish(t)
            return
        if routed is not r:
            self.inflight[rid] = r
        e = self.entry[self.entry_router.pick(self.entry)]
        e.add(routed)
        if e.busy_until is None and e.index not in self.ready:
            self.ready[e.index] = t

    def _transferred(self, t: float) -> None:
        _, _, j, r = heapq.heappop(self.transfers)
        self.loads[j].incoming -= 1
        e = self.decode[j]
        e.receive(r)
        if e.busy_until is None and e.index not in self.ready:
            self.ready[e.index] = t

    # --- horizons ----------------------------------------------------------------------------------
    def horizon(self, e: Engine) -> float:
        """The earliest instant a request may be added to e (a decode segment may not run past it)."""
        h = self.arrivals.next_time()
        closed = self.arrivals.closed
        if e.index < len(self.entry):  # new arrivals; in a closed loop also completions elsewhere
            if closed:
                for o in self.exit:
                    if o is not e and o.busy_until is not None:
                        h = min(h, o.busy_until)
                if self._unseen or self._due:  # and the clients' sends to come
                    h = min(h, self._resend_s())
            return h
        assert self.disaggregated is not None
        if self.transfers:
            h = min(h, self.transfers[0][0])
        h_new = h + self.lead_new_s  # an arrival needs a prefill and a transfer first
        latency_s = self.disaggregated.link.latency_s
        for o in self.engines:
            if o is e or o.busy_until is None:
                continue
            if o.index < len(self.entry):  # a prefill ending starts a transfer
                h = min(h, o.busy_until + latency_s)
            elif closed:
                h_new = min(h_new, o.busy_until + self.lead_new_s)
        for i, t in self.ready.items():  # about to start: a prefill instance may end a prompt, a decode one a request
            if i < len(self.entry):
                h = min(h, t + self.lead_s)
            elif closed and i != e.index:
                h_new = min(h_new, t + self.lead_new_s)
        return min(h, h_new)

    # --- the loop ------------------------------------------------------------------------------------
    def _start(self, i: int) -> None:
        e = self.engines[i]
        if e.start(self.ready.pop(i), self.horizon(e)) is None and e.has_work():
            raise SimulationError(f"{self.roles[i]} {i} cannot admit its next request with an empty batch "
                                  "(KV cache too small); raise --gpu-memory-utilization or lower --max-model-len")

    # --- the API servers (api_server.py) -------------------------------------------------------------------
    def _next_arrival(self) -> float:
        """When the next request reaches an engine (through the API servers' ingestion when there are any)."""
        return self.arrivals.next_time() if self.api is None else self.api.peek()

    def _finished(self, e: Engine) -> None:
        """Apply e's iteration (or segment) and report its stream chunks to the API servers."""
        plan = e.plan
        if self.api is None or plan is None:
            e.finish()
            return
        if isinstance(plan, SegmentPlan):
            n = e.running.size
            for end in (plan.start_t + np.cumsum(plan.durations_s)).tolist():
                self.api.emit(e.index, end, n)
            e.finish()
        else:
            e.finish()
            self.api.emit(e.index, plan.end_t, e.chunks)

    def _see(self, now: float) -> None:
        """Finishes whose last chunk's output turn has started by `now` (every engine's iterations up to `now`
        applied): their clients send their next request when that turn ends."""
        api = self.api
        assert api is not None
        unseen = []
        for server, t in self._unseen:
            busy = self.engines[server].busy_until
            if busy is not None and busy <= now:  # its engine has chunks of up to `now` still to emit: not yet
                unseen.append((server, t))
                continue
            seen = api.seen_s(server, t, now)
            if seen is None:
                unseen.append((server, t))
            else:
                heapq.heappush(self._due, seen)
        self._unseen = unseen

    def _resend_s(self) -> float:
        """The next instant a closed-loop client sends, or a turn starts that says when one will."""
        api = self.api
        assert api is not None
        t = self._due[0] if self._due else math.inf
        for server, _ in self._unseen:
            t = min(t, api.turn_s(server))
        return t

    def _resend(self, now: float) -> None:
        self._see(now)
        while self._due and self._due[0] <= now:
            self.arrivals.on_finish(heapq.heappop(self._due))

    def run(self) -> None:
        ready = self.ready
        engines = self.engines
        single = engines[0] if len(engines) == 1 else None
        transfers = self.transfers
        while True:
            t_arrival = self._next_arrival()
            if single is not None:
                ending = single if single.busy_until is not None else None
            else:
                busy = [e for e in engines if e.busy_until is not None]
                ending = min(busy, key=lambda e: (e.busy_until, e.index)) if busy else None
            t_end = ending.busy_until if ending is not None and ending.busy_until is not None else math.inf
            t_transfer = transfers[0][0] if transfers else math.inf
            t_ready = min(ready.values()) if ready else math.inf
            t_resend = self._resend_s() if self._unseen or self._due else math.inf
            if min(t_arrival, t_end, t_transfer, t_ready, t_resend) == math.inf:
                break
            if ending is not None and t_end <= min(t_arrival, t_transfer, t_ready, t_resend):
                self._finished(ending)  # an iteration ends first: it frees blocks before arrivals are routed
                if ending.has_work():
                    ready[ending.index] = t_end
                if self._unseen:
                    self._see(t_end)
            elif t_resend <= min(t_transfer, t_arrival, t_ready):
                self._resend(t_resend)
            elif t_transfer <= t_arrival and t_transfer <= t_ready:
                self._transferred(t_transfer)
            elif t_arrival <= t_ready:
                self._arrive(t_arrival)
            else:
                self._start(min(ready, key=lambda j: (ready[j], j)))
        if self.api is not None:
            self._deliver()

    def _deliver(self) -> None:
        """The run is over: the API servers stream what is left, and each request's first token and finish
        become the times its client saw them (`first_token_t`, `finish_t`), its inter-token gaps the gaps
        between the stream chunks its client got (`itl`; records.TokenGaps)."""
        api = self.api
        assert api is not None
        api.drain()
        self.table.deliver(api.delivered_array)
        self.itl = self.gaps.client(api.delivered_array)

    def source_us(self) -> tuple[dict[int, float], str | None]:
        """Predicted µs per source code over all engines, and the basis of the split (the coarser one when the
        engines' meters differ); ({}, None) when an engine was not metered."""
        meters = [e.meter for e in self.engines]
        if not meters or any(m is None for m in meters):
            return {}, None
        total = sum((m.source_us() for m in meters if m is not None), np.zeros(len(SOURCES)))
        bases = {m.basis for m in meters if m is not None}
        basis = "kernel" if bases == {"kernel"} else "iteration worst source"
        return {k: float(v) for k, v in enumerate(total) if v > 0}, basis

    def totals(self) -> tuple[dict[int, int], int]:
        """Iterations by cost source, over all engines; preemptions."""
        counts: dict[int, int] = {}
        for e in self.engines:
            for k, v in e.source_counts.items():
                counts[k] = counts.get(k, 0) + v
        return counts, sum(e.preemptions for e in self.engines)


def run_events(setup: SimulationSetup | DisaggSetup, workload: list[RequestSpec] | ClosedLoop,
               progress: Callable[[int, int], None] | None = None, log: IterationLog | None = None) -> EventLoop:
    """Run the workload to completion on an aggregated or a disaggregated deployment; the loop's state
    after the run (`simulate` and `disagg.simulate_disagg` turn it into their results). `log` (default: one
    that keeps every row) may stream the iteration rows to a writer instead (`IterationLog(keep, sink)`)."""
    loop = EventLoop(setup, workload, progress, log)
    loop.run()
    return loop


def run_result(setup: SimulationSetup | DisaggSetup, workload: list[RequestSpec] | ClosedLoop,
               progress: Callable[[int, int], None] | None,
               replica_row: Callable[[Engine], dict[str, int | str]],
               log: IterationLog | None = None) -> tuple[EventLoop, dict[str, Any]]:
    """Run the workload (`run_events`) and gather the fields of a SimulationResult, timed on the wall
    clock, with `replica_row` of each engine; the loop too, for what a result type adds."""
    wall0 = time.perf_counter()
    loop = run_events(setup, workload, progress, log)
    counts, preemptions = loop.totals()
    its = loop.log.arrays()
    source_us, basis = loop.source_us()
    return loop, {"source_us": source_us, "source_basis": basis, "setup": setup, "requests": loop.table,
                  "iterations": its, "itl_runs": loop.itl.runs(), "iteration_totals": loop.log.totals(),
                  "source_counts": counts, "preemptions": preemptions,
                  "wall_s": time.perf_counter() - wall0, "per_replica": [replica_row(e) for e in loop.engines]}


def simulate(setup: SimulationSetup, workload: list[RequestSpec] | ClosedLoop,
             progress: Callable[[int, int], None] | None = None, log: IterationLog | None = None) -> SimulationResult:
    """Run the workload to completion; deterministic for a given setup and workload. By default the result
    keeps every iteration row; `log=IterationLog(keep=False, sink=writer)` streams them instead (bounded
    memory for long runs: `result.iterations` is then empty and summaries use `iteration_totals`)."""
    if setup.replicas < 1:
        raise SimulationError(f"{setup.replicas} replicas; give --replicas >= 1")
    loop, common = run_result(setup, workload, progress, lambda e: {
        "replica": e.index, "iterations": e.iterations, "preemptions": e.preemptions, "evicted_blocks": e.pool.evicted},
        log)
    return SimulationResult(**common, prefix_cache=PrefixCache(tuple(e.pool.snapshot() for e in loop.entry)))


def simulate_after(setup: SimulationSetup, earlier: Sequence[list[RequestSpec] | ClosedLoop],
                   workload: list[RequestSpec] | ClosedLoop, **kwargs: Any) -> SimulationResult:
    """Run `earlier` workloads back to back on the same engines (each from the prefix cache the one before left;
    their own arrivals, concurrency and lengths; the clock restarts with each, and only the cache carries over),
    then `workload`; its result. A prompt is hit across workloads by its prefix key (`bench_random(...,
    prompt_keys=True)` keys every prompt)."""
    cache = setup.prefix_cache
    for w in earlier:
        cache = simulate(replace(setup, prefix_cache=cache), w).prefix_cache
    return simulate(replace(setup, prefix_cache=cache), workload, **kwargs)
