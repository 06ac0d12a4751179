"""Fuse target `trtllm`: the kernels TensorRT-LLM's PyTorch backend (1.3, CUDA, bf16) launches per decoder layer.

Each rule cites `tensorrt_llm/_torch/` (NVIDIA/TensorRT-LLM main at 0004396, the stored snapshot). The matching is
vLLM's (passes/fuse/vllm.py; its packed projections by TensorRT-LLM's own table, TRTLLM_PACKED) with one real difference: the TRTLLM attention backend applies RoPE inside its
attention op (modules/attention.py `Attention.__init__`: "If rope_fusion is not specified, enable if the attention
backend supports it"; `TrtllmAttention.support_fused_rope()` is true), so rotary launches no kernel of its own and
its time is inside the attention rows (aiconfigurator's trtllm attention tables were measured through that op).
Kernel names are TensorRT-LLM's, so a profile.db's elementwise rows are keyed by them.

Not modelled: TensorRT-LLM fuses the TP all-reduce with the residual add and the next RMSNorm
(`AllReduce(fusion_op=RESIDUAL_RMS_NORM)`, modules/linear.py / distributed/ops.py) when tp > 1; graphsim still
prices the all-reduce and the fused add-norm as two kernels.
"""

from __future__ import annotations

from dataclasses import replace

from graphsim.ir import AttentionAttrs, Node
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse import vllm as V
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule
from graphsim.passes.fuse.vllm_dead import DEAD_INDEX_OPS

ROTARY_CACHE = Rule("rotary_cos_sin_cache", "modules/rotary_embedding.py:RotaryEmbedding (cos/sin cache)",
                    V._match_rotary_tables, V._absorb)
EMBEDDING = Rule("embedding", "modules/embedding.py:Embedding.forward", V.EMBEDDING.match, V.EMBEDDING.build)
FUSED_ADD_RMS_NORM = Rule(
    "fused_add_rms_norm", "modules/rms_norm.py:RMSNorm.forward (residual given → flashinfer_fused_add_rmsnorm)",
    V._match_fused_add_norm,
    V._build_norm(KernelKind.FUSED_ADD_RMS_NORM, "flashinfer_fused_add_rmsnorm", "fused_add_rms_norm"))
RMS_NORM = Rule("rms_norm", "modules/rms_norm.py:RMSNorm.forward (flashinfer_rmsnorm)", P.norm_units,
                V._build_norm(KernelKind.RMS_NORM, "flashinfer_rmsnorm", "rms_norm"))
# The projections TensorRT-LLM loads into one GEMM, against vLLM's table (vllm.py PACKED). Where TensorRT-LLM has the
# model file and packs otherwise:
# - Kimi-Linear's KDA (models/modeling_kimi_linear.py KimiKDARuntime, NVIDIA/TensorRT-LLM 000a860): prefill runs
#   q_proj, k_proj, v_proj, f_a_proj -> f_b_proj and b_proj as GEMMs of their own (_forward_prefill); decode fuses
#   [q | k | v | g | f_a | b] into one GEMV only with K3's full-rank gate (finalize_decode_weights returns early
#   `if ... not mixer.use_full_rank_gate`), so Kimi-Linear's low-rank gates leave every projection apart.
# Not checked against TensorRT-LLM's sources (vLLM's packing kept): MLA's q_a / kv_a (modules/attention.py MLA
# builds one kv_a_proj_with_mqa of q_lora_rank + kv_lora_rank + rope, as vLLM's fused_qkv_a_proj), the DSA indexer's
# wk / weights_proj, Qwen3-Next / Qwen3.5's in_proj_qkvz / in_proj_ba; LFM2, OLMo-Hybrid, the KDA Bailing hybrid and
# HunYuan-V4 have no TensorRT-LLM model file.
TRTLLM_PACKED = {k: ms for k, ms in V.PACKED.items() if k != "in_proj_qkvgfab"}


def _trtllm_packs(ctx: FuseContext, packed: str, linear: Node) -> bool:
    return not (packed in ("qkvb_proj", "qkv_proj") and V.kimi_kda(ctx, linear))


