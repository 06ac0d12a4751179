"""Mamba2 scan as one semantic op: the reference kernel, the trace (dynamic tokens), the fuse to vLLM's
kernels, TP and the pricing of its decode, prefill and state rows (graphsim/costing/ssm.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.costing import ssm  # noqa: E402
from graphsim.costing.dtypes import KernelDtype  # noqa: E402
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows  # noqa: E402
from graphsim.costing.kernels import ElementwiseKey  # noqa: E402
from graphsim.costing.roofline import kernel_work  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.ir import LinearAttentionAttrs, Op  # noqa: E402
from graphsim.ir.geometry import LinearAttentionGeometry  # noqa: E402
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402
from graphsim.workload import SeqGroup, Step  # noqa: E402

# A tiny Nemotron-H: mamba, MLP (relu²) and attention layers ("M-*"); 4 SSM heads of 8, state 16, 2 groups.
TINY_NEMOTRON_H = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "torch_dtype": "bfloat16",
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "hybrid_override_pattern": "M-*",
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 96,
    "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4,
    "chunk_size": 8, "expand": 1, "mlp_hidden_act": "relu2", "max_position_embeddings": 128,
    "use_conv_bias": True, "use_bias": False, "mamba_hidden_act": "silu", "time_step_min": 0.001,
}


def tiny(**overrides) -> ResolvedModel:
    cfg = copy.deepcopy(TINY_NEMOTRON_H)
    cfg.update(overrides)
    return ResolvedModel("tiny-nemotron-h", cfg, "path", "test")


@pytest.fixture(scope="module")
def graph():
    g, report = import_hf(tiny(), cache=False)
    return g, report


def test_ssm_scan_op_matches_transformers_chunked_scan():
    mod = pytest.importorskip("transformers.models.nemotron_h.modeling_nemotron_h")
    torch.manual_seed(0)
    b, s, h, p, g, n = 1, 11, 4, 8, 2, 16  # 11 tokens: one chunk of 4 padded
    x, dt = torch.randn(b, s, h, p), torch.randn(b, s, h)
    a, bm, cm = -torch.rand(h) - 0.5, torch.randn(b, s, g, n), torch.randn(b, s, g, n)
    d, dt_bias = torch.randn(h), torch.randn(h)
    ref, ref_state = mod.mamba2_chunk_scan(x, dt, a, bm, cm, chunk_size=4, D=d, dt_bias=dt_bias, dt_softplus=True,
                                           dt_limit=(0.001, float("inf")), return_final_states=True)
    out, state = torch.ops.graphsim.ssm_scan(x, dt, a, bm, cm, d, dt_bias, None, True, 0.001, float("inf"), 4)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state, ref_state, rtol=1e-4, atol=1e-4)


def test_tiny_model_logits_unchanged_by_the_swap():
    """The whole tiny model on CPU gives the same logits with the semantic scan as with transformers' own."""
    from graphsim.importers.hf.build import make_hf_config, model_class

    cfg = copy.deepcopy(TINY_NEMOTRON_H)
    torch.manual_seed(0)
    model = model_class(cfg["architectures"][0])._from_config(make_hf_config(cfg), dtype=torch.float32).eval()
    ids = torch.randint(0, 96, (1, 13))
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        with custom_ops.semantic_kernels(model) as swapped:
            ours = model(input_ids=ids, use_cache=False).logits
    assert any(s.endswith(".mamba2_chunk_scan") for s in swapped)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_trace_is_dynamic_with_one_scan_node(graph):
    g, report = graph
    assert report.dynamic_tokens, "the scan pinned the trace to a fixed token count"
    assert report.opaque_ops == {}
    scans = [n for n in g.nodes if n.op is Op.LINEAR_ATTENTION]
    assert len(scans) == 1
    a = scans[0].attrs_as(LinearAttentionAttrs)
    # groups → k heads, state → k_head_dim, SSM heads of head_dim → v; chunk from the config; Nemotron-H's
    # temporal state is float32 when its config states no mamba_ssm_cache_dtype (vLLM's config hook)
    assert (a.kind, a.num_k_heads, a.k_head_dim, a.num_v_heads, a.v_head_dim, a.chunk_size, a.state_dtype) == (
        "mamba2_ssd", 2, 16, 4, 8, 8, "f32")
    # the mamba layer is not tagged moe for its 3-D conv weight
    assert "linear.dense" in g.schedule.tags


def test_state_dtype_follows_the_config():
    g, _ = import_hf(tiny(mamba_ssm_cache_dtype="bfloat16"), cache=False)
    scan = next(n for n in g.nodes if n.op is Op.LINEAR_ATTENTION)
    assert scan.attrs_as(LinearAttentionAttrs).state_dtype == "bf16"


def _kernels(g, tag) -> list[KernelAttrs]:
    rep = g.schedule.representative[tag]
    return [n.attrs_as(KernelAttrs) for n in g.nodes if n.op is Op.KERNEL and n.layer == rep]


