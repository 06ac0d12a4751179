"""Serving metrics of a simulation: latencies, throughput, goodput, and consistency checks.

- TTFT: first token time − arrival (the first token is sampled at the end of the iteration that
  completes the prompt).
- TPOT: (finish − first token) / (output tokens − 1), per request with more than one output token.
- ITL: every gap between two consecutive tokens of a request (a preempted request's stall included).
- E2E: finish − arrival.
- Throughput over the span from the first arrival to the last finish: requests/s, output tokens/s,
  total (prompt + output) tokens/s, and each per GPU (replicas × tp).
- Goodput: requests/s that met every given SLO.
- Little's law: the time-average number of requests in the system as the engines saw it (running +
  waiting at each iteration, weighted by iteration time) against arrival rate × mean E2E.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from graphsim.costing.interpolate import SOURCES
from graphsim.serving.simulator import SimulationResult


@dataclass(frozen=True)
class Stats:
    count: int
    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: np.ndarray, weights: np.ndarray | None = None, scale: float = 1.0) -> Stats:
        v = np.asarray(values, dtype=np.float64) * scale
        if len(v) == 0:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        if weights is None:
            p = np.percentile(v, [50, 90, 99])
            return cls(len(v), float(v.mean()), float(p[0]), float(p[1]), float(p[2]))
        w = np.asarray(weights, dtype=np.float64)
        order = np.argsort(v, kind="stable")
        v, w = v[order], w[order]
        cum = np.cumsum(w)
        total = cum[-1]

        def q(f: float) -> float:  # the smallest value whose cumulative weight reaches f
            return float(v[min(int(np.searchsorted(cum, f * total, side="left")), len(v) - 1)])

        return cls(int(round(total)), float((v * w).sum() / total), q(0.5), q(0.9), q(0.99))


@dataclass(frozen=True)
class SLO:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    @property
    def given(self) -> bool:
        return any(x is not None for x in (self.ttft_ms, self.tpot_ms, self.e2e_ms))


@dataclass(frozen=True)
class Summary:
    requests: int
    completed: int
    rejected: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    gpus: int
    ttft_ms: Stats
    tpot_ms: Stats
    itl_ms: Stats
    e2e_ms: Stats
    goodput_requests_per_s: float | None
    slo_attained: float | None
    preemptions: int
    prefix_hit_rate: float
    iterations: int
    mean_batch_tokens: float
    mean_running: float
    little_l_observed: float
    little_lambda_w: float
    source: str  # worst source of the iteration times used
    source_counts: dict[str, int]
    wall_s: float
    host_share: float = 0.0  # share of the engine busy time that is host time (derived, serving/host.py)
    source_shares: dict[str, float] = field(default_factory=dict)  # share of predicted iteration time per source
    source_basis: str | None = None  # "kernel" or "iteration worst source" (SimulationResult.source_basis)

    @property
    def all_roofline(self) -> bool:
        """Every predicted µs is a roofline estimate (by the shares when metered, else by the iteration labels)."""
        if self.source_shares:
            return set(self.source_shares) == {"roofline"}
        return set(self.source_counts) == {"roofline"}

    def per_gpu(self, value: float) -> float:
        return value / self.gpus

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["per_gpu"] = {"requests_per_s": self.per_gpu(self.requests_per_s),
                        "output_tokens_per_s": self.per_gpu(self.output_tokens_per_s),
                        "total_tokens_per_s": self.per_gpu(self.total_tokens_per_s)}
        d["all_roofline"] = self.all_roofline
        return d


def summarize(res: SimulationResult, slo: SLO = SLO()) -> Summary:
    table = res.requests  # compact columns (records.RequestTable): no Python object per request
    mask = table.completed_mask
    done = np.flatnonzero(mask)
    arrival = table.column("arrival")[mask]
    first = table.column("first_token_t")[mask]
    finish = table.column("finish_t")[mask]
    outs = table.column("max_tokens")[mask].astype(np.float64)
    prompts = table.column("num_prompt_tokens")[mask].astype(np.float64)
    span = float(finish.max() - table.column("arrival").min()) if len(done) else 0.0
    ttft = first - arrival
    e2e = finish - arrival
    multi = outs > 1
    tpot = (finish[multi] - first[multi]) / (outs[multi] - 1)
    good = None
    attained = None
    if slo.given and len(done):
        ok = np.ones(len(done), dtype=bool)
        if slo.ttft_ms is not None:
            ok &= ttft * 1e3 <= slo.ttft_ms
        if slo.tpot_ms is not None:
            tp = np.zeros(len(done))
            tp[multi] = tpot
            ok &= tp * 1e3 <= slo.tpot_ms
        if slo.e2e_ms is not None:
            ok &= e2e * 1e3 <= slo.e2e_ms
        attained = float(ok.mean())
        good = float(ok.sum() / span) if span > 0 else math.nan
    it = res.iteration_totals  # sums over the iteration rows (kept or streamed)
    busy = it.busy_s
    little_obs = float(it.in_system_dur / span) if span > 0 else math.nan
    lam_w = float(len(done) / span * e2e.mean()) if span > 0 and len(done) else math.nan
    hits = np.maximum(table.column("hit_tokens")[mask], 0).astype(np.float64)
    itl_v, itl_w, itl_c = res.itl_runs  # run-length encoded samples: weight × count each
    counts = {SOURCES[k].value: v for k, v in sorted(res.source_counts.items())}
    shares = source_shares(res.source_us)
    worst = SOURCES[max(res.source_counts)].value if res.source_counts else "missing"
    gpus = res.gpus  # replicas × tp; a disaggregated run counts both pools
    return Summary(
        requests=len(table), completed=len(done), rejected=int(table.column("rejected").sum()),
        duration_s=span,
        requests_per_s=len(done) / span if span else math.nan,
        output_tokens_per_s=float(outs.sum() / span) if span else math.nan,
        total_tokens_per_s=float((outs.sum() + prompts.sum()) / span) if span else math.nan,
        gpus=gpus,
        ttft_ms=Stats.of(ttft, scale=1e3), tpot_ms=Stats.of(tpot, scale=1e3),
        itl_ms=Stats.of(itl_v, itl_w * itl_c, scale=1e3), e2e_ms=Stats.of(e2e, scale=1e3),
        goodput_requests_per_s=good, slo_attained=attained, preemptions=res.preemptions,
        prefix_hit_rate=float(hits.sum() / prompts.sum()) if len(done) else 0.0,
        iterations=it.iterations, mean_batch_tokens=float(it.tokens_dur / busy) if busy else 0.0,
        mean_running=float(it.running_dur / busy) if busy else 0.0,
        little_l_observed=little_obs, little_lambda_w=lam_w, source=worst, source_counts=counts, wall_s=res.wall_s,
        host_share=float(it.host_s / busy) if busy else 0.0,
        source_shares=shares, source_basis=res.source_basis if shares else None)


def source_shares(source_us: dict[int, float]) -> dict[str, float]:
    """µs per SOURCES code → share of the total per source name, best source first, zero shares left out."""
    total = sum(source_us.values())
    if not total > 0:
        return {}
    return {SOURCES[k].value: v / total for k, v in sorted(source_us.items()) if v > 0}
