"""Steady-state fast path: throughput and latencies of one serving unit under a closed loop of clients with
fixed input/output lengths, from a handful of iteration times instead of a simulation.

The search evaluates thousands of deployments; simulating each costs tenths of a second, this costs
tens of microseconds. The search simulates the candidates that matter (the frontier and the best
under the SLOs) and reports how far this path was from the simulation.

**Aggregated** (one instance, chunked prefill, `C` clients): running requests take their decode token
first, the rest of `max_num_batched_tokens` goes to prompts (vLLM's FCFS order). With every client
sending its next request as soon as the last one finishes, completions come in waves and the prompts
of a wave are packed into the iterations that follow it (a closed loop keeps the stagger the first
wave's prefill made). Per period, each of the C requests is prefilled once and decodes `osl − 1`
times:

- the prompts take `n_mix = C · isl / L` packed mixed iterations, `L = max_num_batched_tokens − D`
  prefill tokens beside the `D` decoding requests;
- a request lives `N = osl − 1 + k_p` iterations (`k_p = ceil(isl / L)` for its own prompt), so
  `D = C · (osl − 1) / N` decode on average, and the other `N − n_mix` iterations are decode only;
- period time `T = n_mix · t_mix + (N − n_mix) · t_dec`; throughput `C / T` requests/s; TPOT the mean
  iteration time over a request's decode, `(T − k_p·t_mix) / (N − k_p)`; TTFT the `k_p` iterations of its
  own prompt beside the decodes, plus half of that when it arrives while another prompt is in progress
  (with probability `ρ = C·k_p / N`): clients that start spread out stay spread out, and paced arrivals
  rarely queue deeper. (Throughput is the same whether the prompts come packed or spread out, to ~1%.)

When the prompts do not fit in the period (`n_mix > N`) every iteration is packed: `D = mnbt · (osl − 1) /
(isl + osl − 1)` decode, `L = mnbt − D` prompt tokens, the remaining clients queue (TTFT by Little's law).

**Disaggregated** (x prefill instances, y decode instances, `y · C` clients): a decode instance
decodes `D` requests per iteration (the first step of each is the one recomputed prompt token), a
prefill instance batches the prompts that arrived during its last iteration, and the link adds
`latency + bytes / bandwidth`. A prompt waits for half an iteration in progress (with the prefill
instance's utilisation as probability). The clients' cycle `TTFT + (osl − 1) · TPOT` sets the throughput, and
`D` (Little's law at the decode pool) is found by fixed-point iteration; a prefill pool, or a link,
that cannot keep up caps the throughput and the clients queue at the prefill pool.

Iteration times come from the same `IterationCost` the simulator uses, plus the engine's sampling and host time
per iteration when the caller gives the deployment's `EngineHost` (as the simulator adds them: host.py; the
source split divides the kernels' time only); every figure carries the worst
source of the iteration times it used (and of the link for disaggregated TTFT), and the point carries its
predicted iteration time split by kernel source (`SteadyPoint.source_us`, for shares): aggregated, one period's
iterations (`n_mix` mixed, `N − n_mix` decode-only; or the packed iteration when prefill-bound);
disaggregated, one request's share of both pools' iterations (its prefill iteration over the prompts it is
batched with, and `osl − 1` decode iterations over the `D` requests they serve).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from graphsim.serving.host import EngineHost
from graphsim.serving.pricing import NUM_SOURCES, IterationCost, TreeCost


@dataclass(frozen=True)
class SteadyPoint:
    requests_per_s: float  # per unit (one instance, or one xPyD set)
    output_tokens_per_s: float
    ttft_s: float
    tpot_s: float
    source: int  # worst SOURCES code of the iteration times used
    bound: str  # what limits throughput: "decode", "prefill", "prefill pool", "link", "api server"
    decode_batch: float  # mean requests decoding per iteration (per decode instance)
    transfer_s: float = 0.0  # disaggregated: KV transfer per request
    source_us: tuple[float, ...] = ()  # predicted iteration time per SOURCES code (module docstring), for shares

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1.0 / self.tpot_s if self.tpot_s > 0 else math.inf


class _Timer:
    """Iteration times with the worst source carried, memoised per cost model.

    With a `TreeCost`, decode attention comes from one bulk table per context over every batch size
    (`TreeCost.decode_attention_by_batch`): the fast path asks for many batch sizes at one context."""

    _caches: ClassVar[weakref.WeakKeyDictionary] = weakref.WeakKeyDictionary()  # cost → (steps, decode tables, splits)

    def __init__(self, cost: IterationCost, host: EngineHost | None = None) -> None:
        self.cost = cost
        self.host = host  # the engine's host time and sampling, as the simulator adds them (host.py)
        self.src = 0
        self._tree = isinstance(cost, TreeCost)
        caches = self._caches.get(cost)
        if caches is None:
            caches = self._caches[cost] = ({}, {}, {})
        self._memo, self._tables, self._splits = caches

    def step(self, tokens: int, seqs: int, dec: int, ctx: float, chunks: list[tuple[int, int]]) -> float:
        """An iteration's wall time (s): its kernels, then the engine's sampling and host time when a host is
        given (`EngineHost.iteration_us`, as the simulator charges every iteration)."""
        gpu = self.gpu(tokens, seqs, dec, ctx, chunks)
        if self.host is None:
            return gpu
        return float(self.host.iteration_us(gpu * 1e6, int(tokens), int(seqs))) * 1e-6

    def gpu(self, tokens: int, seqs: int, dec: int, ctx: float, chunks: list[tuple[int, int]]) -> float:
        """An iteration's kernel time (s): what the source shares (`split`) divide."""
        key = (int(tokens), int(seqs), int(dec), round(float(ctx), 3), tuple(chunks))
        hit = self._memo.get(key)
        if hit is None:
            if len(self._memo) > 200_000:
                self._memo.clear()
            hit = self._memo[key] = self._price(int(tokens), int(seqs), int(dec), float(ctx), chunks)
        self.src = max(self.src, hit[1])
        return hit[0]

    def split(self, tokens: int, seqs: int, dec: int, ctx: float, chunks: list[tuple[int, int]]) -> np.ndarray:
        """The fractions of a step's time per SOURCES code: by kernel source with a `TreeCost` (`step_split_us`,
        decode attention from `decode_attention_by_batch`'s split), else all of it under the step's worst source."""
        key = (int(tokens), int(seqs), int(dec), round(float(ctx), 3), tuple(chunks))
        hit = self._splits.get(key)
        if hit is None:
            if len(self._splits) > 200_000:
                self._splits.clear()
            if isinstance(self.cost, TreeCost) and self.cost.is_mixed(int(dec), chunks):  # as `_price`: the step whole
                us = self.cost.step_split_us(int(tokens), int(seqs), int(dec), float(ctx), chunks)
                hit = us / us.sum() if us.sum() > 0 else us
            elif isinstance(self.cost, TreeCost):  # decode attention from the by-batch table `_price` read
                us = self.cost.step_split_us(int(tokens), int(seqs), 0, 0.0, chunks)
                if dec:
                    self.step(tokens, seqs, dec, ctx, chunks)
                    us = us + self._tables[int(round(ctx))][2][:, int(dec)]
                hit = us / us.sum() if us.sum() > 0 else us
            else:
                hit = np.zeros(NUM_SOURCES)
                hit[int(self.cost.step_us(int(tokens), int(seqs), int(dec), float(ctx), chunks)[1])] = 1.0
            self._splits[key] = hit
        return hit

    def _price(self, tokens: int, seqs: int, dec: int, ctx: float, chunks: list[tuple[int, int]]) -> tuple[float, int]:
        c = self.cost
        # decodes beside a prefill chunk that the engine's attention prices apart (TreeCost.mixed): the step whole
        if not self._tree or not dec or (isinstance(c, TreeCost) and c.is_mixed(dec, chunks)):
            us, s = c.step_us(tokens, seqs, dec, ctx, chunks)
            return us * 1e-6, int(s)
        assert isinstance(c, TreeCost)
        us, s = c.step_us(tokens, seqs, 0, 0.0, chunks)
        key = int(round(ctx))
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = c.decode_attention_by_batch(int(round(ctx)))
        return (us + float(table[0][dec])) * 1e-6, max(int(s), int(table[1][dec]))


