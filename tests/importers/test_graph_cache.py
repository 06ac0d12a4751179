"""The traced-graph cache: a second import reads the graph back (no torch), a damaged entry is traced again."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from graphsim.catalog import ResolvedModel, resolve_model
from graphsim.importers import graph_cache
from graphsim.ir import graph_to_text


def run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    """The installed `graphsim` script (beside this Python, else on PATH)."""
    beside = Path(sys.executable).parent / "graphsim"
    exe = str(beside) if beside.is_file() else shutil.which("graphsim")
    assert exe is not None, "graphsim is not installed"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


def _tiny_config() -> dict:
    cfg = dict(resolve_model("llama-3.1-8b").config)
    cfg.pop("rope_scaling", None)
    cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
               num_hidden_layers=2, vocab_size=97, max_position_embeddings=256, bos_token_id=None, eos_token_id=None)
    return cfg


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(graph_cache.NO_CACHE_ENV, raising=False)
    return tmp_path / "home"


@pytest.fixture
def tiny_dir(tmp_path):
    d = tmp_path / "tiny-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(_tiny_config()))
    return d


def test_key_is_the_config_content_not_its_spelling():
    cfg = _tiny_config()
    reordered = dict(reversed(list(cfg.items())))
    assert graph_cache.cache_key(graph_cache.key_fields(cfg, "m", None)) == \
        graph_cache.cache_key(graph_cache.key_fields(reordered, "m", None))
    base = graph_cache.cache_key(graph_cache.key_fields(cfg, "m", None))
    assert graph_cache.cache_key(graph_cache.key_fields(cfg, "m", "fp16")) != base  # dtype
    assert graph_cache.cache_key(graph_cache.key_fields({**cfg, "hidden_size": 128}, "m", None)) != base
    assert graph_cache.cache_key(graph_cache.key_fields(cfg, "m", None, full_depth=True)) != base
    fields = graph_cache.key_fields(cfg, "m", None)
    assert {"graphsim", "graphsim_source", "torch", "transformers"} <= set(fields)


def test_second_import_is_a_hit_with_the_same_graph(home, tiny_dir):
    pytest.importorskip("transformers")
    from graphsim.importers.hf import import_hf

    g1, r1 = import_hf(str(tiny_dir))
    assert r1.cache.startswith("stored ") and "build_s" in r1.timings_s
    assert len(graph_cache.entries()) == 1 and graph_cache.entries()[0].parent == home / "cache" / "graphs"
    g2, r2 = import_hf(str(tiny_dir))
    assert r2.cache.startswith("hit ") and set(r2.timings_s) == {"cache_load_s"}  # no build, no trace
    assert graph_to_text(g1) == graph_to_text(g2)
    assert (r2.param_count, r2.num_layers, r2.traced_layers) == (r1.param_count, r1.num_layers, r1.traced_layers)


def test_damaged_entry_is_traced_again_with_a_notice(home, tiny_dir, capsys):
    pytest.importorskip("transformers")
    from graphsim.importers.hf import import_hf

    import_hf(str(tiny_dir))
    entry = graph_cache.entries()[0]
    entry.write_text('{"format": "graphsim-graph-cache", "version": 1, "key": "')  # cut short
    _, rep = import_hf(str(tiny_dir))
    err = capsys.readouterr().err
    assert "notice: ignoring damaged graph cache entry" in err and "tracing again" in err
    assert rep.cache.startswith("stored ") and "trace_s" in rep.timings_s
    assert json.loads(entry.read_text())["format"] == "graphsim-graph-cache"  # rewritten whole


def test_no_cache_env_reads_and_writes_nothing(home, tiny_dir, monkeypatch):
    pytest.importorskip("transformers")
    from graphsim.importers.hf import import_hf

    import_hf(str(tiny_dir))
    monkeypatch.setenv(graph_cache.NO_CACHE_ENV, "1")
    _, rep = import_hf(str(tiny_dir))
    assert rep.cache == "off" and "trace_s" in rep.timings_s
    assert graph_cache.load(graph_cache.key_fields(_tiny_config(), "tiny-llama", None, full_depth=False)) is None


def test_cached_predict_runs_without_torch(home, tiny_dir):
    """A `graphsim predict` whose graph is cached never imports torch or transformers (that is what makes a
    repeated run fast); its JSON equals the one priced from the fresh trace."""
    pytest.importorskip("transformers")
    from graphsim.cli.app import main

    import_hf = __import__("graphsim.importers.hf", fromlist=["import_hf"]).import_hf
    import_hf(ResolvedModel("tiny-llama", _tiny_config(), "path", str(tiny_dir / "config.json")))  # fills the cache
    code = ("import sys, io, contextlib\nfrom graphsim.cli.app import main\nbuf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            f"    rc = main(['predict', {str(tiny_dir)!r}, '--json', '-b', 'decode:4x128'])\n"
            "print(buf.getvalue())\nprint(rc, 'torch' in sys.modules, 'transformers' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    *body, last = out.stdout.strip().splitlines()
    assert last == "0 False False", out.stderr
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["--no-cache", "predict", str(tiny_dir), "--json", "-b", "decode:4x128"]) == 0
    cached = json.loads("\n".join(body))
    assert cached == json.loads(buf.getvalue())
    assert cached["versions"]["torch"] == version("torch")  # the graph was traced with it (a cache-key field)


def test_entry_point_cache_info_and_clear(home, tiny_dir):
    pytest.importorskip("transformers")
    from graphsim.importers.hf import import_hf

    import_hf(str(tiny_dir))
    info = run_cli(["cache", "info", "--json"])
    assert info.returncode == 0, info.stderr
    d = json.loads(info.stdout)
    assert d["entries"] == 1 and d["graphs"][0]["name"] == "tiny-llama"
    hit = run_cli(["import", str(tiny_dir), "--json"])
    assert json.loads(hit.stdout)["cache"].startswith("hit ")
    cleared = run_cli(["cache", "clear", "--json"])
    assert json.loads(cleared.stdout)["removed"] == 1 and not graph_cache.entries()
