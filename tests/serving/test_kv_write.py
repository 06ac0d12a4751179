"""vLLM FlashAttention's KV-cache writes priced per step for the simulator (graphsim/serving/kv_write.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.kernels import ElementwiseKey
from graphsim.ir.geometry import AttentionGeometry
from graphsim.ir.kernel import KernelKind
from graphsim.serving.host import EngineHost, HostModel
from graphsim.serving.kv_write import KvCacheWrite, kv_cache_write

GQA = AttentionGeometry(num_heads=16, num_kv_heads=8, head_dim=128, v_head_dim=128, window=0, causal=True)
MLA = AttentionGeometry(num_heads=16, num_kv_heads=1, head_dim=192, v_head_dim=128, window=0, causal=True,
                        kv_lora_rank=512, qk_rope_head_dim=64)


def _leaf(kind, name, geometry):
    return SimpleNamespace(attrs=SimpleNamespace(kind=kind, name=name, geometry=geometry))


class _Pricer:
    """3 µs + 1 ns a token for any key; records the keys asked."""

    def __init__(self) -> None:
        self.keys: list = []

    def times(self, key, coords):
        self.keys.append(key)
        c = np.asarray(coords, dtype=np.float64)[:, 0]
        return 3.0 + 0.001 * c, np.zeros(len(c), dtype=np.int8)


def test_one_write_per_flash_attention_kernel_of_the_steps_tokens():
    # 28 FlashAttention kernels (the MLA one and the GEMM write nothing apart): a step of T tokens pays
    # 28 × (3 + 0.001 T) µs: T = 1 → 84.028, T = 512 → 98.336; the key is K + V of 8 KV heads of 128, bf16
    pricer = _Pricer()
    tree = SimpleNamespace(multiplicity=np.asarray([28.0, 28.0, 2.0]),
                           leaves=[_leaf(KernelKind.GEMM, "qkv_proj", None),
                                   _leaf(KernelKind.ATTENTION, "flash_attn_varlen", GQA),
                                   _leaf(KernelKind.ATTENTION, "mla_attention", MLA)])
    w = kv_cache_write(SimpleNamespace(tree=tree, pricer=pricer, dtypes=SimpleNamespace(kv=KernelDtype.BF16)), 1024)
    assert w is not None and w.writes == 28
    assert pricer.keys == [ElementwiseKey("reshape_and_cache_flash", 2048, KernelDtype.BF16)]
    assert w.us(0) == 0.0
    assert w.us(1) == pytest.approx(84.028)
    assert w.us(512) == pytest.approx(98.336)
    assert w.us(np.asarray([1, 512])) == pytest.approx([84.028, 98.336])
    assert w.us(4096) == pytest.approx(28 * (3.0 + 1.024))  # past the table: its last entry


def test_no_flash_attention_no_write():
    tree = SimpleNamespace(multiplicity=np.asarray([2.0]), leaves=[_leaf(KernelKind.ATTENTION, "mla_attention", MLA)])
    cost = SimpleNamespace(tree=tree, pricer=_Pricer(), dtypes=SimpleNamespace(kv=KernelDtype.BF16))
    assert kv_cache_write(cost, 16) is None
    assert kv_cache_write(SimpleNamespace(), 16) is None  # a cost without a tree


def test_the_write_is_gpu_time_of_the_iteration():
    # 1,000 µs of kernels + a write of 86 µs (tokens ≤ 1); async host 100 µs hidden: 1,086; sync: 1,086 + 100
    write = KvCacheWrite(np.asarray([0.0, 86.0]), 28)
    over = EngineHost(HostModel("t", 100.0, 0.0, 0.0, 0.0, True), 0, 2e12, kv_write=write)
    sync = EngineHost(HostModel("t", 100.0, 0.0, 0.0, 0.0, False), 0, 2e12, kv_write=write)
    assert over.iteration_us(1000.0, 1, 1) == pytest.approx(1086.0)
    assert sync.iteration_us(1000.0, 1, 1) == pytest.approx(1186.0)
