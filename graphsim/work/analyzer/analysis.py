"""The analysis of one deployment and one batch: necessary work per location, R6 and R7.

Inputs are plain data: the accountant's rows (`rows.necessary_rows`), the priced CostTree leaves of
one rank (`locations.Site`), the map that ties them (`maps.select_map`) and the hardware's memory
bandwidth. Per location it holds the necessary work (the sum of the rows the map assigns to it, from
the accountant), the work the kernel performs on all ranks (its cost model × ranks), the predicted
time of one rank, and the roofline time of the necessary work spread over all ranks.

- **R6, necessary-work coverage**: the share of the predicted iteration time spent at locations
  that hold necessary work. The rest is communication and locations with no compulsory work
  (rotary, activation epilogues, memory-bound placeholders).
- **R7, redundancy**: performed minus necessary work, per location and in total, for FLOPs,
  parameter bytes and KV/state bytes. Positive is *excess* (KV heads replicated under TP, work
  replicated on every rank, MoE over-fetch, padding, recomputation); negative is *deficit*, work
  the accountant requires that the kernel's cost model leaves out. Activation bytes are shown
  apart: the accountant does not count activations between kernels.
- **Reconciliation**: the rows the map consumed, summed per segment, equal the accountant's report
  for the same step field by field — the numbers `graphsim work` prints.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from graphsim.work.analyzer.locations import Performed, Site
from graphsim.work.analyzer.maps import MapChoice
from graphsim.work.analyzer.rows import Reconciliation, Row, RowSet, reconcile
from graphsim.work.report import SegmentWork
from graphsim.workload import Step

_REL = 1e-6


@dataclass(frozen=True)
class Necessary:
    flops: float = 0.0
    param_bytes: float = 0.0  # expected (uniform routing for MoE)
    param_bytes_worst: float = 0.0
    state_bytes: float = 0.0  # KV/state read + written

    @property
    def bytes(self) -> float:
        return self.param_bytes + self.state_bytes

    @classmethod
    def of(cls, work: SegmentWork) -> Necessary:
        return cls(float(work.flops), work.param_read_bytes, work.param_read_bytes_worst,
                   work.state_read_bytes + work.state_write_bytes)

    def __add__(self, o: Necessary) -> Necessary:
        return Necessary(self.flops + o.flops, self.param_bytes + o.param_bytes,
                         self.param_bytes_worst + o.param_bytes_worst, self.state_bytes + o.state_bytes)


@dataclass(frozen=True)
class Redundancy:
    """Performed minus necessary work (all ranks); positive = excess, negative = deficit."""

    flops: float = 0.0
    param_bytes: float = 0.0
    state_bytes: float = 0.0

    @classmethod
    def between(cls, p: Performed, n: Necessary) -> Redundancy:
        def clean(a: float, b: float) -> float:  # float noise is not redundancy
            d = a - b
            return 0.0 if abs(d) <= _REL * max(abs(a), abs(b), 1.0) else d

        return cls(clean(p.flops, n.flops), clean(p.param_bytes, n.param_bytes), clean(p.state_bytes, n.state_bytes))

    @property
    def bytes(self) -> float:
        return self.param_bytes + self.state_bytes


@dataclass(frozen=True)
class LocationResult:
    location: str
    kernel: str
    kind: str
    count: int
    rows: tuple[str, ...]  # row references the map assigns here ("attn.qkv:self_attn.q_proj", "head")
    segments: tuple[str, ...]  # the accountant segment of each row ("layers.attn.qkv")
    necessary: Necessary
    performed: Performed  # all ranks
    time_us: float | None  # predicted, one rank, all instances
    source: str
    necessary_roofline_us: float | None  # necessary work on all ranks' peak and bandwidth
    redundancy: Redundancy
    excess_roofline_us: float | None  # the excess work (positive parts) on all ranks' peak and bandwidth
    causes: tuple[str, ...] = ()
    members: tuple[str, ...] = ()  # a generated kernel's custom-op kernels, as those are located (`Site.members`)

    @property
    def mapped(self) -> bool:
        return bool(self.rows)


@dataclass(frozen=True)
class Coverage:
    """R6: shares of the predicted iteration time (one rank)."""

    iteration_us: float | None
    mapped_us: float | None  # locations holding necessary work
    unmapped_us: float | None  # non-communication locations with no compulsory work
    communication_us: float | None
    share: float | None  # mapped / iteration
    missing: tuple[str, ...] = ()  # locations without a time (then the shares are not computed)


@dataclass(frozen=True)
class RedundancySummary:
    """R7 over the whole step, all ranks."""

    excess: Redundancy
    deficit: Redundancy
    performed: Performed
    necessary: Necessary
    excess_roofline_us: float | None  # Σ per-location roofline time of the excess work
    top: tuple[LocationResult, ...]  # the locations with the most excess (by its roofline time)

    @property
    def flops_share(self) -> float | None:
        return self.excess.flops / self.performed.flops if self.performed.flops else None

    @property
    def bytes_share(self) -> float | None:
        moved = self.performed.param_bytes + self.performed.state_bytes
        return self.excess.bytes / moved if moved else None


@dataclass(frozen=True)
class Subject:
    """What is analysed: the model, the hardware and parallel layout it runs on, and the batch."""

    model: str
    architecture: str
    hardware: str
    data_note: str
    tp: int
    ep: int
    gpus: int
    batch: str
    step: Step


@dataclass(frozen=True)
class Analysis(Subject):
    work_command: str  # the `graphsim work` command for the same step
    iteration_us: float | None
    iteration_source: str
    necessary_work_available: bool
    reason: str = ""  # why not, when unavailable
    map_id: str = ""
    map_path: str = ""
    locations: list[LocationResult] = field(default_factory=list)
    communication: list[Site] = field(default_factory=list)
    coverage: Coverage | None = None
    redundancy: RedundancySummary | None = None
    reconciliation: Reconciliation | None = None
    necessary_total: Necessary | None = None
    necessary_roofline_us: float | None = None  # Σ per-location rooflines of the necessary work
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        def loc(r: LocationResult) -> dict[str, Any]:
            d = asdict(r)
            d["performed"]["bytes"] = r.performed.bytes
            d["necessary"]["bytes"] = r.necessary.bytes
            return d

        out: dict[str, Any] = {
            "model": self.model, "architecture": self.architecture, "hardware": self.hardware, "data": self.data_note,
            "tp": self.tp, "ep": self.ep, "gpus": self.gpus, "batch": self.batch,
            "step": {"label": self.step.label(), "tokens": self.step.tokens, "sequences": self.step.sequences},
            "work_command": self.work_command,
            "iteration_time_us": self.iteration_us, "iteration_time_source": self.iteration_source,
            "necessary_work_available": self.necessary_work_available,
        }
        if not self.necessary_work_available:
            out["reason"] = self.reason
            return out
        cov, red = self.coverage, self.redundancy
        assert cov is not None and red is not None and self.reconciliation is not None and self.necessary_total
        out |= {
            "map": {"id": self.map_id, "path": self.map_path},
            "locations": [loc(r) for r in self.locations],
            "communication": [{"location": s.location, "kernel": s.kernel, "count": s.count, "time_us": s.time_us,
                               "source": s.source} for s in self.communication],
            "r6_coverage": asdict(cov),
            "r7_redundancy": {
                "excess": asdict(red.excess), "deficit": asdict(red.deficit),
                "performed": asdict(red.performed), "necessary": asdict(red.necessary),
                "excess_flops_share": red.flops_share, "excess_bytes_share": red.bytes_share,
                "excess_roofline_us": red.excess_roofline_us,
                "top": [{"location": r.location, "excess_flops": max(r.redundancy.flops, 0.0),
                         "excess_bytes": max(r.redundancy.param_bytes, 0.0) + max(r.redundancy.state_bytes, 0.0),
                         "excess_roofline_us": r.excess_roofline_us, "causes": list(r.causes)} for r in red.top],
            },
            "reconciliation": self.reconciliation.to_dict(),
            "necessary_total": asdict(self.necessary_total) | {"bytes": self.necessary_total.bytes},
            "necessary_roofline_us": self.necessary_roofline_us,
            "necessary_roofline_source": "roofline (necessary work on the hardware spec)",
            "notes": list(self.notes),
        }
        return out


def _roofline_us(flops: float, nbytes: float, peak: float | None, gpus: int, bandwidth: float) -> float | None:
    """max(flops / (gpus · peak), bytes / (gpus · bandwidth)) in µs; None where the spec has no number."""
    if (flops and not peak) or (nbytes and bandwidth <= 0):
        return None
    compute = flops / (gpus * peak) if (flops and peak) else 0.0
    memory = nbytes / (gpus * bandwidth) if nbytes else 0.0
    return max(compute, memory) * 1e6


def _causes(site: Site, n: Necessary, p: Performed, red: Redundancy, gpus: int, mapped: bool) -> tuple[str, ...]:
    out = list(site.notes)
    if gpus > 1:
        if n.flops and red.flops > 0 and abs(p.flops - gpus * n.flops) <= _REL * p.flops:
            out.append(f"computed on every one of the {gpus} ranks (replicated)")
        if n.param_bytes and red.param_bytes > 0 and abs(p.param_bytes - gpus * n.param_bytes) <= 1e-3 * p.param_bytes:
            out.append(f"weights read on every one of the {gpus} ranks (replicated)")
        if n.state_bytes and red.state_bytes > 0 and abs(p.state_bytes - gpus * n.state_bytes) <= 1e-3 * p.state_bytes:
            out.append(f"the KV cache/state moved on every one of the {gpus} ranks (replicated)")
    if site.kind == "moe_experts" and red.param_bytes:
        out.append("experts fetched per the kernel's cost model (token-expert draws per rank) against the "
                   "accountant's uniform top-k expectation")
    if not mapped and p.flops:
        out.append("FLOPs with no necessary counterpart (recomputation or extra work)")
    if red.flops < 0 or red.param_bytes < 0 or red.state_bytes < 0:
        out.append("deficit: the kernel's cost model leaves out part of the necessary work "
                   "(e.g. KV-cache writes, norm weights, quantization scales)")
    return tuple(out)


def _work_command(model: str, step: Step, dtype: str | None, kv_dtype: str | None) -> str:
    parts = ["graphsim work", model]
    for g in step.groups:
        parts += ["--decode" if g.new_tokens == 1 else "--prefill", g.label()]
    if dtype:
        parts += ["--dtype", dtype]
    if kv_dtype:
        parts += ["--kv-dtype", kv_dtype]
    return " ".join(parts)


@dataclass(frozen=True)
class Deployment(Subject):
    """What the CLI layer knows about the deployment being analysed (plain values)."""

    memory_bandwidth_bytes_per_s: float
    iteration_us: float | None
    iteration_source: str
    dtype: str | None = None
    kv_dtype: str | None = None


def unsupported(dep: Deployment, reason: str) -> Analysis:
    """A deployment the analyzer cannot tie to the accountant: said so, never half-analysed."""
    return _analysis(dep, False, reason)


def _analysis(dep: Deployment, available: bool, reason: str = "", **found: Any) -> Analysis:
    """An Analysis of `dep`: its subject, the `graphsim work` command and iteration time, and what was found."""
    subject: dict[str, Any] = {f.name: getattr(dep, f.name) for f in fields(Subject)}
    return Analysis(**subject, work_command=_work_command(dep.model, dep.step, dep.dtype, dep.kv_dtype),
                    iteration_us=dep.iteration_us, iteration_source=dep.iteration_source,
                    necessary_work_available=available, reason=reason, **found)


def _location(site: Site, assigned: tuple[Row, ...], gpus: int, bandwidth: float) -> LocationResult:
    n = Necessary()
    for r in assigned:
        n = n + Necessary.of(r.work)
    p = site.performed.scaled(gpus)
    red = Redundancy.between(p, n)
    excess_us = _roofline_us(max(red.flops, 0.0), max(red.param_bytes, 0.0) + max(red.state_bytes, 0.0),
                             site.peak_flops_per_s, gpus, bandwidth)
    return LocationResult(
        site.location, site.kernel, site.kind, site.count, tuple(r.ref for r in assigned),
        tuple(r.segment for r in assigned), n, p, site.time_us, site.source,
        _roofline_us(n.flops, n.bytes, site.peak_flops_per_s, gpus, bandwidth), red, excess_us,
        _causes(site, n, p, red, gpus, bool(assigned)), tuple(m.location for m in site.members))


def _coverage(dep: Deployment, sites: list[Site], results: list[LocationResult]) -> Coverage:
    missing = tuple(s.location for s in sites if s.time_us is None)
    if missing:
        return Coverage(dep.iteration_us, None, None, None, None, missing)
    mapped = sum(r.time_us or 0.0 for r in results if r.mapped)
    unmapped = sum(r.time_us or 0.0 for r in results if not r.mapped)
    comm = sum(s.time_us or 0.0 for s in sites if s.communication)
    total = dep.iteration_us if dep.iteration_us else mapped + unmapped + comm
    return Coverage(total, mapped, unmapped, comm, mapped / total if total else None)


def _redundancy(results: list[LocationResult], top: int) -> RedundancySummary:
    def part(pick) -> Redundancy:
        return Redundancy(sum(pick(r.redundancy.flops) for r in results),
                          sum(pick(r.redundancy.param_bytes) for r in results),
                          sum(pick(r.redundancy.state_bytes) for r in results))

    performed, necessary = Performed(), Necessary()
    for r in results:
        performed = performed + r.performed
        necessary = necessary + r.necessary
    excess = [r for r in results if r.redundancy.flops > 0 or r.redundancy.param_bytes > 0 or r.redundancy.state_bytes > 0]
    times = [r.excess_roofline_us for r in excess]
    total_us = None if any(v is None for v in times) else sum(v or 0.0 for v in times)
    ranked = sorted(excess, key=lambda r: (r.excess_roofline_us is None, -(r.excess_roofline_us or 0.0)))
    return RedundancySummary(part(lambda v: max(v, 0.0)), part(lambda v: min(v, 0.0)), performed, necessary,
                             total_us, tuple(ranked[:top]))


def analyze(dep: Deployment, sites: list[Site], rows: RowSet, choice: MapChoice, top: int = 8) -> Analysis:
    """Hold every location of one rank's CostTree against the necessary work the map assigns to it."""
    if not choice.ok:
        return unsupported(dep, choice.reason)
    check = choice.check
    assert check is not None
    results = [_location(s, check.assignment[s.location], dep.gpus, dep.memory_bandwidth_bytes_per_s)
               for s in sites if not s.communication]
    consumed = [r for s in sites if not s.communication for r in check.assignment[s.location]]
    rooflines = [r.necessary_roofline_us for r in results if r.mapped]
    roof = None if any(v is None for v in rooflines) else sum(v or 0.0 for v in rooflines)
    necessary = Necessary()
    for r in results:
        necessary = necessary + r.necessary
    return _analysis(
        dep, True, map_id=check.map.label, map_path=check.map.path, locations=results,
        communication=[s for s in sites if s.communication], coverage=_coverage(dep, sites, results),
        redundancy=_redundancy(results, top), reconciliation=reconcile(consumed, rows.report),
        necessary_total=necessary, necessary_roofline_us=roof, notes=tuple(rows.report.notes))
