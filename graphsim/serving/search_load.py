"""Search for a load, and refinement to the SLO boundary.

**Fewest GPUs for a load** (`graphsim search --target-request-rate R` / `--target-concurrency C`). A
*unit* is one deployment shape of the search space: one aggregated instance, or one xPyD disaggregated
group, enumerated within `spec.gpus` (the largest unit; one node by default). Each unit is evaluated with
the steady-state fast path at its full closed-loop load (`max_num_seqs` clients per (decode) instance), as
`graphsim search` does; a unit that meets the SLOs there serves

- `capacity = requests/s` at that load (open loop, R), or `capacity = clients` (closed loop, C),

and `replicas = ceil(load / capacity)` copies of it serve the load, `gpus = replicas × unit GPUs`. The answer
is the option with the fewest GPUs up to `max_gpus`; ties go to the most headroom (`replicas × capacity /
load`), then the most output tokens/s per GPU. The steady state is a closed loop: Poisson arrivals at the
same mean rate queue more, so the best options are then simulated at their per-replica load (one replica:
Poisson arrivals at R / replicas, or ceil(C / replicas) closed-loop clients) and an option that misses the
SLOs there gets one more replica and is ranked again.

**Refinement** (`refine_rows`). The grids are coarse (`max_num_seqs` in powers of two, batch sizes in
doublings): between a value that meets the SLOs and the next one of the same shape that misses them lies a
larger one that still meets them. For the best candidates, `bisect_max` finds the largest integer between
the two that meets the SLOs (TPOT grows with the clients and with the batch: monotone in the steady state),
along `max_num_seqs` (aggregated or decode pool), the aggregated `max_num_batched_tokens` and the prefill
pool's; each refined deployment becomes an ordinary candidate of the search (simulated, ranked, reported)
with `refined_from` naming its grid point.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graphsim.errors import GraphsimError
from graphsim.serving.search_eval import Evaluation, SearchContext, Task, run_task
from graphsim.serving.search_space import Candidate, SearchSpec

LOAD_SIM_REQUESTS = 6  # an open-loop confirmation sends this many requests per max_num_seqs slot (as search_eval's
LOAD_SIM_MIN = 60  # SIM_GENERATIONS), at least LOAD_SIM_MIN; metrics over the arrivals between 1/3 and 5/6 of them
MAX_BUMPS = 3  # an option missing the SLOs in simulation gets at most this many extra replicas


class LoadSearchError(GraphsimError):
    pass


# --- bisection -------------------------------------------------------------------------------------------
def bisect_max(lo: int, hi: int, ok: Callable[[int], bool]) -> tuple[int, int]:
    """The largest integer v in [lo, hi) with ok(v), given ok(lo) and not ok(hi), for a monotone ok (true up to a
    boundary, false after); and the number of evaluations. At most ceil(log2(hi − lo)) calls of ok."""
    if hi <= lo:
        raise ValueError(f"bisect_max: hi {hi} <= lo {lo}")
    calls = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        calls += 1
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo, calls


AXES = ("max_num_seqs", "max_num_batched_tokens", "prefill_batched_tokens")


def _pool_index(c: Candidate, axis: str) -> int | None:
    """Which pool of `c` an axis changes (None: the axis does not apply): max_num_seqs of the aggregated or
    decode pool; max_num_batched_tokens of the aggregated pool; the prefill pool's max_num_batched_tokens."""
    if c.mode in ("afd", "dp"):  # AFD units and DP×EP instances are not refined
        return None
    if axis == "max_num_seqs":
        return len(c.pools) - 1
    if axis == "max_num_batched_tokens":
        return 0 if c.mode == "agg" else None
    return 0 if c.mode == "disagg" else None


def axis_value(c: Candidate, axis: str) -> int:
    k = _pool_index(c, axis)
    assert k is not None
    p = c.pools[k]
    return p.max_num_seqs if axis == "max_num_seqs" else p.max_num_batched_tokens