def test_fuse_to_vllm_kernels_with_no_placeholders(graph):
    g, _ = graph
    fused = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm}").graph
    mamba = _kernels(fused, "linear.dense")
    names = [k.name for k in mamba]
    assert "mamba_chunk_scan_combined" in names and "causal_conv1d" in names
    assert not [k.name for k in mamba if k.approximate], names  # A = -exp(A_log) absorbed
    scan = next(k for k in mamba if k.name == "mamba_chunk_scan_combined")
    geo = scan.geometry_as(LinearAttentionGeometry)
    assert (geo.kind, geo.num_v_heads, geo.v_head_dim, geo.k_head_dim, geo.num_k_heads, geo.chunk_size,
            geo.state_dtype) == ("mamba2_ssd", 4, 8, 16, 2, 8, "f32")
    mlp = [k.name for k in _kernels(fused, "full.dense")]
    assert "relu2" in mlp and not any(k.approximate for k in _kernels(fused, "full.dense"))


def test_tp2_splits_heads_and_groups(graph):
    g, _ = graph
    fused = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm},tp{size=2}").graph  # conservation runs inside
    scan = next(k for k in _kernels(fused, "linear.dense") if k.name == "mamba_chunk_scan_combined")
    geo = scan.geometry_as(LinearAttentionGeometry)
    assert (geo.num_v_heads, geo.num_k_heads, geo.v_head_dim, geo.k_head_dim) == (2, 1, 8, 16)


# --- pricing (hand-derived; costing/ssm.py's formulas) ------------------------------------------------------------
SHAPE = ssm.SsmShape(heads=2, head_dim=4, state=8, groups=1, chunk=4, state_dtype="f32")


def _work(kernel: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = ssm.work(ssm.op_name(kernel, SHAPE), rows, 2.0)
    assert w is not None
    return w


def test_work_per_row_hand_derived():
    rows = np.array([1.0, 3.0])
    # io elements: x 2·4 + y 2·4 + B,C 2·1·8 + dt 2 = 34; state elements 2·4·8 = 64
    f, b = _work(ssm.DECODE, rows)
    # decode: 5·64 = 320 FLOPs; 34·2 bytes of io + 2·64·4 bytes of fp32 state = 68 + 512 = 580
    assert list(f) == [320.0, 960.0] and list(b) == [580.0, 1740.0]
    f, b = _work(ssm.PREFILL, rows)
    # prefill: CB 2·4·8·1 = 64, intra-chunk 4·4·2 = 32, states and output 4·8·4·2 = 256, passing 2·8·4·2/4 = 32
    # → 384; bytes 68 io + CB 2·4·1·4 = 32 + chunk states 4·64/4·4 = 256 → 356
    assert list(f) == [384.0, 1152.0] and list(b) == [356.0, 1068.0]
    f, b = _work(ssm.PREFILL_STATE, rows)
    assert list(f) == [0.0, 0.0] and list(b) == [512.0, 1536.0]  # initial state read + final state written
    assert ssm.work("rms_norm/dim128", rows, 2.0) is None
    # the roofline reads the same work through the elementwise key
    w = kernel_work(ElementwiseKey(ssm.op_name(ssm.DECODE, SHAPE), 34, KernelDtype.BF16), np.array([[3.0]]))
    assert w is not None and list(w.flops) == [960.0] and list(w.bytes) == [1740.0]


def test_kernel_rows_split_decode_prefill_and_state():
    geo = LinearAttentionGeometry(num_k_heads=1, num_v_heads=2, k_head_dim=8, v_head_dim=4, kind="mamba2_ssd",
                                  chunk_size=4, state_dtype="f32")
    a = KernelAttrs(KernelKind.LINEAR_ATTENTION, "mamba_chunk_scan_combined", geo, "bf16", Rows.NONE)
    steps = [Step((SeqGroup(1, 100, 3), SeqGroup(10, 0, 2))), Step((SeqGroup(1, 50, 5),))]
    rows = kernel_rows(a, StepArrays.of(steps), Dtypes())
    keys = [p.key for p in rows.parts]
    assert all(isinstance(k, ElementwiseKey) for k in keys)
    ops = [k.op for k in keys if isinstance(k, ElementwiseKey)]
    got = {op.split("/")[0]: (list(p.coords[:, 0]), list(p.step)) for op, p in zip(ops, rows.parts, strict=True)}
    # step 0: 3 decode tokens, 2 × 10 prefill tokens, 2 prefill states; step 1: 5 decode tokens only
    assert got == {"selective_state_update": ([3.0, 5.0], [0, 1]), "mamba_chunk_scan_combined": ([20.0], [0]),
                   "mamba_chunk_scan_combined.state": ([2.0], [0])}
    assert all(op.endswith("/h2.p4.n8.g1.c4.sf32") for op in ops)
