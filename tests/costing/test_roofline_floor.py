"""A time read off profile rows is never below the kernel's own roofline (its physical floor)."""

from __future__ import annotations

import numpy as np
import pytest

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import EXTRAPOLATED, MEASURED, ROOFLINE, KernelPricer
from graphsim.costing.kernels import CollectiveKey, CollectiveOp, GemmKey, GemmPoint, Measurement, MessagePoint
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.costing.timing import TimeSource

KEY = GemmKey(4096, 4096, D.BF16)


@pytest.fixture
def pricer(tmp_path):
    meta = ProfileMeta(device="NVIDIA H200", hardware="h200_sxm", engine="vllm", engine_version="0.24.0", torch_version="")
    with ProfileDB.create(tmp_path / "p.db", meta) as db:
        db.put_many([(KEY, GemmPoint(64), Measurement(10.0)), (KEY, GemmPoint(128), Measurement(12.0))])
        # a 2-GPU all-reduce faster than the ring model's 5 µs latency term (vLLM's custom all-reduce can be)
        db.put_many([(CollectiveKey(CollectiveOp.ALL_REDUCE, 2, D.BF16, "custom"), MessagePoint(4096), Measurement(3.0))])
    with ProfileDB.open(tmp_path / "p.db") as db:
        yield KernelPricer(db, load_hardware("h200"))


def test_extrapolation_below_the_rows_is_held_at_their_best_share(pricer):
    # m = 1 extrapolates from m = 64 (10 µs) and 128 (12 µs) on the edge slope log(1.2)/log(2) = 0.263:
    # 10 · (1/64)^0.263 = 3.35 µs. The rows' best share of their roofline: m = 64's bytes 34,603,008 B / 4.8e12 =
    # 7.20896 µs over 10 µs = 0.720896; m = 1's roofline: 1·4096·2 + 4096·4096·2 + 1·4096·2 = 33,570,816 B /
    # 4.8e12 = 6.99392 µs, so at that share 6.99392 / 0.720896 = 9.70171 µs (above the floor: extrapolated)
    t = pricer.time(KEY, GemmPoint(1))
    assert t.source is TimeSource.EXTRAPOLATED
    assert t.time_us == pytest.approx(33_570_816 / 4.8e12 * 1e6 / (34_603_008 / 4.8e12 * 1e6 / 10.0), rel=1e-9)
    times, sources = pricer.times(KEY, np.asarray([[1.0], [64.0]]))
    assert times[0] == pytest.approx(9.70171, rel=1e-5) and times[1] == 10.0
    assert [int(s) for s in sources] == [EXTRAPOLATED, MEASURED]


def test_extrapolation_below_the_floor_is_clamped_and_says_so(tmp_path):
    # rows faster than their own roofline (operands resident in L2: it happens in real tables): m = 64 at 6.0 µs
    # (share 7.20896 / 6.0 = 1.201493, the best) and m = 128 at 7.2 µs (7.42742 / 7.2 = 1.03159). m = 1 extrapolates
    # to 6.0 · (1/64)^(log(1.2)/log 2) = 2.01 µs, the best share allows 6.99392 / 1.201493 = 5.82104 µs, and the
    # floor, m = 1's roofline 6.99392 µs, is above both
    meta = ProfileMeta(device="NVIDIA H200", hardware="h200_sxm", engine="vllm", engine_version="0.24.0", torch_version="")
    with ProfileDB.create(tmp_path / "f.db", meta) as db:
        db.put_many([(KEY, GemmPoint(64), Measurement(6.0)), (KEY, GemmPoint(128), Measurement(7.2))])
    with ProfileDB.open(tmp_path / "f.db") as db:
        pricer = KernelPricer(db, load_hardware("h200"))
        t = pricer.time(KEY, GemmPoint(1))
        assert t.source is TimeSource.ROOFLINE and t.time_us == pytest.approx(33_570_816 / 4.8e12 * 1e6)
        assert "roofline floor (the extrapolated 5.82 µs lies below it)" in t.detail
        times, sources = pricer.times(KEY, np.asarray([[1.0], [64.0]]))
        # the measured 6.0 µs row is itself below its floor (7.20896 µs) and is clamped the same way
        assert times == pytest.approx([6.99392, 7.20896], rel=1e-5)
        assert [int(s) for s in sources] == [ROOFLINE, ROOFLINE]


def test_collectives_keep_their_measured_time(pricer):
    key = CollectiveKey(CollectiveOp.ALL_REDUCE, 2, D.BF16, "custom")
    t = pricer.time(key, MessagePoint(4096))
    assert t.source is TimeSource.MEASURED and t.time_us == 3.0