def _shape(c: Candidate, axis: str = "max_num_seqs") -> tuple:
    """A candidate without the value of `axis` (for max_num_seqs, without the decode batch it raises either)."""
    k = _pool_index(c, axis)
    pools = list(c.pools)
    if k is not None:
        p = pools[k]
        if axis == "max_num_seqs":
            pools[k] = dataclasses.replace(p, max_num_seqs=0, max_num_batched_tokens=0 if p.role == "decode"
                                           else p.max_num_batched_tokens)
        else:
            pools[k] = dataclasses.replace(p, max_num_batched_tokens=0)
    return (c.mode, axis, tuple(pools))


def with_value(c: Candidate, axis: str, value: int, cid: int) -> Candidate:
    """`c` with `axis` set to `value`, as candidate `cid`; memory as c's (between two grid values that fit)."""
    if axis == "max_num_seqs":
        return with_seqs(c, value, cid)
    k = _pool_index(c, axis)
    assert k is not None
    pools = list(c.pools)
    pools[k] = dataclasses.replace(pools[k], max_num_batched_tokens=value)
    return dataclasses.replace(c, id=cid, pools=tuple(pools))


def with_seqs(c: Candidate, seqs: int, cid: int) -> Candidate:
    """`c` with max_num_seqs `seqs` (agg) or decode max_num_seqs `seqs` (disagg; its max_num_batched_tokens raised
    to seqs, as the enumeration does), as candidate `cid`; memory as c's (a smaller batch of the same pool)."""
    *head, last = c.pools
    mnbt = max(last.max_num_batched_tokens, seqs) if last.role == "decode" else last.max_num_batched_tokens
    pool = dataclasses.replace(last, max_num_seqs=seqs, max_num_batched_tokens=mnbt)
    clients = seqs * (last.instances if c.mode == "disagg" else 1)
    return dataclasses.replace(c, id=cid, pools=(*head, pool), clients=clients)


@dataclass(frozen=True)
class Refinement:
    candidate: int  # the refined candidate's id
    refined_from: int  # the grid candidate it refines
    failing: int  # the grid candidate above it that misses the SLOs
    axis: str  # max_num_seqs, max_num_batched_tokens (aggregated) or prefill_batched_tokens
    values: tuple[int, int, int]  # (grid value that meets, refined value, grid value that misses)
    evaluations: int
    gain: float  # steady-state output tokens/s per GPU, refined / grid − 1

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def refine_rows(spec: SearchSpec, rows: list, ctx: SearchContext, backend, meets: Callable[[Evaluation], bool],
                count: int, say: Callable[[str], None] = lambda _m: None) -> list[Refinement]:
    """For each axis (AXES), bisect the `count` best grid candidates (steady-state tokens/s per GPU) that meet the
    SLOs and have a neighbour of the same shape one grid value up that misses them; append each refined
    candidate to `rows` (a `Row` of search.py, id = its index) and return what was refined. max_num_seqs is
    refined first; the batch axes refine the grid candidates (the ranking decides between them)."""
    from graphsim.serving.search import Row

    grid = list(rows)
    ranked = sorted((r for r in grid if meets(r.fast)), key=lambda r: (-r.fast.output_tokens_per_s_per_gpu,
                                                                        r.candidate.id))
    out: list[Refinement] = []
    for axis in AXES:
        by_shape: dict[tuple, list] = {}
        for r in grid:
            if _pool_index(r.candidate, axis) is not None:
                by_shape.setdefault(_shape(r.candidate, axis), []).append(r)
        todo = []
        for r in ranked:
            if _pool_index(r.candidate, axis) is None:
                continue
            v = axis_value(r.candidate, axis)
            above = [o for o in by_shape[_shape(r.candidate, axis)] if axis_value(o.candidate, axis) > v]
            nxt = min(above, key=lambda o: axis_value(o.candidate, axis), default=None)
            if nxt is not None and not meets(nxt.fast) and axis_value(nxt.candidate, axis) - v > 1:
                todo.append((r, nxt))
            if len(todo) == count:
                break
        for r, nxt in todo:
            c = r.candidate
            memo: dict[int, Evaluation] = {}

            def ok(value: int, c: Candidate = c, memo: dict[int, Evaluation] = memo, axis: str = axis) -> bool:
                cand = with_value(c, axis, value, len(rows))
                ev = next(iter(backend.map(run_task, ctx, [Task("steady", (cand,))])))[0]
                memo[value] = ev
                return meets(ev)

            lo, hi = axis_value(c, axis), axis_value(nxt.candidate, axis)
            best, calls = bisect_max(lo, hi, ok)
            if best == lo:
                continue
            cand = with_value(c, axis, best, len(rows))
            ev = dataclasses.replace(memo[best], candidate=cand.id)
            rows.append(Row(cand, ev))
            gain = ev.output_tokens_per_s_per_gpu / r.fast.output_tokens_per_s_per_gpu - 1
            out.append(Refinement(cand.id, c.id, nxt.candidate.id, axis, (lo, best, hi), calls, gain))
            say(f"refined #{c.id}: {axis} {lo} → {best} ({gain:+.1%} tokens/s per GPU)")
    return out


