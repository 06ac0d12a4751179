"""The sigmoid attention output gates and the casts vLLM has no kernel for, on tiny configs of LFM3 (per-head gate
after GQA), Bailing-hybrid / Ling 3 (per-head gate with float32 casts after MLA; its KDA layers' q/k/v concatenation
and the casts to and from float32 conv weights) and HunYuan-V4 (per-channel gate after sparse MLA; the float32
casts before its indexer's weights_proj and its lm_head): each op is the kernel vLLM's port launches, and none is
an approximate placeholder (graphsim/passes/fuse/vllm_elementwise.py ATTN_OUTPUT_GATE, vllm.py CONV1D / LM_HEAD /
INDEXER_WEIGHTS_CAST, vllm_kda.py KDA_QKV_CAT)."""

from __future__ import annotations

import copy

import pytest
from hyv4_helpers import TINY_HYV4  # HunYuan-V4: MLA gated per channel, a 2-head indexer (tests/importers)

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir import Op
from graphsim.ir.geometry import Conv1dGeometry, ElementwiseGeometry, GemmGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes import run_pipeline

# LFM3: a short-conv layer, then a full-attention layer with the per-head gate (g_proj: hidden -> 4 heads).
TINY_LFM3 = {
    "architectures": ["Lfm3ForCausalLM"], "model_type": "lfm3", "torch_dtype": "bfloat16", "vocab_size": 96,
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 8, "layer_types": ["conv", "full_attention"], "conv_L_cache": 3,
    "use_attention_gate": True, "use_sandwich_norm": True, "sliding_window": 16, "max_position_embeddings": 256,
    "tie_word_embeddings": True, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
}
# Bailing-hybrid: a KDA layer (2 heads of 16: q/k/v 32 wide each), then an MLA layer with the per-head gate.
TINY_BAILING = {
    "architectures": ["BailingHybridForCausalLM"], "model_type": "bailing_hybrid", "torch_dtype": "bfloat16",
    "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "kv_lora_rank": 16,
    "q_lora_rank": None, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "head_dim": 8,
    "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1, "num_expert_group": 1, "topk_group": 1,
    "first_k_dense_replace": 2, "layer_types": ["linear_attention", "full_attention"],
    "mlp_layer_types": ["dense", "dense"], "linear_head_dim": 16, "linear_num_heads": 2, "linear_conv_kernel_dim": 4,
    "layer_group_size": 2, "max_position_embeddings": 256, "pad_token_id": 0, "eos_token_id": 2,
    "rope_parameters": {"rope_type": "default", "rope_theta": 6000000.0},
}


def _fused(name: str, cfg: dict):
    g, _ = import_hf(ResolvedModel(name, copy.deepcopy(cfg), "path", "test"), cache=False)
    return g, run_pipeline(copy.deepcopy(g), "fuse{target=vllm}").graph


def _kernels(g, layer: int | None = None, rule: str | None = None) -> list[KernelAttrs]:
    return [n.attrs_as(KernelAttrs) for n in g.nodes if n.op is Op.KERNEL
            and (layer is None or n.layer == layer) and (rule is None or n.attrs_as(KernelAttrs).rule == rule)]


def _gate(g, layer: int) -> list[tuple[str, str, int]]:
    return [(k.name, k.dtype, k.geometry_as(ElementwiseGeometry).width) for k in _kernels(g, layer, "attn_output_gate")]


@pytest.fixture(scope="module")
def lfm3():
    return _fused("tiny-lfm3", TINY_LFM3)


@pytest.fixture(scope="module")
def bailing():
    return _fused("tiny-bailing-hybrid", TINY_BAILING)


@pytest.fixture(scope="module")
def hyv4():
    return _fused("tiny-hyv4-gates", TINY_HYV4)


@pytest.mark.parametrize("which", ["lfm3", "bailing", "hyv4"])
def test_no_placeholders_left(which, request):
    _, g = request.getfixturevalue(which)
    assert [(k.name, k.covers) for k in _kernels(g) if k.approximate] == []


def test_lfm3_per_head_gate_through_its_unsqueeze(lfm3):
    raw, g = lfm3
    # Lfm3Attention.forward: attn_output * sigmoid(g_proj(h)).unsqueeze(-1): the sigmoid over the 4 heads a token,
    # the mul over 4 heads x 8 = 32; vLLM's gated attention runs them as one sigmoid and one mul kernel
    assert _gate(g, 1) == [("sigmoid", "bf16", 4), ("mul", "bf16", 32)]
    assert _gate(g, 0) == []  # the short-conv layer has no attention
    by = {n.name: n for n in raw.nodes}
    mul = by[_kernels(g, 1, "attn_output_gate")[1].covers[0]]
    assert Op.ATTENTION in {by[v].op for v in mul.inputs if v in by}


