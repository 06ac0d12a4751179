"""GEMM rows a collector timed without CUDA graphs (aiconfigurator's vLLM fp8_block rows): near their dispatch floor
they are host time, so the point is priced from the graphed fp8 rows of the same shape × the profile's fp8_block / fp8
ratio (as one without rows where those do not cover it), never below the roofline nor above the row
(graphsim/costing/eager_rows.py)."""

from __future__ import annotations

import numpy as np
import pytest

from graphsim.costing.derived import rowless_note
from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.eager_rows import eager_floors, sibling_ratio
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import DERIVED, MEASURED, ROOFLINE, KernelPricer
from graphsim.costing.kernels import GemmKey, GemmPoint, Measurement
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.costing.roofline import roofline_us
from graphsim.costing.timing import TimeSource

KEY = GemmKey(4096, 4096, D.FP8_BLOCK)
BF16 = GemmKey(4096, 4096, D.BF16)
# what aiconfigurator's eager vLLM rows look like (H200 table, n = k = 4096): flat at the dispatch floor up to
# m = 2048, GPU-bound above
ROWS = {1: 60.0, 64: 84.0, 16384: 536.0}


def _db(tmp_path, engine: str, source: str = "aiconfigurator-core"):
    meta = ProfileMeta(device="NVIDIA H200", hardware="h200_sxm", engine=engine, engine_version="0.24.0",
                       torch_version="", provenance={"source": source})
    path = tmp_path / f"{engine}-{source}.db"
    with ProfileDB.create(path, meta) as db:
        db.put_many([(KEY, GemmPoint(m), Measurement(t)) for m, t in ROWS.items()])
        db.put_many([(BF16, GemmPoint(64), Measurement(12.0))])  # graphed: any time is GPU time
    return ProfileDB.open(path)


def test_rows_near_the_dispatch_floor_are_not_gpu_time(tmp_path):
    with _db(tmp_path, "vllm") as db:
        assert eager_floors(db) == {"fp8_block": 60.0}  # the smallest fp8_block row; bf16 rows were graphed
        hw = load_hardware("h200")
        pricer = KernelPricer(db, hw)
        # m = 64: 84 µs < 2 × 60 µs, host time. Too few rows here for derived rates, so the kernel's roofline
        roofs = roofline_us(hw, KEY, np.asarray([[64.0]]))
        assert roofs is not None
        roof = float(roofs[0])
        t = pricer.time(KEY, GemmPoint(64))
        assert t.source is TimeSource.ROOFLINE and t.time_us == pytest.approx(roof) and roof < 84.0
        assert "without CUDA graphs" in t.detail and "row 84" in t.detail
        # m = 16384: 536 µs ≥ 120 µs, GPU-bound: the row stands; the graphed bf16 row stands at any size
        assert pricer.time(KEY, GemmPoint(16384)).time_us == 536.0
        assert pricer.time(BF16, GemmPoint(64)).source is TimeSource.MEASURED
        times, sources = pricer.times(KEY, np.asarray([[64.0], [16384.0]]))
        assert times == pytest.approx([roof, 536.0]) and [int(s) for s in sources] == [ROOFLINE, MEASURED]


@pytest.mark.parametrize(("engine", "source"), [("sglang", "aiconfigurator-core"), ("vllm", "graphsim profiler")])
def test_other_collectors_rows_are_read_as_measured(tmp_path, engine, source):
    # aiconfigurator's SGLang collector, and graphsim's own profiler, capture every GEMM in a CUDA graph
    with _db(tmp_path, engine, source) as db:
        assert eager_floors(db) == {}
        t = KernelPricer(db, load_hardware("h200")).time(KEY, GemmPoint(64))
        assert t.source is TimeSource.MEASURED and t.time_us == 84.0