# --- search for a load -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadTarget:
    request_rate: float | None = None  # req/s, open loop (Poisson arrivals)
    concurrency: int | None = None  # clients, closed loop
    max_gpus: int = 64

    def __post_init__(self) -> None:
        if (self.request_rate is None) == (self.concurrency is None):
            raise LoadSearchError("give one of --target-request-rate and --target-concurrency")
        if self.request_rate is not None and not (math.isfinite(self.request_rate) and self.request_rate > 0):
            raise LoadSearchError(f"--target-request-rate {self.request_rate}: give a rate > 0 req/s")
        if self.concurrency is not None and self.concurrency < 1:
            raise LoadSearchError(f"--target-concurrency {self.concurrency}: give at least 1 client")
        if self.max_gpus < 1:
            raise LoadSearchError(f"--max-gpus {self.max_gpus}: give at least 1")

    @property
    def load(self) -> float:
        return float(self.request_rate if self.request_rate is not None else self.concurrency or 0)

    @property
    def unit(self) -> str:
        return "req/s" if self.request_rate is not None else "clients"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def unit_capacity(c: Candidate, ev: Evaluation, target: LoadTarget) -> float:
    """What one unit serves within the SLOs (it met them at its full closed-loop load): req/s or clients."""
    return ev.requests_per_s if target.request_rate is not None else float(c.clients)


def replicas_for(load: float, capacity: float) -> int:
    """Replicas of a unit of `capacity` that serve `load` (at least one)."""
    if not capacity > 0:
        return 0
    return max(1, math.ceil(load / capacity - 1e-9))


@dataclass
class LoadOption:
    candidate: Candidate
    fast: Evaluation  # the unit at its full closed-loop load (steady state)
    capacity: float  # per unit, req/s or clients
    replicas: int
    sim: Evaluation | None = None  # one replica at its share of the load (simulated), when confirmed
    sim_replicas: int = 0  # the replicas the simulation was run for
    failed_sims: list[str] = field(default_factory=list)  # earlier simulations that missed the SLOs
    verdict: str = ""
    reason: str = ""

    @property
    def gpus(self) -> int:
        return self.replicas * self.candidate.unit_gpus

    def headroom(self, target: LoadTarget) -> float:
        return self.replicas * self.capacity / target.load

    def per_replica(self, target: LoadTarget) -> float:
        return target.load / self.replicas

    def to_json(self, target: LoadTarget) -> dict[str, Any]:
        return {"candidate": self.candidate.to_json(), "unit_gpus": self.candidate.unit_gpus, "replicas": self.replicas,
                "gpus": self.gpus, "capacity_per_replica": self.capacity, "capacity_unit": target.unit,
                "load_per_replica": self.per_replica(target), "headroom": self.headroom(target),
                "steady_state_at_capacity": self.fast.to_json(),
                "simulated_at_load": self.sim.to_json() if self.sim else None,
                "failed_simulations": self.failed_sims, "verdict": self.verdict, "reason": self.reason}


