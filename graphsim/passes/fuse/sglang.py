"""Fuse target `sglang`: the kernels SGLang (0.5.14, CUDA, bf16, Hopper defaults) launches per decoder layer.

Each rule cites the SGLang source (`python/sglang/srt/`, the `sglang==0.5.14` wheel) that decides the launch. The
matching is vLLM's (passes/fuse/vllm.py): both engines pack q/k/v and gate/up into one GEMM, fuse the residual add
into the norm, run one rotary kernel on q and k in place and one gated-activation kernel; the names and the
attention backend differ (SGLang picks FlashAttention-3 for MHA and MLA on Hopper, server_args.py
`_get_default_attn_backend`). Kernel names are SGLang's, so a profile.db's elementwise rows are keyed by them.
"""

from __future__ import annotations

from dataclasses import replace

from graphsim.ir import AttentionAttrs
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse import vllm as V
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule
from graphsim.passes.fuse.vllm_dead import DEAD_INDEX_OPS
from graphsim.passes.fuse.vllm_zero_experts import SGLANG_ZERO_EXPERTS

ROTARY_CACHE = Rule("rotary_cos_sin_cache", "layers/rotary_embedding/base.py:RotaryEmbedding.__init__ "
                    "(cos_sin_cache buffer)", V._match_rotary_tables, V._absorb)
EMBEDDING = Rule("embedding", "layers/vocab_parallel_embedding.py:VocabParallelEmbedding.forward",
                 V.EMBEDDING.match, V.EMBEDDING.build)
FUSED_ADD_RMS_NORM = Rule(
    "fused_add_rms_norm", "layers/layernorm.py:RMSNorm.forward_cuda (residual given → sgl_kernel fused_add_rmsnorm)",
    V._match_fused_add_norm, V._build_norm(KernelKind.FUSED_ADD_RMS_NORM, "fused_add_rmsnorm", "fused_add_rms_norm"))
RMS_NORM = Rule("rms_norm", "layers/layernorm.py:RMSNorm.forward_cuda (sgl_kernel rmsnorm)",
                P.norm_units, V._build_norm(KernelKind.RMS_NORM, "rmsnorm", "rms_norm"))
PACKED_GEMM = Rule("packed_gemm", "layers/linear.py:QKVParallelLinear / MergedColumnParallelLinear; "
                   "models/llama.py:LlamaForCausalLM.stacked_params_mapping", V._match_packed, V._build_packed)
LM_HEAD = Rule("lm_head", "layers/logits_processor.py:LogitsProcessor (last token of each request)",
               V._match_lm_head, V.LM_HEAD.build)
GEMM = Rule("gemm", "layers/linear.py:UnquantizedLinearMethod.apply (F.linear → cuBLAS); a quantized "
            "checkpoint's linear method instead (layers/quantization/)", V._match_linear, V.GEMM.build)


def _build_rotary(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    return replace(V._build_rotary(ctx, c), name="apply_rope_with_cos_sin_cache_inplace")


ROTARY = Rule("rotary", "layers/rotary_embedding/base.py:RotaryEmbedding.forward_cuda "
              "(jit_kernel/rope.py apply_rope_with_cos_sin_cache_inplace on q and k)", V._match_rotary, _build_rotary)


def _build_attention(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    a = c.info["attention"]
    aa = a.attrs_as(AttentionAttrs)
    name = "fa3_mla" if aa.kv_lora_rank else "flash_attn_with_kvcache"
    return KernelAttrs(KernelKind.ATTENTION, name, P.attention_geometry(aa), a.outputs[0].dtype.value,
                       Rows.NONE, tuple(n.name for n in c.nodes), "attention")


ATTENTION = Rule("attention", "layers/attention/flashattention_backend.py:FlashAttentionBackend.forward_extend / "
                 "forward_decode (flash_attn_with_kvcache, FA3; the Hopper default of "
                 "server_args.py _get_default_attn_backend)", V._match_attention, _build_attention)


ACT_AND_MUL = Rule("act_and_mul", "layers/activation.py:SiluAndMul.forward_cuda (sgl_kernel silu_and_mul) / "
                   "GeluAndMul.forward_cuda; sgl_kernel's names are vLLM's: silu_and_mul, gelu_and_mul)", P.act_and_mul_units,
                   V._build_act)
MOE_ROUTER = Rule("moe_router", "layers/moe/topk.py:select_experts (sgl_kernel topk_softmax; "
                  "biased_grouped_topk_gpu for grouped routers)", V._match_moe_router, V._build_router)
MOE_EXPERTS = Rule("moe_experts", "layers/moe/moe_runner/triton_utils/fused_moe.py:fused_experts (Triton "
                   "fused_moe_kernel ×2, silu_and_mul, moe_sum)", V._match_experts, V._build_experts)
GDN_GATING = Rule("gdn_gating", "layers/attention/fla/ (fused_gdn_gating)", V._match_gdn_gating, V.GDN_GATING.build)
LINEAR_ATTENTION = Rule("linear_attention", "layers/attention/fla/chunk.py:chunk_gated_delta_rule",
                        V.LINEAR_ATTENTION.match, V.LINEAR_ATTENTION.build)
CONV1D = Rule("causal_conv1d", "layers/attention/mamba/causal_conv1d.py:causal_conv1d_fn", V.CONV1D.match, V.CONV1D.build)

RULES: list[Rule] = [
    ROTARY_CACHE, EMBEDDING, FUSED_ADD_RMS_NORM, RMS_NORM, PACKED_GEMM, LM_HEAD, GEMM, ROTARY, ATTENTION,
    ACT_AND_MUL, MOE_ROUTER, MOE_EXPERTS, SGLANG_ZERO_EXPERTS, GDN_GATING, LINEAR_ATTENTION, CONV1D,
    DEAD_INDEX_OPS,  # integer / bool results nothing reads: no kernel in any engine (vllm_dead.py)
]

leftover = V.leftover
