"""Row-less memory-bound kernels are priced at the profile's achieved bandwidth and launch floor (`derived`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from graphsim.costing.derived import compute_rates
from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import DERIVED, ROOFLINE, KernelPricer
from graphsim.costing.kernels import (
    CollectiveKey, CollectiveOp, ElementwiseKey, GemmKey, GemmPoint, Measurement, MessagePoint, TokensPoint,
)
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.costing.timing import TimeSource

H200 = load_hardware("h200")  # 4.8e12 B/s, BF16 989.5e12 FLOP/s
PROBE = ElementwiseKey("probe", 4096, D.BF16)  # bytes per token: 2 (read + write) × 4096 × 2 B = 16,384
NORM = ElementwiseKey("rms_norm", 8192, D.BF16)  # no rows of its own


def probe_rows(big: int = 20) -> list:
    """One small row (1 token, 2 µs: the launch floor) and `big` rows of 4096·i tokens
    (67,108,864·i bytes) at achieved bandwidths 1.1, 1.2, ... TB/s: (1.0 + 0.1·i) TB/s for row i."""
    rows = [(PROBE, TokensPoint(1), Measurement(2.0))]
    for i in range(1, big + 1):
        nbytes = 16_384 * 4096 * i
        rows.append((PROBE, TokensPoint(4096 * i), Measurement(nbytes / ((1.0 + 0.1 * i) * 1e12) * 1e6)))
    return rows


def open_db(tmp_path, rows, name="p.db"):
    meta = ProfileMeta(device="NVIDIA H200", hardware="h200_sxm", engine="vllm", engine_version="0.24.0")
    with ProfileDB.create(tmp_path / name, meta) as db:
        db.put_many(rows)
    return ProfileDB.open(tmp_path / name)


@pytest.fixture
def db(tmp_path):
    with open_db(tmp_path, probe_rows()) as db:
        yield db


def test_rates_from_the_rows(db):
    # floor: 1st percentile (lower) of 21 times = sorted index floor(0.01 · 20) = 0 → the 2 µs row.
    # bandwidth-bound rows: flops 0; memory roofline ≥ 4 × 2 µs = 8 µs — the 1-token row's 16,384 B take
    # 0.0034 µs (out), the smallest big row's 67,108,864 B take 13.98 µs (in): 20 rows.
    # bandwidth: 90th percentile (lower) of the 20 = sorted index floor(0.9 · 19) = 17 → row i = 18: 2.8 TB/s.
    r = compute_rates(db, H200)
    assert r is not None
    assert r.floor_us == 2.0 and r.rows == 21 and r.bound_rows == 20
    assert r.bandwidth_bytes_per_s == pytest.approx(2.8e12, rel=1e-12)


def test_a_rowless_norm_is_derived(db):
    pricer = KernelPricer(db, H200)
    # 1024 tokens: 2 × 1024 × 8192 × 2 B = 33,554,432 B / 2.8e12 B/s = 11.98373 µs (roofline at 4.8e12: 6.99051;
    # floor 2 µs)
    t = pricer.time(NORM, TokensPoint(1024))
    assert t.source is TimeSource.DERIVED and t.time_us == pytest.approx(33_554_432 / 2.8e12 * 1e6, rel=1e-12)
    assert "2 µs launch floor" in t.detail and "2,800 GB/s" in t.detail
    # 1 token: 32,768 B / 2.8e12 = 0.0117 µs → the 2 µs launch floor
    assert pricer.time(NORM, TokensPoint(1)).time_us == 2.0
    times, sources = pricer.times(NORM, np.asarray([[1.0], [1024.0]]))
    assert times[0] == 2.0 and times[1] == pytest.approx(11.98373, rel=1e-6)
    assert sources.tolist() == [DERIVED, DERIVED]


def test_rowless_gemm_derived_when_memory_bound_roofline_when_compute_bound(db):
    pricer = KernelPricer(db, H200)
    key = GemmKey(8192, 8192, D.BF16)
    # m = 1: bytes 1·8192·2 + 8192·8192·2 + 1·8192·2 = 134,250,496 → / 2.8e12 = 47.94661 µs; FLOPs 1.34e8 / 989.5e12
    # = 0.14 µs: memory-bound
    t = pricer.time(key, GemmPoint(1))
    assert t.source is TimeSource.DERIVED and t.time_us == pytest.approx(134_250_496 / 2.8e12 * 1e6, rel=1e-12)
    # m = 8192: FLOPs 2·8192³ = 1.0995e12 / 989.5e12 = 1111.2 µs; bytes 3·8192²·2 = 402,653,184 / 4.8e12 = 83.9 µs:
    # compute-bound, the achieved bandwidth says nothing about it → roofline
    t = pricer.time(key, GemmPoint(8192))
    assert t.source is TimeSource.ROOFLINE and t.time_us == pytest.approx(2 * 8192**3 / 989.5e12 * 1e6, rel=1e-12)


def test_rows_of_the_kernel_override(tmp_path):
    with open_db(tmp_path, [*probe_rows(), (NORM, TokensPoint(1024), Measurement(25.0))]) as db:
        t = KernelPricer(db, H200).time(NORM, TokensPoint(1024))
    assert t.source is TimeSource.MEASURED and t.time_us == 25.0


def test_no_profile_or_too_few_rows_keep_the_roofline(tmp_path):
    # 33,554,432 B / 4.8e12 B/s = 6.990507 µs
    t = KernelPricer(None, H200).time(NORM, TokensPoint(1024))
    assert t.source is TimeSource.ROOFLINE and t.time_us == pytest.approx(6.990507, rel=1e-6)
    # 15 bandwidth-bound rows (< 16): no rate
    with open_db(tmp_path, probe_rows(big=15), "few.db") as db:
        assert compute_rates(db, H200) is None
        t, s = KernelPricer(db, H200).times(NORM, np.asarray([[1024.0]]))
    assert s.tolist() == [ROOFLINE] and t[0] == pytest.approx(6.990507, rel=1e-6)


def test_collectives_are_never_derived(db):
    # ring all-reduce on 2 GPUs: latency + 2·(2-1)/2 × bytes / link bandwidth (the spec's figures)
    t = KernelPricer(db, H200).time(CollectiveKey(CollectiveOp.ALL_REDUCE, 2, D.BF16), MessagePoint(1 << 20))
    assert t.source is TimeSource.ROOFLINE


def test_profiles_show_states_the_rates(db, capsys):
    from graphsim.cli.app import main

    assert main(["profiles", "show", str(db.path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["derived"]
    # the figures of test_rates_from_the_rows: 2 µs, 2.8 TB/s, 21 rows, 20 bandwidth-bound
    assert shown["floor_us"] == 2.0 and shown["rows"] == 21 and shown["bandwidth_bound_rows"] == 20
    assert shown["bandwidth_bytes_per_s"] == pytest.approx(2.8e12, rel=1e-12)


def test_the_data_note_states_the_figures(db):
    from graphsim.cost_model import profile_data

    _, note = profile_data(H200, db)
    assert note.endswith("; kernels without rows: derived where memory-bound, max(2 µs launch floor, bytes / 2,800 GB/s "
                         "achieved), from 20 bandwidth-bound of 21 rows of p.db; roofline otherwise")