def rank_options(options: list[LoadOption], target: LoadTarget) -> list[LoadOption]:
    """Fewest GPUs, then the most headroom, then the most output tokens/s per GPU, then the candidate id."""
    return sorted(options, key=lambda o: (o.gpus, -round(o.headroom(target), 6),
                                          -o.fast.output_tokens_per_s_per_gpu, o.candidate.id))


def load_options(rows: list, target: LoadTarget, meets: Callable[[Evaluation], bool]) -> tuple[list[LoadOption], list]:
    """(options within max_gpus, rows that cannot serve: (row, why)) from the evaluated rows."""
    opts, lost = [], []
    for r in rows:
        if not meets(r.fast):
            lost.append((r, "misses the SLOs at its own full load"))
            continue
        cap = unit_capacity(r.candidate, r.fast, target)
        n = replicas_for(target.load, cap)
        o = LoadOption(dataclasses.replace(r.candidate, replicas=1), r.fast, cap, n)  # one unit; replicas from the load
        if n == 0:
            lost.append((r, "serves nothing within the SLOs"))
        elif o.gpus > target.max_gpus:
            lost.append((r, f"needs {o.gpus} GPUs > --max-gpus {target.max_gpus}"))
        else:
            opts.append(o)
    return rank_options(opts, target), lost


def _simulate_at_load(ctx: SearchContext, o: LoadOption, target: LoadTarget) -> Evaluation:
    """One replica of the option at its share of the load: Poisson arrivals at R / replicas (open loop), or
    ceil(C / replicas) clients (closed loop)."""
    if target.request_rate is not None:
        return simulate_open_loop(ctx, o.candidate, target.request_rate / o.replicas,
                                  max(LOAD_SIM_MIN, LOAD_SIM_REQUESTS * o.candidate.clients))
    return simulate_closed_loop(ctx, o.candidate, min(math.ceil(target.load / o.replicas), o.candidate.clients))


def simulate_closed_loop(ctx: SearchContext, c: Candidate, clients: int) -> Evaluation:
    """One unit of `c` with `clients` closed-loop clients (at most its max_num_seqs slots), as the search
    simulates a candidate (search_eval: clients ramped over one predicted cycle, SIM_GENERATIONS requests each,
    metrics from the settled generations WINDOW)."""
    from graphsim.serving.requests import ClosedLoop
    from graphsim.serving.search_eval import SIM_GENERATIONS, WINDOW, _steady, window_metrics

    ramp = clients / _steady(ctx, c).requests_per_s
    loop = ClosedLoop(clients, SIM_GENERATIONS * clients, ctx.isl, ctx.osl, ctx.seed, ramp_s=ramp)
    return _simulate_unit(ctx, c, loop, lambda reqs: window_metrics(reqs, clients, WINDOW))


