"""graphsim predict end to end: roofline-only, with a small measured profile, and bad input."""

import json

import pytest

from graphsim.cli.app import main

pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))


def run_json(capsys, *args):
    code = main([*list(args), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_roofline_only_says_so(capsys):
    p = run_json(capsys, "predict", "llama-3.1-8b", "--gpu", "h200", "--batch", "prefill:1x2048",
                 "--batch", "decode:64x2048")
    assert "no measured data for h200_sxm" in p["data"] and "roofline estimate" in p["data"]
    for b in p["batches"]:
        assert b["source"] == "roofline" and b["total_us"] > 0
        assert {k["source"] for k in b["kernels"]} == {"roofline"}
        assert abs(sum(k["total_us"] for k in b["kernels"]) - b["total_us"]) < 1e-6 * b["total_us"]
    prefill, decode = p["batches"]
    # Llama-3.1-8B prefill of 2048 tokens: matmul FLOPs alone are ≈ 2·2048·6.98e9 = 2.9e13 (non-embedding
    # weights 8.03e9 − 2·0.525e9 embedding/head ≈ 6.98e9), i.e. ≥ 29 ms at H200's 989 TFLOP/s dense bf16.
    assert prefill["total_us"] > 29_000
    # decode at 64 × 2048 must at least stream the 16 GB of weights once at 4.8 TB/s ≈ 3.3 ms
    assert decode["total_us"] > 3_300


def test_measured_rows_are_used_and_labelled(capsys, tmp_path):
    from graphsim.costing.dtypes import KernelDtype
    from graphsim.costing.kernels import GemmKey, GemmPoint, Measurement
    from graphsim.costing.profile_db import ProfileDB, ProfileMeta

    db_path = tmp_path / "h200.db"
    db = ProfileDB.create(db_path, ProfileMeta(device="test H200", hardware="h200_sxm", engine="vllm"))
    key = GemmKey(6144, 4096, KernelDtype.BF16)  # Llama-3.1-8B fused QKV: 4096 + 2·1024 outputs
    db.put_many([(key, GemmPoint(m), Measurement(time_us=10.0 * m ** 0.5)) for m in (1024, 2048, 4096)])
    db.close()
    p = run_json(capsys, "predict", "llama-3.1-8b", "--gpu", "h200", "--profile", str(db_path),
                 "--batch", "prefill:1x2048", "--batch", "prefill:1x3000", "--batch", "decode:8x100")
    qkv = [next(k for k in b["kernels"] if k["kernel"] == "qkv_proj") for b in p["batches"]]
    assert qkv[0]["source"] == "measured" and qkv[0]["time_us"] == pytest.approx(10.0 * 2048 ** 0.5)
    assert qkv[1]["source"] == "interpolated"
    assert 10.0 * 2048 ** 0.5 < qkv[1]["time_us"] < 10.0 * 4096 ** 0.5
    assert qkv[2]["source"] == "extrapolated"  # m = 8 is below the measured range
    assert p["batches"][0]["source"] == "roofline"  # the worst source of its kernels


def test_moe_with_tp_and_ep(capsys):
    # EP over the TP group (vLLM's --enable-expert-parallel at dp 1): no all-to-all, the group's all-reduces stay
    p = run_json(capsys, "predict", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "2", "--ep", "2",
                 "--batch", "mixed:1x512@0+16x1024")
    (b,) = p["batches"]
    kinds = {k["kind"] for k in b["kernels"]}
    assert {"moe_experts", "moe_router", "all_reduce", "attention"} <= kinds
    assert "all_to_all" not in kinds
    assert b["tokens"] == 512 + 16 and b["total_us"] > 0
    # graphsim's --ep beyond the TP group: a dispatch and a combine around the experts
    p = run_json(capsys, "predict", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "2", "--ep", "4",
                 "--batch", "mixed:1x512@0+16x1024")
    assert "all_to_all" in {k["kind"] for k in p["batches"][0]["kernels"]}


def test_tree_output_mentions_sources(capsys):
    assert main(["predict", "llama-3.1-8b", "--gpu", "h200", "--batch", "decode:1x128"]) == 0
    out = capsys.readouterr().out
    assert "full.dense ×32" in out and "roofline" in out and "no measured data" in out


@pytest.mark.parametrize("args, fragment", [
    (["--batch", "decode:64"], "malformed batch spec"),
    (["--gpu", "tpu9"], "tpu9"),
    (["--tp", "3"], "must be divisible by tensor parallel size (3)"),
])
def test_bad_input_is_one_line(capsys, args, fragment):
    code = main(["predict", "llama-3.1-8b", *args])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err
    assert len([line for line in err.strip().splitlines() if line.strip()]) == 1


def test_moe_routing_is_stated_and_a_bad_one_is_a_usage_error(capsys):
    p = run_json(capsys, "predict", "qwen3-30b-a3b", "--gpu", "h200", "--batch", "decode:8x128",
                 "--moe-routing", "balanced")
    assert p["moe_routing"].startswith("balanced")
    assert run_json(capsys, "predict", "qwen3-30b-a3b", "--gpu", "h200", "--batch", "decode:8x128")[
        "moe_routing"].startswith("power-law α=1.2")  # the default
    assert run_json(capsys, "predict", "llama-3.1-8b", "--gpu", "h200", "--batch", "decode:8x128")[
        "moe_routing"] is None  # no routed experts
    code = main(["predict", "qwen3-30b-a3b", "--moe-routing", "power-law:1.5"])
    err = capsys.readouterr().err
    assert code == 2 and "--moe-routing" in err and "1.01, 1.2" in err
    assert len([line for line in err.strip().splitlines() if line.strip()]) == 1
