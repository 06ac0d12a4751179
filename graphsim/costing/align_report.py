"""The decision table of an alignment, optionally with predicted vs measured time per kernel."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from graphsim.capture import Capture, Iteration, LaunchClass
from graphsim.costing.align import GraphKernel, align_sequences, iteration_kernels
from graphsim.costing.align_rules import accepted_classes
from graphsim.ir import Graph

# Verdicts: matched; partly matched (some instances); absent (from the capture); unmatched (a measured
# kernel no graph kernel claims); plumbing (engine plumbing: memcpy, memset, fill, sampling, views, ...).
MATCHED, PARTLY, ABSENT, UNMATCHED, PLUMBING = "matched", "partly matched", "absent", "unmatched", "plumbing"


@dataclass
class KernelCheck:
    """One kernel of the folded graph, over all its instances in the iteration."""

    node: str
    kernel: str
    kind: str
    region: str
    approximate: bool
    instances: int
    matched: int  # instances with a counterpart
    launches: int  # measured launches assigned to it (parts included)
    counterparts: dict[str, int]  # measured label → launches
    measured_us: float  # sum over its launches, whole iteration
    share: float  # of the iteration's measured launch time
    verdict: str
    reason: str
    predicted_us: float | None = None  # whole iteration (instances × per instance); None: missing or no profile
    predicted_source: str = ""

    @property
    def deviation_us(self) -> float | None:
        return None if self.predicted_us is None else self.predicted_us - self.measured_us

    @property
    def error(self) -> float | None:
        if self.predicted_us is None or self.measured_us <= 0:
            return None
        return self.predicted_us / self.measured_us - 1.0

    def to_json(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["deviation_us"], d["error"] = self.deviation_us, self.error
        return d


@dataclass
class MeasuredGroup:
    """Measured launches of one label that no graph kernel claims: unmatched work, or plumbing."""

    label: str
    klass: str
    op: str
    count: int
    measured_us: float
    share: float
    verdict: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class AlignReport:
    model: str
    target: str
    capture: str
    capture_format: str
    device: str
    timebase: str
    iteration: str
    iteration_index: int
    wall_us: float  # the iteration range's duration on the capture clock
    measured_us: float  # sum of the iteration's launch durations
    kernels: list[KernelCheck]
    measured: list[MeasuredGroup]
    completeness: dict[str, Any]
    batch: str | None = None
    predicted_us: float | None = None  # the whole iteration, from the cost tree
    predicted_source: str = ""
    data_note: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def has_prediction(self) -> bool:
        return self.batch is not None

    def deviations(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every row with a time difference, largest |predicted - measured| first (predicted 0 for
        launches the graph does not model; missing predictions are listed last)."""
        rows: list[dict[str, Any]] = []
        for k in self.kernels:
            rows.append({"what": k.kernel, "node": k.node, "region": k.region, "verdict": k.verdict,
                         "predicted_us": k.predicted_us, "measured_us": k.measured_us, "source": k.predicted_source,
                         "deviation_us": k.deviation_us, "error": k.error})
        for g in self.measured:
            rows.append({"what": g.label, "node": "", "region": "", "verdict": g.verdict, "predicted_us": 0.0,
                         "measured_us": g.measured_us, "source": "not modelled", "deviation_us": -g.measured_us,
                         "error": -1.0 if g.measured_us > 0 else None})
        rows.sort(key=lambda r: (r["deviation_us"] is None, -abs(r["deviation_us"] or 0.0)))
        return rows[:limit] if limit else rows

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in vars(self).items() if k not in ("kernels", "measured")}
        out["kernels"] = [k.to_json() for k in self.kernels]
        out["measured"] = [g.to_json() for g in self.measured]
        if self.has_prediction:
            out["deviations"] = self.deviations()
        return out


def _fmt_counter(c: Counter) -> dict[str, int]:
    return dict(sorted(c.items(), key=lambda kv: -kv[1]))