def _chunks(isl: int, budget: int, max_prompts: int = 1 << 30) -> tuple[list[tuple[int, int]], int]:
    """A packed iteration's prompt chunks for `budget` prefill tokens: whole prompts (and the start of
    the next) when a prompt fits, else one chunk at the prompt's mean position; at most `max_prompts`
    prompts (the free `max_num_seqs` slots). Returns (chunks, tokens)."""
    budget, max_prompts = max(1, int(budget)), max(1, int(max_prompts))
    if isl <= budget:
        whole, rest = divmod(budget, isl)
        if whole >= max_prompts:
            return [(isl, 0)] * max_prompts, isl * max_prompts
        chunks = [(isl, 0)] * whole + ([(rest, 0)] if rest else [])
        return chunks, budget
    k = math.ceil(isl / budget)
    mean_p = int(round(budget * (k - 1) / 2)) if k > 1 else 0
    return [(budget, min(mean_p, isl - budget))], budget


def _decode_ctx(isl: int, osl: int) -> float:
    """Mean context of a decoding request: it has computed isl + j tokens at its j-th decode, j < osl − 1."""
    return isl + max(osl - 2, 0) / 2


def aggregated_point(cost: IterationCost, isl: int, osl: int, clients: int, max_num_batched_tokens: int,
                     host: EngineHost | None = None) -> SteadyPoint:
    """One aggregated instance with `clients` requests always in flight (see the module docstring); `host`: the
    engine's host time per iteration, as the simulator adds it (None: kernels only)."""
    tm = _Timer(cost, host)
    C, mnbt = max(1, int(clients)), int(max_num_batched_tokens)
    ctx = _decode_ctx(isl, osl)
    dec_iters = max(osl - 1, 0)
    D = C * dec_iters / max(dec_iters + 1, 1)
    for _ in range(4):  # D and L depend on each other only through k_p: converges in a few rounds
        L = max(mnbt - int(round(D)), 1)
        k_p = math.ceil(isl / L)
        N = dec_iters + k_p
        D_new = C * dec_iters / N
        if abs(D_new - D) < 0.5:
            D = D_new
            break
        D = D_new
    L = max(mnbt - int(round(D)), 1)
    k_p = math.ceil(isl / L)
    N = dec_iters + k_p
    n_mix = C * isl / L
    if n_mix <= N:  # prompts fit in the period: decode-bound
        d = max(int(round(D)), 0)
        chunks, ptok = _chunks(isl, min(L, C * isl), C)
        dm = max(0, min(d, C - len(chunks)))  # the prompts of a mixed iteration took slots that finished decoding
        t_mix = tm.step(dm + ptok, dm + len(chunks), dm, ctx, chunks)
        t_dec = tm.step(d, d, d, ctx, []) if d else 0.0
        T = n_mix * t_mix + (N - n_mix) * t_dec
        split = n_mix * tm.gpu(dm + ptok, dm + len(chunks), dm, ctx, chunks) * 1e6 * tm.split(dm + ptok, dm + len(chunks),
                                                                                              dm, ctx, chunks)
        if d:
            split = split + (N - n_mix) * tm.gpu(d, d, d, ctx, []) * 1e6 * tm.split(d, d, d, ctx, [])
        rps = C / T
        # TTFT: a prompt's own iterations beside the decodes, after half a prompt's iterations when it arrives
        # while another prompt is in progress (closed-loop arrivals are paced: they rarely queue deeper)
        one, otok = _chunks(isl, min(L, isl), 1)
        d1 = min(d, C - 1)
        busy = min(C * k_p / N, 1.0)  # share of iterations that carry a prompt when prompts arrive spread out
        ttft = k_p * tm.step(d1 + otok, d1 + 1, d1, ctx, one) * (1 + busy / 2)
        tpot = (T - k_p * t_mix) / (N - k_p) if k_p < N else t_mix
        return _api_capped(SteadyPoint(rps, rps * osl, ttft, tpot, tm.src, "decode", D, source_us=tuple(split.tolist())),
                           host, isl, osl, C)
    # prefill-bound: every iteration packed with mnbt tokens
    D = mnbt * dec_iters / (isl + dec_iters)
    d = min(int(round(D)), C - 1)
    L = max(mnbt - d, 1)
    chunks, ptok = _chunks(isl, L, C - d)
    t = tm.step(d + ptok, d + len(chunks), d, ctx, chunks)
    split = tm.gpu(d + ptok, d + len(chunks), d, ctx, chunks) * 1e6 * tm.split(d + ptok, d + len(chunks), d, ctx, chunks)
    per_iter = L / isl  # completions per iteration
    rps = per_iter / t
    queued = max(C - D, per_iter)  # waiting or prefilling
    ttft = max(queued / per_iter, math.ceil(isl / L)) * t
    return _api_capped(SteadyPoint(rps, rps * osl, ttft, t, tm.src, "prefill", D, source_us=tuple(split.tolist())),
                       host, isl, osl, C)


