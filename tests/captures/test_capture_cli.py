"""graphsim capture show and graphsim align end to end (text and JSON), and their one-line errors."""

import json

import pytest
from capture_helpers import MEMCPY_IN, SAMPLING, kernel_list, vllm_kernel_names, write_json

from graphsim.cli.app import main
from graphsim.ir.geometry import GemmGeometry


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def saved_vllm(vllm_graph, tmp_path):
    from graphsim.ir import save_graph

    path = tmp_path / "tiny_vllm.json"
    save_graph(vllm_graph, path)
    return path


@pytest.fixture
def vllm_capture(vllm_graph, tmp_path):
    names = [MEMCPY_IN] + [n for _, n in vllm_kernel_names(vllm_graph)] + [SAMPLING]
    return write_json(tmp_path / "capture.json", kernel_list(names, "decode:4x100"))


def test_capture_show_text_and_json(vllm_capture, capsys):
    assert main(["capture", "show", str(vllm_capture)]) == 0
    out = capsys.readouterr().out
    assert "phase decode:4x100" in out and "measured" in out and "repeated block" in out
    assert "nvjet_tst_128x64_64x8_2x1_v_bz_coopB_TNN" in out and "sampling" in out
    assert main(["capture", "show", str(vllm_capture), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (phase,) = d["phases"]
    assert phase["fold"]["repeats"] == 2
    assert abs(sum(k["share"] for k in phase["kernels"]) - 1) < 1e-9
    assert "iterations" not in d
    assert main(["capture", "show", str(vllm_capture), "--json", "--launches"]) == 0
    assert len(json.loads(capsys.readouterr().out)["iterations"][0]["launches"]) == phase["launches_per_iteration"]


def test_capture_show_cpu_trace(cpu_trace, capsys):
    assert main(["capture", "show", str(cpu_trace), "--phase", "prefill:1x8", "--limit", "5"]) == 0
    out = capsys.readouterr().out
    assert "aten::linear" in out and "host time of each top-level aten op" in out and "more launch names" in out


def test_align_text_and_json(saved_vllm, vllm_capture, capsys):
    assert main(["align", str(saved_vllm), "--capture", str(vllm_capture)]) == 0
    out = capsys.readouterr().out
    assert "decision table" in out and "matched" in out and "plumbing" in out and "every launch is in a row" in out
    assert main(["align", str(saved_vllm), "--capture", str(vllm_capture), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["iteration"] == "decode:4x100" and d["completeness"]["graph_absent"] == 0
    assert "deviations" not in d


def test_align_with_profile(saved_vllm, vllm_capture, vllm_graph, tmp_path, capsys):
    from graphsim.costing.dtypes import KernelDtype
    from graphsim.costing.kernels import GemmKey, GemmPoint, Measurement
    from graphsim.costing.profile_db import ProfileDB, ProfileMeta

    db = ProfileDB.create(tmp_path / "p.db", ProfileMeta(device="test gpu", hardware="h200_sxm", engine="vllm"))
    gemms = [n.kernel.geometry_as(GemmGeometry) for n in vllm_graph.nodes if n.kernel.kind.value == "gemm"]
    keys = {(g.n, g.k) for g in gemms}
    db.put_many([(GemmKey(n, k, KernelDtype.FP32), GemmPoint(4), Measurement(7.0)) for n, k in keys])
    db.close()
    args = ["align", str(saved_vllm), "--capture", str(vllm_capture), "--profile", str(tmp_path / "p.db")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "largest deviations for decode:4x100" in out and "measured" in out and "roofline" in out
    assert main([*args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["batch"] == "decode:4x100" and d["predicted_us"] > 0 and d["predicted_source"] == "roofline"
    qkv = next(k for k in d["kernels"] if k["kernel"] == "qkv_proj")
    assert qkv["predicted_us"] == pytest.approx(14.0) and qkv["predicted_source"] == "measured"


@pytest.mark.parametrize("args, msg", [
    (["capture", "show", "/nonexistent/trace.json"], "no capture file"),
    (["align", "SAVED", "--capture", "CAPTURE", "--iteration", "5"], "out of range"),
    (["align", "SAVED", "--capture", "CAPTURE", "--profile", "DB", "--range", "capture"], "needs the step"),
    (["align", "SAVED", "--capture", "CAPTURE", "--range", "("], "not a valid regular expression"),
])
def test_errors_are_one_line_and_exit_2(saved_vllm, tmp_path, capsys, args, msg):
    cap = write_json(tmp_path / "c.json", {"kernels": [{"name": "k", "duration_us": 1}]})
    sub = {"SAVED": str(saved_vllm), "CAPTURE": str(cap), "DB": str(tmp_path / "none.db")}
    assert main([sub.get(str(a), str(a)) for a in args]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.strip().count("\n") == 0
