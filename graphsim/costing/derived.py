"""Derived prices: a memory-bound kernel the profile has no rows for, at what this GPU measurably achieves.

A profile.db holds GEMMs, attention, MoE and collectives; the memory-bound glue between them (norms,
rotary, activations, residual adds, embedding gathers) often has no rows — aiconfigurator's tables hold
none (/work/shared/notes/aiconfigurator-data.md, "No measured tables for norms, activations, embeddings,
RoPE"). At the datasheet bandwidth and with no launch cost such a kernel is priced far too fast. Instead,
`profile_rates` reads two figures off the profile's own rows, and `derived_us` prices a row-less
memory-bound point at

    max(launch floor, bytes / achieved bandwidth, roofline)

labelled `derived` — any kernel but a collective, so also a memory-bound GEMM, attention or MoE point of a
geometry no rows cover. Rows for the kernel itself (measured / interpolated / extrapolated) always win; a
compute-bound point (flops / peak > bytes / bandwidth) keeps its roofline, since a bandwidth says
nothing about it.

The rows read are those of the single-kernel tables whose byte count is exact (`RATE_TABLES`: GEMMs,
attention, plain MLA attention, elementwise) — not MoE (its bytes depend on how tokens were routed:
`roofline._moe` takes an expectation), not the MLA module tables (several kernels in one time), not
collectives (the interconnect, not DRAM).

- **Launch floor**: the 1st percentile of those rows' times (a measured time, not an average). The very
  smallest row would do as well, but one odd row (or one edited by hand) then sets it alone.
- **Achieved bandwidth**: the 90th percentile of bytes / time over the rows that are clearly bound by
  DRAM: their memory roofline is at least `BOUND_FACTOR` × their compute roofline (so they stay
  bandwidth-bound even at a quarter of peak FLOP/s), and at least `LARGE_FACTOR` launch floors long (so a
  fixed launch cost is at most a fifth of their time). A high percentile, because what is below it is
  mostly kernels that are bandwidth-bound on paper but not tuned to stream (small GEMM tiles, decode
  attention with few sequences), while the plain streaming kernels priced here (norms, activations) are
  the simplest to run at full speed; not the maximum, since single rows exceed the DRAM datasheet
  (5,078 GB/s for one GEMM row of the H200 tables against 4,800: operands likely L2-resident). It is capped at the spec's
  bandwidth. Fewer than `MIN_BOUND_ROWS` such rows: no rate, and row-less kernels keep their roofline.

On the imported aiconfigurator vLLM tables (2026-12-01, `compute_rates`): H200 (vLLM 0.24.0) 3.02 µs and
3,907 GB/s; A100-SXM (vLLM 0.14.0) 3.29 µs and 1,515 GB/s (docs/predict.md). Nothing here is a constant of a
GPU: both are recomputed from whatever profile is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphsim.costing import dsa
from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.kernels import (
    CollectiveKey, ElementwiseKey, GemmKey, KernelKey, MlaModuleDecodeKey, MlaModulePrefillKey, TableKind,
)
from graphsim.costing.profile_db import ProfileDB
from graphsim.costing.roofline import KernelWork, kernel_work, on_device_key

# Tables read for the rates (see the module docstring for why these).
RATE_TABLES: tuple[TableKind, ...] = (TableKind.GEMM, TableKind.ATTENTION_PREFILL, TableKind.ATTENTION_DECODE,
                                      TableKind.MLA_PREFILL, TableKind.MLA_DECODE, TableKind.ELEMENTWISE)
FLOOR_PERCENTILE = 1.0  # launch floor: a low percentile of the row times (module docstring)
BANDWIDTH_PERCENTILE = 90.0  # achieved bandwidth: a high percentile over bandwidth-bound rows
BOUND_FACTOR = 4.0  # memory roofline >= 4 x compute roofline: still memory-bound at 25% of peak FLOP/s
LARGE_FACTOR = 4.0  # memory roofline >= 4 launch floors: a launch cost is <= 1/5 of the row's time
MIN_BOUND_ROWS = 16  # below this a 90th percentile is one or two rows: no rate
COMPUTE_PERCENTILE = 90.0  # achieved share of peak FLOP/s: a high percentile over compute-bound GEMM rows


@dataclass(frozen=True)
class ProfileRates:
    """What one profile's rows say this GPU achieves on memory-bound work."""

    floor_us: float  # launch floor: FLOOR_PERCENTILE of the rate tables' row times
    bandwidth_bytes_per_s: float  # achieved DRAM bandwidth (capped at the spec's)
    rows: int  # rows the floor was read from
    bound_rows: int  # bandwidth-bound rows the bandwidth was read from
    source: str  # the profile file's name, for labels
    # achieved share of the spec's peak FLOP/s per compute dtype, over clearly compute-bound GEMM rows (none: {})
    compute_share: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        shares = "".join(f", flops / {v:.0%} of the {k} peak" for k, v in sorted(self.compute_share.items()))
        return (f"max({self.floor_us:.3g} µs launch floor, bytes / {self.bandwidth_bytes_per_s / 1e9:,.0f} GB/s "
                f"achieved{shares}), from {self.bound_rows:,} bandwidth-bound of {self.rows:,} rows of {self.source}")


