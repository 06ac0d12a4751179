"""Disaggregated prefill/decode serving (xPyD): a prefill pool and a decode pool, each of its own TP and
engine settings, joined by a KV transfer over a link.

What happens to a request (vLLM's P/D split with a KV connector, e.g. NixlConnector, and the proxy of
examples/online_serving/disaggregated_serving):

1. the router sends it to a prefill instance as a request for one token (`max_tokens=1`); that instance
   runs the prompt like any engine (chunked prefill, prefix caching) and its token is discarded;
2. its KV blocks go to a decode instance (picked by the decode router when the prefill ends) over the
   link: `latency + bytes / bandwidth`, where bytes are the prompt's KV bytes per rank on the busier
   side (`KvLayout.bytes_for_request`: a prefill rank sends its shard, a decode rank receives its
   shard, so with tp_p = 1 and tp_d = 4 the prefill GPU sends four decode ranks' worth). Transfers
   through one prefill instance's egress or one decode instance's ingress queue one after another;
3. the decode instance admits it with `prompt − 1` tokens already computed (vLLM recomputes the last
   prompt token: a prefix hit is at most `num_tokens − 1`), so its first step is one token that
   yields the first output token — TTFT therefore includes prefill, transfer, the decode-side queue
   and that step; then it decodes as usual. A request preempted on the decode side recomputes its
   prompt there (the remote KV is gone).

Aggregated serving (one pool, chunked prefill: `simulator.simulate`) stays the default; this module
reuses its engines, router, records and arrival handling. The link comes from the hardware spec
(`interconnect_bandwidth_bytes_per_s`, `interconnect_latency_us`: an estimate, reported as
`roofline`) or is given.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from graphsim.costing.hardware import HardwareSpec
from graphsim.errors import GraphsimError
from graphsim.serving.blocks import BlockPool
from graphsim.serving.records import IterationLog, Request, Samples
from graphsim.serving.requests import ClosedLoop, RequestSpec
from graphsim.serving.router import Router
from graphsim.serving.scheduler import Engine
from graphsim.serving.simulator import SimulationError, SimulationResult, SimulationSetup, _Arrivals


class KvLinkError(GraphsimError):
    pass


@dataclass(frozen=True)
class KvLink:
    """The path KV blocks take from a prefill GPU to a decode GPU (per GPU, one direction)."""

    bandwidth_bytes_per_s: float
    latency_s: float
    source: str = "roofline"  # "roofline" (a spec figure) or "given"
    describe: str = ""

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_per_s > 0 or self.latency_s < 0:
            raise KvLinkError(f"KV link bandwidth {self.bandwidth_bytes_per_s:g} B/s, latency {self.latency_s:g} s; "
                              "give a bandwidth > 0 (--kv-link-gbps) and a latency >= 0")

    def transfer_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bandwidth_bytes_per_s

    @classmethod
    def from_hardware(cls, hw: HardwareSpec, bandwidth_gb_per_s: float | None = None,
                      latency_us: float | None = None) -> KvLink:
        bw = bandwidth_gb_per_s * 1e9 if bandwidth_gb_per_s else hw.interconnect_bandwidth_bytes_per_s
        lat = latency_us if latency_us is not None else hw.interconnect_latency_us
        if not bw:
            raise KvLinkError(f"the {hw.id} spec has no interconnect bandwidth; give --kv-link-gbps")
        given = bandwidth_gb_per_s is not None or latency_us is not None
        what = (f"{bw / 1e9:,.0f} GB/s, {lat:g} µs" + (" (given)" if given else f" ({hw.interconnect or hw.id} spec)"))
        return cls(bw, lat * 1e-6, "given" if given else "roofline", what)


@dataclass(frozen=True)
class DisaggSetup:
    prefill: SimulationSetup  # replicas = prefill instances (x of xPyD)
    decode: SimulationSetup  # replicas = decode instances (y)
    link: KvLink

    @property
    def gpus(self) -> int:
        return self.prefill.replicas * self.prefill.tp + self.decode.replicas * self.decode.tp

    def transfer_bytes(self, prompt_tokens: int) -> int:
        """Bytes through the busier GPU's link for one prompt's KV (per rank, prefill or decode side)."""
        return max(self.prefill.layout.bytes_for_request(prompt_tokens),
                   self.decode.layout.bytes_for_request(prompt_tokens))

    def transfer_s(self, prompt_tokens: int) -> float:
        return self.link.transfer_s(self.transfer_bytes(prompt_tokens))

    def label(self) -> str:
        p, d = self.prefill, self.decode
        return f"{p.replicas}P(tp{p.tp}) {d.replicas}D(tp{d.tp})"


class DecodeEngine(Engine):
    """A decode instance: requests arrive with their prompt's KV (all but the last token) in place."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.caching = False  # the KV comes over the link; prefix caching is the prefill side's business
        self.pool = BlockPool(self.pool.num_blocks, False)
        self.remote: dict[int, int] = {}  # request id → tokens whose KV arrived

    def receive(self, r: Request) -> None:
        self.remote[r.id] = r.prompt - 1
        self.add(r)

    def _admit(self, budget: int) -> tuple[Request, int, int] | None:
        r = self.waiting[0]
        comp0 = self.remote.get(r.id, 0)
        new = r.ntok - comp0
        if not self.cfg.enable_chunked_prefill and new > budget:
            return None
        new = min(new, budget)
        full = min(r.ntok, self.cfg.max_model_len)
        if self.layout.admission_blocks(full, self.cfg.max_in_flight_tokens) > self.pool.free:
            return None
        self.waiting.popleft()
        self.remote.pop(r.id, None)  # once admitted, a preemption recomputes locally
        r.nshared, r.comp = 0, comp0
        r.hit_tokens = max(r.hit_tokens, 0)  # transferred KV is not a prefix-cache hit
        r.held = self.layout.held_blocks_one(comp0, new)
        self.pool.alloc(r.held)
        if np.isnan(r.admitted_t):
            r.admitted_t = self._now
        return r, self._append(r), new


