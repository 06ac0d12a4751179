"""What `graphsim capture show` prints: per phase, the launches folded by name with their share
of time, and the repeating block (one decoder layer) found in the launch sequence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphsim.capture import Capture, Iteration, Launch, LaunchClass


@dataclass(frozen=True)
class Fold:
    """launches[start : start + period * repeats] is `repeats` copies of one block of `period` launches."""

    start: int
    period: int
    repeats: int
    block: tuple[str, ...]

    @property
    def end(self) -> int:
        return self.start + self.period * self.repeats


def find_fold(labels: list[str], max_period: int = 2000) -> Fold | None:
    """The tandem repeat covering the most launches (ties: the shortest block), if any repeats twice."""
    n = len(labels)
    if n < 2:
        return None
    ids: dict[str, int] = {}
    codes = np.asarray([ids.setdefault(x, len(ids)) for x in labels], dtype=np.int64)
    best: tuple[int, int, int, int] | None = None  # (covered, -period, start, repeats)
    for p in range(1, min(n // 2, max_period) + 1):
        eq = np.concatenate([[False], codes[:-p] == codes[p:], [False]]).astype(np.int8)
        d = np.diff(eq)
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        if not len(starts):
            continue
        runs = ends - starts
        k = int(np.argmax(runs))
        repeats = (int(runs[k]) + p) // p
        if repeats < 2:
            continue
        cand = (repeats * p, -p, int(starts[k]), repeats)
        if best is None or cand[:2] > best[:2]:
            best = cand
    if best is None:
        return None
    _, neg_p, start, repeats = best
    p = -neg_p
    return Fold(start, p, repeats, tuple(labels[start:start + p]))


@dataclass
class LaunchGroup:
    label: str
    klass: str
    op: str
    plumbing: str
    count: int = 0  # over all iterations of the phase
    total_us: float = 0.0
    min_us: float = float("inf")
    max_us: float = 0.0

    def per_iteration(self, iterations: int) -> tuple[float, float]:
        return self.count / iterations, self.total_us / iterations

    @property
    def mean_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0


@dataclass
class PhaseSummary:
    phase: str
    iterations: list[Iteration]
    groups: list[LaunchGroup]  # sorted by total time, largest first
    launch_us: float  # per iteration (mean)
    wall_us: float  # per iteration (mean)
    plumbing_us: float  # per iteration (mean)
    fold: Fold | None  # of the first iteration's non-plumbing launches
    sequence: list[Launch] = field(default_factory=list)  # the first iteration's non-plumbing launches

    def share(self, g: LaunchGroup) -> float:
        n = len(self.iterations)
        return (g.total_us / n) / self.launch_us if self.launch_us else 0.0

    def to_json(self) -> dict[str, Any]:
        n = len(self.iterations)
        out: dict[str, Any] = {
            "phase": self.phase, "iterations": n, "labels": sorted({it.label for it in self.iterations}),
            "launches_per_iteration": sum(len(it.launches) for it in self.iterations) / n,
            "launch_us_per_iteration": self.launch_us, "wall_us_per_iteration": self.wall_us,
            "plumbing_us_per_iteration": self.plumbing_us,
            "kernels": [{"label": g.label, "class": g.klass, "op": g.op, "plumbing": g.plumbing,
                         "count_per_iteration": g.count / n, "us_per_iteration": g.total_us / n,
                         "mean_us": g.mean_us, "min_us": g.min_us, "max_us": g.max_us, "share": self.share(g)}
                        for g in self.groups],
        }
        if self.fold is not None:
            f = self.fold
            out["fold"] = {"before": f.start, "period": f.period, "repeats": f.repeats,
                           "after": len(self.sequence) - f.end, "block": list(f.block)}
        return out


def summarize(capture: Capture, phase: str | None = None) -> list[PhaseSummary]:
    phases = capture.phases()
    if phase is not None:
        capture.select(phase=phase)  # raises with the list of phases
        phases = {phase: phases[phase]}
    out = []
    for name, iters in phases.items():
        groups: dict[tuple[str, str], LaunchGroup] = {}
        for it in iters:
            for x in it.launches:
                g = groups.get((x.key, x.klass.value))
                if g is None:
                    g = groups[(x.key, x.klass.value)] = LaunchGroup(x.key, x.klass.value, x.op, x.plumbing)
                g.count += 1
                g.total_us += x.duration_us
                g.min_us = min(g.min_us, x.duration_us)
                g.max_us = max(g.max_us, x.duration_us)
        n = len(iters)
        seq = iters[0].work()
        out.append(PhaseSummary(
            name, iters, sorted(groups.values(), key=lambda g: -g.total_us),
            sum(it.launch_us for it in iters) / n, sum(it.wall_us for it in iters) / n,
            sum(x.duration_us for it in iters for x in it.launches if x.klass is LaunchClass.PLUMBING) / n,
            find_fold([x.key for x in seq]), seq))
    return out