def test_bailing_mla_gate_keeps_its_casts(bailing):
    _, g = bailing
    # BailingHybridAttention.forward (and vLLM's bailing_moe_v3.py): sigmoid(g_proj(h).float()).to(bf16) per head,
    # then attn_output * gate.unsqueeze(-1) over 4 heads x v_head_dim 16 = 64
    assert _gate(g, 1) == [("cast", "f32", 4), ("sigmoid", "f32", 4), ("cast", "bf16", 4), ("mul", "bf16", 64)]


def test_bailing_kda_conv_takes_its_casts_and_the_qkv_cat_is_no_kernel(bailing):
    raw, g = bailing
    by = {n.name: n for n in raw.nodes}
    convs = [k for k in _kernels(g, 0) if k.kind is KernelKind.CONV1D]
    # q, k, v 2 heads x 16 = 32 each: one depthwise conv over 96 channels, kernel 4, reading the bf16 projections
    # (vLLM: causal_conv1d_fn on bf16 x with float32 weights writes empty_like(x))
    assert [(k.geometry_as(Conv1dGeometry), k.dtype, k.rows) for k in convs] \
        == [(Conv1dGeometry(channels=96, kernel_size=4), "bf16", Rows.TOKENS)]
    assert sorted(by[c].op.value for c in convs[0].covers if by[c].op is Op.CAST) == ["cast", "cast"]
    covered = {c for k in _kernels(g) for c in k.covers}
    cats = [n for n in raw.nodes if n.op is Op.CAT and n.layer == 0 and n.scope.endswith("self_attn")]
    assert len(cats) == 1 and cats[0].name not in covered  # absorbed: vLLM convolves q, k and v apart


def test_hyv4_mla_gate_per_channel(hyv4):
    _, g = hyv4
    for layer in (0, 1):
        # HYV4Attention.forward: attn_output * sigmoid(gate_proj(h)) over 4 heads x v_head_dim 32 = 128
        assert _gate(g, layer) == [("sigmoid", "bf16", 128), ("mul", "bf16", 128)]


def test_hyv4_float32_casts_into_bf16_gemms(hyv4):
    raw, g = hyv4
    by = {n.name: n for n in raw.nodes}
    covered = {c for k in _kernels(g) for c in k.covers}
    weights_cast = [n for n in raw.nodes if n.op is Op.CAST and n.scope.endswith("indexer")
                    and any(u.op is Op.LINEAR and u.scope.endswith("weights_proj")
                            for u in raw.nodes if n.name in u.inputs)]
    assert len(weights_cast) == 1 and weights_cast[0].name not in covered  # one indexer (layer 1 shares its picks)
    head = [k for k in _kernels(g) if k.name == "lm_head"]
    # vLLM's HYV4 lm_head stays bf16 (accumulating into fp32): the float32 cast before it is in its one launch
    assert len(head) == 1 and head[0].dtype == "bf16" and head[0].rows is Rows.SEQUENCES
    assert head[0].geometry_as(GemmGeometry) == GemmGeometry(n=96, k=64)
    assert sorted(by[c].op.value for c in head[0].covers) == ["cast", "linear"]


@pytest.mark.parametrize("which, layer, widths", [
    ("lfm3", 1, [("sigmoid", 2), ("mul", 16)]),  # 4 heads of 8 -> 2 heads a rank
    ("bailing", 1, [("cast", 2), ("sigmoid", 2), ("cast", 2), ("mul", 32)]),  # 4 heads x 16 -> 2 a rank
    ("hyv4", 0, [("sigmoid", 64), ("mul", 64)]),  # 4 heads x 32 per channel -> 2 heads a rank
])
def test_gates_split_with_the_heads_at_tp2(which, layer, widths, request):
    # vLLM's gate projections are ColumnParallelLinear over the heads: each rank gates its own heads
    _, g = request.getfixturevalue(which)
    g2 = run_pipeline(copy.deepcopy(g), "tp{size=2}").graph
    assert [(k.name, k.geometry_as(ElementwiseGeometry).width) for k in _kernels(g2, layer, "attn_output_gate")] == widths