@dataclass
class DisaggResult(SimulationResult):
    """A SimulationResult whose `setup` is a DisaggSetup: `requests` are the decode-side records,
    `iterations` hold both pools (replica < prefill instances is a prefill instance)."""

    prefill_done_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per request id (NaN if none)
    transfer_start_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    transfer_end_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    transfer_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prefill_tokens: int = 0  # tokens the prefill pool computed
    decode_tokens: int = 0  # tokens the decode pool computed

    @property
    def gpus(self) -> int:
        return self.setup.gpus

    def transfer_stats_ms(self) -> dict[str, float]:
        ok = ~np.isnan(self.transfer_end_s)
        if not ok.any():
            return {"mean": math.nan, "max": math.nan, "queue_mean": math.nan}
        dur = (self.transfer_end_s - self.prefill_done_s)[ok] * 1e3
        queue = (self.transfer_start_s - self.prefill_done_s)[ok] * 1e3
        return {"mean": float(dur.mean()), "max": float(dur.max()), "queue_mean": float(queue.mean()),
                "bytes_mean": float(self.transfer_bytes[ok].mean())}


class _Load:
    """A decode instance as the decode router sees it: queued and running requests plus those on the link."""

    __slots__ = ("engine", "incoming")

    def __init__(self, engine: Engine) -> None:
        self.engine, self.incoming = engine, 0

    @property
    def outstanding(self) -> int:
        return self.engine.outstanding + self.incoming


