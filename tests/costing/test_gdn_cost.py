"""Pricing of the gated delta rule (Qwen3-Next / Qwen3.5 gated DeltaNet, graphsim/costing/gdn.py): FLOPs and bytes
of each kernel by hand, the split of a step's rows into vLLM's decode, chunked prefill and state work, and the
roofline and the analyzer reading the same work."""

from __future__ import annotations

import numpy as np
import pytest

from graphsim.analysis.performed import performed_work
from graphsim.costing import gdn, kda
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows
from graphsim.costing.kernels import ElementwiseKey
from graphsim.costing.roofline import kernel_work
from graphsim.ir.geometry import LinearAttentionGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.workload import SeqGroup, Step

# 4 value heads sharing 2 query/key heads, Dk 16, Dv 32, chunk 64, the state in bf16; activations bf16 (2 bytes)
SHAPE = gdn.GdnShape(heads=4, k_heads=2, k_dim=16, v_dim=32, chunk=64, state_dtype="bf16")


def _work(kernel: str) -> tuple[float, float]:
    w = gdn.work(gdn.op_name(kernel, SHAPE), np.array([1.0]), 2.0)
    assert w is not None
    return float(w[0][0]), float(w[1][0])


def test_each_kernel_by_hand():
    # decode: 7 FLOPs per state element (decay 1, k·S 2, rank-1 update 2, q·S 2) × 4·16·32 = 14,336;
    # bytes: q, k 2·2·16 + v, o 2·4·32 = 320 elements × 2 B = 640, g and beta 4·2·4 B = 32, the state
    # 4·16·32 = 2,048 elements × 2 B read and written = 8,192 → 8,864
    assert _work(gdn.DECODE) == (14_336.0, 8_864.0)
    # chunked prefill: 4·(6·16·32 + 3·64·16 + 2·64·32 + 64²/3) = 4·(3,072 + 3,072 + 4,096 + 1,365.33) = 46,421.33;
    # bytes: io 672 + 4·(A fp32 2·64·4 = 512 + (A⁻¹ 2·64 + w, u 2·(16 + 32) + v_new 2·32 + h 2·16·32/64) · 2 B
    # = (128 + 96 + 64 + 16)·2 = 608) = 4,480 → 5,152
    f, b = _work(gdn.PREFILL)
    assert f == pytest.approx(46_421.333, abs=1e-3) and b == 5_152.0
    # a sequence's state read and written: 2 · 2,048 · 2 B = 8,192, no FLOPs
    assert _work(gdn.PREFILL_STATE) == (0.0, 8_192.0)


def test_op_names_parse_back_and_do_not_collide_with_kda():
    name = gdn.op_name(gdn.PREFILL, SHAPE)
    assert name == "chunk_gated_delta_rule/h4.hk2.k16.v32.c64.sbf16"
    assert gdn.parse(name) == (gdn.PREFILL, SHAPE)
    assert kda.parse(name) is None and gdn.parse(kda.op_name(kda.PREFILL, kda.KdaShape(4, 16, 32, 64, "f32"))) is None
    assert gdn.work("chunk_gated_delta_rule", np.array([1.0]), 2.0) is None  # a plain op name is no gdn row


def test_roofline_reads_the_same_work():
    key = ElementwiseKey(gdn.op_name(gdn.DECODE, SHAPE), SHAPE.io_elements, KernelDtype.BF16)
    w = kernel_work(key, np.array([[3.0]]))
    assert w is not None and list(w.flops) == [3 * 14_336.0] and list(w.bytes) == [3 * 8_864.0]


def test_kernel_rows_split_decode_prefill_and_state():
    geo = LinearAttentionGeometry(num_k_heads=2, num_v_heads=4, k_head_dim=16, v_head_dim=32, kind="gated_delta_rule")
    a = KernelAttrs(KernelKind.LINEAR_ATTENTION, "chunk_gated_delta_rule", geo, "bf16", Rows.NONE)
    steps = [Step((SeqGroup(1, 100, 3), SeqGroup(10, 0, 2))), Step((SeqGroup(1, 50, 5),))]
    rows = kernel_rows(a, StepArrays.of(steps), Dtypes())
    got = {p.key.op.split("/")[0]: (list(p.coords[:, 0]), list(p.step)) for p in rows.parts
           if isinstance(p.key, ElementwiseKey)}
    # step 0 holds a prefill: all its 3 + 2·10 = 23 tokens on the chunked kernel, its 5 sequences' states;
    # step 1 is decode only: 5 tokens on the recurrent kernel
    assert got == {"fused_recurrent_gated_delta_rule": ([5.0], [1]), "chunk_gated_delta_rule": ([23.0], [0]),
                   "chunk_gated_delta_rule.state": ([5.0], [0])}
    # no state dtype on the geometry: the activation dtype (vLLM mamba_ssm_cache_dtype "auto")
    assert all(isinstance(p.key, ElementwiseKey) and p.key.op.endswith(".c64.sbf16") for p in rows.parts)


def test_the_analyzer_counts_the_cached_state_as_state_bytes():
    geo = LinearAttentionGeometry(num_k_heads=2, num_v_heads=4, k_head_dim=16, v_head_dim=32, kind="gated_delta_rule")
    a = KernelAttrs(KernelKind.LINEAR_ATTENTION, "chunk_gated_delta_rule", geo, "bf16", Rows.NONE)
    steps = [Step((SeqGroup(1, 100, 3), SeqGroup(10, 0, 2))), Step((SeqGroup(1, 50, 5),))]
    mixed, decode = performed_work(kernel_rows(a, StepArrays.of(steps), Dtypes()), 2)
    # step 0: 5 sequences' states read and written (5 · 8,192 B); the 23 chunked tokens' hand-offs are activations:
    # 23 · 5,152 B; 46,421.33 FLOPs a token
    assert mixed.state_bytes == 5 * 8_192.0 and mixed.activation_bytes == 23 * 5_152.0
    assert mixed.flops == pytest.approx(23 * 46_421.333, abs=0.01) and mixed.param_bytes == 0.0
    # step 1: 5 decode tokens, each reading and writing its sequence's state in place (8,192 B) beside its io (672 B)
    assert decode.state_bytes == 5 * 8_192.0 and decode.activation_bytes == 5 * 672.0 and decode.flops == 5 * 14_336.0
