"""profile.db: schema round trip, resume, interrupted-write safety, clear errors for bad files."""

import sqlite3
import subprocess
import sys
import textwrap

import pytest

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.errors import ProfileDBCorruptError, ProfileDBError, ProfileDBMismatchError, ProfileDBVersionError
from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionDecodePoint, AttentionPrefillKey, AttentionPrefillPoint, CollectiveKey, CollectiveOp,
    DsaModuleDecodeKey, DsaModulePrefillKey, ElementwiseKey, GemmKey, GemmPoint, Measurement, MessagePoint,
    MlaDecodeKey, MlaModuleDecodeKey, MlaModulePrefillKey, MlaPrefillKey, MoeKey, MoeRouting, TableKind, TokensPoint,
)
from graphsim.costing.profile_db import ProfileDB, ProfileMeta, TimeStatistic
from graphsim.costing.schema import SCHEMA_VERSION, TABLES

META = ProfileMeta(device="cpu: test", hardware="h200_sxm", engine="torch-eager", engine_version="2.13",
                   torch_version="2.13.0", provenance={"who": "test"})

MLA = (16, 512, 128, 64, 128, D.BF16, D.FP8)
ONE_ROW_PER_KIND = {
    TableKind.GEMM: (GemmKey(4096, 1024, D.BF16), GemmPoint(64)),
    TableKind.ATTENTION_PREFILL: (AttentionPrefillKey(32, 8, 128, D.BF16, D.FP8, window=4096), AttentionPrefillPoint(2, 512, 1024)),
    TableKind.ATTENTION_DECODE: (AttentionDecodeKey(32, 8, 128, D.BF16, D.BF16), AttentionDecodePoint(64, 2048)),
    TableKind.MLA_PREFILL: (MlaPrefillKey(*MLA), AttentionPrefillPoint(1, 128, 128)),
    TableKind.MLA_DECODE: (MlaDecodeKey(*MLA), AttentionDecodePoint(8, 4096)),
    TableKind.MLA_MODULE_PREFILL: (MlaModulePrefillKey(*MLA, 7168, 1536, D.FP8_BLOCK), AttentionPrefillPoint(1, 64, 64)),
    TableKind.MLA_MODULE_DECODE: (MlaModuleDecodeKey(*MLA, 7168, 1536, D.BF16), AttentionDecodePoint(4, 16)),
    TableKind.DSA_MODULE_PREFILL: (DsaModulePrefillKey(*MLA, 7168, 1536, D.FP8_BLOCK, 64, 128, 2048),
                                   AttentionPrefillPoint(1, 64, 192)),
    TableKind.DSA_MODULE_DECODE: (DsaModuleDecodeKey(*MLA, 7168, 1536, D.BF16, 64, 128, 2048), AttentionDecodePoint(4, 16)),
    TableKind.MOE: (MoeKey(7168, 2048, 8, 256, 1, 8, D.FP8_BLOCK, MoeRouting.POWER_LAW_1_01), TokensPoint(32)),
    TableKind.COLLECTIVE: (CollectiveKey(CollectiveOp.ALL_REDUCE, 4, D.BF16, "nccl"), MessagePoint(1 << 20)),
    TableKind.ELEMENTWISE: (ElementwiseKey("rms_norm", 4096, D.BF16), TokensPoint(128)),
}


def test_schema_covers_every_kind_with_us_time_columns():
    assert set(TABLES) == set(TableKind)
    for spec in TABLES.values():
        cols = set(spec.all_columns)
        assert {"time_us", "p10_us", "p90_us", "std_us", "samples"} <= cols
        assert not {"time", "latency", "time_ms", "latency_ms"} & cols


def test_round_trip_every_kind(tmp_path):
    path = tmp_path / "p.db"
    m = Measurement(12.5, p10_us=12.0, p90_us=13.5, std_us=0.4, samples=20, kernel="k")
    with ProfileDB.create(path, META) as db:
        db.put_many([(k, p, m) for k, p in ONE_ROW_PER_KIND.values()])
        assert db.meta.schema_version == SCHEMA_VERSION
    with ProfileDB.open(path) as db:
        assert db.readonly
        assert db.meta.device == META.device and db.meta.provenance == {"who": "test"}
        assert db.meta.time_statistic is TimeStatistic.MEDIAN
        assert all(n == 1 for n in db.counts().values())
        for kind, (key, point) in ONE_ROW_PER_KIND.items():
            assert db.get(key, point) == m
            assert db.keys(kind) == [key]
            assert db.has_row(key, point)
        gemm_key, gemm_point = ONE_ROW_PER_KIND[TableKind.GEMM]
        with pytest.raises(ProfileDBError, match="read-only"):
            db.put(gemm_key, gemm_point, m)


