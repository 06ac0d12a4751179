"""What the rows achieve bounds what is read beyond them: an extrapolated time runs no closer to its roofline
than the best measured row of its key, and a row-less compute-bound GEMM runs at the share of peak FLOP/s the
profile's compute-bound GEMM rows achieve (`derived`)."""

from __future__ import annotations

import numpy as np
import pytest
from test_derived import H200, open_db, probe_rows

from graphsim.costing.derived import compute_rates
from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.interpolate import DERIVED, EXTRAPOLATED, KernelPricer
from graphsim.costing.kernels import GemmKey, GemmPoint, Measurement
from graphsim.costing.timing import TimeSource

KEY = GemmKey(4096, 4096, D.BF16)


def _roofline_us(m: int) -> float:
    # memory-bound on H200 for these m: bytes = m·4096·2 (A) + 4096²·2 (B) + m·4096·2 (C) at 4.8e12 B/s
    return (m * 4096 * 4 + 4096 * 4096 * 2) / 4.8e12 * 1e6


def test_extrapolation_is_held_at_the_best_measured_share_of_the_roofline(tmp_path):
    # rows: m = 8 at 20 µs, m = 16 at 10.2 µs. Their roofline shares: 7.01781 / 20 = 0.351 and 7.04512 / 10.2
    # = 0.690698 (best). m = 64 lies beyond the rows: the edge slope log(10.2/20)/log 2 < 0 is clamped to 0, so the
    # curve says 10.2 µs; m = 64's roofline is 7.20896 µs, and at the best share that is 7.20896 / 0.690698 =
    # 10.4372 µs — the edge alone would run at 0.707 of the roofline, closer than any measured row
    with open_db(tmp_path, [(KEY, GemmPoint(8), Measurement(20.0)), (KEY, GemmPoint(16), Measurement(10.2))]) as db:
        pricer = KernelPricer(db, H200)
        best = _roofline_us(16) / 10.2
        t = pricer.time(KEY, GemmPoint(64))
        assert t.source is TimeSource.EXTRAPOLATED
        assert t.time_us == pytest.approx(_roofline_us(64) / best, rel=1e-9)
        assert t.time_us == pytest.approx(10.4372, abs=1e-4)
        assert "best share of the roofline" in t.detail
        times, sources = pricer.times(KEY, np.asarray([[16.0], [64.0]]))
        assert times[0] == 10.2 and times[1] == pytest.approx(_roofline_us(64) / best, rel=1e-9)
        assert sources.tolist()[1] == EXTRAPOLATED


def test_the_ceiling_leaves_extrapolation_that_stays_below_it(tmp_path):
    # rows m = 8 at 10 µs, m = 16 at 10.2 µs: slope log(1.02)/log 2 = 0.028569, so m = 64 extrapolates to
    # 10.2 · 4^0.028569 = 10.6121 µs; the ceiling (best share 7.01781 / 10 = 0.701781) asks only
    # 7.20896 / 0.701781 = 10.2724 µs: the extrapolation stands
    with open_db(tmp_path, [(KEY, GemmPoint(8), Measurement(10.0)), (KEY, GemmPoint(16), Measurement(10.2))]) as db:
        t = KernelPricer(db, H200).time(KEY, GemmPoint(64))
        assert t.source is TimeSource.EXTRAPOLATED and t.time_us == pytest.approx(10.2 * 4 ** (np.log(1.02) / np.log(2)))


BIG = GemmKey(8192, 8192, D.BF16)


def compute_rows() -> list:
    """16 compute-bound GEMM rows, m = 2048·i, at shares 0.5 + 0.02·i of the BF16 peak (989.5e12 FLOP/s).
    m = 2048: compute 2·2048·8192² / 989.5e12 = 277.8 µs ≥ 4 × memory (67,108,864 + 134,217,728 B / 4.8e12 =
    41.9 µs) and ≥ 4 launch floors: every row counts."""
    rows = []
    for i in range(1, 17):
        m = 2048 * i
        rows.append((BIG, GemmPoint(m), Measurement(2 * m * 8192 * 8192 / ((0.5 + 0.02 * i) * 989.5e12) * 1e6)))
    return rows


def test_rowless_compute_bound_gemm_runs_at_the_achieved_share_of_peak(tmp_path):
    # the achieved share: 90th percentile (lower) of the 16 shares = sorted index floor(0.9 · 15) = 13 → i = 14:
    # 0.78. A GEMM no row covers (n = 200,000 > every measured n, so no geometry interpolation), m = 4096:
    # 2 · 4096 · 200,000 · 8192 FLOPs / (0.78 · 989.5e12) = 17,389.9 µs; its bytes (4,982,308,864 B at the
    # achieved 2.8e12 B/s: 1,779 µs) and roofline (13,564 µs) are below that
    with open_db(tmp_path, probe_rows() + compute_rows()) as db:
        rates = compute_rates(db, H200)
        assert rates is not None and rates.compute_share == {"bf16": pytest.approx(0.78)}
        key = GemmKey(200_000, 8192, D.BF16)
        t = KernelPricer(db, H200).time(key, GemmPoint(4096))
        assert t.source is TimeSource.DERIVED
        assert t.time_us == pytest.approx(2 * 4096 * 200_000 * 8192 / (0.78 * 989.5e12) * 1e6, rel=1e-9)
        assert "flops / 78% of the bf16 peak" in t.detail
        _, sources = KernelPricer(db, H200).times(key, np.asarray([[4096.0]]))
        assert sources.tolist() == [DERIVED]
