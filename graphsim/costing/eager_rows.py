"""GEMM rows timed without CUDA graphs: their launch-bound times are host dispatch, not GPU time.

aiconfigurator's vLLM collector times block-scaled fp8 GEMMs eagerly, one layer instance per replay
(ai-dynamo/aiconfigurator collector/vllm/collect_gemm.py `run_gemm`: `outside_loop_count = 1 if gemm_type in
("fp8_block", "nvfp4") else 6` and `benchmark_with_power(..., use_cuda_graph=gemm_type != "fp8_block")`); every
other GEMM dtype is captured in a CUDA graph. An eagerly timed row reads max(host dispatch, GPU time): vLLM's
Python path of one fp8-block linear (activation quantisation + the GEMM) costs 55–155 µs of host time on H200 /
H100 (the smallest row of each kernel source in aiconfigurator-core 0.12: FlashInfer 55, DeepGEMM 78, CUTLASS
154 µs), so every small GEMM reads ~55–90 µs whatever its size: (n 2048, k 7168, m 64) reads 87.0 µs against
14.6 µs for vLLM's graphed per-tensor fp8 GEMM of the same shape and 12.0 / 12.4 µs for the graphed DeepGEMM
fp8-block rows of aiconfigurator's SGLang / TensorRT-LLM collectors on the same GPU. vLLM serves decode (and
mixed batches up to its capture sizes) from CUDA graphs, where none of that host time is on the GPU's path.

A row is therefore read as GPU time only where it is well above the dispatch floor: below `EAGER_BAND` × the
smallest time of the dtype's rows the row says only that the GPU took no longer. A row is read through the
envelope of the rows at its m and larger (a GEMM of more rows does at least its work, so their eager time bounds its
GPU time too): a lone outlier above its larger neighbours (n 2048, k 512: 84.9 / 203.2 / 83.1 µs at m 32 / 64 / 128)
is host time like them. Such a point is priced from the
profile's GRAPHED rows of the same shape in the sibling dtype (`GRAPHED_SIBLING`: fp8_block → fp8 per-tensor),
scaled by the fp8_block / fp8 time ratio the same profile measures where the eager rows are GPU time
(`sibling_ratio`), held at the kernel's roofline floor and never above the eager row itself, and labelled
`derived` with that evidence in its note. Where the sibling has no rows for the shape (nor neighbouring shapes to
interpolate between), or the profile too few pairs for a ratio, the point is priced like a point without rows
(`derived`: launch floor, achieved bandwidth and compute share of the profile). Rows above the band (large GEMMs,
GPU-bound) agree with the graphed fp8 rows (e.g. n 7168, k 2048, m 8192: 231.8 µs fp8-block eager, 221.2 µs fp8
graphed) and are kept.

Why fp8 per-tensor is the sibling: in aiconfigurator's vLLM collector both are one vLLM `RowParallelLinear` with
fp8 (e4m3, 1-byte) weights and activations, i.e. the same operand bytes, and both run an activation
quantisation launch before the GEMM (fp8: `Fp8Config(activation_scheme="static")`, a static-scale quant +
CUTLASS scaled_mm; fp8_block: `activation_scheme="dynamic"`, weight_block_size 128×128, a per-token-group quant
+ DeepGEMM); only the scale granularity differs. bf16 is no sibling: its weight bytes are twice as many, so its
memory-bound (small-m) rows do not scale by a compute-bound ratio.

The ratio on aiconfigurator-core 0.12's vLLM tables (median over same-shape row pairs that are compute-bound and
at least `LARGE_FACTOR` dispatch floors long, so the eager row is GPU time): H200 1.019 (3,441 pairs), H100 0.892
(2,472 pairs). Cross-check against evidence this does not read (tests/costing/test_eager_rows_real.py): over the
22,481 H200 rows it prices, the stand-in is a median 1.22 × the graphed fp8-block rows of the same (m, n, k) from
aiconfigurator's SGLang collector (per-token-group quant + DeepGEMM, graph-captured: collector/sglang/collect_gemm.py)
and 1.09 × TensorRT-LLM's (H100: 1.05 ×, 0.94 ×), where the eager rows it replaces are 4.9 × and 4.5 ×.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.kernels import GemmKey, TableKind
from graphsim.costing.profile_db import ProfileDB
from graphsim.costing.roofline import kernel_work

# (provenance source, engine) → GEMM dtypes its collector times eagerly (see the module docstring)
EAGER_TIMED: dict[tuple[str, str], frozenset[str]] = {("aiconfigurator-core", "vllm"): frozenset({"fp8_block"})}
# A row under twice the dispatch floor cannot be told from dispatch time plus noise: the eager rows of one key
# scatter by up to ~1.3× around their floor (n 2048, k 7168: 80–95 µs from m 32 to 2048), with single outliers
# to 2.6× (m 49: 132.6 µs): a row is held to the band through the envelope of the rows at its m and larger
# (`KernelPricer._eager_envelope`: more rows, at least the work), which catches such outliers; 2× keeps the GPU-bound
# rows (≥ 160 µs from m 4096).
EAGER_BAND = 2.0
# eagerly timed dtype → the graphed dtype whose same-shape rows stand in for its GPU time (module docstring)
GRAPHED_SIBLING: dict[str, str] = {"fp8_block": "fp8"}
# Pairs read for the ratio: compute roofline ≥ BOUND_FACTOR × memory roofline (compute-bound even at a quarter of
# peak, so the scale granularity, not the bytes, is what differs), and eager row ≥ LARGE_FACTOR × the dispatch
# floor (host time at most a quarter of it, and hidden: an eager launch queues ahead of a busy GPU). The same
# factors as derived.py's BOUND_FACTOR / LARGE_FACTOR, for the same reasons.
BOUND_FACTOR = 4.0
LARGE_FACTOR = 4.0
MIN_PAIRS = 16  # fewer pairs: the median is a handful of rows, no ratio (as derived.MIN_BOUND_ROWS)


def eager_dtypes(db: ProfileDB) -> frozenset[str]:
    """The GEMM dtypes whose rows in `db` were timed without CUDA graphs (by its provenance)."""
    prov = db.meta.provenance
    return EAGER_TIMED.get((prov.get("source", ""), db.meta.engine or prov.get("backend", "")), frozenset())


def eager_floors(db: ProfileDB) -> dict[str, float]:
    """dtype → the smallest time of its eagerly timed GEMM rows (the host dispatch floor), for `db`'s eager
    dtypes that have rows."""
    want = eager_dtypes(db)
    if not want:
        return {}
    return {d: t for d, t in db.min_time_by_dtype(TableKind.GEMM).items() if d in want}


@dataclass(frozen=True)
class SiblingRatio:
    """How the eagerly timed dtype's GPU time compares with its graphed sibling's, on one profile."""

    dtype: str  # the eagerly timed dtype (fp8_block)
    sibling: str  # the graphed dtype standing in (fp8)
    ratio: float  # median dtype / sibling time over the pairs
    pairs: int  # same (m, n, k) row pairs the median was read from

    def describe(self) -> str:
        return (f"× {self.ratio:.3g}, the median {self.dtype} / {self.sibling} time over {self.pairs:,} same-shape "
                f"rows that are compute-bound and ≥ {LARGE_FACTOR:g} dispatch floors long")


def compute_sibling_ratio(db: ProfileDB, spec: HardwareSpec, dtype: str, floor_us: float) -> SiblingRatio | None:
    """The `SiblingRatio` of `dtype` in `db` on `spec` (None: no sibling, no peak, or fewer than MIN_PAIRS pairs)."""
    sibling = GRAPHED_SIBLING.get(dtype)
    bw = spec.memory_bandwidth_bytes_per_s
    if sibling is None or bw <= 0:
        return None
    peak = spec.peak_flops(KernelDtype(dtype))
    if peak is None or peak <= 0:
        return None
    ratios: list[np.ndarray] = []
    for key in db.keys(TableKind.GEMM):
        if not isinstance(key, GemmKey) or key.dtype.value != dtype:
            continue
        mine, theirs = db.rows(key), db.rows(GemmKey(key.n, key.k, KernelDtype(sibling)))
        if not len(mine) or not len(theirs):
            continue
        m, i, j = np.intersect1d(mine.coords[:, 0], theirs.coords[:, 0], return_indices=True)
        if not len(m):
            continue
        work = kernel_work(key, m.reshape(-1, 1))
        assert work is not None  # a GEMM has work
        t_mine, t_theirs = mine.times_us[i].astype(np.float64), theirs.times_us[j].astype(np.float64)
        ok = ((work.flops / peak >= BOUND_FACTOR * work.bytes / bw) & (t_mine >= LARGE_FACTOR * floor_us)
              & (t_theirs > 0))
        ratios.append(t_mine[ok] / t_theirs[ok])
    x = np.concatenate(ratios) if ratios else np.zeros(0)
    if len(x) < MIN_PAIRS:
        return None
    return SiblingRatio(dtype, sibling, float(np.median(x)), len(x))


def sibling_ratio(db: ProfileDB, spec: HardwareSpec, dtype: str, floor_us: float) -> SiblingRatio | None:
    """`compute_sibling_ratio`, once per profile, spec and dtype (cached on the open db and on disk)."""
    cache = db.__dict__.setdefault("_sibling_ratio", {})
    key = (spec.id, spec.memory_bandwidth_bytes_per_s, spec.peak_flops(KernelDtype(dtype)), dtype, floor_us)
    if key not in cache:  # reading both dtypes' rows takes ~1 s on an imported table
        from graphsim.costing import profile_db, roofline
        from graphsim.costing.disk_memo import memo

        cache[key] = memo("sibling_ratio", db.path, key, lambda: compute_sibling_ratio(db, spec, dtype, floor_us),
                          SiblingRatio, code=[__file__, roofline.__file__, profile_db.__file__])
    return cache[key]


def describe(dtype: str, floor_us: float, ratio: SiblingRatio | None = None) -> str:
    """The data note of `dtype`'s eager rows: what a row near the floor is priced at instead."""
    how = (f"derived from the graphed {ratio.sibling} rows of the same shape {ratio.describe()}"
           if ratio is not None else "priced as a point without rows")
    return (f"{dtype} GEMM rows timed without CUDA graphs (aiconfigurator collect_gemm.py): a row under "
            f"{EAGER_BAND:g} × their {floor_us:.1f} µs dispatch floor is host time, so the point is {how}")


def eager_notes(db: ProfileDB, spec: HardwareSpec) -> str:
    """'; '-joined `describe` of every eagerly timed dtype of `db` ('' when none), for a profile's data note."""
    return "".join(f"; {describe(d, f, sibling_ratio(db, spec, d, f))}" for d, f in eager_floors(db).items())