def _compute_s(key: KernelKey, work: KernelWork, spec: HardwareSpec) -> np.ndarray | None:
    """flops / peak per point; None where the spec has no peak for the key's dtype (and flops are non-zero)."""
    if not np.any(work.flops):
        return np.zeros(len(work.flops))
    dtype = key.gemm_dtype if isinstance(key, (MlaModulePrefillKey, MlaModuleDecodeKey)) else key.dtype
    peak = spec.peak_flops(dtype)
    if peak is None or peak <= 0:
        return None
    return work.flops / peak


def compute_rates(db: ProfileDB, spec: HardwareSpec) -> ProfileRates | None:
    """The launch floor and achieved bandwidth of `db`'s rows on `spec` (None: too few rows to say)."""
    bw = spec.memory_bandwidth_bytes_per_s
    if bw <= 0:
        return None
    per_key: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (times_us, bytes, bandwidth-bound mask)
    gemms: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []  # (dtype, compute s, memory s, times_us)
    for kind in RATE_TABLES:
        for key in db.keys(kind):
            rows = db.rows(key)
            if not len(rows):
                continue
            work = kernel_work(key, rows.coords)
            if work is None:
                continue
            comp = _compute_s(key, work, spec)
            mem = work.bytes / bw
            bound = np.zeros(len(mem), dtype=bool) if comp is None else mem >= BOUND_FACTOR * comp
            per_key.append((rows.times_us, work.bytes, bound))
            if isinstance(key, GemmKey) and comp is not None:
                gemms.append((key.dtype.value, comp, mem, rows.times_us))
    if not per_key:
        return None
    times = np.concatenate([t for t, _, _ in per_key])
    floor = float(np.percentile(times, FLOOR_PERCENTILE, method="lower"))
    nbytes = np.concatenate([b for _, b, _ in per_key])
    bound = np.concatenate([m for _, _, m in per_key]) & (nbytes / bw * 1e6 >= LARGE_FACTOR * floor)
    if int(bound.sum()) < MIN_BOUND_ROWS:
        return None
    achieved = nbytes[bound] / (times[bound] * 1e-6)
    rate = min(float(np.percentile(achieved, BANDWIDTH_PERCENTILE, method="lower")), bw)
    return ProfileRates(floor, rate, len(times), int(bound.sum()), db.path.name, _compute_shares(gemms, floor))


