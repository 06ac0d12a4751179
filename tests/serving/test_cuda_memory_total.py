"""vLLM sizes its KV budget from the total CUDA reports, not the datasheet's size (hardware spec `cuda_memory_bytes`)."""

import dataclasses
import json
from pathlib import Path

from graphsim.costing.hardware import load_hardware
from graphsim.serving.config import DeploymentConfig, EngineArgs
from graphsim.serving.deployment import plan_deployment

GiB = 2**30
DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "dennislee22_vllm_benchmarking.json"


def test_shipped_totals_are_below_the_datasheet():
    # round(79.26 × 2^30) = 85,104,776,970; round(79.18 × 2^30) = 85,018,877,624; round(139.80 × 2^30) = 150,109,106,995
    want = {"a100_sxm": 85_104_776_970, "h100_sxm": 85_018_877_624, "h200_sxm": 150_109_106_995}
    for hid, total in want.items():
        hw = load_hardware(hid)
        assert hw.cuda_memory_bytes == total and hw.engine_memory_bytes == total
        assert hw.memory_bytes > total  # the datasheet size stays for everything else
        assert type(hw).from_json(hw.to_json()) == hw


def test_a100_total_follows_from_the_logged_budgets():
    # Same server, two gpu_memory_utilizations: the KV budgets differ by total × (0.5 − 0.25), the rest being equal.
    # TP1: (24.83 − 5.01) / 0.25 = 79.28 GiB; TP2: (31.83 − 12.02) / 0.25 = 79.24 GiB; mean 79.26.
    tests = json.loads(DATA.read_text())["tests"]
    kv = {k: (t["gpu_memory_utilization"], t["kv_cache_memory_gib"]) for k, t in tests.items() if k in "2345"}
    tp1 = (kv["5"][1] - kv["4"][1]) / (kv["5"][0] - kv["4"][0])
    tp2 = (kv["3"][1] - kv["2"][1]) / (kv["3"][0] - kv["2"][0])
    assert round(tp1, 2) == 79.28 and round(tp2, 2) == 79.24
    assert load_hardware("a100").cuda_memory_bytes == round((tp1 + tp2) / 2 * GiB)


def test_budget_uses_the_cuda_total_and_falls_back_to_the_datasheet(tmp_path):
    cfg = DeploymentConfig(model="llama-3.1-8b", hardware="h100", engine=EngineArgs(max_model_len=8192))
    b = plan_deployment(cfg).budget
    assert b.total_bytes == 85_018_877_624
    # a user's spec without cuda_memory_bytes: the datasheet's 80 GiB, as before
    hw = dataclasses.replace(load_hardware("h100"), cuda_memory_bytes=0)
    path = tmp_path / "h100_no_cuda_total.json"
    path.write_text(json.dumps(hw.to_json()))
    b0 = plan_deployment(cfg.model_copy(update={"hardware": str(path)})).budget
    assert b0.total_bytes == 80 * GiB
    # ceil(80 GiB × 0.9) − ceil(85,018,877,624 × 0.9) = 77,309,411,328 − 76,516,989,862 = 792,421,466 B less KV
    assert b0.available_bytes - b.available_bytes == 792_421_466
