"""Faults from outside: a `graphsim` process killed with SIGKILL (no cleanup runs) while it writes
leaves every previous output as it was and only its own temporaries, which the next writer of the same
name removes; two writers of one profile.db; unwritable simulate outputs refused before the run."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphsim.atomic import leftover_temporaries, remove_stale
from graphsim.cli.app import main


def _graphsim(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "graphsim", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(Path.cwd())})


def _wait_for(cond, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    t0 = time.monotonic()
    while not cond():
        if proc.poll() is not None:
            pytest.fail(f"the process ended (exit {proc.returncode}) before the point to kill it: "
                        f"{proc.stderr.read().decode() if proc.stderr else ''}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            pytest.fail("timed out waiting for the point to kill the process")
        time.sleep(0.05)


@pytest.mark.slow
def test_kill_during_simulate_keeps_previous_outputs(tmp_path):
    pytest.importorskip("torch")
    outs = {"t.json": "old trace", "r.csv": "old requests", "it.csv": "old log"}
    for name, text in outs.items():
        (tmp_path / name).write_text(text)
    proc = _graphsim("simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "50", "-n", "300000", "--input-len",
                     "64:128", "--output-len", "8:16", "--chrome-trace", "t.json", "--requests-out", "r.csv",
                     "--iteration-log", "it.csv", "--json", cwd=tmp_path)
    _wait_for(lambda: any(p.name.startswith(".t.json.") for p in tmp_path.iterdir()), proc)
    time.sleep(1.0)  # well into the run: the trace temporary is growing
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for name, text in outs.items():
        assert (tmp_path / name).read_text() == text, name
    left = leftover_temporaries(tmp_path)
    assert left and all(p.name.split(".")[1] in ("t", "it") for p in left)  # its own temporaries only
    for name in outs:  # the next writer of each name removes them (the writer's pid is gone)
        remove_stale(tmp_path, name)
    assert leftover_temporaries(tmp_path) == []


@pytest.mark.slow
def test_kill_during_import_leaves_no_profile(tmp_path):
    pytest.importorskip("aiconfigurator_core")
    target = tmp_path / "h200.db"
    proc = _graphsim("profiles", "import-aiconfigurator", "--system", "h200_sxm", "--backend", "vllm", "-o",
                     str(target), cwd=tmp_path)
    _wait_for(lambda: any(p.name.startswith(".h200.db.") for p in tmp_path.iterdir()), proc)
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not target.exists()  # absent, never partial
    assert leftover_temporaries(tmp_path)
    remove_stale(tmp_path, "h200.db")
    assert leftover_temporaries(tmp_path) == []


@pytest.mark.slow
def test_a_second_writer_of_a_profile_db_is_one_line(tmp_path):
    from graphsim.costing.profile_db import ProfileDB, ProfileMeta
    from graphsim.errors import GraphsimError

    path = tmp_path / "p.db"
    meta = ProfileMeta(device="cpu-test", engine="vllm", engine_version="0.0")
    ProfileDB.create(path, meta).close()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process mid-write
    try:
        with pytest.raises(GraphsimError) as e:  # switching to WAL needs the lock: refused (a transaction
            db = ProfileDB.create(path, meta)     # would wait out sqlite3's 5 s busy timeout first)
            with db.transaction():
                pass
        assert "\n" not in str(e.value) and "another process" in str(e.value)
    finally:
        other.execute("ROLLBACK")
        other.close()
    with ProfileDB.create(path, meta) as db, db.transaction():  # once the other writer is done: fine
        pass


def test_simulate_refuses_unwritable_outputs_before_running(tmp_path, capsys):
    for extra, expect in ((["--requests-out", str(tmp_path / "no" / "r.csv")], "No such file or directory"),
                          (["--requests-out", str(tmp_path / "r.txt")], "ending in .csv or .parquet"),
                          (["--chrome-trace", str(tmp_path)], "s a directory"),
                          (["--trace-sample", "5"], "--trace-sample needs --chrome-trace")):
        code = main(["simulate", "llama-3.1-8b", "--rate", "1", "-n", "5", *extra])
        err = capsys.readouterr().err
        assert code == 2 and expect in err and "Traceback" not in err, (extra, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
