"""GEMMs whose (n, k) was not measured: interpolate between measured geometries.

Measured GEMM tables cover a generic grid of (n, k) (powers of two and midpoints); a model's
fused projections often fall between grid values (e.g. n = 28,672). For such a key, the curves
of the bracketing measured geometries (n_lo ≤ n ≤ n_hi, k_lo ≤ k ≤ k_hi, same dtype) are
evaluated at the requested m and combined bilinearly in log(time) over (log n, log k). The
result is marked `interpolated` (or `extrapolated` where a neighbour curve extrapolates in m);
a key outside the measured (n, k) range gets nothing here and falls to the roofline.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from graphsim.costing.kernels import GemmKey, Point, TableKind

if TYPE_CHECKING:
    from graphsim.costing.interpolate import Curve
    from graphsim.costing.timing import Timing


@dataclass
class GeometryCurve:
    """Evaluates like `Curve`: coords (N, 1) of m → (times, source codes)."""

    key: GemmKey
    corners: list[tuple[float, Curve]]  # (bilinear weight, curve of a measured neighbour geometry)

    @property
    def num_rows(self) -> int:
        return sum(c.num_rows for _, c in self.corners)

    def evaluate(self, coords: np.ndarray):
        from graphsim.costing.interpolate import INTERPOLATED, MISSING

        q = np.asarray(coords, dtype=np.float64).reshape(-1, 1)
        log_t = np.zeros(len(q))
        src = np.full(len(q), INTERPOLATED, dtype=np.int8)
        for w, curve in self.corners:
            t, s = curve.evaluate(q)
            log_t += w * np.log(t)
            src = np.maximum(src, s)
        out = np.exp(log_t)
        bad = ~np.isfinite(out) | (src == MISSING)
        out[bad] = np.nan
        src[bad] = MISSING
        return out, src

    def at(self, point: Point) -> Timing:
        from graphsim.costing.interpolate import timing_at

        return timing_at(self, point)


def _bracket(values: list[int], x: int) -> tuple[int, int] | None:
    i = bisect.bisect_left(values, x)
    if i < len(values) and values[i] == x:
        return x, x
    if i == 0 or i == len(values):
        return None
    return values[i - 1], values[i]


def _weights(values: list[int], x: int) -> list[tuple[int, float]] | None:
    """The measured values bracketing x with their log-space interpolation weights."""
    b = _bracket(values, x)
    if b is None:
        return None
    lo, hi = b
    if lo == hi:
        return [(lo, 1.0)]
    w = float((np.log(x) - np.log(lo)) / (np.log(hi) - np.log(lo)))
    return [(lo, 1.0 - w), (hi, w)]


def gemm_geometry_curve(db, key: GemmKey, curve_of) -> GeometryCurve | None:
    """A GeometryCurve for an unmeasured GEMM key, or None when it cannot be bracketed.

    `curve_of(key)` returns the measured Curve of a key (the pricer's cache)."""
    cache = db.__dict__.setdefault("_gemm_geometries", {})
    if key.dtype not in cache:
        cache[key.dtype] = {(k.n, k.k) for k in db.keys(TableKind.GEMM) if k.dtype == key.dtype}
    geos: set[tuple[int, int]] = cache[key.dtype]
    k_weights = _weights(sorted({k for _, k in geos}), key.k)
    if k_weights is None:
        return None
    corners = []
    for kk, w_k in k_weights:
        n_weights = _weights(sorted(n for n, k in geos if k == kk), key.n)
        if n_weights is None:
            return None
        for nn, w_n in n_weights:
            curve = curve_of(GemmKey(nn, kk, key.dtype))
            if curve is None:
                return None
            corners.append((w_k * w_n, curve))
    return GeometryCurve(key, corners)
