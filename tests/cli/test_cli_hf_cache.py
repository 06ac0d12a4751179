"""HF ids resolve through the local hub cache the way huggingface_hub does: the snapshot refs/main (or
--revision) names, in the directory HF_HUB_CACHE / HF_HOME / XDG_CACHE_HOME pick; never a download."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graphsim.catalog import resolve_model


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The installed `graphsim` script (beside this Python, else on PATH) with `env` added."""
    beside = Path(sys.executable).parent / "graphsim"
    exe = str(beside) if beside.is_file() else shutil.which("graphsim")
    assert exe is not None, "graphsim is not installed"
    clean = {k: v for k, v in os.environ.items()
             if k not in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME", "TRANSFORMERS_CACHE",
                          "GRAPHSIM_HF_REVISION")}
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, env={**clean, **env})


def make_cache(hub: Path) -> dict[str, Path]:
    """models--acme--tiny with two snapshots: refs/main → aaa111 (the older file), refs/v2 → bbb222 (newer)."""
    repo = hub / "models--acme--tiny"
    cfg = resolve_model("llama-3.1-8b").config
    paths = {}
    for sha, layers in (("aaa111", 3), ("bbb222", 5)):
        snap = repo / "snapshots" / sha
        snap.mkdir(parents=True)
        paths[sha] = snap / "config.json"
        paths[sha].write_text(json.dumps(dict(cfg, num_hidden_layers=layers)))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("aaa111")
    (repo / "refs" / "v2").write_text("bbb222")
    os.utime(paths["aaa111"], (1_000_000, 1_000_000))  # main is the older snapshot: not picked by mtime
    return paths


def _config_of(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["config"]


def test_refs_main_under_hf_home(tmp_path):
    paths = make_cache(tmp_path / "hf" / "hub")
    out = run_cli(["work", "acme/tiny", "--json"], {"HF_HOME": str(tmp_path / "hf")})
    assert _config_of(out) == str(paths["aaa111"])


def test_revision_tag_through_the_cli(tmp_path):
    make_cache(tmp_path / "hf" / "hub")
    env = {"HF_HOME": str(tmp_path / "hf")}
    kv = run_cli(["kv", "acme/tiny", "--revision", "v2", "--json"], env)
    assert kv.returncode == 0, kv.stderr
    assert sum(p["layers"] for p in json.loads(kv.stdout)["layout"]["parts"]) == 5  # bbb222's num_hidden_layers


def test_revision_as_a_commit(tmp_path, monkeypatch):
    paths = make_cache(tmp_path / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("GRAPHSIM_HF_REVISION", raising=False)
    import importlib

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert importlib.import_module("graphsim.catalog").hf_hub_cache() == tmp_path / "hub"
    assert resolve_model("acme/tiny", revision="bbb222").location == str(paths["bbb222"])
    assert resolve_model("acme/tiny").location == str(paths["aaa111"])


def test_xdg_cache_home(tmp_path):
    paths = make_cache(tmp_path / "xdg" / "huggingface" / "hub")
    assert _config_of(run_cli(["work", "acme/tiny", "--json"], {"XDG_CACHE_HOME": str(tmp_path / "xdg")})) == str(paths["aaa111"])


def test_hf_hub_cache(tmp_path):
    other = make_cache(tmp_path / "elsewhere")
    assert _config_of(run_cli(["work", "acme/tiny", "--json"], {"HF_HUB_CACHE": str(tmp_path / "elsewhere")})) == str(other["aaa111"])


def test_missing_revision_names_what_is_cached(tmp_path):
    make_cache(tmp_path / "hf" / "hub")
    out = run_cli(["work", "acme/tiny", "--revision", "v3"], {"HF_HOME": str(tmp_path / "hf")})
    assert out.returncode == 2 and out.stderr.count("error:") == 1
    assert "revision v3 is not in the local Hugging Face cache" in out.stderr
    assert "main -> aaa111" in out.stderr and "never downloads" in out.stderr


def test_resolver_without_huggingface_hub_reads_the_same_layout(tmp_path, monkeypatch):
    """The by-hand reader (huggingface_hub absent) follows refs/ and the env vars as huggingface_hub does."""
    import builtins

    paths = make_cache(tmp_path / "xdg" / "huggingface" / "hub")
    real_import = builtins.__import__

    def no_hub(name, *args, **kwargs):
        if name.startswith("huggingface_hub"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    for var in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "GRAPHSIM_HF_REVISION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(builtins, "__import__", no_hub)
    assert resolve_model("acme/tiny").location == str(paths["aaa111"])
    assert resolve_model("acme/tiny", revision="v2").location == str(paths["bbb222"])
    with pytest.raises(Exception, match="revision nope"):
        resolve_model("acme/tiny", revision="nope")
