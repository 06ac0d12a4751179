"""vLLM fuse rules that replaced the last elementwise placeholders of issue 16's configs: dense MLA's key
assembly absorbed (vLLM never builds per-head keys), and the elementwise ops vLLM's port runs as written named
after their op (graphsim/passes/fuse/vllm_elementwise.py): the attention sigmoid output gate and the shared
expert's sigmoid gate of Qwen3.5, Gemma-4's scales by a parameter / constant and its residual add."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir import Op
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes import run_pipeline

# Tiny text-only configs of the real Gemma-4-26B-A4B / Qwen3.5-35B-A3B / DeepSeek-V3 layouts (same fields,
# small sizes): one sliding + one full attention layer with the MoE block (Gemma-4); one linear-attention and
# one gated full-attention layer, MoE with a gated shared expert (Qwen3.5); one dense + one MoE MLA layer.
TINY_GEMMA4 = {
    "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "torch_dtype": "bfloat16",
    "attention_bias": False, "attention_k_eq_v": True, "enable_moe_block": True, "final_logit_softcapping": 30.0,
    "global_head_dim": 16, "head_dim": 8, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 32,
    "hidden_size_per_layer_input": 0, "intermediate_size": 48, "layer_types": ["sliding_attention", "full_attention"],
    "max_position_embeddings": 256, "moe_intermediate_size": 16, "num_attention_heads": 4, "num_experts": 8,
    "num_global_key_value_heads": 1, "num_hidden_layers": 2, "num_key_value_heads": 2, "num_kv_shared_layers": 0,
    "rms_norm_eps": 1e-6, "rope_parameters": {
        "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1e6, "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}},
    "sliding_window": 16, "tie_word_embeddings": True, "top_k_experts": 2, "vocab_size": 96,
}
TINY_QWEN35_MOE = {
    "architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text", "torch_dtype": "bfloat16",
    "attn_output_gate": True, "head_dim": 8, "hidden_act": "silu", "hidden_size": 32,
    "layer_types": ["linear_attention", "full_attention"], "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_value_head_dim": 8,
    "max_position_embeddings": 256, "moe_intermediate_size": 16, "num_attention_heads": 4, "num_experts": 8,
    "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
    "shared_expert_intermediate_size": 16, "vocab_size": 96,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
}
TINY_DSV3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "torch_dtype": "bfloat16",
    "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 2,
    "first_k_dense_replace": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 32,
    "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
    "vocab_size": 96, "max_position_embeddings": 128, "rope_theta": 10000.0,
}


def _fused(name: str, cfg: dict):
    g, _ = import_hf(ResolvedModel(name, copy.deepcopy(cfg), "path", "test"), cache=False)
    return g, run_pipeline(g, "fold,fuse{target=vllm}").graph


def _kernels(g, layer: int | None = None, rule: str | None = None) -> list[KernelAttrs]:
    return [n.attrs_as(KernelAttrs) for n in g.nodes if n.op is Op.KERNEL
            and (layer is None or n.layer == layer) and (rule is None or n.attrs_as(KernelAttrs).rule == rule)]


@pytest.fixture(scope="module")
def gemma4():
    return _fused("tiny-gemma4", TINY_GEMMA4)


@pytest.fixture(scope="module")
def qwen35():
    return _fused("tiny-qwen35-moe", TINY_QWEN35_MOE)


@pytest.fixture(scope="module")
def dsv3():
    return _fused("tiny-dsv3", TINY_DSV3)


@pytest.mark.parametrize("which", ["gemma4", "qwen35", "dsv3"])
def test_no_placeholders_left(which, request):
    _, g = request.getfixturevalue(which)
    assert [(k.name, k.covers) for k in _kernels(g) if k.approximate] == []


def test_gemma4_router_scales_layer_scalar_and_residual_add(gemma4):
    raw, g = gemma4
    for layer in (0, 1):
        # gemma4.py Gemma4Router.forward: x * root_size, x * scale (two muls at the hidden width 32);
        # Gemma4DecoderLayer.forward: hidden_states * layer_scalar (one more mul)
        scales = _kernels(g, layer, "param_scale")
        assert [(k.name, k.geometry_as(ElementwiseGeometry).width, k.rows) for k in scales] == [("mul", 32, Rows.TOKENS)] * 3
        # hidden_states + residual before * layer_scalar: one add of two 32-wide token tensors
        adds = _kernels(g, layer, "residual_add")
        assert [(k.name, k.geometry_as(ElementwiseGeometry).width) for k in adds] == [("add", 32)]
        assert all(k.kind is KernelKind.ELEMENTWISE and not k.approximate for k in scales + adds)
    # the layer scalar multiplies the residual add's output: the mul covering it reads that add
    by = {n.name: n for n in raw.nodes}
    scalar_mul = by[_kernels(g, 0, "param_scale")[-1].covers[0]]
    assert by[scalar_mul.inputs[0]].name == _kernels(g, 0, "residual_add")[0].covers[0]
    # the embedding normalizer (embed_tokens(input_ids) * normalizer) before the layers
    assert [(k.name, k.rule) for k in _kernels(g) if k.rule == "param_scale" and k.covers[0] == "mul"] \
        == [("mul", "param_scale")]


def test_qwen35_attention_output_gate(qwen35):
    _, g = qwen35
    gate = _kernels(g, 1, "attn_output_gate")
    # qwen3_next.py Qwen3NextAttention.forward: sigmoid(gate), attn_output * gate, over the 4 heads × 8 = 32
    assert [(k.name, k.geometry_as(ElementwiseGeometry).width) for k in gate] == [("sigmoid", 32), ("mul", 32)]
    assert _kernels(g, 0, "attn_output_gate") == []  # the linear-attention layer has no such gate


def test_qwen35_shared_expert_gate_then_one_all_reduce(qwen35):
    _, g = qwen35
    for layer in (0, 1):
        # qwen2_moe.py Qwen2MoeMLP.forward: sigmoid of the (T, 1) gate logit, then its broadcast mul on the
        # shared expert's 32-wide output; the routed + shared add is moe_shared_sum
        gate = _kernels(g, layer, "shared_expert_gate")
        assert [(k.name, k.geometry_as(ElementwiseGeometry).width) for k in gate] == [("sigmoid", 1), ("mul", 32)]
        assert [k.name for k in _kernels(g, layer, "moe_shared_sum")] == ["add"]
    out = run_pipeline(g, "tp{size=2}").graph
    names = [n.name for n in out.nodes if n.layer == 1]
    # one all-reduce after the routed + shared add (the gate keeps the shared expert's partial sum partial)
    assert [n for n in names if n.endswith("all_reduce") and "o_proj" not in n] == ["L1.add.all_reduce"]


def test_dense_mla_key_assembly_absorbed(dsv3):
    raw, g = dsv3
    ks = _kernels(g)
    # transformers' copy_ of k_nope / k_rot into per-head keys never runs in vLLM: no copy / cat kernel left
    assert not [k for k in ks if k.name in ("copy", "cat", "sub")]
    by = {n.name: n for n in raw.nodes}
    copies = [n for n in raw.nodes if n.op is Op.COPY and ".self_attn" in n.scope]
    assert len(copies) == 4  # 2 per layer (k_nope, k_rot), both in the graph before fusion
    covered = {c for k in ks for c in k.covers}
    assert not any(c.name in covered for c in copies)  # absorbed: no kernel covers them
    assert all(by[c.name].scope.endswith("self_attn") for c in copies)
    assert [k.name for k in ks if k.kind is KernelKind.ATTENTION] == ["mla_attention"] * 2
