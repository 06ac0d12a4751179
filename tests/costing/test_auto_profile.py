"""Measured by default: a missing default profile.db is built once from aiconfigurator-core's tables (here the
small fake package tree of test_costing_aiconfigurator), announced on stderr; the opt-out builds nothing."""

from __future__ import annotations

import pytest
from test_costing_aiconfigurator import fake_root  # noqa: F401  (the fixture)

from graphsim.costing import aiconfigurator_import as aic
from graphsim.costing import auto_profile
from graphsim.costing.hardware import load_hardware
from graphsim.costing.predict import default_data, default_profile_path


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(auto_profile.NO_AUTO_PROFILE_ENV, raising=False)
    return tmp_path / "home"


def test_first_use_builds_the_default_profile(home, fake_root, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setattr(aic, "aiconfigurator_root", lambda: fake_root)
    hw = load_hardware("h200")
    db, note = default_data(hw)
    path = default_profile_path(hw.id)
    assert path == home / "profiles" / "h200_sxm_vllm.db" and path.is_file()
    assert db is not None and f"measured rows from {path}" in note
    err = capsys.readouterr().err
    assert err.count("notice:") == 1 and f"building {path} once" in err and "GRAPHSIM_NO_AUTO_PROFILE=1" in err
    db2, _ = default_data(hw)  # the second use reads the file: no notice, no rebuild
    assert db2 is not None and "notice:" not in capsys.readouterr().err


def test_opt_out_and_a_gpu_without_tables_build_nothing(home, fake_root, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setattr(aic, "aiconfigurator_root", lambda: fake_root)
    monkeypatch.setenv(auto_profile.NO_AUTO_PROFILE_ENV, "1")
    db, note = default_data(load_hardware("h200"))
    assert db is None and "roofline" in note and not (home / "profiles").exists()
    monkeypatch.delenv(auto_profile.NO_AUTO_PROFILE_ENV)
    assert auto_profile.auto_build("a100_sxm", home / "profiles" / "a100_sxm_vllm.db") is False  # not in the tree
    assert capsys.readouterr().err == ""


def test_missing_package_builds_nothing(home, monkeypatch):
    def absent():
        raise aic.OptionalDependencyError("aiconfigurator-core is not installed")

    monkeypatch.setattr(aic, "aiconfigurator_root", absent)
    db, _ = default_data(load_hardware("h200"))
    assert db is None and not (home / "profiles").exists()


def test_root_options_turn_the_cache_and_the_build_off(monkeypatch, capsys):
    """`graphsim --no-auto-profile --no-cache …` sets the environment every later step (and worker) reads."""
    import os

    from graphsim.cli.app import main
    from graphsim.importers import graph_cache

    monkeypatch.delenv(auto_profile.NO_AUTO_PROFILE_ENV, raising=False)
    monkeypatch.delenv(graph_cache.NO_CACHE_ENV, raising=False)
    assert auto_profile.enabled() and graph_cache.enabled()
    assert main(["--no-auto-profile", "--no-cache", "models", "--json"]) == 0
    capsys.readouterr()
    assert os.environ[auto_profile.NO_AUTO_PROFILE_ENV] == "1" and not auto_profile.enabled()
    assert not graph_cache.enabled()


def test_a_profile_imported_before_graphsim_read_a_table_says_so_once(home, fake_root, monkeypatch, capsys):  # noqa: F811
    """A default profile whose import did not read a table the installed package holds (an older graphsim read
    fewer) prices without those rows: one notice names them and the re-import command; a fresh import, or one of a
    chosen subset of tables (`--tables`), says nothing."""
    monkeypatch.setattr(aic, "aiconfigurator_root", lambda: fake_root)
    hw = load_hardware("h200")
    path = default_profile_path(hw.id)
    default_data(hw)  # built fresh: nothing unread
    capsys.readouterr()
    fresh = auto_profile.unread_tables(aic_provenance(path))
    assert fresh == []
    stale = {k: v for k, v in aic_provenance(path).items() if k != "table.gemm_perf"}  # as if gemm_perf was not read
    assert auto_profile.unread_tables(stale) == ["gemm_perf"]
    assert auto_profile.unread_tables({**stale, "tables": "gemm_perf"}) == []  # a chosen subset is not stale
    assert auto_profile.unread_tables({"source": "graphsim profile"}) == []  # not an aiconfigurator import
    assert auto_profile.warn_if_stale("/x/stale.db", stale) == ["gemm_perf"]
    assert auto_profile.warn_if_stale("/x/stale.db", stale) == ["gemm_perf"]  # a second time: no second notice
    err = capsys.readouterr().err
    assert err.count("notice:") == 1 and "gemm_perf" in err
    assert "graphsim profiles import-aiconfigurator --system h200_sxm --backend vllm -o /x/stale.db --overwrite" in err


def aic_provenance(path):
    from graphsim.costing.profile_db import ProfileDB

    with ProfileDB.open(path) as db:
        return dict(db.meta.provenance)
