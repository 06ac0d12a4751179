"""Kernel time lookup: exact row → interpolation → derived → roofline → missing (DESIGN §1).

`Curve` interpolates the rows of one geometry key over their batch-dependent coordinates
(`m` for GEMMs; batch and kv_len for decode; batch, q_len and cached prefix for prefill; tokens;
message bytes) in log-log space: linear in log(time) against log(coordinate), one coordinate after
another (bilinear where there are two, on ragged grids too: each slice interpolates over its own
points). Inside the measured
range the result lies between the neighbouring rows and is monotone where they are; outside it
the edge segment's log-log slope, clamped to [0, 1] (a time never falls as work grows, and never
grows faster than the coordinate), extends it and the result is marked `extrapolated`; an extrapolated time
is also held at the best share of its roofline that the key's measured rows achieve (`KernelPricer._ceiling`). A coordinate measured at one value only is matched exactly
or not at all.

`KernelPricer` runs the chain for one profile.db and hardware spec, scalar (`time`) or vectorised
over many points (`times`), and records every result's `TimeSource`. A key with no rows of its own
is interpolated between measured neighbouring geometries where it lies between them
(`geometry_interp.py`); a point still without a time is priced `derived` where it is memory-bound
and the profile says what the GPU achieves on such work (`derived.py`), `roofline` otherwise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from graphsim.costing.collectives import CollectiveSettings
from graphsim.costing.derived import ProfileRates, derived_us, profile_rates
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.eager_rows import EAGER_BAND, SiblingRatio
from graphsim.costing.eager_rows import describe as describe_eager
from graphsim.costing.eager_rows import eager_floors, sibling_ratio
from graphsim.costing.geometry_interp import geometry_curve
from graphsim.costing.hardware import HardwareSpec, load_hardware
from graphsim.costing.kernels import (
    AttentionPrefillPoint, CollectiveKey, GemmKey, KernelKey, MoeKey, Point, check_point, point_coords,
)
from graphsim.costing.moe_variants import NonGatedCurve, gated_twin
from graphsim.costing.profile_db import KernelRows, ProfileDB
from graphsim.costing.roofline import roofline_us
from graphsim.costing.timing import TimeSource, Timing

# Source codes used in vectorised results: index into SOURCES.
SOURCES: tuple[TimeSource, ...] = tuple(TimeSource)
MEASURED, INTERPOLATED, EXTRAPOLATED, DERIVED, ROOFLINE, MISSING = (SOURCES.index(s) for s in SOURCES)


def grid_coordinates(key: KernelKey, coords: np.ndarray) -> np.ndarray:
    """Point coordinates (N, d) → the space interpolation is linear in: the log of each coordinate,
    except that prefill points (batch, q_len, kv_len) use log1p(kv_len - q_len), the cached prefix,
    as their last axis, so rows measured without a prefix (kv_len = q_len) form one slice."""
    c = np.asarray(coords, dtype=np.float64)
    if key.POINT is AttentionPrefillPoint:
        return np.column_stack([np.log(c[:, 0]), np.log(c[:, 1]), np.log1p(np.maximum(c[:, 2] - c[:, 1], 0.0))])
    return np.log(c)


class _Level:
    """One axis of a grid (in `grid_coordinates` space): sorted distinct values, and per value
    either a time (last axis) or the sub-grid over the remaining axes."""

    __slots__ = ("children", "logx", "times")

    def __init__(self, coords: np.ndarray, times: np.ndarray) -> None:
        order = np.lexsort(coords.T[::-1])
        coords, times = coords[order], times[order]
        self.logx, starts = np.unique(coords[:, 0], return_index=True)
        if coords.shape[1] == 1:
            self.times = times[starts].astype(np.float64)
            self.children: list[_Level] | None = None
        else:
            self.times = None
            bounds = [*starts, len(coords)]
            self.children = [_Level(coords[a:b, 1:], times[a:b]) for a, b in itertools.pairwise(bounds)]

    def _at(self, index: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values of entries `index` (one per query) at the remaining coordinates `q[:, 1:]`."""
        if self.children is None:
            assert self.times is not None  # a leaf level holds times
            return self.times[index], np.full(len(index), MEASURED, dtype=np.int8)
        t = np.empty(len(index))
        s = np.empty(len(index), dtype=np.int8)
        for i in np.unique(index):
            sel = index == i
            t[sel], s[sel] = self.children[i].evaluate(q[sel, 1:])
        return t, s

    def evaluate(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """q: (N, d) grid coordinates. Returns times (NaN where unavailable) and source codes."""
        n = len(q)
        t = np.full(n, np.nan)
        s = np.full(n, MISSING, dtype=np.int8)
        if n == 0:
            return t, s
        qx, xs = q[:, 0], self.logx
        idx = np.searchsorted(xs, qx)
        exact = (idx < len(xs)) & (xs[np.minimum(idx, len(xs) - 1)] == qx)
        if exact.any():
            t[exact], s[exact] = self._at(idx[exact], q[exact])
        rest = ~exact
        if len(xs) < 2 or not rest.any():
            return t, s
        qr = q[rest]
        lo = np.clip(idx[rest] - 1, 0, len(xs) - 2)
        hi = lo + 1
        t_lo, s_lo = self._at(lo, qr)
        t_hi, s_hi = self._at(hi, qr)
        lq = qr[:, 0]
        x_lo, x_hi = xs[lo], xs[hi]
        with np.errstate(divide="ignore", invalid="ignore"):
            y_lo, y_hi = np.log(t_lo), np.log(t_hi)
            slope = (y_hi - y_lo) / (x_hi - x_lo)
        below, above = lq < self.logx[0], lq > self.logx[-1]
        inside = ~(below | above)
        y = y_lo + slope * (lq - x_lo)
        # extrapolate with the edge slope clamped to [0, 1] in log-log: a time never falls as work
        # grows and never grows faster than the coordinate (rows measured close together can
        # otherwise give an edge slope in the thousands)
        flat = np.clip(slope, 0.0, 1.0)
        y = np.where(below, y_lo + flat * (lq - x_lo), y)
        y = np.where(above, y_hi + flat * (lq - x_hi), y)
        out = np.exp(y)
        # inside: stay within the neighbours (guards rounding in exp(log(.)))
        out = np.where(inside, np.clip(out, np.minimum(t_lo, t_hi), np.maximum(t_lo, t_hi)), out)
        src = np.maximum(np.maximum(s_lo, s_hi), np.where(inside, INTERPOLATED, EXTRAPOLATED).astype(np.int8))
        bad = (s_lo == MISSING) | (s_hi == MISSING) | ~np.isfinite(out)
        out[bad] = np.nan
        src[bad] = MISSING
        t[rest], s[rest] = out, src
        return t, s


class Evaluator(Protocol):
    """What the pricer needs of a curve: a batch of coordinates → (times_us, source codes)."""

    @property
    def key(self) -> KernelKey: ...

    @property
    def num_rows(self) -> int: ...

    def evaluate(self, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def at(self, point: Point) -> Timing: ...

    def best_fraction(self, hardware: HardwareSpec) -> float | None: ...


def timing_at(curve: Evaluator, point: Point) -> Timing:
    """One point of a curve as a Timing (its source, or missing with the rows it has)."""
    check_point(curve.key, point)
    t, s = curve.evaluate(np.asarray([point_coords(point)]))
    src = SOURCES[int(s[0])]
    if src is TimeSource.MISSING:
        return Timing.missing(f"{curve.num_rows} rows do not cover {point}")
    return Timing(float(t[0]), src, f"{curve.num_rows} rows")


class Curve:
    """Interpolator over all rows of one geometry key."""

    def __init__(self, rows: KernelRows) -> None:
        if len(rows) == 0:
            raise ValueError(f"no rows for {rows.key}")
        self.key = rows.key
        self.num_rows = len(rows)
        self.dims = rows.coords.shape[1]
        self._grid = _Level(grid_coordinates(rows.key, rows.coords), rows.times_us.astype(np.float64))
        self._coords, self._times = rows.coords.astype(np.float64), rows.times_us.astype(np.float64)
        self._best: dict[str, float | None] = {}

    def evaluate(self, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """coords (N, d) in point order → (times_us with NaN where unavailable, source codes int8:
        MEASURED / INTERPOLATED / EXTRAPOLATED / MISSING)."""
        q = np.asarray(coords, dtype=np.float64).reshape(-1, self.dims)
        if np.any(q < 1):
            raise ValueError("coordinates must be >= 1")
        return self._grid.evaluate(grid_coordinates(self.key, q))

    def at(self, point: Point) -> Timing:
        return timing_at(self, point)

    def best_fraction(self, hardware: HardwareSpec) -> float | None:
        """The largest share of its roofline any measured row of this key achieved (roofline time / row time);
        None without a roofline for the key."""
        if hardware.id not in self._best:
            rt = roofline_us(hardware, self.key, self._coords)
            best = None
            if rt is not None:
                ok = np.isfinite(rt) & (self._times > 0)
                if ok.any():
                    best = float(np.max(rt[ok] / self._times[ok]))
            self._best[hardware.id] = best
        return self._best[hardware.id]


@dataclass
class KernelPricer:
    """The lookup chain for one profile.db (optional) and hardware spec (optional).

    With no explicit `hardware`, the spec named in the db's meta (`hardware`) is used if any."""

    db: ProfileDB | None = None
    hardware: HardwareSpec | None = None
    collectives: CollectiveSettings = field(default_factory=CollectiveSettings)  # which collective vLLM runs

    def __post_init__(self) -> None:
        self._curves: dict[KernelKey, Evaluator | None] = {}
        self._rates: tuple[ProfileRates | None] | None = None  # (rates,) once read
        self._eager: dict[str, float] | None = None  # GEMM dtype → dispatch floor of its eagerly timed rows
        if self.hardware is None and self.db is not None and self.db.meta.hardware:
            self.hardware = load_hardware(self.db.meta.hardware)

    def curve(self, key: KernelKey) -> Evaluator | None:
        if isinstance(key, MoeKey) and not key.gated:  # from the gated experts' rows (costing/moe_variants.py)
            if key not in self._curves:
                gated = self.curve(gated_twin(key))
                self._curves[key] = NonGatedCurve(key, gated) if gated is not None else None
            return self._curves[key]
        if key not in self._curves:
            self._curves[key] = self._measured_curve(key)
            if self._curves[key] is None and self.db is not None:
                # an unmeasured geometry between measured ones (costing/geometry_interp.py)
                self._curves[key] = geometry_curve(self.db, key, self._measured_curve)
        return self._curves[key]

    def _measured_curve(self, key: KernelKey) -> Curve | None:
        if isinstance(key, MoeKey) and not key.gated:
            # the MoE tables time gated experts only (aiconfigurator collector/vllm/collect_moe.py builds w1
            # [E, 2·inter, hidden] for every model): non-gated experts have no rows of their own (`curve`)
            return None
        rows = self.db.rows(key) if self.db is not None else None
        return Curve(rows) if rows is not None and len(rows) else None

    def time(self, key: KernelKey, point: Point) -> Timing:
        check_point(key, point)
        curve = self.curve(key)
        q1 = np.asarray([point_coords(point)], dtype=np.float64)
        if curve is not None:
            timing = curve.at(point)
            if timing.source is TimeSource.EXTRAPOLATED and timing.time_us is not None:
                t1, _ = self._ceiling(key, curve, q1, np.asarray([timing.time_us]), np.asarray([EXTRAPOLATED]))
                if t1[0] > timing.time_us:
                    timing = Timing(float(t1[0]), TimeSource.EXTRAPOLATED,
                                    f"{timing.detail}; held at the best share of the roofline its rows achieve".lstrip("; "))
            eager = self._eager_floor(key)
            if eager is not None and isinstance(key, GemmKey) and timing.time_us is not None:
                bound = min(timing.time_us, float(self._eager_envelope(key, q1)[0]))
                if bound < EAGER_BAND * eager:  # the row (or a larger m's) is host dispatch time (eager_rows.py)
                    t, src, sib = self._graphed_stand_in(key, q1)
                    if src[0] in (DERIVED, ROOFLINE):
                        ratio = self._sibling_ratio(key)
                        used = ratio if ratio is not None and sib[0] != MISSING else None
                        what = "" if used is None else f": {SOURCES[sib[0]].value} {used.sibling} {sib[1]:.3g} µs"
                        larger = f", {bound:.3g} µs at a larger m" if bound < timing.time_us else ""
                        return Timing(min(float(t[0]), bound), SOURCES[src[0]],
                                      f"{describe_eager(key.dtype.value, eager, used)}{what} "
                                      f"(row {timing.time_us:.3g} µs{larger})")
            if not timing.is_missing:
                floor = self._floor_us(key, q1)
                if floor is not None and timing.time_us is not None and timing.time_us < floor[0]:
                    return Timing(float(floor[0]), TimeSource.ROOFLINE,
                                  f"{self.hardware.id if self.hardware else ''} roofline floor "
                                  f"(the {timing.source.value} {timing.time_us:.3g} µs lies below it)")
                return timing
        if self.hardware is not None:
            t, s = self._fallback(key, q1)
            if curve is not None:
                t, s = self._uncovered(key, curve, q1, t, s)
                if s[0] == EXTRAPOLATED:
                    return Timing(float(t[0]), TimeSource.EXTRAPOLATED, "off the rows' measured axes (e.g. a cached prefix): "
                                  "the roofline held at the best share of it the rows achieve")
            if s[0] == DERIVED:
                rates = self.rates
                assert rates is not None  # a derived time has rates
                return Timing(float(t[0]), TimeSource.DERIVED, f"{self.hardware.id}: {rates.describe()}")
            if s[0] == ROOFLINE:
                return Timing(float(t[0]), TimeSource.ROOFLINE, f"{self.hardware.id} spec")
        return Timing.missing(self._why_missing(key, curve))

    def times(self, key: KernelKey, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised chain: coords (N, d) → (times_us, NaN where missing; source codes, see SOURCES)."""
        q = np.asarray(coords, dtype=np.float64).reshape(-1, len(key.POINT.__dataclass_fields__))
        curve = self.curve(key)
        if curve is not None:
            t, s = curve.evaluate(q)
            t, s = self._ceiling(key, curve, q, t, s)
            t, s = self._eager_rows(key, q, t, s)
        else:
            t, s = np.full(len(q), np.nan), np.full(len(q), MISSING, dtype=np.int8)
        floor = self._floor_us(key, q)
        if floor is not None:  # no time from rows below the kernel's own roofline
            low = (s != MISSING) & (t < floor)
            t[low] = floor[low]
            s[low] = ROOFLINE
        need = s == MISSING
        if need.any() and self.hardware is not None:
            t[need], s[need] = self._fallback(key, q[need])
            if curve is not None:
                t[need], s[need] = self._uncovered(key, curve, q[need], t[need], s[need])
        return t, s

    @property
    def rates(self) -> ProfileRates | None:
        """The launch floor and achieved bandwidth the profile's rows show (`derived.py`); None without a
        profile, a spec, or enough bandwidth-bound rows."""
        if self._rates is None:
            db, spec = self.db, self.hardware
            self._rates = (profile_rates(db, spec) if db is not None and spec is not None else None,)
        return self._rates[0]

    def _fallback(self, key: KernelKey, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Points without a time from rows: derived where memory-bound and the profile gives rates,
        else the roofline, else missing."""
        t = np.full(len(q), np.nan)
        s = np.full(len(q), MISSING, dtype=np.int8)
        assert self.hardware is not None
        rt = roofline_us(self.hardware, key, q)
        if rt is None:
            return t, s
        t[:], s[:] = rt, ROOFLINE
        rates = self.rates
        if rates is not None:
            d = derived_us(rates, self.hardware, key, q, rt)
            if d is not None:
                ok = np.isfinite(d)
                t[ok], s[ok] = d[ok], DERIVED
        return t, s

    def _uncovered(self, key: KernelKey, curve: Evaluator, q: np.ndarray, t: np.ndarray,
                   s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Points of a measured key its rows do not cover (an axis measured at one value only: aiconfigurator
        times context attention without a cached prefix, so a chunked prefill's later chunks have no rows) that
        fell to the roofline: held, as `_ceiling` holds extrapolations, at the best share of the roofline the key's
        rows achieve, and marked `extrapolated`. It is the kernel the rows measured, on more work, and none of its
        rows ran closer to the datasheet peak (Qwen3-14B's FlashAttention prefill key: at best 0.57 of the bf16
        peak in aiconfigurator's A100 rows, 0.66 in its H100 rows, where the bare roofline is the whole peak)."""
        roof = s == ROOFLINE
        if self.hardware is None or isinstance(key, CollectiveKey) or not roof.any():
            return t, s
        best = curve.best_fraction(self.hardware)
        if best is None or not 0 < best < 1:
            return t, s
        t, s = t.copy(), s.copy()
        t[roof] = t[roof] / best
        s[roof] = EXTRAPOLATED
        return t, s

    def _ceiling(self, key: KernelKey, curve: Evaluator, q: np.ndarray, t: np.ndarray,
                 s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Extrapolated times held at the best efficiency the rows show: outside the measured range a kernel
        runs no closer to its roofline than the best measured row of its key (or of the neighbouring keys a
        geometry interpolation reads) did — the edge slope alone can run on toward the datasheet peak, which no
        measured row reaches (e.g. A100 decode attention, measured up to ~1.5 TB/s, extrapolated to 1.8). Not
        for collectives (their roofline is no bound: `_floor_us`)."""
        ext = s == EXTRAPOLATED
        if self.hardware is None or isinstance(key, CollectiveKey) or not ext.any():
            return t, s
        best = curve.best_fraction(self.hardware)
        if best is None or best <= 0:
            return t, s
        rt = roofline_us(self.hardware, key, q[ext])
        if rt is None:
            return t, s
        t = t.copy()
        t[ext] = np.maximum(t[ext], rt / best)
        return t, s

    def _eager_floor(self, key: KernelKey) -> float | None:
        """The dispatch floor of `key`'s rows when the profile timed its dtype without CUDA graphs, else None."""
        if not isinstance(key, GemmKey) or self.db is None:
            return None
        if self._eager is None:
            self._eager = eager_floors(self.db)
        return self._eager.get(key.dtype.value)

    def _eager_rows(self, key: KernelKey, q: np.ndarray, t: np.ndarray,
                    s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Times read off eagerly timed GEMM rows within EAGER_BAND of their dispatch floor are host time, not
        GPU time (costing/eager_rows.py): such a point is priced from the graphed sibling's rows
        (`_graphed_stand_in`), never above the row."""
        floor = self._eager_floor(key)
        if floor is None or self.hardware is None or not isinstance(key, GemmKey):
            return t, s
        bound = np.minimum(t, self._eager_envelope(key, q))
        low = np.flatnonzero((s != MISSING) & (bound < EAGER_BAND * floor))
        if not len(low):
            return t, s
        t2, s2, _ = self._graphed_stand_in(key, q[low])
        ok = s2 != MISSING
        t, s = t.copy(), s.copy()
        t[low[ok]] = np.minimum(bound[low[ok]], t2[ok])
        s[low[ok]] = s2[ok]
        return t, s

    def _eager_envelope(self, key: GemmKey, q: np.ndarray) -> np.ndarray:
        """Per point, the smallest eagerly timed row of `key` at the point's m or a larger one (inf where none).
        A GEMM of more rows (same n, k) does all the work of one of fewer, so its eager row, GPU time plus host time
        at most, bounds the smaller one's GPU time too: a row far above its larger neighbours is a timing outlier
        (aiconfigurator-core 0.12 H200 vLLM fp8_block n 2048, k 512: m 32 / 64 / 128 read 84.9 / 203.2 / 83.1 µs;
        eager_rows.py names such outliers), and it is the envelope that is held to the dispatch band."""
        memo = self.__dict__.setdefault("_envelopes", {})
        if key not in memo:
            rows = self.db.rows(key) if self.db is not None else None
            if rows is None or not len(rows):
                memo[key] = (np.zeros(0), np.zeros(0))
            else:
                order = np.argsort(rows.coords[:, 0], kind="stable")
                m, times = rows.coords[order, 0].astype(np.float64), rows.times_us[order].astype(np.float64)
                memo[key] = (m, np.minimum.accumulate(times[::-1])[::-1])  # suffix minimum over m
        m, suffix = memo[key]
        out = np.full(len(q), np.inf)
        idx = np.searchsorted(m, q[:, 0], side="left")
        inside = idx < len(m)
        out[inside] = suffix[idx[inside]]
        return out

    def _sibling_ratio(self, key: GemmKey) -> SiblingRatio | None:
        """The profile's time ratio of `key`'s eagerly timed dtype to its graphed sibling (eager_rows.py)."""
        floor = self._eager_floor(key)
        if floor is None or self.db is None or self.hardware is None:
            return None
        return sibling_ratio(self.db, self.hardware, key.dtype.value, floor)

    def _graphed_stand_in(self, key: GemmKey, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, float]]:
        """GPU times of an eagerly timed GEMM at points `q` whose rows are host time (costing/eager_rows.py): the
        graphed sibling dtype's time of the same shape (measured, interpolated or extrapolated from its rows, through
        this chain) × the profile's sibling ratio, held at `key`'s roofline, `derived`; points the sibling's rows do
        not cover are priced as points without rows (`_fallback`). Also (source code, time) of the sibling at the
        first point (MISSING where it was not used), for a note."""
        t = np.full(len(q), np.nan)
        s = np.full(len(q), MISSING, dtype=np.int8)
        first: tuple[int, float] = (MISSING, float("nan"))
        ratio = self._sibling_ratio(key)
        if ratio is not None and self.hardware is not None:
            ts, ss = self.times(GemmKey(key.n, key.k, KernelDtype(ratio.sibling)), q)
            ok = np.isin(ss, (MEASURED, INTERPOLATED, EXTRAPOLATED))  # from its rows, not its own fallback
            if ok.any():
                roof = roofline_us(self.hardware, key, q[ok])
                t[ok] = ts[ok] * ratio.ratio if roof is None else np.maximum(ts[ok] * ratio.ratio, roof)
                s[ok] = DERIVED
            if len(q) and ok[0]:
                first = (int(ss[0]), float(ts[0]))
        need = s == MISSING
        if need.any() and self.hardware is not None:
            t[need], s[need] = self._fallback(key, q[need])
        return t, s, first

    def _floor_us(self, key: KernelKey, q: np.ndarray) -> np.ndarray | None:
        """The kernel's compute/memory roofline, the physical floor of a time read off rows. Not for
        collectives: their roofline's latency term is one measured NCCL figure, not a bound that
        every implementation (vLLM's custom all-reduce) must respect."""
        if self.hardware is None or isinstance(key, CollectiveKey):
            return None
        return roofline_us(self.hardware, key, q)

    def _why_missing(self, key: KernelKey, curve: Evaluator | None) -> str:
        data = "no profile rows" if curve is None else "profile rows do not cover the point"
        if self.hardware is None:
            return f"{data} for {key} and no hardware spec"
        return f"{data} for {key}, and {self.hardware.id} has no roofline for it"


def lookup(db: ProfileDB | None, key: KernelKey, point: Point, hardware: HardwareSpec | None = None) -> Timing:
    """One-off lookup through the chain (build a `KernelPricer` to price many kernels)."""
    return KernelPricer(db, hardware).time(key, point)
