"""A time read off profile rows is never below the kernel's own roofline (its physical floor)."""

from __future__ import annotations

import numpy as np
import pytest

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import MEASURED, ROOFLINE, KernelPricer
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


def test_extrapolation_below_the_floor_is_clamped_and_says_so(pricer):
    # m = 1 extrapolates from m = 64 (10 µs) and 128 (12 µs) on the edge slope log(1.2)/log(2) = 0.263:
    # 10 · (1/64)^0.263 = 3.35 µs. The floor: bytes = 1·4096·2 + 4096·4096·2 + 1·4096·2 = 33,570,816 B,
    # / 4.8e12 B/s = 6.99392 µs (FLOPs 2·4096² = 3.4e7 / 989.5e12 = 0.034 µs is below that).
    t = pricer.time(KEY, GemmPoint(1))
    assert t.source is TimeSource.ROOFLINE and t.time_us == pytest.approx(33_570_816 / 4.8e12 * 1e6)
    assert "roofline floor (the extrapolated 3.35 µs lies below it)" in t.detail
    times, sources = pricer.times(KEY, np.asarray([[1.0], [64.0]]))
    assert times[0] == pytest.approx(6.99392, rel=1e-5) and times[1] == 10.0  # m = 64: floor 7.21 µs < 10 µs
    assert [int(s) for s in sources] == [ROOFLINE, MEASURED]


def test_collectives_keep_their_measured_time(pricer):
    key = CollectiveKey(CollectiveOp.ALL_REDUCE, 2, D.BF16, "custom")
    t = pricer.time(key, MessagePoint(4096))
    assert t.source is TimeSource.MEASURED and t.time_us == 3.0
