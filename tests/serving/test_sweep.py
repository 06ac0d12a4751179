"""graphsim sweep end to end (one trace, several points; table, --json, --plot) and simulate --plot."""

import json
import sys

import pytest

from graphsim.cli.app import main

SMALL = ["llama-3.1-8b", "--gpu", "h100", "-n", "12", "--input-len", "200:400", "--output-len", "8:16",
         "--max-model-len", "2048"]


@pytest.fixture(autouse=True, scope="module")
def isolated_home(tmp_path_factory):
    """One GRAPHSIM_HOME for the module: the first test traces the model, the others read its graph cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPHSIM_HOME", str(tmp_path_factory.mktemp("home")))
        mp.setenv("COLUMNS", "200")
        yield


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_sweep_json_traces_once_and_reports_every_point(capsys, monkeypatch):
    pytest.importorskip("torch")
    from graphsim.serving import deployment

    calls = []
    real = deployment.build_cost

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(deployment, "build_cost", counting)
    assert main(["sweep", *SMALL, "--rates", "2,8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(calls) == 1  # one trace and one set of cost tables for the whole sweep
    assert d["axis"] == "rate" and [p["rate"] for p in d["points"]] == [2.0, 8.0] and "graphsim" in d["versions"]
    for p in d["points"]:
        assert p["completed"] == 12 and p["source_shares"] == {"roofline": pytest.approx(1.0)}
        assert p["ttft_ms"]["count"] == 12 and p["per_gpu"]["output_tokens_per_s"] > 0


def test_sweep_concurrencies_table_and_plot(capsys, tmp_path):
    pytest.importorskip("torch")
    png = tmp_path / "curve.png"
    plot = ["--plot", str(png)] if _has_matplotlib() else []
    assert main(["sweep", *SMALL, "--concurrencies", "1,4", *plot]) == 0
    out = capsys.readouterr().out
    for text in ("concurrency", "TTFT ms mean/p90", "share of predicted kernel time by source", "1: all roofline",
                 "4: all roofline"):
        assert text in out, text
    if plot:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert not [f for f in tmp_path.iterdir() if f.name.endswith(".tmp")]  # published whole


@pytest.mark.parametrize("args,message", [
    (["--rates", "1", "--concurrencies", "2"], "give exactly one of --rates"),
    ([], "give exactly one of --rates"),
    (["--rates", "1,x"], "--rates '1,x'"),
    (["--concurrencies", "0"], "values > 0"),
    (["--rates", "1", "--plot", "curve.svg"], "give a .png path"),
])
def test_sweep_bad_input_is_one_line_exit_2(capsys, args, message):
    assert main(["sweep", "llama-3.1-8b", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_plot_without_matplotlib_names_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib → ImportError
    assert main(["sweep", "llama-3.1-8b", "--rates", "1", "--plot", str(tmp_path / "c.png")]) == 2
    assert "pip install 'graphsim[plot]'" in capsys.readouterr().err
    assert main(["simulate", "llama-3.1-8b", "--rate", "1", "--plot", str(tmp_path / "d.png")]) == 2
    assert "pip install 'graphsim[plot]'" in capsys.readouterr().err


def test_simulate_plot_writes_the_distributions(capsys, tmp_path):
    pytest.importorskip("torch")
    if not _has_matplotlib():
        pytest.skip("matplotlib not installed")
    png = tmp_path / "dist.png"
    assert main(["simulate", *SMALL, "--rate", "4", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote the TTFT/TPOT distributions: {png}" in capsys.readouterr().out
