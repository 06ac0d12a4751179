"""Unmeasured geometries are interpolated between measured ones in log space: GEMMs over (n, k), attention over
head_dim, KV heads and query heads."""

import pytest

from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import KernelPricer
from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionDecodePoint, AttentionPrefillKey, AttentionPrefillPoint, GemmKey, GemmPoint,
    Measurement, MlaDecodeKey,
)
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


# ---- attention: interpolation across head counts (and head_dim) ----------------------------------------------

def attention_db(tmp_path, rows):
    # no hardware spec: no roofline floor or fallback, so the test sees the interpolation alone
    with ProfileDB.create(tmp_path / "a.db", ProfileMeta(device="test", engine="test")) as db:
        db.put_many(rows)
    return ProfileDB.open(tmp_path / "a.db")


def decode_rows(times: dict[tuple[int, int, int], float]) -> list:
    """Decode rows of each (query heads, KV heads, head_dim) at batch {1, 64} × kv_len {1024, 4096},
    the time constant over the grid so a point's time is its geometry's."""
    return [(AttentionDecodeKey(h, kv, d, BF16, BF16), AttentionDecodePoint(b, n), Measurement(t))
            for (h, kv, d), t in times.items() for b in (1, 64) for n in (1024, 4096)]


def test_query_heads_between_measured_counts(tmp_path):
    rows = decode_rows({(16, 4, 128): 40.0, (32, 4, 128): 70.0, (16, 8, 128): 60.0, (32, 8, 128): 120.0})
    with attention_db(tmp_path, rows) as db:
        pricer = KernelPricer(db, None)
        # 28 q / 4 kv: kv 4 exact; q between 16 (40 µs) and 32 (70 µs), weight w = ln(28/16) / ln(32/16) = 0.807355:
        # 40 · (70/40)^w = 40 · exp(0.807355 · 0.559616) = 40 · exp(0.451809) = 40 · 1.571151 = 62.8460 µs
        t = pricer.time(AttentionDecodeKey(28, 4, 128, BF16, BF16), AttentionDecodePoint(64, 1024))
        assert t.source is TimeSource.INTERPOLATED
        assert t.time_us == pytest.approx(62.8460, rel=1e-5)
        # 24 q / 6 kv: at kv 4, q 24 between 16 and 32: w = ln(1.5)/ln 2 = 0.584963 → 40 · 1.75^w = 55.4917;
        # at kv 8: 60 · 2^w = 60 · 1.5 = 90; along kv (same w for 6 between 4 and 8): 55.4917 · (90 / 55.4917)^w
        # = 55.4917 · 1.621864^0.584963 = 55.4917 · 1.326938 = 73.6340 µs
        t = pricer.time(AttentionDecodeKey(24, 6, 128, BF16, BF16), AttentionDecodePoint(1, 4096))
        assert t.source is TimeSource.INTERPOLATED
        assert t.time_us == pytest.approx(73.6340, rel=1e-5)


def test_time_proportional_to_heads_is_reproduced(tmp_path):
    # prefill rows at 16 q (30 µs) and 32 q (60 µs), kv 4: log-log is exact for t ∝ heads → 28 q: 30 · 28/16 = 52.5
    rows = [(AttentionPrefillKey(h, 4, 128, BF16, BF16), AttentionPrefillPoint(1, q, q), Measurement(t))
            for h, t in ((16, 30.0), (32, 60.0)) for q in (512, 1024)]
    with attention_db(tmp_path, rows) as db:
        t = KernelPricer(db, None).time(AttentionPrefillKey(28, 4, 128, BF16, BF16), AttentionPrefillPoint(1, 1024, 1024))
    assert t.source is TimeSource.INTERPOLATED and t.time_us == pytest.approx(52.5, rel=1e-12)


def test_head_dim_between_measured_dims(tmp_path):
    # 32 q / 8 kv at head_dim 64 (50 µs) and 128 (100 µs): 96 → w = ln(1.5)/ln 2 → 50 · 2^w = 50 · 1.5 = 75 µs
    rows = decode_rows({(32, 8, 64): 50.0, (32, 8, 128): 100.0})
    with attention_db(tmp_path, rows) as db:
        t = KernelPricer(db, None).time(AttentionDecodeKey(32, 8, 96, BF16, BF16), AttentionDecodePoint(64, 4096))
    assert t.source is TimeSource.INTERPOLATED and t.time_us == pytest.approx(75.0, rel=1e-12)


def test_heads_outside_the_measured_range_or_another_window_are_not_interpolated(tmp_path):
    rows = decode_rows({(16, 4, 128): 40.0, (32, 4, 128): 70.0})
    with attention_db(tmp_path, rows) as db:
        pricer = KernelPricer(db, None)
        point = AttentionDecodePoint(64, 1024)
        assert pricer.time(AttentionDecodeKey(64, 4, 128, BF16, BF16), point).is_missing  # beyond 32 q heads
        assert pricer.time(AttentionDecodeKey(28, 2, 128, BF16, BF16), point).is_missing  # kv 2 unmeasured
        assert pricer.time(AttentionDecodeKey(28, 4, 128, BF16, BF16, window=4096), point).is_missing  # windowed
        assert pricer.time(AttentionDecodeKey(28, 4, 128, BF16, KernelDtype.FP8), point).is_missing  # fp8 KV


def test_mla_query_heads_between_measured_counts(tmp_path):
    # MLA decode at 16 heads (20 µs) and 64 heads (80 µs), DeepSeek-V3 latent dims: 32 heads → w = ln 2 / ln 4 = 0.5,
    # 20 · (80 / 20)^0.5 = 40 µs
    def key(h):
        return MlaDecodeKey(h, 512, 128, 64, 128, BF16, BF16)

    rows = [(key(h), AttentionDecodePoint(b, 4096), Measurement(t)) for h, t in ((16, 20.0), (64, 80.0)) for b in (1, 64)]
    with attention_db(tmp_path, rows) as db:
        t = KernelPricer(db, None).time(key(32), AttentionDecodePoint(64, 4096))
    assert t.source is TimeSource.INTERPOLATED and t.time_us == pytest.approx(40.0, rel=1e-12)
