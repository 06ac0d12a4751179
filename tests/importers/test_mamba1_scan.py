"""Mamba-1's selective scan as one semantic op (graphsim/importers/hf/mamba1_ops.py) for MambaForCausalLM,
FalconMambaForCausalLM and JambaForCausalLM: the reference kernel against transformers' scan, the tiny models'
logits, the trace (dynamic tokens), the fuse to vLLM's MambaMixer kernels, TP and the graph-derived state."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.ir import DType, LinearAttentionAttrs, Op  # noqa: E402
from graphsim.ir.geometry import (  # noqa: E402
    CollectiveGeometry, ElementwiseGeometry, GemmGeometry, LinearAttentionGeometry,
)
from graphsim.ir.kernel import KernelAttrs  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402
from graphsim.serving.graph_kv import graph_kv_layout  # noqa: E402

# Tiny configs: 64 channels (intermediate_size), state 8, dt rank 4, conv 4. Jamba: a Mamba layer (dense MLP), a
# Mamba layer (4 experts), an attention layer, a Mamba layer (MoE) — attn_layer_period 4 / offset 2.
MAMBA = {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 32, "state_size": 8,
         "num_hidden_layers": 2, "vocab_size": 96, "intermediate_size": 64, "time_step_rank": 4, "conv_kernel": 4,
         "torch_dtype": "bfloat16"}
FALCON_MAMBA = {**MAMBA, "architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba"}
JAMBA = {"architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": 32, "mamba_d_state": 8,
         "num_hidden_layers": 4, "vocab_size": 96, "intermediate_size": 64, "mamba_dt_rank": 4, "mamba_d_conv": 4,
         "mamba_expand": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4,
         "num_experts_per_tok": 2, "attn_layer_period": 4, "attn_layer_offset": 2, "expert_layer_period": 2,
         "expert_layer_offset": 1, "torch_dtype": "bfloat16"}
CONFIGS = {"MambaForCausalLM": MAMBA, "FalconMambaForCausalLM": FALCON_MAMBA, "JambaForCausalLM": JAMBA}
# Mamba in the default suite; FalconMamba and Jamba (a trace of ~7 s each) in the slow one
ARCHS = ["MambaForCausalLM", *(pytest.param(a, marks=pytest.mark.slow) for a in ("FalconMambaForCausalLM",
                                                                                 "JambaForCausalLM"))]
@pytest.fixture(scope="module")
def graphs():
    class Lazy(dict):
        def __missing__(self, arch):
            self[arch] = import_hf(ResolvedModel(f"tiny-{arch}", copy.deepcopy(CONFIGS[arch]), "path", "test"),
                                   cache=False)
            return self[arch]

    return Lazy()


def test_selective_scan_op_matches_transformers():
    """graphsim::selective_scan against transformers' own torch scan (modeling_mamba.mamba_selective_scan, its
    recurrent path), with the gate, the D skip, the dt bias and softplus; output and final state (fp32)."""
    mod = pytest.importorskip("transformers.models.mamba.modeling_mamba")
    torch.manual_seed(0)
    b, d, n, s = 2, 6, 4, 9
    x, dt, z = torch.randn(b, d, s), torch.randn(b, d, s), torch.randn(b, d, s)
    a = -torch.rand(d, n) - 0.5
    bm, cm = torch.randn(b, n, s), torch.randn(b, n, s)
    dd, bias = torch.randn(d), torch.randn(d)
    ref, ref_state = mod.mamba_selective_scan(x, dt, a, bm, cm, D=dd, z=z, delta_bias=bias, delta_softplus=True,
                                              return_last_state=True)
    out, state = torch.ops.graphsim.selective_scan(x, dt, a, bm, cm, dd, z, bias, None, True)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state, ref_state, rtol=1e-5, atol=1e-5)
    # an initial state carries over: two halves equal the whole
    h1, st1 = torch.ops.graphsim.selective_scan(x[..., :4], dt[..., :4], a, bm[..., :4], cm[..., :4], dd, z[..., :4],
                                                bias, None, True)
    h2, st2 = torch.ops.graphsim.selective_scan(x[..., 4:], dt[..., 4:], a, bm[..., 4:], cm[..., 4:], dd, z[..., 4:],
                                                bias, st1, True)
    torch.testing.assert_close(torch.cat([h1, h2], -1), out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(st2, state, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_model_logits_unchanged_by_the_swap(arch):
    """The whole tiny model on CPU in float32 gives transformers' logits with the semantic scan (tolerance 1e-4)."""
    from graphsim.importers.hf.build import make_hf_config, model_class

    torch.manual_seed(0)
    model = model_class(arch)._from_config(make_hf_config(copy.deepcopy(CONFIGS[arch])), dtype=torch.float32).eval()
    ids = torch.randint(0, 96, (1, 13))
    with torch.no_grad():
        ref = model(input_ids=ids, use_cache=False).logits
        with custom_ops.semantic_kernels(model) as swapped:
            ours = model(input_ids=ids, use_cache=False).logits
    assert any(s.endswith(".mamba_selective_scan") for s in swapped), swapped
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_trace_is_dynamic_with_one_scan_per_mamba_layer(graphs, arch):
    g, report = graphs[arch]
    assert report.dynamic_tokens, "the scan pinned the trace to a fixed token count"
    assert report.opaque_ops == {}
    scans = [n for n in g.nodes if n.op is Op.LINEAR_ATTENTION]
    # Mamba / FalconMamba: one traced layer; Jamba: its two Mamba layer types (dense MLP, MoE)
    assert len(scans) == (2 if arch == "JambaForCausalLM" else 1)
    for s in scans:
        a = s.attrs_as(LinearAttentionAttrs)
        # channels as heads of one value, the state as k_head_dim, one B/C group; the state in the model dtype
        # (vLLM's mamba_ssm_cache_dtype "auto")
        assert (a.kind, a.num_v_heads, a.v_head_dim, a.k_head_dim, a.num_k_heads, a.state_dtype) == (
            "mamba1", 64, 1, 8, 1, "bf16")