# --- the graphed stand-in: the same shape's fp8 per-tensor rows × the profile's fp8_block / fp8 ratio -----------------
FP8 = GemmKey(4096, 4096, D.FP8)
WIDE, WIDE_FP8 = GemmKey(8192, 4096, D.FP8_BLOCK), GemmKey(8192, 4096, D.FP8)
NARROW = GemmKey(2048, 4096, D.FP8_BLOCK)  # no fp8 rows of its own, none on both sides of n to interpolate between
# Ratio pairs (n = k = 4096, same m on both sides): m = 16384 + 1024 i, i = 0..16, every fp8 row 400 µs; fp8_block
# (slow − 0.1) × 400 µs for i < 8 and slow × 400 µs for the other 9 (slow = 1.3: 480 and 520 µs). All are compute-bound on
# H200 (m = 16384: 2·m·n·k / 1979 TFLOP/s = 277.8 µs against (m·k + k·n + 2·m·n) B / 4.8 TB/s = 45.4 µs) and
# ≥ 4 × 60 = 240 µs long, so the median of the 17 ratios (the 9th smallest) is `slow`. Two pairs at ratio 1.0 are
# compute-bound but under 240 µs (m 4096: 150/150 µs, m 8192: 200/200 µs: eager rows that may hold host time), so
# they are left out; counted, the median of 19 would be the 10th smallest, 1.2 for slow = 1.3.
def _pairs(slow: float) -> dict[int, tuple[float, float]]:
    return {16384 + 1024 * i: ((slow - 0.1 if i < 8 else slow) * 400.0, 400.0) for i in range(17)} | {
        4096: (150.0, 150.0), 8192: (200.0, 200.0)}


def _stand_in_db(tmp_path, slow: float = 1.3):
    meta = ProfileMeta(device="NVIDIA H200", hardware="h200_sxm", engine="vllm", engine_version="0.24.0",
                       torch_version="", provenance={"source": "aiconfigurator-core"})
    path = tmp_path / f"stand-in-{slow}.db"
    with ProfileDB.create(path, meta) as db:
        db.put_many([(KEY, GemmPoint(m), Measurement(t)) for m, t in {1: 60.0, 64: 84.0, 128: 110.0}.items()])
        db.put_many([(FP8, GemmPoint(m), Measurement(t)) for m, t in {1: 10.0, 64: 12.0, 128: 100.0}.items()])
        db.put_many([(KEY, GemmPoint(m), Measurement(b)) for m, (b, _) in _pairs(slow).items()])
        db.put_many([(FP8, GemmPoint(m), Measurement(f)) for m, (_, f) in _pairs(slow).items()])
        db.put_many([(WIDE, GemmPoint(64), Measurement(70.0)), (WIDE_FP8, GemmPoint(64), Measurement(8.0))])
        db.put_many([(NARROW, GemmPoint(64), Measurement(80.0))])
    return ProfileDB.open(path)


def test_ratio_is_the_median_over_compute_bound_rows_above_the_dispatch_floor(tmp_path):
    with _stand_in_db(tmp_path) as db:
        r = sibling_ratio(db, load_hardware("h200"), "fp8_block", 60.0)
        assert r is not None and (r.sibling, r.pairs) == ("fp8", 17) and r.ratio == pytest.approx(1.3)
        # too few pairs (a floor that leaves none of the rows GPU-bound): no ratio
        assert sibling_ratio(db, load_hardware("h200"), "fp8_block", 1000.0) is None


def test_eager_rows_near_the_floor_are_priced_from_the_graphed_sibling(tmp_path):
    with _stand_in_db(tmp_path) as db:
        pricer = KernelPricer(db, load_hardware("h200"))
        # m 64: the eager row (84 µs < 2 × 60) is host time; the graphed fp8 row of the same shape says 12.0 µs:
        # 12.0 × 1.3 = 15.6 µs, above the roofline (3.66 µs: (64·4096 + 4096² + 2·64·4096) B / 4.8 TB/s)
        t = pricer.time(KEY, GemmPoint(64))
        assert t.source is TimeSource.DERIVED and t.time_us == pytest.approx(15.6)
        assert "graphed fp8 rows" in t.detail and "× 1.3" in t.detail and "17 same-shape" in t.detail
        assert "measured fp8 12 µs" in t.detail and "row 84" in t.detail
        # m 32, between rows on both sides: fp8 interpolated in log-log between (1, 10) and (64, 12):
        # 10 × 1.2^(5/6) = 11.641 µs, × 1.3 = 15.133 µs
        t32 = pricer.time(KEY, GemmPoint(32))
        assert t32.source is TimeSource.DERIVED and t32.time_us == pytest.approx(15.133, abs=1e-3)
        assert "interpolated fp8" in t32.detail
        # m 128: 100 × 1.3 = 130 µs, above the eager row itself (110 µs), which bounds the GPU time: 110 µs
        assert pricer.time(KEY, GemmPoint(128)).time_us == pytest.approx(110.0)
        # n 8192: 8.0 × 1.3 = 10.4 µs
        assert pricer.time(WIDE, GemmPoint(64)).time_us == pytest.approx(10.4)
        # n 2048: no fp8 rows of that shape nor on both sides of it: priced as a point without rows (too few
        # bandwidth-bound rows here for derived rates, so the roofline):
        # (64·4096 + 4096·2048 + 2·64·2048) B = 8,912,896 B / 4.8 TB/s = 1.8569 µs
        tn = pricer.time(NARROW, GemmPoint(64))
        assert tn.source is TimeSource.ROOFLINE and tn.time_us == pytest.approx(1.8569, abs=1e-4)
        assert "graphed" not in tn.detail
        # GPU-bound eager rows stand: m 16384 (480 µs ≥ 120)
        assert pricer.time(KEY, GemmPoint(16384)).source is TimeSource.MEASURED
        # the vectorised chain gives the same prices and sources
        times, sources = pricer.times(KEY, np.asarray([[64.0], [32.0], [128.0], [16384.0]]))
        assert times == pytest.approx([15.6, 15.133, 110.0, 480.0], abs=1e-3)
        assert [int(s) for s in sources] == [DERIVED, DERIVED, DERIVED, MEASURED]


