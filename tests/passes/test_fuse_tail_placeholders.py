"""Placeholders the architectures sweep found in vLLM-served classes (issue 16: more than 1 % of a tiny decode step in
approximate kernels), each replaced by the kernel vLLM launches; tiny hand-written configs."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir.geometry import Conv1dGeometry, ElementwiseGeometry, GemmGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes import run_pipeline


def _fused(name, cfg):
    graph, _ = import_hf(ResolvedModel(name, dict(cfg), "path", "test"), cache=False)
    return run_pipeline(graph, "fold,fuse{target=vllm}").graph


def _layer_kernels(graph, layer):
    return [n for n in graph.nodes if isinstance(n.attrs, KernelAttrs) and n.layer == layer]


# LFM2: layer 0 a short convolution (hidden 64, kernel 3), layer 1 attention (transformers models/lfm2 Lfm2ShortConv:
# B, C, x = in_proj(x).chunk(3); conv(B * x); C * conv_out; out_proj).
LFM2 = {
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "layer_types": ["conv", "full_attention"], "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "conv_L_cache": 3, "max_position_embeddings": 256,
    "block_auto_adjust_ff_dim": False, "torch_dtype": "bfloat16",
}


def test_short_conv_gates_are_the_two_mul_kernels_vllm_launches():
    # vLLM ShortConv.forward_cuda: Bx = (B * x), causal_conv1d, y = C * Bx: one mul kernel each side of the conv
    # (were approximate placeholders: 13.6 % of LFM2-MoE's tiny decode step in the sweep)
    kernels = _layer_kernels(_fused("tiny-lfm2", LFM2), 0)
    kinds = [n.kernel.kind for n in kernels]
    conv = kinds.index(KernelKind.CONV1D)
    gates = [n for n in kernels if n.kernel.rule == "short_conv_gate"]
    assert [kernels.index(g) for g in gates] == [conv - 1, conv + 1]
    # B and x (and C and the conv output): 64 features a token each
    assert all(g.kernel.name == "mul" and g.kernel.geometry_as(ElementwiseGeometry).width == 64 for g in gates)
    assert not [n.name for n in kernels if n.kernel.approximate]


# Qwen3-Next: layer 0 a gated delta net whose in_proj_qkvz interleaves q, k, v, z per key-head group (2 key heads of
# 16, 4 value heads of 16), layer 1 full attention; 4 experts (transformers models/qwen3_next
# Qwen3NextGatedDeltaNet.fix_query_key_value_ordering, then torch.cat((query, key, value), dim=-1)).
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 64, "intermediate_size": 64,
    "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"], "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "num_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "decoder_sparse_step": 1, "vocab_size": 256, "max_position_embeddings": 256, "torch_dtype": "bfloat16",
}


def test_gdn_qkv_reordering_is_vllms_one_split_cat_kernel():
    # vLLM QwenGatedDeltaNetAttention.prepare_gdn_attention_core_inputs: one compiled Triton kernel (was a cat
    # placeholder: 3.6 % of Qwen3-Next's tiny decode step)
    kernels = _layer_kernels(_fused("tiny-qwen3-next", QWEN3_NEXT), 0)
    cats = [n for n in kernels if n.kernel.rule == "gdn_qkvzba_split_cat"]
    assert len(cats) == 1
    # q 2 x 16 + k 2 x 16 + v 4 x 16 = 128 features a token, written before the conv over the same 128 channels
    assert cats[0].kernel.geometry_as(ElementwiseGeometry).width == 128
    assert kernels[kernels.index(cats[0]) + 1].kernel.kind is KernelKind.CONV1D
    assert not [n.name for n in kernels if n.kernel.approximate]


# Mamba2: 8 heads x 16 = 2 x hidden 64, one group, state 16; residual_in_fp32 (transformers models/mamba2 Mamba2Block:
# residual = residual.to(torch.float32); Mamba2ForCausalLM casts the final hidden state to lm_head's dtype).
MAMBA2 = {
    "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 64, "num_heads": 8, "head_dim": 16,
    "expand": 2, "n_groups": 1, "state_size": 16, "num_hidden_layers": 2, "vocab_size": 256, "conv_kernel": 4,
    "chunk_size": 8, "residual_in_fp32": True, "torch_dtype": "bfloat16",
}


def test_mamba2_residual_in_fp32_casts_are_no_kernel():
    # vLLM Mamba2DecoderLayer.forward: hidden_states, residual = self.norm(hidden_states, residual) in the model
    # dtype (was a cast placeholder per layer: 3.2 % of Mamba2's tiny decode step)
    graph = _fused("tiny-mamba2", MAMBA2)
    kernels = [n for n in graph.nodes if isinstance(n.attrs, KernelAttrs)]
    assert not [n.name for n in kernels if n.kernel.approximate]
    assert not [n.name for n in kernels if n.layer is not None and n.kernel.name == "cast"]
    assert any(n.kernel.kind is KernelKind.LINEAR_ATTENTION for n in kernels)  # the mixer is there


# Llama-4 text: 4 layers, every 4th a NoPE global layer with attention temperature tuning (transformers models/llama4
# Llama4TextAttention: attn_scales from the positions, query_states = (query_states * attn_scales).to(dtype)).
LLAMA4 = {
    "architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 64,
    "intermediate_size_mlp": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 1,
    "no_rope_layers": [1, 1, 1, 0], "attention_chunk_size": 64, "attn_temperature_tuning": True, "use_qk_norm": True,
    "vocab_size": 256, "max_position_embeddings": 512, "torch_dtype": "bfloat16",
}


def test_llama4_query_temperature_is_vllms_mul_and_cast():
    # vLLM Llama4Attention.forward: q = (q * attn_scale).to(q.dtype): a mul and a cast kernel (were placeholders)
    graph = _fused("tiny-llama4", LLAMA4)
    nope = _layer_kernels(graph, 3)
    scaled = [n for n in nope if n.kernel.rule == "query_position_scale"]
    assert [n.kernel.name for n in scaled] == ["mul", "cast"]
    # the 4 query heads of 16 a token, just before the attention kernel
    assert all(n.kernel.geometry_as(ElementwiseGeometry).width == 64 for n in scaled)
    assert nope[nope.index(scaled[1]) + 1].kernel.kind is KernelKind.ATTENTION
    assert not [n.name for n in graph.nodes if isinstance(n.attrs, KernelAttrs) and n.kernel.approximate]


APERTUS = {
    "architectures": ["ApertusForCausalLM"], "model_type": "apertus", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 512, "torch_dtype": "bfloat16",
}


def test_xielu_ops_are_vllms_python_fallback_kernels():
    # vLLM XIELU._xielu_python (no xielu CUDA package) is transformers' XIELUActivation._xielu_python op for op:
    # softplus x2, add, gt, mul x3, add, min, expm1, sub, mul x2, add, where = 15 kernels (were placeholders:
    # 45 % of Apertus's tiny decode step)
    kernels = _layer_kernels(_fused("tiny-apertus", APERTUS), 0)
    xielu = [n for n in kernels if n.kernel.rule == "xielu_python"]
    assert sorted(n.kernel.name for n in xielu) == sorted(
        ["softplus", "softplus", "add", "compare", "mul", "mul", "mul", "add", "min", "expm1", "sub", "mul", "mul",
         "add", "where"])
    compare = next(n for n in xielu if n.kernel.name == "compare")
    assert compare.kernel.dtype == "bf16"  # x > 0 read at x's dtype (its bool output has no kernel table)
    # the per-token ops cover the 128 intermediate features; the two softplus read one-element parameters
    assert {n.kernel.geometry_as(ElementwiseGeometry).width for n in xielu} == {1, 128}
    assert not [n.name for n in kernels if n.kernel.approximate]


def test_clamped_swiglu_is_one_act_and_mul_kernel():
    # MiniMax-M3's dense MLP: gate * sigmoid(alpha * gate) * (up + beta), both clamped (transformers: clamp x2, mul,
    # sigmoid, mul, add, mul = 7 placeholders); vLLM MiniMaxM3MLP.forward: swiglu_oai_split, one fp32 Triton kernel
    cfg = {"architectures": ["MiniMaxM3ForCausalLM"], "model_type": "minimax_m3", "hidden_size": 64,
           "intermediate_size": 96, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 512, "first_k_dense_replace": 1,
           "num_local_experts": 4, "num_experts_per_tok": 2, "torch_dtype": "bfloat16"}
    kernels = _layer_kernels(_fused("tiny-minimax-m3", cfg), 0)
    acts = [n for n in kernels if n.kernel.rule == "swiglu_oai"]
    assert acts and all(a.kernel.kind is KernelKind.ACT_AND_MUL and a.kernel.name == "swigluoai_and_mul" for a in acts)
    for a in acts:  # between the packed gate_up GEMM (2 x width out) and down_proj (width in), the 7 ops in one
        width = a.kernel.geometry_as(ElementwiseGeometry).width
        before, after = kernels[kernels.index(a) - 1], kernels[kernels.index(a) + 1]
        assert before.kernel.geometry_as(GemmGeometry).n == 2 * width
        assert after.kernel.geometry_as(GemmGeometry).k == width
        assert len(a.kernel.covers) == 7
    assert not [n.name for n in kernels if n.kernel.approximate]


@pytest.mark.slow  # a trace of the sweep's tiny OLMo-Hybrid (~10-40 s on 2 shared cores)
def test_packed_qkv_cat_into_the_conv_is_a_slice(benchmark_script):
    # OLMo-Hybrid's q, k, v projections (packed with the output gate g into one GEMM) concatenated by transformers
    # before the conv; vLLM's OlmoHybridGatedDeltaNetAttention reads q|k|v as a slice of in_proj_qkvg's output: no
    # kernel (was a cat placeholder: 1.2 % of the tiny decode step)
    cfg = benchmark_script("architectures_sweep").tiny_config("OlmoHybridForCausalLM")
    graph = _fused("tiny-olmo-hybrid", cfg)
    kernels = [n for n in graph.nodes if isinstance(n.attrs, KernelAttrs)]
    conv = next(n for n in kernels if n.kernel.kind is KernelKind.CONV1D)
    qkvg = graph.nodes[graph.nodes.index(conv) - 1]  # the packed projection feeds the conv directly
    assert qkvg.kernel.kind is KernelKind.GEMM and conv.inputs[0].split("#")[0] == qkvg.name
    # q|k|v (the conv's channels: 30 key heads x 96 x 2 + 30 value heads x 192 = 11,520) and g (30 x 192 = 5,760)
    assert conv.kernel.geometry_as(Conv1dGeometry).channels == 11520
    assert qkvg.kernel.geometry_as(GemmGeometry).n == 11520 + 5760
    assert not [n.name for n in kernels if n.kernel.approximate]


def test_moe_sum_casts_are_no_kernel():
    # HunYuan-V3's MoE: transformers casts the routed and the shared expert outputs to float32, adds, casts back (3
    # placeholders: 13.7 % of the tiny decode step); vLLM's FusedMoE adds the shared expert in the model dtype
    # (hy_v3.py HYV3MoEFused). Layer 1 is the first MoE layer (first_k_dense_replace 1).
    cfg = {"architectures": ["HYV3ForCausalLM"], "model_type": "hy_v3", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "num_shared_experts": 1,
           "first_k_dense_replace": 1, "vocab_size": 256, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}
    graph = _fused("tiny-hy-v3", cfg)
    kernels = _layer_kernels(graph, 1)
    assert not [n.name for n in kernels if n.kernel.approximate]
    by_name = {m.name: m for m in kernels}
    adds = [n for n in kernels if n.kernel.name == "add" and all(v in by_name for v in n.inputs)]
    # the sum reads the experts and the shared GEMM directly (no casts between)
    assert [{by_name[v].kernel.kind for v in a.inputs} for a in adds] == [{KernelKind.MOE_EXPERTS, KernelKind.GEMM}]
    # and tp 2 reduces the two partial sums once, after the add (the shared GEMM's reduce deferred)
    res = run_pipeline(graph, "tp{size=2}").results[0][1]
    assert res.stats.get("shared_reduce_deferred", 0) >= 1


def test_softplus_attention_gate_is_vllms_four_kernels():
    # Laguna: gate = softplus(g_proj(x).float()).type_as(attn), attn * gate per head (transformers models/laguna);
    # vLLM LagunaAttention.forward runs the same cast, softplus, cast and mul (were placeholders: 9.8 % of the tiny
    # decode step). 2 layers, 4 heads of 16, one gate per head.
    cfg = {"architectures": ["LagunaForCausalLM"], "model_type": "laguna", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_attention_heads_per_layer": [4, 4],
           "num_key_value_heads": 2, "head_dim": 16, "gating": True, "num_experts": 4, "num_experts_per_tok": 2,
           "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "vocab_size": 256,
           "layer_types": ["full_attention", "full_attention"], "max_position_embeddings": 512,
           "torch_dtype": "bfloat16"}
    kernels = _layer_kernels(_fused("tiny-laguna", cfg), 0)
    gate = [n for n in kernels if n.kernel.rule == "softplus_attn_gate"]
    assert [n.kernel.name for n in gate] == ["cast", "softplus", "cast", "mul"]
    # the gate is one value a head (4); the product covers the 4 heads x 16 of the attention output
    assert [n.kernel.geometry_as(ElementwiseGeometry).width for n in gate] == [4, 4, 4, 64]
    assert not [n.name for n in kernels if n.kernel.approximate]
