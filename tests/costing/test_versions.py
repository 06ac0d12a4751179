"""Every JSON result carries `versions`: graphsim always; torch / transformers and the profile.db's tables
when the command traced and priced the model; nothing imported to read them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from test_costing_aiconfigurator import fake_root  # noqa: F401  (the fixture)

from graphsim.costing import aiconfigurator_import as aic
from graphsim.versions import profile_tables, versions


def run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    beside = Path(sys.executable).parent / "graphsim"
    exe = str(beside) if beside.is_file() else shutil.which("graphsim")
    assert exe is not None, "graphsim is not installed"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


def test_profile_tables_name_the_db_and_its_source(fake_root, tmp_path, monkeypatch):  # noqa: F811
    db = tmp_path / "p.db"
    aic.import_aiconfigurator("h200_sxm", "vllm", db, root=fake_root)
    t = profile_tables(db)
    assert t is not None and t["path"] == str(db) and t["engine"] == "vllm"
    assert t["source"] == "aiconfigurator-core" and t["engine_version"]  # the fake tree's current vLLM version
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "empty"))
    assert profile_tables(None, "h200") is None  # no default profile.db: nothing measured to name
    v = versions(db, engine="vllm==0.10.1")
    assert v["graphsim"] == version("graphsim") and v["engine_profile"] == "vllm==0.10.1"
    assert v["profile_tables"]["path"] == str(db)
    assert "torch" not in versions(priced=False) and "profile_tables" not in versions(db, priced=False)


def test_config_only_results_record_no_torch():
    """work records graphsim alone; kv also the engine version it models (--engine's default: vllm, the newest)."""
    want = {"work": {"graphsim": version("graphsim")},
            "kv": {"graphsim": version("graphsim"), "engine_profile": "vllm"}}
    for cmd, expected in want.items():
        out = run_cli([cmd, "llama-3.1-8b", "--json"])
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["versions"] == expected
