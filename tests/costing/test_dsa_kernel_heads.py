"""DSA's sparse MLA as FlashMLA runs it on a device: a rank's query heads padded to the kernel's tile (64 on Hopper,
128 on Blackwell, vLLM flashmla_sparse.py) and the prefill pairs at the share of the bf16 peak FlashMLA published
(640 TFLOP/s on an H800, 989.4 peak). Expected values are hand-derived in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from graphsim.costing import dsa
from graphsim.costing.derived import ProfileRates, derived_us
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.hardware import load_hardware
from graphsim.costing.kernels import ElementwiseKey
from graphsim.costing.roofline import roofline_us


@pytest.mark.parametrize(("heads", "cc", "expected"), [
    (16, "9.0", 64),  # DeepSeek-V3.2 at TP 8 on an H200: 128 / 8 = 16 heads, padded to 64
    (32, "9.0", 64),
    (64, "9.0", 64),
    (96, "9.0", 128),  # not a multiple of 64: the next one
    (128, "9.0", 128),  # TP 1: no padding
    (16, "10.0", 128),  # Blackwell's bf16 prefill kernel: multiples of 128
    (16, "8.0", 16),  # no FlashMLA sparse tile stated for Ampere: unchanged
    (16, "", 16),  # compute capability not stated: unchanged
])
def test_kernel_heads(heads: int, cc: str, expected: int) -> None:
    assert dsa.kernel_heads(heads, cc) == expected


def test_on_device_pads_pairs_and_tokens_not_keys() -> None:
    pairs = dsa.attention_op_name(dsa.ATTN_PAIRS, 16, 512, 64, 2048)
    tokens = dsa.attention_op_name(dsa.ATTN_TOKENS, 16, 512, 64, 2048)
    keys = dsa.attention_op_name(dsa.ATTN_KEYS, 16, 512, 64, 2048)
    assert dsa.on_device(pairs, "9.0") == "flashmla_sparse.prefill/h64.l512.r64.k2048"
    assert dsa.on_device(tokens, "9.0") == "flashmla_sparse.prefill_tokens/h64.l512.r64.k2048"
    assert dsa.on_device(keys, "9.0") == keys  # the key rows have no heads
    assert dsa.on_device("rms_norm", "9.0") == "rms_norm"


def _pairs_key(heads: int) -> ElementwiseKey:
    return ElementwiseKey(dsa.attention_op_name(dsa.ATTN_PAIRS, heads, 512, 64, 2048), heads * 512, KernelDtype.BF16)


def test_roofline_runs_the_padded_heads_on_hopper() -> None:
    h200 = load_hardware("h200_sxm")
    peak = h200.peak_flops(KernelDtype.BF16)
    assert peak
    rows = np.array([[1e6]])  # one million (query, picked key) pairs
    # 16 heads run as 64: 2 · 64 · (2 · 512 + 64) = 139,264 FLOPs a pair; 1.39264e11 FLOPs / peak
    got = roofline_us(h200, _pairs_key(16), rows)
    assert got is not None
    assert got[0] == pytest.approx(1e6 * 139264 / peak * 1e6)
    # the same as 64 real heads, and 4x the 16 heads' 34,816 FLOPs a pair
    assert got[0] == pytest.approx(roofline_us(h200, _pairs_key(64), rows)[0])  # type: ignore[index]
    a100 = load_hardware("a100_sxm")  # no tile stated for 8.0: 16 heads priced as 16
    a_peak = a100.peak_flops(KernelDtype.BF16)
    assert a_peak
    assert roofline_us(a100, _pairs_key(16), rows)[0] == pytest.approx(1e6 * 34816 / a_peak * 1e6)  # type: ignore[index]


def test_derived_pairs_at_flashmla_published_share() -> None:
    h200 = load_hardware("h200_sxm")
    peak = h200.peak_flops(KernelDtype.BF16)
    assert peak
    rows = np.array([[1e6]])
    rates = ProfileRates(floor_us=3.0, bandwidth_bytes_per_s=3.9e12, rows=100, bound_rows=50, source="test")
    roof = roofline_us(h200, _pairs_key(16), rows)
    assert roof is not None
    got = derived_us(rates, h200, _pairs_key(16), rows, roof)
    assert got is not None
    # 1.39264e11 FLOPs at 640 / 989.4 of the bf16 peak: 1.39264e11 · 989.4 / 640 / peak
    assert got[0] == pytest.approx(1e6 * 139264 * 989.4 / 640.0 / peak * 1e6)
    assert got[0] > roof[0]  # never below the kernel's roofline
