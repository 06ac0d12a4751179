"""benchmarks/gpu_consistency.py: same-lab H100 / A100 ratios and decode ceilings from the stored runs and the
datasheets, and the harness leaving out a test whose GPU is not the one its page names."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def report(benchmark_script):
    return {e["h100_test"]: e for e in benchmark_script("gpu_consistency").report()}


def test_pairs_same_model_same_vllm(report):
    # GPUStack's pages: Qwen3-14B H100/A100 (tests 1/2), Qwen3-32B (3/4), Qwen3-235B TP8 (6/7); DeepSeek ran on H200 only
    got = {k: e["a100_test"] for k, e in report.items() if k.startswith("gpustack")}
    assert got == {"gpustack_performance_lab:1": "gpustack_performance_lab:2",
                   "gpustack_performance_lab:3": "gpustack_performance_lab:4",
                   "gpustack_performance_lab:6": "gpustack_performance_lab:7"}


def test_ratios_from_the_pages_and_datasheets(report):
    e = report["gpustack_performance_lab:1"]
    rows = {r["workload"]: r for r in e["rows"]}
    # qwen3-14b pages, "random 32K input": A100 724.56 s, H100 386.80 s → 1.873
    assert rows["32k"]["duration_ratio"] == pytest.approx(724.56 / 386.80)
    # median of the four: 32k 1.873, 4k 407.05/227.57 = 1.789, 2k 175.66/98.91 = 1.776, 128 26.79/22.72 = 1.179
    # → (1.789 + 1.776) / 2 = 1.7825
    assert e["median_duration_ratio"] == pytest.approx((407.05 / 227.57 + 175.66 / 98.91) / 2)
    # datasheets: H100 SXM 989.5 / A100 312 TFLOP/s = 3.171, 3.35 / 2.039 TB/s = 1.643; PCIe 756.5 / 312, 2.0 / 2.039
    assert e["named"]["bf16_ratio"] == pytest.approx(3.1715, abs=1e-3)
    assert e["named"]["hbm_ratio"] == pytest.approx(1.6430, abs=1e-3)
    assert e["sibling"]["part"] == "H100 PCIe"
    assert e["sibling"]["hbm_ratio"] == pytest.approx(0.9809, abs=1e-3)
    # the 8-GPU node of the same lab: 32K 481.89 / 141.60 = 3.403
    r6 = {r["workload"]: r for r in report["gpustack_performance_lab:6"]["rows"]}
    assert r6["32k"]["duration_ratio"] == pytest.approx(481.89 / 141.60)


def test_decode_ceiling_hand_derived(report):
    d = report["gpustack_performance_lab:3"]["h100_decode"]["H100 SXM"]
    # Qwen3-32B weights: per layer q 5120·8192 + k,v 2·5120·1024 + o 8192·5120 + MLP 3·5120·25600 + norms 2·5120 + 2·128
    # = 487,598,336; × 64 = 31,206,293,504; + embed and lm_head 2·151936·5120 = 1,555,824,640; + final norm 5120
    # = 32,762,123,264 params × 2 B = 65,524,246,528 B → 19.56 ms at 3.35 TB/s
    assert d["weights_gb"] == pytest.approx(65.524246528)
    assert d["weights_ms"] == pytest.approx(65.524246528e9 / 3.35e12 * 1e3)
    # all vLLM manages: 0.9 × the total CUDA reports (hardware specs' cuda_memory_bytes): H100 ceil(0.9 × 85,018,877,624)
    # = 76,516,989,862 B → 22.84 ms at 3.35 TB/s; A100 ceil(0.9 × 85,104,776,970) = 76,594,299,273 B → 37.56 ms at 2.039
    assert d["ceiling_ms"] == pytest.approx(76.516989862e9 / 3.35e12 * 1e3)
    assert report["gpustack_performance_lab:3"]["a100_decode"]["A100 SXM"]["ceiling_ms"] == pytest.approx(
        76.594299273e9 / 2.039e12 * 1e3)
    # the 8-GPU pages get no single-GPU ceiling
    assert "h100_decode" not in report["gpustack_performance_lab:6"]


def test_harness_leaves_out_a_mismatched_gpu(benchmark_script):
    h = benchmark_script("validate_serving")
    runs, tests = h.load_runs()
    run = next(r for r in runs if r["id"] == "gps-t1-4k")
    why = h.excluded(run, tests[run["test_key"]])
    assert why is not None and "not the one named" in why and "gpu_consistency.py" in why
    a100 = next(r for r in runs if r["id"] == "gps-t2-4k")
    assert h.excluded(a100, tests[a100["test_key"]]) is None
