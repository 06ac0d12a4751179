"""GEMM rows a collector timed without CUDA graphs (aiconfigurator's vLLM fp8_block rows): near their dispatch floor
they are host time, so the point is priced as one without rows, never above the row (graphsim/costing/eager_rows.py)."""

from __future__ import annotations

import numpy as np
import pytest

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.eager_rows import eager_floors
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import MEASURED, ROOFLINE, KernelPricer
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