def test_the_data_note_names_the_stand_in(tmp_path):
    with _stand_in_db(tmp_path) as db:
        note = rowless_note(db, load_hardware("h200"))
        assert "timed without CUDA graphs" in note and "60.0 µs dispatch floor" in note
        assert "graphed fp8 rows of the same shape × 1.3" in note


def test_the_stand_in_is_held_at_the_roofline(tmp_path):
    with _stand_in_db(tmp_path, slow=0.8) as db:  # fp8_block 0.8 × fp8 where both are GPU time
        hw = load_hardware("h200")
        r = sibling_ratio(db, hw, "fp8_block", 60.0)
        assert r is not None and r.ratio == pytest.approx(0.8)
        # n 8192, m 64: fp8 8.0 µs × 0.8 = 6.4 µs, below the kernel's roofline, which holds it:
        # (64·4096 + 4096·8192 + 2·64·8192) B = 34,865,152 B / 4.8 TB/s = 7.2636 µs
        t = KernelPricer(db, hw).time(WIDE, GemmPoint(64))
        assert t.source is TimeSource.DERIVED and t.time_us == pytest.approx(7.2636, abs=1e-4)


def test_an_outlier_above_larger_rows_is_held_to_their_envelope(tmp_path):
    # aiconfigurator-core 0.12's H200 vLLM fp8_block rows at n 2048, k 512 read 84.9 / 203.2 / 83.1 µs at m 32 / 64 /
    # 128: the m 64 row is above the 2 × floor band, but the m 128 row (more work) took 83.1 µs, so m 64's GPU time is
    # at most that, inside the band: host time, priced like the other host-time rows (here the roofline: too few rows
    # for a sibling ratio or derived rates)
    meta = ProfileMeta(device="NVIDIA H200", hardware="h200_sxm", engine="vllm", engine_version="0.24.0",
                       torch_version="", provenance={"source": "aiconfigurator-core"})
    path = tmp_path / "outlier.db"
    rows = {1: 60.0, 32: 84.9, 64: 203.2, 128: 83.1, 16384: 536.0}
    with ProfileDB.create(path, meta) as db:
        db.put_many([(KEY, GemmPoint(m), Measurement(t)) for m, t in rows.items()])
    hw = load_hardware("h200")
    roofs = roofline_us(hw, KEY, np.asarray([[64.0], [100.0]]))
    assert roofs is not None
    with ProfileDB.open(path) as db:
        pricer = KernelPricer(db, hw)
        t = pricer.time(KEY, GemmPoint(64))
        assert t.source is TimeSource.ROOFLINE and t.time_us == pytest.approx(float(roofs[0]))
        assert "row 203 µs, 83.1 µs at a larger m" in t.detail
        # m 100, read between the 203.2 and 83.1 µs rows, is held by the m 128 row the same way
        assert pricer.time(KEY, GemmPoint(100)).time_us == pytest.approx(float(roofs[1]))
        # the GPU-bound row stands (nothing larger), and the vectorised chain agrees
        assert pricer.time(KEY, GemmPoint(16384)).source is TimeSource.MEASURED
        times, sources = pricer.times(KEY, np.asarray([[64.0], [100.0], [16384.0]]))
        assert times == pytest.approx([float(roofs[0]), float(roofs[1]), 536.0])
        assert [int(s) for s in sources] == [ROOFLINE, ROOFLINE, MEASURED]
