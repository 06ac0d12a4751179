"""Kimi Delta Attention as one semantic op (graphsim/importers/hf/kda_ops.py): the reference kernel against
transformers' two KDA functions, the tiny model's logits, the trace (dynamic tokens), the fuse to vLLM's KDA
kernels, TP and the pricing of its decode, prefill and state rows (graphsim/costing/kda.py), by hand."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.costing import kda  # noqa: E402
from graphsim.costing.dtypes import KernelDtype  # noqa: E402
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows  # noqa: E402
from graphsim.costing.kernels import ElementwiseKey  # noqa: E402
from graphsim.costing.roofline import kernel_work  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.ir import LinearAttentionAttrs, Op  # noqa: E402
from graphsim.ir.geometry import GemmGeometry, LinearAttentionGeometry  # noqa: E402
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402
from graphsim.workload import SeqGroup, Step  # noqa: E402

# A tiny Kimi Linear: KDA layers 1 (dense MLP) and 2 (MoE), an MLA layer 3; 4 KDA heads of 8.
TINY_KIMI_LINEAR = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "torch_dtype": "bfloat16",
    "vocab_size": 96, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "hidden_size": 32,
    "intermediate_size": 64, "moe_intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": None, "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8, "v_head_dim": 8, "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1,
    "first_k_dense_replace": 1,
    "linear_attn_config": {"head_dim": 8, "num_heads": 4, "short_conv_kernel_size": 4, "full_attn_layers": [3],
                           "kda_layers": [1, 2]},
}


@pytest.fixture(scope="module")
def graph():
    g, report = import_hf(ResolvedModel("tiny-kimi-linear", copy.deepcopy(TINY_KIMI_LINEAR), "path", "test"),
                          cache=False)
    return g, report


def _inputs(s: int, seed: int = 0):
    torch.manual_seed(seed)
    b, h, dk, dv = 1, 2, 8, 4
    q, k, v = torch.randn(b, s, h, dk), torch.randn(b, s, h, dk), torch.randn(b, s, h, dv)
    g = -torch.rand(b, s, h, dk)  # log decays ≤ 0, per key channel
    beta = torch.rand(b, s, h)
    return q, k, v, g, beta


def test_kda_op_matches_transformers_chunked_and_recurrent():
    mod = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")
    q, k, v, g, beta = _inputs(70)  # 70 tokens: a full chunk of 64 and a padded one
    ref, ref_state = mod.chunk_kimi_delta_attention(q, k, v, g=g, beta=beta, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True)
    out, state = torch.ops.graphsim.kda(q, k, v, g, beta, None, True, True, 64)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state, ref_state, rtol=1e-4, atol=1e-4)
    # one decode step from that state, against the recurrent form
    q1, k1, v1, g1, b1 = _inputs(1, seed=1)
    ref1, ref1_state = mod.recurrent_kimi_delta_attention(q1, k1, v1, g=g1, beta=b1, initial_state=ref_state,
                                                          output_final_state=True, use_qk_l2norm_in_kernel=True)
    out1, state1 = torch.ops.graphsim.kda(q1, k1, v1, g1, b1, state, True, False, 64)
    torch.testing.assert_close(out1, ref1, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state1, ref1_state, rtol=1e-4, atol=1e-4)


def test_tiny_model_logits_unchanged_by_the_swap():
    from graphsim.importers.hf.build import make_hf_config, model_class

    cfg = copy.deepcopy(TINY_KIMI_LINEAR)
    torch.manual_seed(0)
    model = model_class(cfg["architectures"][0])._from_config(make_hf_config(cfg), dtype=torch.float32).eval()
    ids = torch.randint(0, 96, (1, 70))
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        with custom_ops.semantic_kernels(model) as swapped:
            ours = model(input_ids=ids, use_cache=False).logits
    assert any(s.endswith(".chunk_kimi_delta_attention") for s in swapped)
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_trace_is_dynamic_with_one_kda_node_per_layer(graph):
    g, report = graph
    assert report.dynamic_tokens, "KDA pinned the trace to a fixed token count"
    assert report.opaque_ops == {}
    nodes = [n for n in g.nodes if n.op is Op.LINEAR_ATTENTION]
    assert len(nodes) == 2  # layers 0 and 1 are traced (one per layer type), each one node
    a = nodes[0].attrs_as(LinearAttentionAttrs)
    # 4 heads of 8 key and value channels; fla's chunk of 64; the recurrent state in float32 (kda_state_dtype)
    assert (a.kind, a.num_k_heads, a.num_v_heads, a.k_head_dim, a.v_head_dim, a.chunk_size, a.state_dtype) == (
        "kda", 4, 4, 8, 8, 64, "f32")


def _kernels(g, tag) -> list[KernelAttrs]:
    rep = g.schedule.representative[tag]
    return [n.attrs_as(KernelAttrs) for n in g.nodes if n.op is Op.KERNEL and n.layer == rep]


def test_fuse_to_vllm_kda_kernels_with_no_placeholders(graph):
    g, _ = graph
    fused = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm}").graph
    for tag in ("linear.dense", "linear.moe"):
        ks = _kernels(fused, tag)
        names = [k.name for k in ks]
        assert not [k.name for k in ks if k.approximate], names
        # one gate kernel, beta's sigmoid, the conv over q|k|v (3·32 channels), the recurrence, the gated norm
        for name in ("fused_kda_gate", "sigmoid", "causal_conv1d", "chunk_kda", "rms_norm_gated"):
            assert names.count(name) == 1, (tag, name, names)
        assert "cat" not in names  # vLLM convolves q, k and v apart: no concatenation kernel
        # q, k, v, b and the forget gate's f_a are one GEMM (vLLM 0.33.0 kimi_gdn_linear_attn.py in_proj_qkvgfab,
        # output sizes [proj, proj, proj, num_heads, head_dim]): 3 x (4 heads x 8) + 4 + 8 = 108 wide over hidden 32
        packed = [k for k in ks if k.name == "in_proj_qkvgfab"]
        assert [k.geometry_as(GemmGeometry) for k in packed] == [GemmGeometry(n=108, k=32)], names
        assert not {"q_proj", "k_proj", "v_proj", "b_proj", "f_a_proj", "qkv_proj", "qkvb_proj"} & set(names)
        assert "f_b_proj" in names and "g_a_proj" in names  # f_b and the output gate's g_a / g_b stay apart
    geo = next(k for k in _kernels(fused, "linear.dense") if k.name == "chunk_kda").geometry_as(LinearAttentionGeometry)
    assert (geo.kind, geo.num_v_heads, geo.k_head_dim, geo.v_head_dim, geo.chunk_size, geo.state_dtype) == (
        "kda", 4, 8, 8, 64, "f32")


def test_tp2_splits_heads_and_keeps_the_low_rank_halves_whole(graph):
    g, _ = graph
    fused = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm},tp{size=2}").graph  # conservation runs inside
    ks = {k.name: k for k in _kernels(fused, "linear.dense")}
    geo = ks["chunk_kda"].geometry_as(LinearAttentionGeometry)
    assert (geo.num_k_heads, geo.num_v_heads, geo.k_head_dim, geo.v_head_dim) == (2, 2, 8, 8)
    # vLLM 0.33.0 kimi_gdn_linear_attn.py: in_proj_qkvgfab splits q, k, v (32 / 2 = 16 each) and b (4 / 2 = 2) and
    # keeps f_a whole (replicated_shard_id=4: head_dim 8): 3 x 16 + 2 + 8 = 58 a rank; g_a_proj ReplicatedLinear
    # (n = head_dim 8 whole), f_b_proj / g_b_proj column-parallel (4·8 / 2 = 16), o_proj row-parallel: the layer's
    # only all-reduces are after o_proj and the MLP
    assert ks["in_proj_qkvgfab"].geometry_as(GemmGeometry) == GemmGeometry(n=58, k=32)
    assert ks["g_a_proj"].geometry_as(GemmGeometry).n == 8
    assert ks["f_b_proj"].geometry_as(GemmGeometry).n == 16 and ks["g_b_proj"].geometry_as(GemmGeometry).n == 16
    reduces = [k for k in _kernels(fused, "linear.dense") if k.kind is KernelKind.ALL_REDUCE]
    assert len(reduces) == 2


def test_tp4_packed_projection_keeps_f_a_whole_and_states_it(graph):
    g, _ = graph
    res = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm},tp{size=4}")
    out = res.graph
    packed = next(n for n in out.nodes if n.op is Op.KERNEL and n.layer == 0 and n.attrs_as(KernelAttrs).name ==
                  "in_proj_qkvgfab")
    # 4 heads over 4 ranks: q, k, v 32 / 4 = 8 each, b 4 / 4 = 1, f_a whole 8: n = 3 x 8 + 1 + 8 = 33
    assert packed.attrs_as(KernelAttrs).geometry_as(GemmGeometry) == GemmGeometry(n=33, k=32)
    sa = "model.layers.0.self_attn"
    shapes = {v.removeprefix(sa + "."): out.params[v].shape for v in packed.inputs if v in out.params}
    assert shapes == {"q_proj.weight": (8, 32), "k_proj.weight": (8, 32), "v_proj.weight": (8, 32),
                      "b_proj.weight": (1, 32), "forget_gate.f_a_proj.weight": (8, 32)}
    # f_b_proj reads the whole f_a vector on every rank and expands it column-parallel: 4·8 / 4 = 8, k = 8 whole
    f_b = next(n for n in out.nodes if n.op is Op.KERNEL and n.layer == 0 and n.attrs_as(KernelAttrs).name == "f_b_proj")
    assert f_b.attrs_as(KernelAttrs).geometry_as(GemmGeometry) == GemmGeometry(n=8, k=8)
    # the conservation check held the packed GEMM to (33 x 4) / 108 and lists its excess as stated replication
    notes = res.results[-1][1].notes
    assert any("packed GEMM's part kept whole" in line for line in notes), notes


# --- pricing (hand-derived; costing/kda.py's formulas) ------------------------------------------------------------
SHAPE = kda.KdaShape(heads=2, k_dim=4, v_dim=6, chunk=6, state_dtype="f32")


def _work(kernel: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = kda.work(kda.op_name(kernel, SHAPE), rows, 2.0)
    assert w is not None
    return w


def test_work_per_row_hand_derived():
    rows = np.array([1.0, 2.0])
    # state 2·4·6 = 48 elements; io per token 2·(2·4 + 2·6) = 40 elements = 80 B; fp32 gate + beta 2·(4 + 1)·4 = 40 B
    f, b = _work(kda.DECODE, rows)
    # decode: 7·2·4·6 = 336 FLOPs; 80 + 40 + the fp32 state read and written 2·48·4 = 384 → 504 B
    assert list(f) == [336.0, 672.0] and list(b) == [504.0, 1008.0]
    f, b = _work(kda.PREFILL, rows)
    # prefill per head: 6·24 = 144 (state) + 3·6·4 = 72 (k·kᵀ, q·kᵀ, w) + 2·6·6 = 72 (u, intra o) + 36/3 = 12
    # (solve_tril) = 300, ×2 heads = 600; bytes 120 io + 2 heads × (A and Aqk fp32 2·2·6·4 = 96 + (A⁻¹ 2·6 +
    # w, kg, u 2·(2·4 + 6) + v_new 2·6 + h 2·24/6 = 12 + 28 + 12 + 8 = 60 elements) · 2 B = 120) = 120 + 432 = 552
    assert list(f) == [600.0, 1200.0] and list(b) == [552.0, 1104.0]
    f, b = _work(kda.PREFILL_STATE, rows)
    assert list(f) == [0.0, 0.0] and list(b) == [384.0, 768.0]  # initial state read + final state written
    assert kda.work("selective_state_update/h2.p4.n8.g1.c4.sf32", rows, 2.0) is None
    w = kernel_work(ElementwiseKey(kda.op_name(kda.DECODE, SHAPE), 40, KernelDtype.BF16), np.array([[3.0]]))
    assert w is not None and list(w.flops) == [1008.0] and list(w.bytes) == [1512.0]


def test_kernel_rows_follow_vllms_prefill_switch():
    geo = LinearAttentionGeometry(num_k_heads=2, num_v_heads=2, k_head_dim=4, v_head_dim=6, kind="kda",
                                  chunk_size=6, state_dtype="f32")
    a = KernelAttrs(KernelKind.LINEAR_ATTENTION, "chunk_kda", geo, "bf16", Rows.NONE)
    steps = [Step((SeqGroup(1, 100, 3), SeqGroup(10, 0, 2))), Step((SeqGroup(1, 50, 5),))]
    rows = kernel_rows(a, StepArrays.of(steps), Dtypes())
    ops = [p.key.op for p in rows.parts if isinstance(p.key, ElementwiseKey)]
    got = {op.split("/")[0]: (list(p.coords[:, 0]), list(p.step)) for op, p in zip(ops, rows.parts, strict=True)}
    # step 0 holds a prefill: all 3·1 + 2·10 = 23 tokens on chunk_kda and 5 sequences' states; step 1 is
    # decode only: 5 tokens on fused_recurrent_kda (kda.py KimiDeltaAttention._forward, num_prefills > 0)
    assert got == {"fused_recurrent_kda": ([5.0], [1]), "chunk_kda": ([23.0], [0]), "chunk_kda.state": ([5.0], [0])}
    assert all(op.endswith("/h2.k4.v6.c6.sf32") for op in ops)


def test_graph_kv_keeps_the_recurrent_state_in_float32(graph):
    from graphsim.ir.tensor import DType
    from graphsim.serving.graph_kv import graph_layer_kv

    g, _ = graph
    layers = graph_layer_kv(g, 2, DType.BFLOAT16, DType.BFLOAT16)
    # tp 2, per KDA layer: conv 96/2 channels × (4 − 1) × 2 B = 288 + recurrent 4/2 heads × 8 × 8 × 4 B (fp32,
    # vLLM kda_state_dtype) = 512 → 800 B per request; the two traced KDA layers first, then the MLA layer
    assert [layer.state_bytes for layer in layers[:2]] == [800, 800]