def build_report(graph: Graph, capture: Capture, iteration: Iteration, *, target: str = "",
                 predicted: dict[str, tuple[float | None, str]] | None = None, batch: str | None = None,
                 predicted_total: tuple[float | None, str] | None = None, data_note: str = "") -> AlignReport:
    """Align `iteration` with `graph` and tabulate. `predicted`: node name → (whole-iteration
    predicted µs or None when missing, source) for the batch `batch`."""
    seq = iteration_kernels(graph)
    work_idx = [i for i, x in enumerate(iteration.launches) if x.klass is not LaunchClass.PLUMBING]
    work = [iteration.launches[i] for i in work_idx]
    al = align_sequences(seq, work)
    total = iteration.launch_us or 1.0
    present = {x.klass.value for x in work}

    # graph kernels, folded by node
    order: list[str] = []
    inst: dict[str, list[int]] = {}
    for gi, g in enumerate(seq):
        if g.node not in inst:
            order.append(g.node)
            inst[g.node] = []
        inst[g.node].append(gi)
    kernels: list[KernelCheck] = []
    for node in order:
        idx = inst[node]
        g0: GraphKernel = seq[idx[0]]
        a = g0.attrs
        launches = [j for gi in idx for j in al.launches_of[gi]]
        matched = sum(1 for gi in idx if any(al.main[j] for j in al.launches_of[gi]))
        counterparts = Counter(work[j].key for j in launches)
        measured = sum(work[j].duration_us for j in launches)
        if matched == len(idx):
            verdict = MATCHED
            per = len(launches) / len(idx)
            reason = f"{per:.3g} launches each" if per > 1.0001 else ""
        else:
            classes = accepted_classes(a)
            if a.approximate:
                why = "memory-bound placeholder (~) for leftover ops: the engine fused them into a neighbour or launched nothing"
            elif not set(classes) & present:
                why = f"no {'/'.join(classes) or a.kind.value} launch anywhere in this iteration"
            else:
                why = f"no {'/'.join(classes)} launch at this position"
            if matched:
                verdict, reason = PARTLY, f"{matched} of {len(idx)} instances matched; the others: {why}"
            else:
                verdict, reason = ABSENT, why
        pred, src = (predicted or {}).get(node, (None, ""))
        kernels.append(KernelCheck(node, a.name, a.kind.value, g0.region, a.approximate, len(idx), matched,
                                   len(launches), _fmt_counter(counterparts), measured, measured / total, verdict,
                                   reason, pred, src if predicted is not None else ""))

    # unmatched measured work, grouped by label with the most common position
    def context(j: int) -> str:
        prev = next((al.graph_of_launch[k] for k in range(j - 1, -1, -1) if al.graph_of_launch[k] is not None), None)
        nxt = next((al.graph_of_launch[k] for k in range(j + 1, len(work)) if al.graph_of_launch[k] is not None), None)
        p = seq[prev].attrs.name if prev is not None else "start"
        q = seq[nxt].attrs.name if nxt is not None else "end"
        return f"between {p} and {q}"

    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for j, x in enumerate(work):
        if al.graph_of_launch[j] is not None:
            continue
        d = groups.setdefault((x.key, x.klass.value), {"x": x, "n": 0, "us": 0.0, "ctx": Counter()})
        d["n"] += 1
        d["us"] += x.duration_us
        d["ctx"][context(j)] += 1
    measured_rows: list[MeasuredGroup] = []
    for (label, klass), d in groups.items():
        ctx, c = d["ctx"].most_common(1)[0]
        where = ctx + (f" ({c} of {d['n']})" if d["n"] > 1 and c < d["n"] else "")
        reason = where if klass != LaunchClass.OTHER.value else f"unclassified name; {where}"
        measured_rows.append(MeasuredGroup(label, klass, d["x"].op, d["n"], d["us"], d["us"] / total, UNMATCHED, reason))
    plumb: dict[str, dict[str, Any]] = {}
    for x in iteration.launches:
        if x.klass is LaunchClass.PLUMBING:
            d = plumb.setdefault(x.key, {"x": x, "n": 0, "us": 0.0})
            d["n"] += 1
            d["us"] += x.duration_us
    for label, d in plumb.items():
        measured_rows.append(MeasuredGroup(label, LaunchClass.PLUMBING.value, d["x"].op, d["n"], d["us"], d["us"] / total,
                                           PLUMBING, d["x"].plumbing))
    measured_rows.sort(key=lambda g: (g.verdict != UNMATCHED, -g.measured_us))

    matched_us = sum(k.measured_us for k in kernels)
    unmatched = [g for g in measured_rows if g.verdict == UNMATCHED]
    plumbing = [g for g in measured_rows if g.verdict == PLUMBING]
    n_inst = len(seq)
    matched_inst = sum(k.matched for k in kernels)
    completeness = {
        "launches": len(iteration.launches), "launch_us": iteration.launch_us,
        "matched_launches": sum(k.launches for k in kernels), "matched_us": matched_us,
        "unmatched_launches": sum(g.count for g in unmatched), "unmatched_us": sum(g.measured_us for g in unmatched),
        "plumbing_launches": sum(g.count for g in plumbing), "plumbing_us": sum(g.measured_us for g in plumbing),
        "graph_instances": n_inst, "graph_matched": matched_inst, "graph_absent": n_inst - matched_inst,
        "graph_kernels": len(kernels),
        "alignment_score": al.score,
    }
    assert completeness["matched_launches"] + completeness["unmatched_launches"] + completeness["plumbing_launches"] \
        == len(iteration.launches)
    pt, ps = predicted_total if predicted_total else (None, "")
    notes = list(capture.notes)
    return AlignReport(graph.name, target, capture.path, capture.format, capture.device, capture.timebase,
                       iteration.label, iteration.index, iteration.wall_us, iteration.launch_us, kernels, measured_rows,
                       completeness, batch, pt, ps, data_note, notes)
