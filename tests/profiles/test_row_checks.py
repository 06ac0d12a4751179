"""Measured rows checked beyond 'finite and positive': the profiler re-times a point whose samples scatter
(IQR over median above timer.SPREAD_LIMIT) and reports it if it stays noisy; on read, `profiles show` counts
noisy rows (stored p10–p90 spread) and rows far slower than the kernel's roofline."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")  # the profiler's timer module imports torch

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.hardware import load_hardware
from graphsim.costing.kernels import GemmKey, GemmPoint, Measurement
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.costing.row_checks import FAR_SLOWER, NOISY_P10_P90, check_rows
from graphsim.profiles.profiler import timer as timer_mod

META = ProfileMeta(device="cpu: test", hardware="h200_sxm", engine="torch-eager", engine_version="2.13",
                   torch_version="2.13.0")
KEY = GemmKey(4096, 1024, D.BF16)


def test_spread_is_iqr_over_median():
    # [1, 2, 3, 4, 5]: quartiles 2 and 4 (numpy's linear method), median 3 → (4 − 2) / 3
    assert timer_mod.spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2 / 3)
    assert timer_mod.spread([1.0, 1.0, 1.0]) == 0.0  # too few samples for quartiles


class _Timer:
    """Hands out prepared sample lists, one per `time` call."""

    def __init__(self, *runs: list[float]) -> None:
        self.runs, self.calls = list(runs), 0

    def time(self, fn):
        self.calls += 1
        return self.runs.pop(0)


NOISY = [1.0, 1.0, 5.0, 5.0, 9.0, 9.0]  # quartiles 2 and 8 (linear), median 5 → IQR/median 1.2
TIGHT = [1.0, 1.0, 1.0, 1.01, 1.0, 1.0]


def test_a_noisy_point_is_timed_again_and_the_tightest_kept():
    t = _Timer(NOISY, TIGHT)
    samples, spread, tries = timer_mod.time_steady(t, lambda: None)  # type: ignore[arg-type]
    assert samples == TIGHT and tries == 2 and spread <= timer_mod.SPREAD_LIMIT


def test_a_point_that_stays_noisy_is_reported_after_the_retries():
    t = _Timer(*[NOISY] * (timer_mod.RETRIES + 1))
    samples, spread, tries = timer_mod.time_steady(t, lambda: None)  # type: ignore[arg-type]
    assert tries == timer_mod.RETRIES + 1 == t.calls and spread == pytest.approx(1.2) and samples == NOISY


@pytest.fixture
def db_path(tmp_path):
    # GEMM m×1024 @ 1024×4096 bf16 on H200 (4.8e12 B/s; 989.5e12 FLOP/s): memory-bound at these m. Its roofline
    # lies between the weights alone, 1024·4096·2 B / 4.8e12 B/s = 1.75 µs, and all three matrices at 4 B an
    # element for m ≤ 64, (64·1024 + 1024·4096 + 64·4096)·4 / 4.8e12 = 3.77 µs (the FLOPs take ≤ 0.55 µs).
    path = tmp_path / "p.db"
    with ProfileDB.create(path, META) as db:
        db.put_many([
            (KEY, GemmPoint(16), Measurement(10.0, p10_us=9.0, p90_us=11.0)),  # spread 0.2: fine; ≤ 5.7× roofline
            (KEY, GemmPoint(32), Measurement(10.0, p10_us=6.0, p90_us=16.0)),  # spread 1.0: noisy
            (KEY, GemmPoint(64), Measurement(20_000.0)),  # ≥ 20,000 / 3.77 = 5,305× its roofline: far slower
        ])
    return path


def test_check_rows_counts_noisy_and_far_slower_rows(db_path):
    assert NOISY_P10_P90 < 1.0 < FAR_SLOWER < 5305
    with ProfileDB.open(db_path) as db:
        c = check_rows(db, load_hardware("h200_sxm"))
    assert (c.rows, c.noisy, c.far_slower) == (3, 1, 1)
    assert 5305 <= c.worst_ratio <= 20_000 / 1.75 and "20,000.0 µs" in c.examples[0]
    with ProfileDB.open(db_path) as db:
        assert check_rows(db, None).far_slower == 0  # no spec: no roofline to compare with


def test_profiles_show_reports_the_checks(db_path):
    r = subprocess.run([sys.executable, "-m", "graphsim", "profiles", "show", str(db_path), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    checks = json.loads(r.stdout)["row_checks"]
    assert (checks["noisy"], checks["far_slower"]) == (1, 1)


def test_check_rows_of_given_keys_only(db_path):
    other = GemmKey(8192, 1024, D.BF16)  # no rows: nothing to flag
    with ProfileDB.open(db_path) as db:
        assert check_rows(db, load_hardware("h200_sxm"), keys=[other]).far_slower == 0
        assert check_rows(db, load_hardware("h200_sxm"), keys=[KEY]).far_slower == 1
        assert db.keys_read() == [other, KEY]  # both were read (the other with no rows)


def test_predict_names_suspect_rows_it_read_in_its_data_note(db_path):
    from types import SimpleNamespace

    from graphsim.costing.predict import _checked_note

    with ProfileDB.open(db_path) as db:
        pricer = SimpleNamespace(db=db, hardware=load_hardware("h200_sxm"), rates=None)
        cm = SimpleNamespace(pricer=pricer, data_note="measured rows from p.db")
        before = _checked_note(cm)  # type: ignore[arg-type]  # no rows read yet: the profile's noisy rows only
        assert before == "measured rows from p.db; profile rows: 1 noisy row(s) (p10–p90 spread above 50% of the median)"
        db.rows(KEY)  # the prediction read this key's rows
        note = _checked_note(cm)  # type: ignore[arg-type]
    assert note.startswith("measured rows from p.db; profile rows: 1 noisy row(s)") and "1 row(s) over 2,000×" in note
