"""graphsim search end to end: the rich output, --json, --plot, and one-line errors."""

import json
import sys

import pytest

from graphsim.cli.app import main

ARGS = ["search", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--isl", "1024", "--osl", "128", "--ttft", "1000",
        "--tpot", "20", "--max-num-seqs", "4,16,64", "--max-num-batched-tokens", "2048",
        "--prefill-batched-tokens", "4096", "--verify", "1"]


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "220")


def test_search_prints_the_best_the_frontier_and_why_others_lost(capsys, tmp_path):
    pytest.importorskip("torch")
    png = tmp_path / "pareto.png"
    plot = ["--plot", str(png)] if _has_matplotlib() else []
    assert main(ARGS + plot) == 0
    out = capsys.readouterr().out
    for text in ("best under the SLOs:", "Pareto frontier", "why the others lost", "candidates evaluated",
                 "every time below is a roofline estimate", "KV link (disaggregated): 450 GB/s", "simulated"):
        assert text in out, text
    if plot:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_search_json(capsys):
    pytest.importorskip("torch")
    assert main([*ARGS, "--json", "--mode", "agg"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["best"] is not None and d["all_roofline"] and d["source"] == "roofline"
    assert {r["candidate"]["mode"] for r in d["rows"]} == {"agg"}
    assert d["rows"][d["best"]]["verdict"] == "best"


@pytest.mark.parametrize("extra,message", [
    (["--mode", "split"], "unknown --mode 'split'"),
    (["--backend", "dask"], "unknown backend 'dask'"),
    (["--tp", "two"], "--tp 'two'"),
    (["--isl", "0"], "--isl '0'"),
    (["--plot", "x.svg"], "give a .png path"),
])
def test_bad_input_is_one_line_exit_2(capsys, extra, message):
    assert main(ARGS + extra) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_plot_without_matplotlib_is_a_clear_error(monkeypatch, tmp_path):
    from graphsim.errors import GraphsimError
    from graphsim.render.search_view import write_pareto_png

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(GraphsimError, match=r"pip install 'graphsim\[plot\]'"):
        # no result needed: the missing matplotlib is reported before the result is read
        write_pareto_png(None, tmp_path / "p.png")  # pyright: ignore[reportArgumentType]


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True