def test_wal_mode_and_resume_with_missing(tmp_path):
    path = tmp_path / "p.db"
    key = GemmKey(256, 256, D.FP32)
    grid = [GemmPoint(m) for m in (1, 2, 4, 8, 16)]
    with ProfileDB.create(path, META) as db:
        db.put_many([(key, p, Measurement(float(p.m))) for p in grid[:2]])
        probe = sqlite3.connect(path)
        assert probe.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # while writing
        probe.close()
    # closed: the log is folded into the file and WAL mode left, so the .db alone holds every row
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert not (tmp_path / "p.db-wal").exists()
    with ProfileDB.create(path, META) as db:  # resume: the rows are still there
        assert db.missing(key, grid) == grid[2:]
        db.put(key, grid[2], Measurement(4.0))
        assert db.missing(key, grid) == grid[3:]
        assert db.meta.created_utc  # kept from the first run


def test_exception_inside_transaction_keeps_committed_rows(tmp_path):
    path = tmp_path / "p.db"
    key = GemmKey(256, 256, D.FP32)
    with ProfileDB.create(path, META) as db:
        db.put(key, GemmPoint(1), Measurement(1.0))
        with pytest.raises(RuntimeError), db.transaction():
            db.put(key, GemmPoint(2), Measurement(2.0))
            raise RuntimeError("interrupted")
        assert db.missing(key, [GemmPoint(1), GemmPoint(2)]) == [GemmPoint(2)]


def test_killed_writer_loses_only_the_transaction_in_flight(tmp_path):
    path = tmp_path / "p.db"
    script = textwrap.dedent(f"""
        import os
        from graphsim.costing.dtypes import KernelDtype as D
        from graphsim.costing.kernels import GemmKey, GemmPoint, Measurement
        from graphsim.costing.profile_db import ProfileDB, ProfileMeta
        db = ProfileDB.create({str(path)!r}, ProfileMeta(device="cpu: test", engine="torch-eager"))
        key = GemmKey(64, 64, D.FP32)
        for m in range(1, 6):
            db.put(key, GemmPoint(m), Measurement(float(m)))
        with db.transaction():
            db.put(key, GemmPoint(100), Measurement(100.0))
            os._exit(9)  # killed mid-transaction, no cleanup
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr
    with ProfileDB.open(path) as db:
        rows = db.rows(GemmKey(64, 64, D.FP32))
        assert rows.coords[:, 0].tolist() == [1, 2, 3, 4, 5]
    with ProfileDB.create(path, ProfileMeta(device="cpu: test", engine="torch-eager")) as db:  # resumable
        assert db.missing(GemmKey(64, 64, D.FP32), [GemmPoint(5), GemmPoint(100)]) == [GemmPoint(100)]


def test_corrupt_and_foreign_files_get_one_line_errors(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(ProfileDBCorruptError, match=r"not a readable profile\.db") as e:
        ProfileDB.open(junk)
    assert "\n" not in str(e.value) and "import-aiconfigurator" in str(e.value)
    with pytest.raises(ProfileDBCorruptError):
        ProfileDB.create(junk, META)

    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(ProfileDBCorruptError, match="no meta table"):
        ProfileDB.open(other)

    with pytest.raises(ProfileDBError, match=r"no profile\.db at"):
        ProfileDB.open(tmp_path / "absent.db")


def test_wrong_schema_version(tmp_path):
    path = tmp_path / "p.db"
    ProfileDB.create(path, META).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(ProfileDBVersionError, match=f"schema version 0, this graphsim reads version {SCHEMA_VERSION}"):
        ProfileDB.open(path)


def test_resume_refuses_another_device_unless_overwrite(tmp_path):
    path = tmp_path / "p.db"
    ProfileDB.create(path, META).close()
    other = ProfileMeta(device="NVIDIA H200", engine="vllm", engine_version="0.24.0")
    with pytest.raises(ProfileDBMismatchError, match="--overwrite"):
        ProfileDB.create(path, other)
    with ProfileDB.create(path, other, overwrite=True) as db:
        assert db.meta.device == "NVIDIA H200"


def test_bad_points_rejected(tmp_path):
    with ProfileDB.create(tmp_path / "p.db", META) as db:
        with pytest.raises(ValueError, match=">= 1"):
            db.put(GemmKey(8, 8, D.BF16), GemmPoint(0), Measurement(1.0))
        with pytest.raises(ValueError, match="takes a GemmPoint"):
            db.put(GemmKey(8, 8, D.BF16), TokensPoint(3), Measurement(1.0))
    with pytest.raises(ValueError):
        Measurement(0.0)
