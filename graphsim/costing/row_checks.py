"""Checks of a profile's measured rows on read, beyond the finite-positive check every row gets
(`ProfileDB.invalid_rows`): rows whose repeated timings scattered widely (noisy) and rows far slower than
the kernel can take on the profile's device (suspect: measured on a busy machine, or mislabelled).

Neither kind is dropped: a noisy row's median is still the best figure there is, and a slow row may be
true. `graphsim profiles show` counts them and `predict` names them in its data note.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.kernels import KernelKey, TableKind
from graphsim.costing.profile_db import ProfileDB
from graphsim.costing.roofline import roofline_us

# (p90 − p10) / median above which a row is noisy. The profiler re-times a point whose interquartile range
# exceeds 0.25 of its median (profiler.timer.SPREAD_LIMIT, torch.utils.benchmark's gross-variance threshold);
# only p10/p90 are stored, and for normally distributed samples p10–p90 spans 2.563 σ against the IQR's
# 1.349 σ, so the same limit reads 0.25 × 2.563 / 1.349 ≈ 0.475 here, rounded to 0.5.
NOISY_P10_P90 = 0.5
# A row slower than this many times max(its roofline, the profile's launch floor) is suspect. The largest
# such ratio in aiconfigurator-core 0.12's measured vLLM tables, imported with this graphsim, is 1,110× on
# H200 (280,533 rows) and 780× on H100 (280,414 rows; p99.9 ≈ 85× on both; the decode-attention
# tables); 2,000× is above every real GPU measurement there, and the busy-machine CPU rows this check is
# for were 1,400–2,600× slower than the same kernels measured on an idle machine.
FAR_SLOWER = 2000.0


@dataclass
class RowChecks:
    rows: int = 0
    noisy: int = 0
    far_slower: int = 0
    worst_ratio: float = 0.0  # largest time / max(roofline, floor) over the rows with a roofline
    examples: list[str] = field(default_factory=list)  # a few far-slower rows, described

    @property
    def clean(self) -> bool:
        return not (self.noisy or self.far_slower)

    def describe(self) -> str:
        parts = []
        if self.noisy:
            parts.append(f"{self.noisy:,} noisy row(s) (p10–p90 spread above {NOISY_P10_P90:.0%} of the median)")
        if self.far_slower:
            parts.append(f"{self.far_slower:,} row(s) over {FAR_SLOWER:,.0f}× their roofline/launch floor (worst "
                         f"{self.worst_ratio:,.0f}×: measured on a busy machine?)")
        return "; ".join(parts) if parts else f"{self.rows:,} rows, none noisy or far slower than their roofline"

    def to_json(self) -> dict[str, object]:
        return {"rows": self.rows, "noisy": self.noisy, "far_slower": self.far_slower,
                "worst_ratio": self.worst_ratio, "examples": self.examples,
                "limits": {"noisy_p10_p90_over_median": NOISY_P10_P90, "far_slower_than_roofline": FAR_SLOWER}}


def check_rows(db: ProfileDB, spec: HardwareSpec | None, floor_us: float = 0.0,
               keys: Iterable[KernelKey] | None = None) -> RowChecks:
    """Count `db`'s noisy rows, and with a spec its rows over FAR_SLOWER × max(roofline, `floor_us`): of every
    key, or of `keys` only (those a prediction read)."""
    out = RowChecks(rows=sum(db.counts().values()), noisy=sum(db.noisy_rows(NOISY_P10_P90).values()))
    if spec is None:
        return out
    every = (key for kind in TableKind for key in db.keys(kind))
    for key in every if keys is None else keys:
        rows = db.rows(key)
        if not len(rows):
            continue
        roof = roofline_us(spec, key, rows.coords)
        if roof is None:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = rows.times_us / np.maximum(roof, floor_us)
        ratio = np.where(np.isfinite(ratio), ratio, 0.0)  # a zero roofline (no work) says nothing
        out.worst_ratio = max(out.worst_ratio, float(ratio.max()))
        slow = np.flatnonzero(ratio > FAR_SLOWER)
        out.far_slower += len(slow)
        for i in slow[:max(0, 3 - len(out.examples))]:
            out.examples.append(f"{key} at {rows.coords[i].tolist()}: {rows.times_us[i]:,.1f} µs, "
                                f"{ratio[i]:,.0f}× its roofline/floor")
    return out