PACKED_GEMM = Rule("packed_gemm", "modules/attention.py:Attention.qkv_proj (fused q/k/v Linear); "
                   "modules/gated_mlp.py:GatedMLP.gate_up_proj (TRTLLM_PACKED)",
                   V.packed_matcher(TRTLLM_PACKED, V.PACKED_IN, _trtllm_packs), V._build_packed)
LM_HEAD = Rule("lm_head", "modules/embedding.py:LMHead (last token of each request, "
               "models/modeling_utils.py DecoderModelForCausalLM.forward)", V._match_lm_head, V.LM_HEAD.build)
GEMM = Rule("gemm", "modules/linear.py:Linear.forward (UnquantizedLinearMethod: F.linear → cuBLAS; quantized "
            "methods in the same file)", V._match_linear, V.GEMM.build)
# RoPE fused into the attention op: the rotary nodes are absorbed, no launch
ROTARY_FUSED = Rule("rotary", "modules/attention.py:Attention (rope_fusion: RoPE applied in attn.forward, "
                    "TrtllmAttention.support_fused_rope)", V._match_rotary, V._absorb)


def _build_attention(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    a = c.info["attention"]
    aa = a.attrs_as(AttentionAttrs)
    name = "trtllm_mla" if aa.kv_lora_rank else "trtllm_attention"
    return KernelAttrs(KernelKind.ATTENTION, name, P.attention_geometry(aa), a.outputs[0].dtype.value,
                       Rows.NONE, tuple(n.name for n in c.nodes), "attention")


ATTENTION = Rule("attention", "attention_backend/trtllm.py:TrtllmAttention.forward (thop.attention: context FMHA / "
                 "XQA generation kernels, RoPE and KV-cache append fused)", V._match_attention, _build_attention)


def _build_act(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    a = V._build_act(ctx, c)
    return replace(a, name="swiglu") if a.name == "silu_and_mul" else a


ACT_AND_MUL = Rule("act_and_mul", "modules/gated_mlp.py:GatedMLP.forward → modules/swiglu.py:swiglu "
                   "(one fused kernel)", P.act_and_mul_units, _build_act)
MOE_ROUTER = Rule("moe_router", "modules/fused_moe/routing.py:RenormalizeMoeRoutingMethod / "
                  "DeepSeekV3MoeRoutingMethod (routing kernel)", V._match_moe_router, V._build_router)


def _build_experts(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    return replace(V._build_experts(ctx, c), name="cutlass_fused_moe")


MOE_EXPERTS = Rule("moe_experts", "modules/fused_moe/fused_moe_cutlass.py:CutlassFusedMoE.forward "
                   "(torch.ops.trtllm.fused_moe: permute, grouped GEMMs, activation, finalize)",
                   V._match_experts, _build_experts)
GDN_GATING = Rule("gdn_gating", "modules/fla/fused_sigmoid_gating_recurrent.py (gating fused)",
                  V._match_gdn_gating, V.GDN_GATING.build)
LINEAR_ATTENTION = Rule("linear_attention", "modules/fla/chunk.py:chunk_gated_delta_rule",
                        V.LINEAR_ATTENTION.match, V.LINEAR_ATTENTION.build)
CONV1D = Rule("causal_conv1d", "modules/mamba/causal_conv1d.py:causal_conv1d_fn", V.CONV1D.match, V.CONV1D.build)

RULES: list[Rule] = [
    ROTARY_CACHE, EMBEDDING, FUSED_ADD_RMS_NORM, RMS_NORM, PACKED_GEMM, LM_HEAD, GEMM, ROTARY_FUSED, ATTENTION,
    ACT_AND_MUL, MOE_ROUTER, MOE_EXPERTS, GDN_GATING, LINEAR_ATTENTION, CONV1D,
    DEAD_INDEX_OPS,  # integer / bool results nothing reads: no kernel in any engine (vllm_dead.py)
]

leftover = V.leftover
