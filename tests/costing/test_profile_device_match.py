"""A profile's rows and the spec that prices the rest must be one device, or the command says no."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graphsim.cost_model import check_same_device
from graphsim.costing.errors import ProfileDBMismatchError
from graphsim.costing.hardware import load_hardware, measure_cpu_spec
from graphsim.costing.profile_db import ProfileDB, ProfileMeta


def _db(tmp_path, device: str, hardware: str):
    path = tmp_path / "p.db"
    with ProfileDB.create(path, ProfileMeta(device=device, hardware=hardware, engine="torch-eager",
                                            engine_version="2.13", torch_version="2.13.0")):
        pass
    return path


def test_cpu_rows_with_a_gpu_spec_are_refused(tmp_path):
    path = _db(tmp_path, "cpu: Test CPU (2 logical cpus)", "")
    with ProfileDB.open(path) as db:
        with pytest.raises(ProfileDBMismatchError, match=r"measurements of cpu: Test CPU .*--gpu is h200_sxm \(gpu\); pass this CPU's spec"):
            check_same_device(db, load_hardware("h200"), str(path))
        check_same_device(db, measure_cpu_spec(), str(path))  # the CPU's own spec: fine


def test_one_gpu_rows_with_another_gpus_spec_are_refused(tmp_path):
    path = _db(tmp_path, "NVIDIA H100 80GB HBM3", "h100_sxm")
    with ProfileDB.open(path) as db:
        with pytest.raises(ProfileDBMismatchError, match="not of h200_sxm; pass --gpu h100_sxm"):
            check_same_device(db, load_hardware("h200"), str(path))
        check_same_device(db, load_hardware("h100"), str(path))


def test_cli_says_it_in_one_line(tmp_path):
    path = _db(tmp_path, "cpu: Test CPU (2 logical cpus)", "")
    r = subprocess.run([sys.executable, "-m", "graphsim", "predict", "llama-3.1-8b", "--profile", str(path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "holds measurements of cpu: Test CPU" in r.stderr and len(r.stderr.strip().splitlines()) == 1