def simulate_disagg(setup: DisaggSetup, workload: list[RequestSpec] | ClosedLoop,
                    progress: Callable[[int, int], None] | None = None) -> DisaggResult:
    """Run the workload through the prefill pool, the link and the decode pool; deterministic."""
    p, d = setup.prefill, setup.decode
    if p.replicas < 1 or d.replicas < 1:
        raise SimulationError(f"{p.replicas} prefill and {d.replicas} decode instances; give at least one of each")
    wall0 = time.perf_counter()
    mml = min(p.engine.max_model_len, d.engine.max_model_len)
    arrivals = _Arrivals(workload)
    log, itl, prefill_itl = IterationLog(), Samples(), Samples()
    finals: list[Request] = []
    n = arrivals.total
    done_s, xs, xe, xb = (np.full(n, np.nan) for _ in range(4))
    link_free_p = [0.0] * p.replicas
    link_free_d = [0.0] * d.replicas
    transfers: list[tuple[float, int, int, Request]] = []  # (end, seq, decode instance, request)
    counters = {"finished": 0, "rejected": 0, "seq": 0}
    now = [0.0]

    def on_prefilled(rp: Request) -> None:
        rd = finals[rp.id]
        j = droute.pick(loads)
        loads[j].incoming += 1
        t = rp.finish_t
        start = max(t, link_free_p[rp.replica], link_free_d[j])
        nbytes = setup.transfer_bytes(rd.prompt)
        end = start + setup.link.transfer_s(nbytes)
        link_free_p[rp.replica] = link_free_d[j] = end
        done_s[rp.id], xs[rp.id], xe[rp.id], xb[rp.id] = t, start, end, nbytes
        counters["seq"] += 1
        heapq.heappush(transfers, (end, counters["seq"], j, rd))

    def on_decoded(r: Request) -> None:
        counters["finished"] += 1
        arrivals.on_finish(r.finish_t)
        total = counters["finished"] + counters["rejected"]
        if progress is not None and (counters["finished"] % 250 == 0 or total == n):
            progress(total, n)

    prefill = [Engine(i, p.engine, p.layout, p.num_blocks, p.cost, log, prefill_itl, on_prefilled)
               for i in range(p.replicas)]
    decode = [DecodeEngine(p.replicas + j, d.engine, d.layout, d.num_blocks, d.cost, log, itl, on_decoded)
              for j in range(d.replicas)]
    for e in prefill:
        e.fast_forward = p.fast_forward
    for e in decode:
        e.fast_forward = d.fast_forward
    engines: list[Engine] = prefill + decode
    loads = [_Load(e) for e in decode]
    proute, droute = Router(p.router), Router(d.router)
    ready: dict[int, float] = {}
    closed = isinstance(workload, ClosedLoop)
    # A request reaches a decode instance no sooner than its prefill and the link latency after it reaches the
    # prefill pool. Lower bounds on that delay, with a factor 2 of margin (iteration times are near affine in
    # tokens, so splitting a prompt over iterations does not make it faster): one token for a request already
    # in the prefill pool; in a closed loop, a new request's shortest prompt less its shareable prefix.
    def lower_bound_s(tokens: int) -> float:
        tokens = max(1, min(tokens, p.engine.max_num_batched_tokens))
        one = min(p.cost.step_us(1, 1, 1, 0.0, [])[0], p.cost.step_us(1, 1, 0, 0.0, [(1, 0)])[0])
        t_us = one if tokens == 1 else max(one, p.cost.step_us(tokens, 1, 0, 0.0, [(tokens, 0)])[0])
        return 0.5 * t_us * 1e-6 + setup.link.latency_s

    lead = lower_bound_s(1)
    lead_new = lower_bound_s(workload.input_len.lo - workload.prefix_tokens) if closed else lead

    def horizon(e: Engine) -> float:
        """The earliest instant a request may be added to e (a decode segment may not run past it)."""
        h = arrivals.next_time()
        if e.index < p.replicas:  # prefill: new arrivals; in a closed loop also decode completions
            if closed:
                for o in decode:
                    if o.busy_until is not None:
                        h = min(h, o.busy_until)
            return h
        if transfers:
            h = min(h, transfers[0][0])
        h_new = h + lead_new  # an arrival needs a prefill and a transfer first
        for o in engines:
            if o is e or o.busy_until is None:
                continue
            if o.index < p.replicas:  # a prefill ending starts a transfer
                h = min(h, o.busy_until + setup.link.latency_s)
            elif closed:
                h_new = min(h_new, o.busy_until + lead_new)
        for i, t in ready.items():  # about to start: a prefill instance may end a prompt, a decode one a request
            if i < p.replicas:
                h = min(h, t + lead)
            elif closed and i != e.index:
                h_new = min(h_new, t + lead_new)
        return min(h, h_new)

    while True:
        na = arrivals.next_time()
        busy = [e for e in engines if e.busy_until is not None]
        nb = min(busy, key=lambda e: (e.busy_until, e.index)) if busy else None
        tb = nb.busy_until if nb is not None else math.inf
        tx = transfers[0][0] if transfers else math.inf
        tr = min(ready.values()) if ready else math.inf
        if min(na, tb, tx, tr) == math.inf:
            break
        if nb is not None and tb <= na and tb <= tx and tb <= tr:
            now[0] = tb
            nb.finish()
            if nb.has_work():
                ready[nb.index] = tb
        elif tx <= na and tx <= tr:
            _, _, j, rd = heapq.heappop(transfers)
            loads[j].incoming -= 1
            e = decode[j]
            e.receive(rd)
            if e.busy_until is None and e.index not in ready:
                ready[e.index] = tx
        elif na <= tr:
            spec = arrivals.pop()
            rid = len(finals)
            rd = Request(rid, spec.arrival_s, spec.input_tokens, spec.output_tokens, None, 0, mml)
            finals.append(rd)
            if rd.rejected:
                counters["rejected"] += 1
                arrivals.on_finish(na)
                continue
            rp = Request(rid, spec.arrival_s, spec.input_tokens, 1, spec.prefix_id, spec.prefix_tokens, mml)
            e = prefill[proute.pick(prefill)]
            e.add(rp)
            if e.busy_until is None and e.index not in ready:
                ready[e.index] = na
        else:
            i = min(ready, key=lambda k: (ready[k], k))
            e = engines[i]
            if e.start(ready.pop(i), horizon(e)) is None and e.has_work():
                raise SimulationError(f"{'prefill' if i < p.replicas else 'decode'} instance {i} cannot admit its "
                                      "next request with an empty batch (KV cache too small); raise "
                                      "--gpu-memory-utilization or lower --max-model-len")
    counts: dict[int, int] = {}
    for e in engines:
        for k, v in e.source_counts.items():
            counts[k] = counts.get(k, 0) + v
    values, weights = itl.arrays()
    per = [{"replica": e.index, "pool": "prefill" if e.index < p.replicas else "decode", "iterations": e.iterations,
            "preemptions": e.preemptions} for e in engines]
    its = log.arrays()
    pre = its["replica"] < p.replicas if len(its["replica"]) else np.zeros(0, dtype=bool)
    return DisaggResult(setup, finals, its, values, weights, counts, sum(e.preemptions for e in engines),
                        time.perf_counter() - wall0, per, done_s, xs, xe, xb,
                        int(its["tokens"][pre].sum()) if len(pre) else 0,
                        int(its["tokens"][~pre].sum()) if len(pre) else 0)