def _open_window(requests) -> dict[str, float]:
    """Metrics over the requests arriving between 1/3 and 5/6 of an open-loop run."""
    import numpy as np

    done = sorted((r for r in requests if not r.rejected and not math.isnan(r.finish_t)), key=lambda r: r.arrival)
    win = done[len(done) // 3: max(len(done) * 5 // 6, len(done) // 3 + 1)] or done
    ttft = np.asarray([r.first_token_t - r.arrival for r in win]) * 1e3
    multi = [r for r in win if r.max_tokens > 1]
    tpot = np.asarray([(r.finish_t - r.first_token_t) / (r.max_tokens - 1) for r in multi]) * 1e3
    span = win[-1].arrival - win[0].arrival if len(win) > 1 else 0.0
    rps = (len(win) - 1) / span if span > 0 else math.nan
    return {"requests_per_s": rps, "output_tokens_per_s": rps * float(np.mean([r.max_tokens for r in win])),
            "ttft_ms": float(ttft.mean()), "ttft_p90_ms": float(np.percentile(ttft, 90)),
            "tpot_ms": float(tpot.mean()) if len(tpot) else math.nan,
            "tpot_p90_ms": float(np.percentile(tpot, 90)) if len(tpot) else math.nan}


def confirm(ctx: SearchContext, options: list[LoadOption], target: LoadTarget, meets: Callable[[Evaluation], bool],
            budget: int, say: Callable[[str], None] = lambda _m: None) -> LoadOption | None:
    """Simulate the fewest-GPU option at its load; one that misses gets one more replica (up to MAX_BUMPS) and the
    options are ranked again; the first that meets is the answer. At most `budget` simulations (0: none, the
    steady-state ranking stands). Options whose GPUs grow past max_gpus drop out."""
    sims = 0
    pool = list(options)
    seen: set[tuple] = set()
    while pool and sims < budget:
        pool = rank_options(pool, target)
        o = pool[0]
        if o.sim is not None and o.sim_replicas == o.replicas:
            return o
        key = (_figures(o.fast), o.candidate.unit_gpus, o.replicas)
        if key in seen:  # same figures and GPUs as one simulated already: it shares that one's fate
            pool.pop(0)
            continue
        seen.add(key)
        say(f"simulating #{o.candidate.id} × {o.replicas} at {o.per_replica(target):,.3g} {target.unit} per replica")
        ev = _simulate_at_load(ctx, o, target)
        sims += 1
        if meets(ev):
            o.sim, o.sim_replicas = ev, o.replicas
            return o
        o.failed_sims.append(f"{o.replicas} replicas: " + _miss_text(ev, ctx, target, meets))
        o.sim = None
        if len(o.failed_sims) > MAX_BUMPS or (o.replicas + 1) * o.candidate.unit_gpus > target.max_gpus:
            pool.pop(0)
            continue
        o.replicas += 1
    return None


def simulate_open_loop(ctx: SearchContext, c: Candidate, rate: float, n: int) -> Evaluation:
    """One unit of `c` (one aggregated instance, or one xPyD group) under `n` Poisson arrivals at `rate` req/s
    (seeded by the search's seed); metrics over the requests arriving between 1/3 and 5/6 of the run (the
    start-up and the draining tail left out)."""
    from graphsim.serving.requests import synthetic

    return _simulate_unit(ctx, c, synthetic(n, rate, ctx.isl, ctx.osl, ctx.seed), _open_window)


def _simulate_unit(ctx: SearchContext, c: Candidate, workload, window: Callable[[Any], dict[str, float]]) -> Evaluation:
    from graphsim.costing.interpolate import SOURCES
    from graphsim.serving.disagg import DisaggSetup, simulate_disagg
    from graphsim.serving.search_eval import _setup, _warm, kv_link
    from graphsim.serving.simulator import simulate

    _warm(ctx, c)
    if c.mode == "agg":
        (p,) = c.pools
        res: Any = simulate(_setup(ctx, dataclasses.replace(p, instances=1)), workload)
        link_src, xfer = None, 0.0
    else:
        pp, pd = c.pools
        link = kv_link(ctx, c.unit_gpus)
        res = simulate_disagg(DisaggSetup(_setup(ctx, pp), _setup(ctx, pd), link), workload)
        link_src, xfer = link.source, float(res.transfer_stats_ms()["mean"])
    m = window(res.requests)
    tpot = m["tpot_ms"]
    worst = SOURCES[max(res.source_counts)].value if res.source_counts else "missing"
    return Evaluation(c.id, "simulated", m["requests_per_s"], m["output_tokens_per_s"] / c.unit_gpus,
                      1e3 / tpot if tpot > 0 else math.inf, m["ttft_ms"], tpot, worst, link_src, "simulated at load",
                      0.0, xfer, m["ttft_p90_ms"], m["tpot_p90_ms"], len(res.requests), float(res.wall_s),
                      {SOURCES[k].value: v for k, v in sorted(res.source_us.items())})


def _figures(ev: Evaluation) -> tuple:
    return tuple(float(f"{v:.4g}") for v in (ev.output_tokens_per_s_per_gpu, ev.tokens_per_s_per_user, ev.ttft_ms))


def _miss_text(ev: Evaluation, ctx: SearchContext, target: LoadTarget, meets) -> str:
    return f"simulated TTFT {ev.ttft_ms:,.0f} ms, TPOT {ev.tpot_ms:,.1f} ms"


@dataclass
class LoadResult:
    target: LoadTarget
    options: list[LoadOption]  # ranked, the answer first when there is one
    answer: LoadOption | None
    lost: list  # (row, why) of candidates that cannot serve the load
    confirmed: bool  # the answer was simulated at its load and met the SLOs

    def explain(self, spec: SearchSpec) -> None:
        """Verdicts and why each runner-up lost."""
        best = self.answer
        for o in self.options:
            if o is best:
                o.verdict, o.reason = "answer", ""
                continue
            o.verdict = "runner-up"
            if o.failed_sims and o.sim is None:
                o.reason = "misses the SLOs in simulation (" + "; ".join(o.failed_sims) + ")"
            elif best is None:
                o.reason = ""
            elif o.gpus > best.gpus:
                o.reason = f"{o.gpus - best.gpus} more GPUs ({o.gpus} vs {best.gpus})"
            elif o.headroom(self.target) < best.headroom(self.target) - 1e-6:
                o.reason = (f"same GPUs, less headroom ({o.headroom(self.target):.2f}× vs "
                            f"{best.headroom(self.target):.2f}× the load)")
            else:
                o.reason = "same GPUs and headroom, fewer tokens/s per GPU"
            if o.failed_sims and o.sim is None:
                continue
            if o.sim is None and best is not None and best.sim is not None and o.gpus <= best.gpus:
                o.reason += "; not simulated"

    def to_json(self, top: int | None = None) -> dict[str, Any]:
        opts = self.options if top is None else self.options[:top + 1]
        lost: dict[str, int] = {}
        for _r, why in self.lost:
            key = why if not why.startswith("needs") else "needs more than --max-gpus"
            lost[key] = lost.get(key, 0) + 1
        return {"target": self.target.to_json(), "answer": self.answer.to_json(self.target) if self.answer else None,
                "confirmed_by_simulation": self.confirmed, "options": [o.to_json(self.target) for o in opts],
                "options_total": len(self.options), "cannot_serve": lost}


def run_load_search(spec: SearchSpec, target: LoadTarget, backend=None, progress: Callable[[str], None] | None = None,
                    context: SearchContext | None = None):
    """The fewest GPUs that serve `target` within the SLOs (module docstring): evaluate and refine the units of
    `spec` (steady state, `spec.gpus` the largest unit), rank the options, simulate the best at their load.
    Returns (LoadResult, SearchResult of the units)."""
    from graphsim.catalog import resolve_model
    from graphsim.costing.hardware import load_hardware
    from graphsim.serving.search import SearchError, meets, run_search
    from graphsim.serving.search_eval import make_context
    from graphsim.serving.search_space import enumerate_candidates

    say = progress or (lambda _msg: None)
    spec.check()
    ctx = context
    if ctx is None:
        model = resolve_model(spec.base.model)
        hw = spec.base.interconnect.apply(load_hardware(spec.base.hardware))
        cands, _ = enumerate_candidates(spec, model, hw)
        if not cands:
            raise SearchError(f"no deployment of {model.name} fits on {spec.gpus} × {hw.id}; raise --gpus (the "
                              "largest unit), use --kv-dtype fp8 or lower --max-model-len")
        say(f"tracing {model.name} and fusing it")
        ctx = make_context(spec, model, hw, cands)
    units = run_search(spec.model_copy(update={"verify": 0}), backend, say, ctx)

    def ok(ev: Evaluation) -> bool:
        return meets(ev, spec)

    options, lost = load_options(units.rows, target, ok)
    answer = confirm(ctx, options, target, ok, 2 * spec.verify, say) if options and spec.verify else None
    confirmed = answer is not None
    if answer is None and options and not spec.verify:
        answer = options[0]
    options = rank_options(options, target)
    if answer is not None:
        options.remove(answer)
        options.insert(0, answer)
    res = LoadResult(target, options, answer, lost, confirmed)
    res.explain(spec)
    return res, units