def _compute_shares(gemms: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]], floor_us: float) -> dict[str, float]:
    """Per GEMM dtype, from (dtype, compute s, memory s, times µs) of each GEMM key's rows: the COMPUTE_PERCENTILE
    of compute roofline / time over the rows clearly bound by compute (compute roofline ≥ BOUND_FACTOR × memory
    roofline and ≥ LARGE_FACTOR launch floors), capped at 1; a dtype with fewer than MIN_BOUND_ROWS such rows gets
    none."""
    shares: dict[str, list[np.ndarray]] = {}
    for dtype, comp, mem, times_us in gemms:
        bound = (comp >= BOUND_FACTOR * mem) & (comp * 1e6 >= LARGE_FACTOR * floor_us)
        if bound.any():
            shares.setdefault(dtype, []).append(comp[bound] / (times_us[bound] * 1e-6))
    out = {}
    for dtype, parts in shares.items():
        x = np.concatenate(parts)
        if len(x) >= MIN_BOUND_ROWS:
            out[dtype] = min(float(np.percentile(x, COMPUTE_PERCENTILE, method="lower")), 1.0)
    return out


def profile_rates(db: ProfileDB, spec: HardwareSpec) -> ProfileRates | None:
    """`compute_rates`, once per profile and spec (cached on the open db)."""
    cache = db.__dict__.setdefault("_derived_rates", {})
    # what the rates depend on: the bandwidth and the peaks (a spec file edited under the same id is another spec)
    key = (spec.id, spec.memory_bandwidth_bytes_per_s, tuple(sorted((str(k), v) for k, v in spec.peak_flops_per_s.items())))
    if key not in cache:  # and on disk, until the profile file or this code changes (reading every row takes ~1 s)
        from graphsim.costing import profile_db, roofline
        from graphsim.costing.disk_memo import memo

        cache[key] = memo("profile_rates", db.path, key, lambda: compute_rates(db, spec), ProfileRates,
                          code=[__file__, roofline.__file__, profile_db.__file__])
    return cache[key]


def rowless_note(db: ProfileDB, spec: HardwareSpec) -> str:
    """What kernels without rows are priced at, with this profile's figures (for a data note:
    cost_model.profile_data, predict.default_data)."""
    from graphsim.costing.eager_rows import eager_notes

    eager = eager_notes(db, spec)  # host-time rows (eager_rows.py)
    rates = profile_rates(db, spec)
    if rates is None:
        return "kernels without rows: roofline (too few bandwidth-bound rows in the profile for a derived price)" + eager
    return f"kernels without rows: derived where memory-bound, {rates.describe()}; roofline otherwise" + eager


def derived_us(rates: ProfileRates, spec: HardwareSpec, key: KernelKey, coords: np.ndarray,
               roofline: np.ndarray) -> np.ndarray | None:
    """Derived times of `key` at `coords` (N, d): memory-bound points at the achieved bandwidth, compute-bound
    GEMM points at the achieved share of the dtype's peak FLOP/s when the profile has one (NaN otherwise: they
    keep `roofline`, the kernel's roofline at the same points); None when no point can be derived."""
    if isinstance(key, CollectiveKey):  # the interconnect, not DRAM
        return None
    key = on_device_key(spec, key)  # the kernel the GPU runs (DSA's sparse MLA at its padded heads)
    work = kernel_work(key, coords)
    if work is None or spec.memory_bandwidth_bytes_per_s <= 0:
        return None
    comp = _compute_s(key, work, spec)
    if comp is None:
        return None
    mem = work.bytes / spec.memory_bandwidth_bytes_per_s
    out = np.maximum(np.maximum(rates.floor_us, work.bytes / rates.bandwidth_bytes_per_s * 1e6), roofline)
    share = rates.compute_share.get(key.dtype.value) if isinstance(key, GemmKey) else None
    if isinstance(key, ElementwiseKey) and (measured := dsa.measured_peak_share(key.op)) is not None:
        share = measured  # a kernel whose achieved share of the peak is published (DSA's sparse MLA prefill)
    if share:  # a compute-bound GEMM no rows cover (e.g. an LM head wider than every measured n)
        return np.maximum(out, comp / share * 1e6)
    return np.where(mem >= comp, out, np.nan)