def _api_capped(p: SteadyPoint, host: EngineHost | None, isl: int, osl: int, clients: int) -> SteadyPoint:
    """The instance's API servers (api_server.py; `api_servers_per_engine` of them side by side) take requests in one
    at a time each (the front end's FIFO: `frontend_us + frontend_per_token_us × isl` a request) and stream on their
    loops, where a request's `osl` outputs cost at least `osl × api_per_output_us` however merged its chunks:
    requests/s ≤ the smaller of the two rates. Where that binds, throughput is the servers' and the clients wait in
    front of them (TTFT by Little's law: a client's cycle C / rps less its decode)."""
    if host is None or host.model.api_per_chunk_us <= 0:
        return p
    m = host.model
    per_request_s = max(m.frontend_us + m.frontend_per_token_us * isl, osl * m.api_per_output_us) * 1e-6
    per_request_s /= host.api_servers_per_engine  # several API servers per engine take requests side by side
    if per_request_s <= 0 or p.requests_per_s * per_request_s <= 1.0:
        return p
    rps = 1.0 / per_request_s
    ttft = max(p.ttft_s, clients / rps - max(osl - 1, 0) * p.tpot_s)
    return replace(p, requests_per_s=rps, output_tokens_per_s=rps * osl, ttft_s=ttft, bound="api server")


