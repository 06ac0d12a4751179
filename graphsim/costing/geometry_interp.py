"""Kernel geometries that were not measured: interpolate between measured neighbouring geometries.

Measured tables cover a generic grid of geometries: GEMMs over (n, k) (powers of two and midpoints),
attention over (query heads, KV heads, head_dim) pairs of common models. A model's fused projections
often fall between grid values (e.g. n = 28,672), and its per-rank head counts too (e.g. 28 query / 4
KV heads). For such a key, the curves of the bracketing measured geometries — every other key field
(dtypes, sliding window) equal — are evaluated at the requested batch coordinates and combined
multilinearly in log(time) over the log of each geometry field (`GEOMETRY_FIELDS`), one field after
another, outermost first: the first field is bracketed among all measured values, each next one among
the geometries that share the fields already chosen (ragged grids, like the batch coordinates in
`interpolate.Curve`).

Log–log, as along the batch coordinates: exact when time ∝ field^α, which covers both ends of a kernel's
range — launch-bound (α = 0) and work-bound (α = 1: GEMM time ∝ n·k at large m; attention time ∝ query
heads when compute-bound, ∝ KV heads when reading the cache) — and within one bracket it differs little
from linear-in-field interpolation of a fixed cost plus work (t = 5 + h µs: 24 → 29, 32 → 37 µs gives
33.04 µs at 28 against 33 linear). The result is `interpolated` (or `extrapolated` where a neighbour
curve extrapolates in the batch coordinates); a key outside the measured range of a field gets nothing
here and falls through the pricer's chain (derived or roofline).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np

from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionPrefillKey, DsaModuleDecodeKey, DsaModulePrefillKey, GemmKey, KernelKey, MlaDecodeKey,
    MlaModuleDecodeKey, MlaModulePrefillKey, MlaPrefillKey, Point,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from graphsim.costing.hardware import HardwareSpec
    from graphsim.costing.interpolate import Evaluator
    from graphsim.costing.timing import Timing

# Per key class, the geometry fields interpolated across (outermost first); every other field must match.
# GEMMs: k, then n. Attention: head_dim, then KV heads, then query heads (the query heads of one KV-head
# count form the GQA groups a table measures). MLA: query heads (its latent dimensions are one model's).
GEOMETRY_FIELDS: dict[type, tuple[str, ...]] = {
    GemmKey: ("k", "n"),
    AttentionPrefillKey: ("head_dim", "num_kv_heads", "num_heads"),
    AttentionDecodeKey: ("head_dim", "num_kv_heads", "num_heads"),
    MlaPrefillKey: ("num_heads",), MlaDecodeKey: ("num_heads",),
    MlaModulePrefillKey: ("num_heads",), MlaModuleDecodeKey: ("num_heads",),
    DsaModulePrefillKey: ("num_heads",), DsaModuleDecodeKey: ("num_heads",),
}


@dataclass
class GeometryCurve:
    """Evaluates like `interpolate.Curve`: coords (N, d) in the key's point order → (times, source codes)."""

    key: KernelKey
    corners: list[tuple[float, Evaluator]]  # (multilinear weight, curve of a measured neighbour geometry)

    @property
    def num_rows(self) -> int:
        return sum(c.num_rows for _, c in self.corners)

    def evaluate(self, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from graphsim.costing.interpolate import INTERPOLATED, MISSING

        q = np.asarray(coords, dtype=np.float64).reshape(-1, len(fields(self.key.POINT)))
        log_t = np.zeros(len(q))
        src = np.full(len(q), INTERPOLATED, dtype=np.int8)
        for w, curve in self.corners:
            t, s = curve.evaluate(q)
            with np.errstate(divide="ignore", invalid="ignore"):
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

    def best_fraction(self, hardware: HardwareSpec) -> float | None:
        """The best share of the roofline the neighbouring geometries' rows achieve (the largest of theirs)."""
        got = [f for _, c in self.corners if (f := c.best_fraction(hardware)) is not None]
        return max(got) if got else None


def _weights(values: list[int], x: int) -> list[tuple[int, float]] | None:
    """The measured values bracketing x with their log-space interpolation weights (None: outside)."""
    i = bisect.bisect_left(values, x)
    if i < len(values) and values[i] == x:
        return [(x, 1.0)]
    if i == 0 or i == len(values):
        return None
    lo, hi = values[i - 1], values[i]
    w = float((np.log(x) - np.log(lo)) / (np.log(hi) - np.log(lo)))
    return [(lo, 1.0 - w), (hi, w)]


def corners(geos: set[tuple[int, ...]], target: tuple[int, ...]) -> list[tuple[float, tuple[int, ...]]] | None:
    """The measured geometries (tuples of the geometry fields, outermost first) bracketing `target`, with
    their multilinear log-space weights; None when some field cannot be bracketed."""
    if not target:
        return [(1.0, ())]
    ws = _weights(sorted({g[0] for g in geos}), target[0])
    if ws is None:
        return None
    out = []
    for v, w in ws:
        inner = corners({g[1:] for g in geos if g[0] == v}, target[1:])
        if inner is None:
            return None
        out += [(w * wi, (v, *rest)) for wi, rest in inner]
    return out


def geometry_family(key: KernelKey, names: tuple[str, ...]) -> tuple[object, ...]:
    """The key's fields that must match exactly (its class and everything but the geometry fields)."""
    return (type(key), *(getattr(key, f.name) for f in fields(key) if f.name not in names))


def geometry_curve(db, key: KernelKey, curve_of: Callable[[KernelKey], Evaluator | None]) -> GeometryCurve | None:
    """A GeometryCurve for an unmeasured key, or None when its kind has no geometry fields or the key
    cannot be bracketed. `curve_of(key)` returns the measured curve of a key (the pricer's cache)."""
    names = GEOMETRY_FIELDS.get(type(key))
    if names is None:
        return None
    family = geometry_family(key, names)
    cache = db.__dict__.setdefault("_geometries", {})
    if family not in cache:
        cache[family] = {tuple(getattr(k, n) for n in names) for k in db.keys(key.KIND) if geometry_family(k, names) == family}
    found = corners(cache[family], tuple(getattr(key, n) for n in names))
    if found is None:
        return None
    parts = []
    for w, geo in found:
        curve = curve_of(replace(key, **dict(zip(names, geo, strict=True))))
        if curve is None:
            return None
        parts.append((w, curve))
    return GeometryCurve(key, parts)
