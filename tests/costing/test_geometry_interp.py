"""Unmeasured GEMM geometries are interpolated between measured (n, k) in log space."""

import pytest

from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import KernelPricer
from graphsim.costing.kernels import GemmKey, GemmPoint, Measurement
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.costing.timing import TimeSource

BF16 = KernelDtype.BF16


def work_time_us(m: int, n: int, k: int) -> float:
    return 1e-6 * m * n * k  # a power law: exact under log-space bilinear interpolation


@pytest.fixture()
def db(tmp_path):
    db = ProfileDB.create(tmp_path / "g.db", ProfileMeta(device="test", hardware="h200_sxm", engine="test"))
    rows = [(GemmKey(n, k, BF16), GemmPoint(m), Measurement(work_time_us(m, n, k)))
            for n in (1024, 4096) for k in (1024, 4096) for m in (16, 64, 256)]
    db.put_many(rows)
    db.close()
    return ProfileDB.open(tmp_path / "g.db")


def test_between_measured_geometries_is_interpolated(db):
    pricer = KernelPricer(db, load_hardware("h200"))
    t = pricer.time(GemmKey(2048, 3000, BF16), GemmPoint(64))
    assert t.source is TimeSource.INTERPOLATED
    assert t.time_us == pytest.approx(work_time_us(64, 2048, 3000), rel=1e-9)
    # an exact k with an interpolated n
    t2 = pricer.time(GemmKey(2048, 4096, BF16), GemmPoint(256))
    assert t2.source is TimeSource.INTERPOLATED
    assert t2.time_us == pytest.approx(work_time_us(256, 2048, 4096), rel=1e-9)


def test_outside_the_measured_geometries_falls_to_roofline(db):
    pricer = KernelPricer(db, load_hardware("h200"))
    assert pricer.time(GemmKey(8192, 1024, BF16), GemmPoint(64)).source is TimeSource.ROOFLINE
    assert pricer.time(GemmKey(2048, 2048, KernelDtype.FP8), GemmPoint(64)).source is TimeSource.ROOFLINE


def test_m_outside_range_is_extrapolated(db):
    pricer = KernelPricer(db, None)
    t = pricer.time(GemmKey(2048, 2048, BF16), GemmPoint(1024))
    assert t.time_us is not None
    assert t.source is TimeSource.EXTRAPOLATED and t.time_us > work_time_us(256, 2048, 2048)
