"""Hardware specs (shipped datasheet JSONs, measured CPU) and roofline work formulas."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.dtypes import PeakClass, parse_kernel_dtype
from graphsim.costing.errors import HardwareSpecError
from graphsim.costing.hardware import (
    CpuMeasureSettings, DeviceKind, list_hardware, load_hardware, measure_cpu_spec, save_hardware,
)
from graphsim.costing.kernels import CollectiveKey, CollectiveOp, ElementwiseKey, GemmKey, MoeKey
from graphsim.costing.roofline import attended_pairs, kernel_work, roofline_us


def test_shipped_specs_are_complete_and_sourced():
    specs = {s.id: s for s in list_hardware()}
    assert {"h100_sxm", "h200_sxm", "b200_sxm", "a100_sxm", "l40s"} <= set(specs)
    for s in specs.values():
        assert s.kind is DeviceKind.GPU
        assert "http" in s.source and s.memory_bytes > 0 and s.memory_bandwidth_bytes_per_s > 0
        assert {PeakClass.FP32, PeakClass.BF16, PeakClass.FP16} <= set(s.peak_flops_per_s)
        assert s.interconnect_bandwidth_bytes_per_s > 0 and s.interconnect_latency_us > 0
    assert specs["h200_sxm"].memory_bandwidth_bytes_per_s == 4.8e12
    assert specs["h100_sxm"].peak_flops(D.BF16) == pytest.approx(989.5e12)
    assert specs["b200_sxm"].peak_flops(D.NVFP4) == 9e15
    assert specs["a100_sxm"].peak_flops(D.FP8) is None and specs["h200_sxm"].peak_flops(D.NVFP4) is None
    assert specs["h200_sxm"].peak_flops(D.FP8_BLOCK) == specs["h200_sxm"].peak_flops(D.FP8)


def test_load_by_alias_path_and_errors(tmp_path):
    assert load_hardware("H200").id == "h200_sxm" and load_hardware("a100-80gb").id == "a100_sxm"
    with pytest.raises(HardwareSpecError, match="unknown hardware 'h900'; known: "):
        load_hardware("h900")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"id": "x"}))
    with pytest.raises(HardwareSpecError, match="malformed"):
        load_hardware(str(bad))


def test_measured_cpu_spec_round_trips(tmp_path):
    spec = measure_cpu_spec(CpuMeasureSettings(matmul_n=256, copy_bytes=8 * 2**20, repeats=2))
    assert spec.kind is DeviceKind.CPU and "measured with numpy" in spec.source
    fp32 = spec.peak_flops(PeakClass.FP32)
    assert fp32 is not None and fp32 > 1e8 and spec.memory_bandwidth_bytes_per_s > 1e8
    assert spec.peak_flops(D.BF16) == spec.peak_flops(PeakClass.FP32)  # CPU falls back to fp32
    path = save_hardware(spec, tmp_path / "cpu.json")
    assert load_hardware(str(path)) == spec


def test_kernel_dtype_parsing():
    assert parse_kernel_dtype("torch.bfloat16") is D.BF16 and parse_kernel_dtype("half") is D.FP16
    assert parse_kernel_dtype("sq") is D.INT8_SQ and parse_kernel_dtype("fp8_block") is D.FP8_BLOCK
    with pytest.raises(ValueError, match="unknown kernel dtype"):
        parse_kernel_dtype("fp7")


@given(st.integers(1, 300), st.integers(0, 300), st.integers(0, 400))
def test_attended_pairs_matches_brute_force(q, prefix, window):
    kv = q + prefix
    brute = sum(min(p + 1, window) if window else p + 1 for p in range(prefix, kv))
    assert attended_pairs(np.array([q]), np.array([kv]), window)[0] == brute


def test_gemm_and_elementwise_work_and_roofline():
    h200 = load_hardware("h200")
    w = kernel_work(GemmKey(6144, 4096, D.BF16), np.array([[2048]]))
    assert w is not None
    assert w.flops[0] == 2 * 2048 * 6144 * 4096
    assert w.bytes[0] == (2048 * 4096 + 4096 * 6144 + 2048 * 6144) * 2
    t = roofline_us(h200, GemmKey(6144, 4096, D.BF16), np.array([[2048], [1]]))
    assert t is not None
    assert t[0] == pytest.approx(w.flops[0] / 989.5e12 * 1e6)  # compute bound
    assert t[1] == pytest.approx(4096 * 6144 * 2 / 4.8e12 * 1e6, rel=1e-3)  # memory bound: the weights
    e = roofline_us(h200, ElementwiseKey("rms_norm", 4096, D.BF16), np.array([[1000]]))
    assert e is not None
    assert e[0] == pytest.approx(2 * 1000 * 4096 * 2 / 4.8e12 * 1e6)


def test_collective_and_moe_roofline():
    h200 = load_hardware("h200")
    t = roofline_us(h200, CollectiveKey(CollectiveOp.ALL_REDUCE, 4, D.BF16), np.array([[1 << 30]]))
    assert t is not None
    assert t[0] == pytest.approx(5.0 + 1.5 * (1 << 30) / 450e9 * 1e6)
    moe = MoeKey(4096, 14336, 2, 8, 1, 1, D.BF16)
    w = kernel_work(moe, np.array([[1], [100000]]))
    assert w is not None
    assert w.flops[0] == 2 * 2 * 3 * 4096 * 14336
    assert w.bytes[1] > 8 * 3 * 4096 * 14336 * 2 * 0.99  # every expert's weights read
