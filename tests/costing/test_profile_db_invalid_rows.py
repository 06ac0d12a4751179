"""Rows edited by hand to a non-positive or missing time are never used as measurements."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.errors import ProfileDBCorruptError
from graphsim.costing.interpolate import KernelPricer
from graphsim.costing.kernels import GemmKey, GemmPoint, Measurement, TableKind
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.costing.timing import TimeSource

META = ProfileMeta(device="cpu: test", hardware="h200_sxm", engine="torch-eager", engine_version="2.13",
                   torch_version="2.13.0", provenance={"who": "test"})
KEY = GemmKey(4096, 1024, D.BF16)


@pytest.fixture
def edited(tmp_path):
    path = tmp_path / "p.db"
    with ProfileDB.create(path, META) as db:
        db.put_many([(KEY, GemmPoint(m), Measurement(10.0 * m)) for m in (16, 32, 64, 128)])
    conn = sqlite3.connect(path)
    # The schema's CHECK (time_us > 0) refuses such edits; a tool that turns checks off does not.
    conn.execute("PRAGMA ignore_check_constraints = ON")
    conn.execute("UPDATE gemm SET time_us = -5 WHERE m = 32")
    conn.execute("UPDATE gemm SET time_us = 0 WHERE m = 64")
    conn.commit()
    conn.close()
    return path


def test_invalid_rows_are_left_out_and_counted(edited):
    with ProfileDB.open(edited) as db:
        rows = db.rows(KEY)
        assert rows.coords[:, 0].tolist() == [16, 128] and rows.times_us.tolist() == [160.0, 1280.0]
        assert db.invalid_rows() == {TableKind.GEMM: 2}
        with pytest.raises(ProfileDBCorruptError, match="time_us must be a finite positive number, got -5"):
            db.get(KEY, GemmPoint(32))
        # m = 32 lies between the two valid rows: interpolated from them, not "measured" at -5 µs
        t = KernelPricer(db, None).time(KEY, GemmPoint(32))
        assert t.source is TimeSource.INTERPOLATED and t.time_us is not None and 160.0 < t.time_us < 1280.0


def test_profiles_show_reports_them(edited):
    r = subprocess.run([sys.executable, "-m", "graphsim", "profiles", "show", str(edited), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["invalid_rows"] == {"gemm": 2}