def _mamba_kernels(g) -> list[KernelAttrs]:
    scans = {n.scope for n in g.nodes if n.op is Op.KERNEL and n.attrs_as(KernelAttrs).name == "selective_scan_fn"}
    return [n.attrs_as(KernelAttrs) for n in g.nodes if n.op is Op.KERNEL and n.scope.startswith(tuple(scans))]


@pytest.mark.parametrize("arch", ARCHS)
def test_fuse_to_vllm_kernels_with_no_placeholders(graphs, arch):
    g, _ = graphs[arch]
    fused = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm}").graph
    kernels = [n.attrs_as(KernelAttrs) for n in fused.nodes if n.op is Op.KERNEL]
    assert not [k.name for k in kernels if k.approximate]  # A at load, residual casts absorbed, dt_proj a GEMM
    names = sorted(k.name for k in _mamba_kernels(fused))
    layers = 2 if arch == "JambaForCausalLM" else 1
    norms = 3 if arch != "MambaForCausalLM" else 0  # FalconMamba / Jamba: dt, B and C RMSNorms
    # one cast: the dt bias's .float() (D's runs on vLLM's prefill path only: absorbed)
    per_layer = ["cast", "causal_conv1d", "dt_proj", "in_proj", "out_proj", *["rms_norm"] * norms,
                 "selective_scan_fn", "x_proj"]
    assert names == sorted(per_layer * layers)
    by_name = {k.name: k for k in _mamba_kernels(fused)}
    assert by_name["dt_proj"].geometry_as(GemmGeometry) == GemmGeometry(n=64, k=4)  # intermediate × dt rank
    assert by_name["x_proj"].geometry_as(GemmGeometry) == GemmGeometry(n=4 + 2 * 8, k=64)
    assert by_name["cast"].geometry_as(ElementwiseGeometry).width == 64 and by_name["cast"].rows.value == "once"


@pytest.mark.parametrize("arch", ARCHS)
def test_tp2_splits_channels_and_keeps_b_c_whole(graphs, arch):
    g, _ = graphs[arch]
    out = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm},tp{size=2}")  # conservation runs inside
    fused = out.graph
    nodes = [n for n in fused.nodes if n.op is Op.KERNEL]
    scan = next(n.attrs_as(KernelAttrs) for n in nodes if n.attrs_as(KernelAttrs).name == "selective_scan_fn")
    geo = scan.geometry_as(LinearAttentionGeometry)
    assert (geo.num_v_heads, geo.num_k_heads, geo.k_head_dim) == (32, 1, 8)  # 64 channels / 2, B/C whole
    names = [n.attrs_as(KernelAttrs).name for n in nodes]
    # x_proj is vLLM's RowParallelLinear: its (dt rank + 2 × state) outputs all-reduced
    i = names.index("x_proj")
    assert names[i + 1] == "all_reduce"
    assert nodes[i + 1].attrs_as(KernelAttrs).geometry_as(CollectiveGeometry).width == 4 + 2 * 8
    by_name = {n.attrs_as(KernelAttrs).name: n.attrs_as(KernelAttrs) for n in nodes if n.layer is not None}
    assert by_name["dt_proj"].geometry_as(GemmGeometry).n == 32  # ColumnParallelLinear
    assert by_name["cast"].geometry_as(ElementwiseGeometry).width == 32
    prefix = "backbone.layers.0.mixer" if arch != "JambaForCausalLM" else "model.layers.0.mamba"
    assert fused.params[f"{prefix}.A_log"].shape == (32, 8)
    assert fused.params[f"{prefix}.D"].shape == (32,)
    assert fused.params[f"{prefix}.dt_proj.bias"].shape == (32,)
    assert fused.params[f"{prefix}.dt_proj.weight"].shape == (32, 4)
    assert fused.params[f"{prefix}.x_proj.weight"].shape == (20, 32)


@pytest.mark.parametrize("arch", ARCHS)
def test_graph_kv_state_as_vllm_mamba1_state_shape(graphs, arch):
    g, _ = graphs[arch]
    # per Mamba layer and request (vLLM mamba1_state_shape, bf16): conv 64 / tp × (4 − 1) + ssm 64 / tp × 8
    mamba_layers = 3 if arch == "JambaForCausalLM" else 2
    for tp in (1, 2):
        lay = graph_kv_layout(g, DType.BFLOAT16, DType.BFLOAT16, tp)
        assert lay.state_bytes_per_request == mamba_layers * (64 // tp * 3 + 64 // tp * 8) * 2
        # Jamba's one attention layer: 2 kv heads (1 per rank at tp 2) × (8 K + 8 V) × 2 B per token
        assert lay.bytes_per_token == ((2 // tp) * 16 * 2 if arch == "JambaForCausalLM" else 0)
