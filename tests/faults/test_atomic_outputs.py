"""Outputs appear whole or not at all (graphsim.atomic): a writer that fails, is interrupted, runs out of
space or meets a read-only file system leaves the previous file as it was and no temporary behind, and
says so in one line; a killed writer's temporaries are removed by the next writer of the same name."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from graphsim.atomic import OutputError, atomic_writer, check_writable, leftover_temporaries, remove_stale
from graphsim.errors import GraphsimError


def _previous(tmp_path: Path) -> Path:
    target = tmp_path / "out.csv"
    target.write_text("previous\n")
    return target


def test_complete_write_publishes_with_plain_file_permissions(tmp_path):
    target = tmp_path / "out.csv"
    with atomic_writer(target) as f:
        f.write("a,b\n")
        assert not target.exists()  # nothing at the target until the block ends
    mask = os.umask(0)
    os.umask(mask)
    assert target.read_text() == "a,b\n" and (target.stat().st_mode & 0o777) == 0o666 & ~mask
    assert leftover_temporaries(tmp_path) == []


@pytest.mark.parametrize("error", [ValueError("writer bug"), KeyboardInterrupt()])
def test_failure_or_interrupt_keeps_the_previous_file(tmp_path, error):
    target = _previous(tmp_path)
    with pytest.raises(type(error)), atomic_writer(target) as f:
        f.write("half")
        raise error
    assert target.read_text() == "previous\n" and leftover_temporaries(tmp_path) == []


def test_disk_full_is_one_line_and_loses_nothing(tmp_path, monkeypatch):
    target = _previous(tmp_path)

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError) as e, atomic_writer(target) as f:
        f.write("x" * 1000)
    msg = str(e.value)
    assert "\n" not in msg and str(target) in msg and "No space left on device" in msg
    assert target.read_text() == "previous\n" and leftover_temporaries(tmp_path) == []


def test_unwritable_directory_is_one_line(tmp_path):
    with pytest.raises(OutputError, match=r"cannot write .*missing.*No such file or directory"):
        check_writable(tmp_path / "missing" / "out.csv")
    with pytest.raises(OutputError, match=r"[Ii]s a directory"):
        check_writable(tmp_path)


def test_stale_temporaries_of_dead_writers_are_removed_live_ones_kept(tmp_path):
    dead = tmp_path / ".out.csv.999999999.abc.tmp"  # above any pid_max: no such process
    dead_dir = tmp_path / ".out.csv.999999999.def.tmp"
    dead_wal = tmp_path / ".out.csv.999999999.ghi.tmp-wal"
    live = tmp_path / f".out.csv.{os.getpid()}.jkl.tmp"
    other = tmp_path / ".other.csv.999999999.abc.tmp"
    for p in (dead, dead_wal, live, other):
        p.write_text("x")
    dead_dir.mkdir()
    with atomic_writer(tmp_path / "out.csv") as f:
        f.write("new\n")
    assert {p.name for p in tmp_path.iterdir()} == {"out.csv", live.name, other.name}
    assert remove_stale(tmp_path, "other.csv") == [other]


def _tmpfs(tmp_path: Path, size: str):
    """A small tmpfs (needs mount privileges; skipped without them), unmounted after the test."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture()
def small_tmpfs(tmp_path):
    yield from _tmpfs(tmp_path, "64k")


@pytest.fixture()
def roomy_tmpfs(tmp_path):
    yield from _tmpfs(tmp_path, "4m")


def test_a_really_full_disk(small_tmpfs):
    target = small_tmpfs / "out.json"
    target.write_text("previous\n")
    with pytest.raises(OutputError, match="No space left on device"), atomic_writer(target) as f:
        for _ in range(64):
            f.write("y" * 4096)  # 256 KiB into 64 KiB
    assert target.read_text() == "previous\n" and leftover_temporaries(small_tmpfs) == []


def test_a_read_only_file_system(small_tmpfs):
    target = small_tmpfs / "out.json"
    target.write_text("previous\n")
    if subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], capture_output=True).returncode:
        pytest.skip("cannot remount read-only here")
    with pytest.raises(OutputError, match="Read-only file system"):
        check_writable(target)
    with pytest.raises(OutputError, match="Read-only file system"), atomic_writer(target) as f:
        f.write("new")
    assert target.read_text() == "previous\n"


def test_a_read_only_profile_db_opens_for_reading(roomy_tmpfs):
    from graphsim.costing.profile_db import ProfileDB, ProfileMeta

    small_tmpfs = roomy_tmpfs
    path = small_tmpfs / "p.db"
    with ProfileDB.create(path, ProfileMeta(device="cpu-test", engine="vllm", engine_version="0.0")):
        pass
    if subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], capture_output=True).returncode:
        pytest.skip("cannot remount read-only here")
    with ProfileDB.open(path) as db:
        assert db.readonly and db.meta.device == "cpu-test"
    with pytest.raises(GraphsimError) as e:
        ProfileDB.create(path, ProfileMeta(device="cpu-test", engine="vllm", engine_version="0.0")).close()
    assert "\n" not in str(e.value)