def _prefill_time(tm: _Timer, isl: int, prompts: float, mnbt: int, seqs: int) -> tuple[float, float]:
    """(time of the iterations that prefill `prompts` prompts arriving together, their count)."""
    tokens = max(1, int(round(prompts * isl)))
    iters = max(1, math.ceil(tokens / mnbt))
    per = min(tokens, mnbt)
    chunks, ptok = _chunks(isl, per, seqs)
    return iters * tm.step(ptok, len(chunks), 0, 0.0, chunks), iters


def _prefill_split(tm: _Timer, isl: int, prompts: float, mnbt: int, seqs: int) -> np.ndarray:
    """`_prefill_time`'s iterations: the fractions of their time per SOURCES code."""
    tokens = max(1, int(round(prompts * isl)))
    chunks, ptok = _chunks(isl, min(tokens, mnbt), seqs)
    return tm.split(ptok, len(chunks), 0, 0.0, chunks)


def disaggregated_point(cost_p: IterationCost, cost_d: IterationCost, isl: int, osl: int, prefill_instances: int,
                        decode_instances: int, clients_per_decode: int, mnbt_p: int, mnbt_d: int,
                        transfer_s: float, transfer_bytes_s: float, seqs_p: int = 1 << 30,
                        host_p: EngineHost | None = None, host_d: EngineHost | None = None) -> SteadyPoint:
    """One xPyD unit with `decode_instances × clients_per_decode` clients (see the module docstring).

    `transfer_s` is one request's KV transfer (latency + bytes / bandwidth), `transfer_bytes_s` its
    bandwidth part (what occupies a link); `host_p`/`host_d` the pools' engine host time (None: kernels only)."""
    tp, td = _Timer(cost_p, host_p), _Timer(cost_d, host_d)
    x, y = int(prefill_instances), int(decode_instances)
    clients = y * max(1, int(clients_per_decode))
    ctx = _decode_ctx(isl, osl)
    C = max(1, int(clients_per_decode))
    # prefill capacity per instance: iterations packed with mnbt_p prompt tokens
    chunks, ptok = _chunks(isl, mnbt_p, seqs_p)
    t_pack = tp.step(ptok, len(chunks), 0, 0.0, chunks)
    mu_p = x * (ptok / isl) / t_pack  # requests/s the pool sustains
    mu_link = min(x, y) / transfer_bytes_s if transfer_bytes_s > 0 else math.inf
    D = float(min(C, mnbt_d))
    rps = 0.0
    bound = "decode"
    ttft = tpot = math.nan
    b = 1.0  # prompts per prefill iteration (set in the loop)
    for _ in range(30):
        d = max(1, int(round(D)))
        t_d = td.step(d, d, d, ctx, [])
        lam = rps / x if rps > 0 else 0.0  # arrivals per prefill instance
        b = 1.0
        for _ in range(5):  # prompts per prefill iteration: those that arrived during the last one
            t_b, _ = _prefill_time(tp, isl, b, mnbt_p, seqs_p)
            b = min(max(1.0, lam * t_b), max(1.0, mnbt_p / isl), float(seqs_p))
        t_b, _ = _prefill_time(tp, isl, b, mnbt_p, seqs_p)
        busy = min(1.0, lam * t_b / b)
        ttft_p = t_b * (1 + busy / 2)  # its iteration, after the rest of one in progress (paced arrivals)
        ttft = ttft_p + transfer_s + 1.5 * t_d  # then the decode side's next iteration computes the last token
        cycle = ttft + (osl - 1) * t_d
        new = clients / cycle
        cap = min(mu_p, mu_link)
        if new >= cap:
            bound = "prefill pool" if mu_p <= mu_link else "link"
            new = cap
            ttft = max(ttft, clients / cap - (osl - 1) * t_d)  # the rest of the cycle: queueing for prefill
        else:
            bound = "decode"
        D_new = min(float(C), new / y * osl * t_d)  # Little's law at one decode instance
        tpot = t_d
        if abs(new - rps) <= 1e-6 * max(new, 1e-9) and abs(D_new - D) < 0.25:
            rps, D = new, D_new
            break
        rps, D = new, 0.5 * (D + D_new)
    src = max(tp.src, td.src)
    d = max(1, int(round(D)))  # one request's share of the iterations of both pools (module docstring)
    t_b, _ = _prefill_time(tp, isl, b, mnbt_p, seqs_p)
    split = (_prefill_time(_Timer(cost_p), isl, b, mnbt_p, seqs_p)[0] / b * 1e6 * _prefill_split(tp, isl, b, mnbt_p, seqs_p)
             + (osl - 1) * td.gpu(d, d, d, ctx, []) / d * 1e6 * td.split(d, d, d, ctx, []))
    return SteadyPoint(rps, rps * osl, ttft, tpot, src, bound, D, transfer_s, tuple(split.tolist()))
