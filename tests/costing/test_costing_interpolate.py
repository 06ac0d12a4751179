"""Interpolation properties (hypothesis) and the lookup chain exact → interpolated → roofline → missing."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import (
    EXTRAPOLATED, INTERPOLATED, MEASURED, MISSING, SOURCES, Curve, KernelPricer, lookup,
)
from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionDecodePoint, AttentionPrefillKey, AttentionPrefillPoint, GemmKey, GemmPoint,
    Measurement,
)
from graphsim.costing.profile_db import KernelRows, ProfileDB, ProfileMeta
from graphsim.costing.timing import TimeSource

GEMM = GemmKey(1024, 1024, D.BF16)
DECODE = AttentionDecodeKey(8, 8, 64, D.BF16, D.BF16)


def curve_1d(xs, ts):
    return Curve(KernelRows(GEMM, np.asarray(xs, dtype=np.int64).reshape(-1, 1), np.asarray(ts, dtype=float)))


def curve_2d(bs, kvs, table):
    coords = np.array([(b, kv) for b in bs for kv in kvs], dtype=np.int64)
    return Curve(KernelRows(DECODE, coords, np.asarray(table, dtype=float).reshape(-1)))


@st.composite
def monotone_rows(draw):
    xs = sorted(draw(st.sets(st.integers(1, 100_000), min_size=2, max_size=12)))
    steps = draw(st.lists(st.floats(0, 50, allow_nan=False), min_size=len(xs), max_size=len(xs)))
    base = draw(st.floats(0.01, 100))
    ts = base + np.cumsum(steps)
    return xs, ts


@settings(max_examples=150, deadline=None)
@given(monotone_rows(), st.lists(st.integers(1, 100_000), min_size=2, max_size=20))
def test_1d_exact_bounded_monotone(rows, queries):
    xs, ts = rows
    c = curve_1d(xs, ts)
    # exact rows exactly
    t, s = c.evaluate(np.array(xs).reshape(-1, 1))
    assert t.tolist() == list(ts) and (s == MEASURED).all()
    # inside: within neighbours and monotone
    inside = sorted(q for q in queries if xs[0] <= q <= xs[-1])
    if inside:
        t, s = c.evaluate(np.array(inside).reshape(-1, 1))
        assert np.all(np.diff(t) >= 0)
        for q, tq, sq in zip(inside, t, s, strict=True):
            i = np.searchsorted(xs, q)
            if xs[i] == q:
                assert sq == MEASURED and tq == ts[i]
            else:
                assert sq == INTERPOLATED
                assert ts[i - 1] <= tq <= ts[i]


@settings(max_examples=100, deadline=None)
@given(monotone_rows(), st.integers(1, 10_000_000))
def test_1d_extrapolation_is_flagged_and_never_falls_with_work(rows, q):
    xs, ts = rows
    c = curve_1d(xs, ts)
    t, s = c.evaluate(np.array([[q]]))
    if q > xs[-1]:
        assert s[0] == EXTRAPOLATED and t[0] >= ts[-1] * (1 - 1e-12)
    elif q < xs[0]:
        assert s[0] == EXTRAPOLATED and t[0] <= ts[0] * (1 + 1e-12)
    else:
        assert s[0] in (MEASURED, INTERPOLATED)


def test_extrapolation_from_close_rows_stays_finite_and_at_most_linear():
    # rows 4 apart at 99,776 / 99,780 with the time doubling: the raw edge slope is ~17,000 in
    # log-log; clamped to 1, the time at 103,958 grows at most in proportion: 2 × 103958/99780
    c = curve_1d([1, 2, 99776, 99780], [1, 1, 1, 2])
    t, s = c.evaluate(np.array([[103958]]))
    assert s[0] == EXTRAPOLATED and 2 <= t[0] <= 2 * 103958 / 99780 + 1e-9


def test_1d_power_law_is_exact_in_log_space():
    xs = [1, 4, 16, 64, 256]
    c = curve_1d(xs, [3.0 * x**0.75 for x in xs])
    t, s = c.evaluate(np.array([[2], [10], [100], [1000]]))
    np.testing.assert_allclose(t, [3.0 * x**0.75 for x in (2, 10, 100, 1000)], rtol=1e-12)
    assert s.tolist() == [INTERPOLATED, INTERPOLATED, INTERPOLATED, EXTRAPOLATED]


@st.composite
def monotone_grid(draw):
    bs = sorted(draw(st.sets(st.integers(1, 512), min_size=2, max_size=5)))
    kvs = sorted(draw(st.sets(st.integers(1, 131072), min_size=2, max_size=6)))
    row_steps = draw(st.lists(st.floats(0, 10), min_size=len(bs), max_size=len(bs)))
    col_steps = draw(st.lists(st.floats(0, 10), min_size=len(kvs), max_size=len(kvs)))
    inter = draw(st.floats(0, 1))
    a, b = np.cumsum(row_steps), np.cumsum(col_steps)
    table = 1.0 + a[:, None] + b[None, :] + inter * a[:, None] * b[None, :]  # monotone in both coordinates
    return bs, kvs, table


@settings(max_examples=100, deadline=None)
@given(monotone_grid(), st.integers(1, 512), st.integers(1, 131072), st.integers(1, 131072))
def test_2d_bilinear_exact_bounded_monotone(grid, b, kv1, kv2):
    bs, kvs, table = grid
    c = curve_2d(bs, kvs, table)
    coords = np.array([(x, y) for x in bs for y in kvs])
    t, s = c.evaluate(coords)
    assert t.tolist() == table.reshape(-1).tolist() and (s == MEASURED).all()
    b = min(max(b, bs[0]), bs[-1])
    lo_kv, hi_kv = sorted((min(max(kv1, kvs[0]), kvs[-1]), min(max(kv2, kvs[0]), kvs[-1])))
    t, s = c.evaluate(np.array([(b, lo_kv), (b, hi_kv)]))
    assert (s <= INTERPOLATED).all()
    assert t[0] <= t[1] * (1 + 1e-12)  # monotone along kv
    i, j = np.searchsorted(bs, b), np.searchsorted(kvs, lo_kv)
    corners = table[max(i - 1, 0):i + 1, max(j - 1, 0):j + 1]
    assert corners.min() * (1 - 1e-12) <= t[0] <= corners.max() * (1 + 1e-12)


def test_2d_ragged_grid_and_single_value_coordinate():
    # batch 1 measured at kv 128..8192, batch 8 only at kv 1024: a query at batch 4 needs both slices
    coords = np.array([(1, 128), (1, 1024), (1, 8192), (8, 1024)])
    c = Curve(KernelRows(DECODE, coords, np.array([1.0, 2.0, 8.0, 4.0])))
    t, s = c.evaluate(np.array([(4, 1024), (4, 512), (1, 512)]))
    assert s[0] == INTERPOLATED and 2.0 < t[0] < 4.0
    assert s[1] == MISSING and np.isnan(t[1])  # batch-8 slice has one kv value only: no slope to use
    assert s[2] == INTERPOLATED


def test_vectorised_equals_scalar():
    xs = [1, 2, 4, 8, 16, 32]
    c = curve_1d(xs, [1.0, 1.1, 1.3, 2.0, 3.5, 7.0])
    qs = [1, 3, 5, 17, 40, 100]
    t, s = c.evaluate(np.array(qs).reshape(-1, 1))
    for q, tq, sq in zip(qs, t, s, strict=True):
        one = c.at(GemmPoint(q))
        assert one.time_us == pytest.approx(tq) and one.source is SOURCES[sq]


# ---- the chain ---------------------------------------------------------------------------------


@pytest.fixture()
def small_db(tmp_path):
    path = tmp_path / "p.db"
    with ProfileDB.create(path, ProfileMeta(device="cpu: test", hardware="h100_sxm", engine="torch-eager")) as db:
        db.put_many([(GEMM, GemmPoint(m), Measurement(10.0 + m)) for m in (1, 16, 256)])
    with ProfileDB.open(path) as db:
        yield db


def test_chain_measured_interpolated_extrapolated_roofline(small_db):
    pr = KernelPricer(small_db)  # hardware from meta
    assert pr.hardware is not None and pr.hardware.id == "h100_sxm"
    assert pr.time(GEMM, GemmPoint(16)).source is TimeSource.MEASURED
    assert pr.time(GEMM, GemmPoint(16)).time_us == 26.0
    assert pr.time(GEMM, GemmPoint(64)).source is TimeSource.INTERPOLATED
    assert pr.time(GEMM, GemmPoint(4096)).source is TimeSource.EXTRAPOLATED
    other = GemmKey(8192, 8192, D.BF16)
    rt = pr.time(other, GemmPoint(4096))
    assert rt.source is TimeSource.ROOFLINE
    assert rt.time_us == pytest.approx(2 * 4096 * 8192 * 8192 / 989.5e12 * 1e6)
    times, sources = pr.times(GEMM, np.array([[16], [64], [4096]]))
    assert [SOURCES[i] for i in sources] == [TimeSource.MEASURED, TimeSource.INTERPOLATED, TimeSource.EXTRAPOLATED]
    times, sources = pr.times(other, np.array([[1], [4096]]))
    assert (sources == SOURCES.index(TimeSource.ROOFLINE)).all() and np.all(times > 0)


def test_chain_missing_is_never_zero(small_db):
    no_spec = lookup(None, GEMM, GemmPoint(8))
    assert no_spec.is_missing and no_spec.time_us is None and "no hardware spec" in no_spec.detail
    a100 = load_hardware("a100")
    fp8 = lookup(None, GemmKey(4096, 4096, D.FP8), GemmPoint(8), a100)  # A100 has no fp8 tensor cores
    assert fp8.is_missing and "a100_sxm" in fp8.detail
    t, s = KernelPricer(None, a100).times(GemmKey(4096, 4096, D.FP8), np.array([[8]]))
    assert np.isnan(t[0]) and s[0] == MISSING


def test_attention_roofline_runs_for_prefill_and_decode():
    h200 = load_hardware("h200")
    pre = lookup(None, AttentionPrefillKey(32, 8, 128, D.BF16, D.BF16), AttentionPrefillPoint(1, 2048, 2048), h200)
    dec = lookup(None, DECODE, AttentionDecodePoint(64, 2048), h200)
    assert pre.source is TimeSource.ROOFLINE and dec.source is TimeSource.ROOFLINE
    assert pre.time_us is not None
    assert 0 < pre.time_us < 87.44  # a lower bound for the measured 87.44 µs (aiconfigurator h200 vllm)


def test_prefill_rows_without_prefix_interpolate_over_batch_and_tokens():
    # aiconfigurator-style prefill rows: kv_len == q_len (no cached prefix)
    key = AttentionPrefillKey(32, 8, 128, D.BF16, D.BF16)
    coords = np.array([(b, q, q) for b in (1, 4) for q in (512, 1024, 2048)])
    c = Curve(KernelRows(key, coords, np.array([10.0, 30.0, 100.0, 35.0, 110.0, 390.0])))
    mid = c.at(AttentionPrefillPoint(2, 1536, 1536))
    assert mid.time_us is not None
    assert mid.source is TimeSource.INTERPOLATED and 30.0 < mid.time_us < 390.0
    assert c.at(AttentionPrefillPoint(1, 1024, 3072)).is_missing  # a prefix was never measured
    h200 = load_hardware("h200")
    with_prefix = KernelPricer(None, h200)
    with_prefix._curves[key] = c
    # no row covers the prefix: the roofline held at the best share of it these rows achieve (below)
    assert with_prefix.time(key, AttentionPrefillPoint(1, 1024, 3072)).source is TimeSource.EXTRAPOLATED
    with pytest.raises(ValueError, match="kv_len"):
        AttentionPrefillPoint(1, 1024, 512)


def test_a_point_off_the_rows_is_held_at_their_best_share_of_the_roofline():
    # One row without a cached prefix, (1, 1024, 1024) in 20 µs, on H200 (bf16 989.5 TFLOP/s, 4.8 TB/s).
    # Its roofline: causal pairs 1024·1025/2 = 524,800; FLOPs 2 · 32 heads · 524,800 · (128 + 128) = 8,598,323,200
    # → 8.68956 µs (compute: bytes 16,777,216 q/o + 4,194,304 kv = 20,971,520 → 4.37 µs); best share 8.68956 / 20.
    # (1, 1024, 3072), a 2,048-token prefix: pairs 1024·2048 + 524,800 = 2,621,952, compute-bound as well, so
    # held = roofline / share = 20 µs × 2,621,952 / 524,800 = 99.92195 µs (the bare roofline: FLOPs 2 · 32 ·
    # 2,621,952 · 256 = 42,958,061,568 → 43.41391 µs)
    key = AttentionPrefillKey(32, 8, 128, D.BF16, D.BF16)
    h200 = load_hardware("h200")
    pricer = KernelPricer(None, h200)
    pricer._curves[key] = Curve(KernelRows(key, np.array([(1, 1024, 1024)]), np.array([20.0])))
    t = pricer.time(key, AttentionPrefillPoint(1, 1024, 3072))
    assert t.source is TimeSource.EXTRAPOLATED and t.time_us == pytest.approx(99.92195, rel=1e-6)
    ts, ss = pricer.times(key, np.array([[1, 1024, 1024], [1, 1024, 3072]]))
    assert ts.tolist() == pytest.approx([20.0, 99.92195], rel=1e-6) and ss.tolist() == [MEASURED, EXTRAPOLATED]
    # without rows of its own the key keeps the bare roofline (a floor, marked roofline)
    bare = KernelPricer(None, h200).time(key, AttentionPrefillPoint(1, 1024, 3072))
    assert bare.source is TimeSource.ROOFLINE and bare.time_us == pytest.approx(43.41391, rel=1e-5)


def test_prefill_prefix_axis_interpolates_when_measured():
    key = AttentionPrefillKey(8, 8, 64, D.BF16, D.BF16)
    coords = np.array([(1, 256, 256 + p) for p in (0, 1024, 4096)])
    c = Curve(KernelRows(key, coords, np.array([5.0, 9.0, 20.0])))
    t = c.at(AttentionPrefillPoint(1, 256, 256 + 2048))
    assert t.time_us is not None
    assert t.source is TimeSource.INTERPOLATED and 9.0 < t.time_us < 20.0
