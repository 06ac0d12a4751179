"""Profiler pieces: grids, kind filters, benchmarks that must refuse rather than fake."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from profiler_helpers import fast_timing

from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.kernels import (
    AttentionDecodePoint, AttentionPrefillKey, AttentionPrefillPoint, ElementwiseKey, GemmKey, GemmPoint, MlaPrefillKey,
    MoeKey, TokensPoint,
)
from graphsim.errors import GraphsimError
from graphsim.ir.geometry import (
    AttentionGeometry, Conv1dGeometry, ElementwiseGeometry, EmbeddingGeometry, GemmGeometry, Geometry,
    LinearAttentionGeometry, MoeExpertsGeometry, MoeRouterGeometry, NormGeometry, RotaryGeometry,
)
from graphsim.ir.kernel import GEOMETRY_FOR_KIND, KernelAttrs, KernelKind
from graphsim.profiles.profiler import Grid, KernelTarget, Unmeasurable, open_device, parse_kinds
from graphsim.profiles.profiler.attention import attention_mask
from graphsim.profiles.profiler.benches import make_bench
from graphsim.profiles.profiler.grid import pow2_and_midpoints
from graphsim.profiles.profiler.moe import MoeBench, balanced_assignment
from graphsim.profiles.profiler.timer import CpuTimer, summarise


@pytest.fixture(scope="module")
def cpu():
    return open_device("cpu", threads=1)


def test_generic_grids():
    assert pow2_and_midpoints(1, 16) == (1, 2, 3, 4, 6, 8, 12, 16)
    full = Grid.full()
    assert full.gemm_m[0] == 1 and full.gemm_m[-1] == 16384 and 12288 in full.gemm_m
    assert full.prefill_q[0] == 16 and full.prefill_q[-1] == 8192
    assert full.decode_batch[-1] == 256 and full.decode_kv[0] == 128 and full.decode_kv[-1] == 32768
    pre = full.prefill_points()
    assert all(p.kv_len >= p.q_len and p.kv_len % p.q_len == 0 for p in pre)
    assert AttentionPrefillPoint(1, 8192, 32768) in pre
    quick = Grid.quick()
    assert set(quick.gemm_m) < set(full.gemm_m) and set(quick.decode_points()) < set(full.decode_points())
    cut = full.trimmed(max_m=100, max_kv=1024)
    assert max(cut.gemm_m) == 96 and max(cut.decode_kv) == 1024 and cut.prefill_max_kv == 1024


def test_parse_kinds():
    assert parse_kinds(None) is None
    assert parse_kinds("gemm,moe") == {"gemm", "moe_experts"}
    with pytest.raises(GraphsimError, match="unknown kernel kind 'gemmm'"):
        parse_kinds("gemmm")


# a geometry for tests that leave it out (the bench reads these dims from the key)
_DEFAULT_GEOMETRY: dict[type[Geometry], Geometry] = {
    GemmGeometry: GemmGeometry(n=64, k=64),
    AttentionGeometry: AttentionGeometry(num_heads=4, num_kv_heads=2, head_dim=16, v_head_dim=16, window=0, causal=True),
    MoeExpertsGeometry: MoeExpertsGeometry(hidden_size=64, inter_size=32, top_k=2, num_experts=8, activation="silu"),
    LinearAttentionGeometry: LinearAttentionGeometry(num_k_heads=4, num_v_heads=4, k_head_dim=16, v_head_dim=16),
}


def _target(key, kind, name, geometry: Geometry | None = None, dtype="bf16"):
    geo = geometry if geometry is not None else _DEFAULT_GEOMETRY[GEOMETRY_FOR_KIND[kind]]
    return KernelTarget(key, KernelAttrs(kind, name, geo, dtype))


def test_fp8_gemm_on_cpu_is_reported(cpu):
    t = _target(GemmKey(64, 64, KernelDtype.FP8), KernelKind.GEMM, "linear", GemmGeometry(n=64, k=64), "f8e4m3")
    with pytest.raises(Unmeasurable, match=r"fp8 GEMM .* CPU"):
        make_bench(t, cpu)
    t4 = _target(GemmKey(64, 64, KernelDtype.INT4_WO), KernelKind.GEMM, "linear")
    with pytest.raises(Unmeasurable, match="int4_wo"):
        make_bench(t4, cpu)


@pytest.mark.parametrize("op", ["polar", "matmul", "no_such_op"])
def test_elementwise_ops_without_a_measurement_are_refused(cpu, op):
    t = _target(ElementwiseKey(op, 64, KernelDtype.BF16), KernelKind.ELEMENTWISE, op, ElementwiseGeometry(width=64))
    with pytest.raises(Unmeasurable):
        make_bench(t, cpu)


def test_linear_attention_is_refused(cpu):
    t = _target(ElementwiseKey("chunk_gated_delta_rule", 64, KernelDtype.BF16), KernelKind.LINEAR_ATTENTION,
                "chunk_gated_delta_rule")
    with pytest.raises(Unmeasurable, match="linear attention"):
        make_bench(t, cpu)


@pytest.mark.parametrize("kind,name,geometry,width", [
    (KernelKind.RMS_NORM, "rms_norm", NormGeometry(width=64, dim=16), 64),
    (KernelKind.FUSED_ADD_RMS_NORM, "fused_add_rms_norm", NormGeometry(width=64, dim=64), 64),
    (KernelKind.ROTARY, "rotary_embedding", RotaryGeometry(num_heads=4, num_kv_heads=2, rot_dim=8, head_dim=16), 48),
    (KernelKind.ACT_AND_MUL, "silu_and_mul", ElementwiseGeometry(width=32), 32),
    (KernelKind.MOE_ROUTER, "topk_softmax", MoeRouterGeometry(num_experts=8, top_k=2), 8),
    (KernelKind.MOE_ROUTER, "grouped_topk", MoeRouterGeometry(num_experts=8, top_k=2), 8),
    (KernelKind.CONV1D, "causal_conv1d", Conv1dGeometry(channels=32, kernel_size=4), 32),
    (KernelKind.EMBEDDING, "embedding", EmbeddingGeometry(vocab=96, width=64), 64),
    (KernelKind.ELEMENTWISE, "fused_gdn_gating", ElementwiseGeometry(num_v_heads=4, width=8), 8),
    (KernelKind.ELEMENTWISE, "mean", ElementwiseGeometry(width=1, in_width=64), 1),
    (KernelKind.ELEMENTWISE, "cat", ElementwiseGeometry(width=192, in_width=128), 192),
    (KernelKind.ELEMENTWISE, "topk", ElementwiseGeometry(width=2, in_width=8), 2),
    (KernelKind.ELEMENTWISE, "cast", ElementwiseGeometry(width=64, in_width=64), 64),
])
def test_per_token_kernels_run(cpu, kind, name, geometry, width):
    dtype = "f32" if kind is KernelKind.MOE_ROUTER else "bf16"
    key = ElementwiseKey(name, width, KernelDtype.FP32 if dtype == "f32" else KernelDtype.BF16)
    bench = make_bench(_target(key, kind, name, geometry, dtype), cpu)
    for tokens in (1, 5):
        bench.prepare(TokensPoint(tokens))()


def test_attention_and_moe_run(cpu):
    gqa = make_bench(_target(AttentionPrefillKey(4, 2, 16, KernelDtype.BF16, KernelDtype.BF16, 8),
                             KernelKind.ATTENTION, "attention"), cpu)
    assert gqa.prepare(AttentionPrefillPoint(1, 16, 32))().shape == (1, 4, 16, 16)
    mla = make_bench(_target(MlaPrefillKey(4, 32, 16, 8, 12, KernelDtype.BF16, KernelDtype.BF16),
                             KernelKind.ATTENTION, "mla_attention"), cpu)
    assert mla.prepare(AttentionPrefillPoint(1, 16, 16))().shape == (1, 4, 16, 12)
    from graphsim.costing.kernels import MlaDecodeKey

    mla_dec = make_bench(_target(MlaDecodeKey(4, 32, 16, 8, 12, KernelDtype.BF16, KernelDtype.BF16),
                                 KernelKind.ATTENTION, "mla_attention"), cpu)
    assert mla_dec.prepare(AttentionDecodePoint(2, 40))().shape == (2, 4, 1, 12)
    moe = make_bench(_target(MoeKey(64, 32, 2, 8, 1, 2, KernelDtype.BF16), KernelKind.MOE_EXPERTS, "fused_moe"), cpu)
    assert isinstance(moe, MoeBench) and moe.local_experts == 4
    assert moe.prepare(TokensPoint(6))().shape == (6, 64)


def test_window_mask_aligns_queries_to_the_end():
    m = attention_mask(2, 5, 0, device=__import__("torch").device("cpu"))
    assert m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    w = attention_mask(2, 5, 2, device=__import__("torch").device("cpu"))
    assert w.tolist() == [[False, False, True, True, False], [False, False, False, True, True]]


def test_balanced_routing():
    rows = balanced_assignment(tokens=10, topk=2, num_experts=4)
    assert sorted(len(r) for r in rows) == [5, 5, 5, 5]
    for i in range(10):  # each token picks distinct experts
        assert sum(i in r for r in rows) == 2


def test_timer_and_summary():
    samples = CpuTimer(fast_timing()).time(lambda: sum(range(100)))
    assert len(samples) >= 3
    m = summarise(samples, "python sum")
    assert m.p10_us is not None and m.p90_us is not None
    assert m.time_us > 0 and m.p10_us <= m.time_us <= m.p90_us and m.samples == len(samples)


def test_gemm_point(cpu):
    bench = make_bench(_target(GemmKey(32, 16, KernelDtype.FP32), KernelKind.GEMM, "linear", dtype="f32"), cpu)
    assert bench.prepare(GemmPoint(3))().shape == (3, 32)


def test_reduction_reads_its_input_width_and_writes_one_per_token():
    # RMSNorm's mean: keyed on the 4096 values it reads per token, it writes one
    from graphsim.costing.kernel_map import Dtypes, key_for
    from graphsim.costing.kernels import TokensPoint
    from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
    from graphsim.profiles.profiler.device import open_device
    from graphsim.profiles.profiler.pointwise import PointwiseBench

    attrs = KernelAttrs(KernelKind.ELEMENTWISE, "mean", ElementwiseGeometry(width=1, in_width=4096), "f32", Rows.TOKENS)
    key = key_for(attrs, Dtypes())
    assert isinstance(key, ElementwiseKey) and key.width == 4096
    run = PointwiseBench(key, attrs, open_device("cpu", threads=1)).prepare(TokensPoint(8))
    assert tuple(run().shape) == (8, 1)
