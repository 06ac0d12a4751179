"""`graphsim search`: for a model, a GPU budget and SLOs, which deployment serves the most per GPU?

1. Enumerate deployments (`search_space.py`): TP (and EP for MoE models), replicas, `max_num_seqs`,
   `max_num_batched_tokens`, aggregated or disaggregated with every xPyD split of the GPU budget; prune
   those whose weights and KV do not fit (the KV-capacity model).
2. Trace the model once; evaluate every candidate with the steady-state fast path (`steady.py`) on a
   backend (`backends.py`), cost tables built once per (TP, EP) partition.
3. Simulate the best candidates under the SLOs (closed loop, `simulator.py` / `disagg.py`), more while
   an unsimulated candidate still promises more than the best simulated one; simulated figures replace
   steady-state ones and the difference is reported.
4. The Pareto frontier of output tokens/s per GPU against tokens/s per user (1 / mean TPOT), the best
   deployment under the SLOs (mean TTFT and mean TPOT), and why every other one lost.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graphsim.catalog import resolve_model
from graphsim.costing.hardware import load_hardware
from graphsim.errors import GraphsimError
from graphsim.serving.backends import Backend, LocalBackend
from graphsim.serving.pareto import dominated_by, pareto_front
from graphsim.serving.search_eval import Evaluation, SearchContext, Task, make_context, run_task
from graphsim.serving.search_space import Candidate, Pruned, SearchSpec, enumerate_candidates

MAX_VERIFY_ROUNDS = 4


class SearchError(GraphsimError):
    pass


@dataclass
class Row:
    candidate: Candidate
    fast: Evaluation
    sim: Evaluation | None = None
    verdict: str = ""  # "best", "meets SLOs", "misses SLOs"
    reason: str = ""  # why it lost (empty for the best)
    on_frontier: bool = False

    @property
    def final(self) -> Evaluation:
        return self.sim if self.sim is not None else self.fast

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.candidate.to_json(), "steady_state": self.fast.to_json(),
                "simulated": self.sim.to_json() if self.sim else None, "verdict": self.verdict,
                "reason": self.reason, "on_frontier": self.on_frontier,
                "output_tokens_per_s_total": self.final.output_tokens_per_s_per_gpu * self.candidate.gpus_used}


@dataclass
class SearchResult:
    spec: SearchSpec
    model: str
    hardware: str
    data_note: str
    link: str
    rows: list[Row]  # every evaluated candidate, by id
    pruned: list[Pruned]
    frontier: list[int]  # candidate ids, tokens/s per user descending
    best: int | None
    timings: dict[str, float]
    backend: str
    workers: int
    verified: list[int] = field(default_factory=list)
    measured_data: bool = False  # a profile.db was used (otherwise every time is a roofline estimate)
    frontier_slo: list[int] = field(default_factory=list)  # the frontier of the candidates that meet the SLOs
    refinements: list = field(default_factory=list)  # search_load.Refinement: candidates bisected to the SLO boundary
    grid: int = 0  # rows[:grid] are the coarse grid's candidates, the rest refined ones (0: all grid)

    def coarse_vs_refined(self) -> dict[str, Any] | None:
        """The best of the coarse grid against the best overall, on the figures ranked (None without refinement)."""
        if not self.refinements or self.best is None:
            return None
        grid = [r for r in self.rows[:self.grid or len(self.rows)] if meets(r.final, self.spec)]
        coarse = _pick([r for r in grid if r.sim is not None] or grid) if grid else None
        best = self.rows[self.best]
        if coarse is None:
            return {"coarse": None, "refined": best.candidate.id, "gain": None}
        # on one basis: simulated when both were simulated, else both steady state
        a, b = (coarse.sim, best.sim) if coarse.sim is not None and best.sim is not None else (coarse.fast, best.fast)
        y0, y1 = a.output_tokens_per_s_per_gpu, b.output_tokens_per_s_per_gpu
        return {"coarse": coarse.candidate.id, "coarse_method": a.method,
                "coarse_tokens_per_s_per_gpu": y0, "refined": best.candidate.id, "refined_method": b.method,
                "refined_tokens_per_s_per_gpu": y1, "gain": y1 / y0 - 1 if y0 else None}

    def row(self, cid: int) -> Row:
        return self.rows[cid]

    def to_pandas(self) -> Any:
        """One row per evaluated candidate (`Row.to_json`, nested keys joined by '.') as a pandas DataFrame;
        needs pandas."""
        try:
            import pandas as pd
        except ModuleNotFoundError:
            raise SearchError("to_pandas() needs pandas (pip install pandas)") from None
        return pd.json_normalize([r.to_json() for r in self.rows])

    def __repr__(self) -> str:  # a few lines, not every candidate
        best = f"best #{self.best}" if self.best is not None else "no candidate meets the SLOs"
        return (f"SearchResult({self.model} on {self.hardware}: {len(self.rows):,} candidates evaluated, "
                f"{len(self.pruned):,} pruned, {len(self.frontier):,} on the frontier, {best}; .to_pandas() for "
                "one row per candidate)")

    @property
    def sources(self) -> Counter:
        return Counter(r.final.source for r in self.rows)

    def source_shares(self) -> dict[str, float]:
        """Shares of predicted iteration time by kernel source, summed over the simulated candidates ({} when none
        was simulated; steady-state rows carry only their worst source)."""
        total: dict[str, float] = {}
        for r in self.rows:
            for k, v in (r.sim.source_us if r.sim is not None else {}).items():
                total[k] = total.get(k, 0.0) + v
        from graphsim.costing.interpolate import SOURCES

        whole = sum(total.values())
        order = [s.value for s in SOURCES]
        return {k: total[k] / whole for k in sorted(total, key=order.index) if total[k] > 0} if whole > 0 else {}

    @property
    def all_roofline(self) -> bool:
        """No measured kernel rows were used: every time is a roofline estimate."""
        return not self.measured_data

    def worst_source(self) -> str:
        from graphsim.costing.interpolate import SOURCES

        order = [s.value for s in SOURCES]
        return max((r.final.source for r in self.rows), key=order.index, default="missing")

    def fast_vs_sim(self) -> dict[str, float]:
        """Relative differences (steady-state / simulated − 1) over the simulated candidates."""
        out: dict[str, list[float]] = {"output_tokens_per_s_per_gpu": [], "ttft_ms": [], "tpot_ms": []}
        for r in self.rows:
            if r.sim is None:
                continue
            for k in out:
                a, b = getattr(r.fast, k), getattr(r.sim, k)
                if b and math.isfinite(a) and math.isfinite(b):
                    out[k].append(a / b - 1)
        res: dict[str, float] = {"simulated": float(sum(1 for r in self.rows if r.sim))}
        for k, v in out.items():
            if v:
                res[f"{k}_median_abs"] = sorted(abs(x) for x in v)[len(v) // 2]
                res[f"{k}_max_abs"] = max(abs(x) for x in v)
        return res

    def loss_tally(self) -> Counter:
        tally: Counter = Counter()
        for p in self.pruned:
            tally[f"does not fit ({p.kind}): " + _reason_class(p.reason)] += 1
        for r in self.rows:
            if r.verdict == "misses SLOs":
                tally["misses " + " and ".join(_missed(r.final, self.spec))] += 1
            elif r.verdict == "meets SLOs":
                tally["meets the SLOs, fewer tokens/s per GPU"] += 1
        return tally

    def to_json(self) -> dict[str, Any]:
        s = self.spec
        return {
            "model": self.model, "hardware": self.hardware, "gpus": s.gpus,
            "workload": {"isl": vars(s.isl), "osl": vars(s.osl), "closed_loop": "max_num_seqs clients per (decode) instance"},
            "slo": vars(s.slo), "data": self.data_note, "kv_link": self.link,
            "source": self.worst_source(), "all_roofline": self.all_roofline, "sources": dict(self.sources),
            "source_shares_simulated": self.source_shares(),
            "best": self.best, "frontier": self.frontier, "frontier_meeting_slos": self.frontier_slo,
            "verified": self.verified,
            "candidates": len(self.rows), "pruned": len(self.pruned),
            "fast_vs_sim": self.fast_vs_sim(), "loss_tally": dict(self.loss_tally()),
            "refinements": [x.to_json() for x in self.refinements], "coarse_vs_refined": self.coarse_vs_refined(),
            "timings_s": self.timings, "backend": self.backend, "workers": self.workers,
            "rows": [r.to_json() for r in self.rows], "pruned_configs": [p.to_json() for p in self.pruned],
        }


def _reason_class(reason: str) -> str:
    if reason.startswith("KV cache holds") and "fewer than max_num_seqs" in reason:
        return "KV cache smaller than max_num_seqs requests"
    if "leave no KV memory" in reason:
        return "weights leave no KV memory"
    if "max_model_len" in reason:
        return "one max_model_len request does not fit"
    return reason.split(";")[0][:60]


def _missed(ev: Evaluation, spec: SearchSpec) -> list[str]:
    out = []
    if spec.slo.ttft_ms is not None and not ev.ttft_ms <= spec.slo.ttft_ms:
        out.append("TTFT")
    if spec.slo.tpot_ms is not None and not ev.tpot_ms <= spec.slo.tpot_ms:
        out.append("TPOT")
    return out


def meets(ev: Evaluation, spec: SearchSpec) -> bool:
    return not _missed(ev, spec)


def _rank_key(row: Row, ev: Evaluation) -> tuple:
    return (-ev.output_tokens_per_s_per_gpu, -row.candidate.gpus_used, -ev.tokens_per_s_per_user, row.candidate.id)


def _chunks(cands: list[Candidate], n: int) -> list[Task]:
    """Tasks of candidates that share partitions, so each worker builds few cost tables."""
    order = sorted(cands, key=lambda c: (c.partitions, c.id))
    size = max(1, math.ceil(len(order) / n))
    return [Task("steady", tuple(order[i:i + size])) for i in range(0, len(order), size)]


def run_search(spec: SearchSpec, backend: Backend | None = None,
               progress: Callable[[str], None] | None = None, context: SearchContext | None = None) -> SearchResult:
    """Enumerate, prune, evaluate, simulate the best, and rank (see the module docstring)."""
    spec.check()
    say = progress or (lambda _msg: None)
    backend = backend or LocalBackend(1)
    t0 = time.perf_counter()
    model = resolve_model(spec.base.model)
    hw = spec.base.interconnect.apply(load_hardware(spec.base.hardware))
    cands, pruned = enumerate_candidates(spec, model, hw)
    t1 = time.perf_counter()
    if not cands:
        why = Counter(_reason_class(p.reason) for p in pruned).most_common(1)
        raise SearchError(f"no deployment of {model.name} fits on {spec.gpus} × {hw.id}"
                          + (f" ({why[0][0]})" if why else "") + "; add GPUs, use --kv-dtype fp8 or lower --max-model-len")
    say(f"tracing {model.name} and fusing it ({len(cands):,} candidates, {len(pruned):,} pool configurations pruned)")
    ctx = context or make_context(spec, model, hw, cands)
    t2 = time.perf_counter()
    say(f"evaluating {len(cands):,} candidates (steady state, {backend.name} backend, {backend.workers()} worker(s))")
    tasks = _chunks(cands, 1 if backend.workers() == 1 else 4 * backend.workers())
    fast = {ev.candidate: ev for evs in backend.map(run_task, ctx, tasks) for ev in evs}
    rows = [Row(c, fast[c.id]) for c in cands]
    refinements = []
    if spec.refine:
        from graphsim.serving.search_load import refine_rows

        refinements = refine_rows(spec, rows, ctx, backend, lambda ev: meets(ev, spec), spec.refine, say)
    t3 = time.perf_counter()
    verified = _verify(spec, rows, backend, ctx, say) if spec.verify else []
    t4 = time.perf_counter()
    best, front, front_slo = _rank(spec, rows)
    timings = {"enumerate": t1 - t0, "trace": t2 - t1, "steady_state": t3 - t2, "simulate": t4 - t3,
               "total": time.perf_counter() - t0}
    return SearchResult(spec, model.name, hw.id, ctx.data_note, ctx.link.describe, rows, pruned, front, best, timings,
                        backend.name, backend.workers(), verified, ctx.profile is not None, front_slo,
                        refinements, len(cands))


def _verify(spec: SearchSpec, rows: list[Row], backend: Backend, ctx: SearchContext, say) -> list[int]:
    """Simulate the best feasible candidates in rounds of `spec.verify` while an unsimulated one still promises
    more tokens/s per GPU than the best simulated one that meets the SLOs."""
    done: list[int] = []
    for _ in range(MAX_VERIFY_ROUNDS):
        ranked = sorted((r for r in rows if meets(r.fast, spec)), key=lambda r: _rank_key(r, r.fast))
        seen = {_figures(r.fast) for r in rows if r.sim is not None}
        todo = []
        for r in ranked:  # one of each set of candidates with the same steady-state figures
            if r.sim is None and _figures(r.fast) not in seen:
                todo.append(r)
                seen.add(_figures(r.fast))
            if len(todo) == spec.verify:
                break
        if not todo:
            break
        good = [r.sim for r in rows if r.sim is not None and meets(r.sim, spec)]
        if good and todo[0].fast.output_tokens_per_s_per_gpu <= max(e.output_tokens_per_s_per_gpu for e in good):
            break
        say(f"simulating {len(todo)} candidate(s): " + ", ".join(f"#{r.candidate.id}" for r in todo))
        results = backend.map(run_task, ctx, [Task("simulate", (r.candidate,)) for r in todo])
        for r, (ev,) in zip(todo, results, strict=True):
            r.sim = ev
            done.append(r.candidate.id)
    return done


TIE = 0.01  # figures within 1% are tied: below the steady-state path's error on throughput


def _pick(rows: list[Row]) -> Row | None:
    """The most tokens/s per GPU; within 1% of it, the most tokens/s per user; within 1% of that, the lowest TTFT."""
    if not rows:
        return None
    y = max(r.final.output_tokens_per_s_per_gpu for r in rows)
    band = [r for r in rows if r.final.output_tokens_per_s_per_gpu >= (1 - TIE) * y]
    u = max(r.final.tokens_per_s_per_user for r in band)
    band = [r for r in band if r.final.tokens_per_s_per_user >= (1 - TIE) * u]
    return min(band, key=lambda r: (r.final.ttft_ms, _rank_key(r, r.final)))


def _figures(ev: Evaluation) -> tuple:
    return tuple(float(f"{v:.4g}") for v in (ev.output_tokens_per_s_per_gpu, ev.tokens_per_s_per_user, ev.ttft_ms))


def _rank(spec: SearchSpec, rows: list[Row]) -> tuple[int | None, list[int], list[int]]:
    xs = [r.final.tokens_per_s_per_user for r in rows]
    ys = [r.final.output_tokens_per_s_per_gpu for r in rows]
    ttft = [r.final.ttft_ms for r in rows]
    front = pareto_front(xs, ys, ttft)  # of equal points, the one with the lowest TTFT
    for i in front:
        rows[i].on_frontier = True
    ok_idx = [i for i, r in enumerate(rows) if meets(r.final, spec)]
    sub = pareto_front([xs[i] for i in ok_idx], [ys[i] for i in ok_idx], [ttft[i] for i in ok_idx])
    front_ok = [ok_idx[k] for k in sub]
    ok = [rows[i] for i in ok_idx]
    simulated_ok = [r for r in ok if r.sim is not None]
    best = _pick(simulated_ok or ok)
    best_y = best.final.output_tokens_per_s_per_gpu if best else None
    for i, r in enumerate(rows):
        ev = r.final
        how = "" if r.sim is None else " (simulated)"
        if best is not None and r is best:
            r.verdict, r.reason = "best", ""
            continue
        missed = _missed(ev, spec)
        if missed:
            parts = []
            if "TTFT" in missed:
                parts.append(f"TTFT {ev.ttft_ms:,.0f} ms > {spec.slo.ttft_ms:,.0f}")
            if "TPOT" in missed:
                parts.append(f"TPOT {ev.tpot_ms:,.1f} ms > {spec.slo.tpot_ms:,.1f}")
            r.verdict, r.reason = "misses SLOs", "; ".join(parts) + how
            continue
        r.verdict = "meets SLOs"
        if best is not None and best_y:
            gap = 1 - ev.output_tokens_per_s_per_gpu / best_y
            r.reason = (f"{gap:.1%} fewer tokens/s per GPU than the best" if gap >= TIE
                        else "tied with the best on tokens/s per GPU (within 1%); "
                        + ("fewer tokens/s per user" if ev.tokens_per_s_per_user < (1 - TIE) * best.final.tokens_per_s_per_user
                           else "higher TTFT")) + how
        if r.sim is None and simulated_ok and best_y and ev.output_tokens_per_s_per_gpu > best_y:
            r.reason = "steady-state figure above the best, not simulated" + how
        if i not in front_ok:  # among the candidates that meet the SLOs
            j = dominated_by(i, xs, ys, front_ok)
            if j is not None:
                r.reason += f"; dominated by #{rows[j].candidate.id}"
            else:
                twin = next((k for k in front_ok if xs[k] == xs[i] and ys[k] == ys[i]), None)
                if twin is not None:
                    r.reason += f"; same figures as #{rows[twin].candidate.id} on the frontier"
    ids = [rows[i].candidate.id for i in front]
    return (best.candidate.id if best else None), ids, [rows[i].candidate.id for i in front_ok]
