"""Fuse target `sglang`: the kernels SGLang (0.5.14, CUDA, bf16, Hopper defaults) launches per decoder layer.

Each rule cites the SGLang source (`python/sglang/srt/`, the `sglang==0.5.14` wheel) that decides the launch. The
matching is vLLM's (passes/fuse/vllm.py): both engines pack q/k/v and gate/up into one GEMM (other packings by SGLang's
own table, SGLANG_PACKED), fuse the residual add
into the norm, run one rotary kernel on q and k in place and one gated-activation kernel; the names and the
attention backend differ (SGLang picks FlashAttention-3 for MHA and MLA on Hopper, server_args.py
`_get_default_attn_backend`). Kernel names are SGLang's, so a profile.db's elementwise rows are keyed by them.
"""

from __future__ import annotations

from dataclasses import replace

from graphsim.ir import AttentionAttrs, Node
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
# The projections SGLang loads into one GEMM (its model files' stacked_params_mapping), read in the sglang==0.5.14
# wheel against vLLM's table (vllm.py PACKED). Where SGLang has the model file and packs otherwise:
# - Kimi-Linear's KDA (models/kimi_linear.py KimiDeltaAttention.__init__): unquantized (`do_fuse_qkvbfg = quant_config
#   is None`), one MergedColumnParallelRepeatedLinear `fused_qkvbfg_a_proj` of q, k, v, b split by rank and the forget
#   and output gates' low-rank f_a and g_a whole on every rank (partition/packed_parts.py keeps those parts whole);
#   quantized, a QKVParallelLinear `qkv_proj` of q, k, v with b, f_a, g_a apart. (The f_b / g_b up-projections then run
#   as one batched matmul, ColumnParallelBatchedLinear `fused_fg_b_proj`; graphsim keeps them two GEMMs.)
# - a DSA indexer (layers/attention/dsa/dsa_indexer.py Indexer.__init__): wk and weights_proj two ReplicatedLinear,
#   not vLLM 0.33's wk_weights_proj, in the classes SGLang serves with it (models/deepseek_v2.py EntryClass
#   DeepseekV32ForCausalLM, glm4_moe.py GlmMoeDsaForCausalLM);
# - LFM2's dense MLP (models/lfm2.py Lfm2MLP: w1 and w3 two ColumnParallelLinear, stacked_params_mapping only q/k/v):
#   not packed; LFM2-MoE's (models/lfm2_moe.py: ("gate_up_proj", "w1", 0), ("gate_up_proj", "w3", 1)) packed. LFM3 has
#   no SGLang file and is priced as LFM2's port, as the vllm target does.
# - MLA's q_a / kv_a pack as in vLLM, under SGLang's name (models/deepseek_v2.py fused_qkv_a_proj_with_mqa).
# SGLang 0.5.14 has no model file for the KDA Bailing hybrid, OLMo-Hybrid, HunYuan-V4 or A.X-K2: vLLM's packing is
# kept there.
SGLANG_PACKED = {
    "fused_qkvbfg_a_proj": ("q_proj", "k_proj", "v_proj", "b_proj", "forget_gate.f_a_proj", "g_a_proj"),
    **{("fused_qkv_a_proj_with_mqa" if k == "fused_qkv_a_proj" else k): ms for k, ms in V.PACKED.items()
       if k != "in_proj_qkvgfab"},
}
SGLANG_PACKED_IN = {"fused_qkvbfg_a_proj": "kda", "qkvb_proj": "kda", "in_proj_qkvg": "gated_delta_rule"}
SGLANG_UNPACKED_ARCHS = {"w13": frozenset({"Lfm2ForCausalLM", "Lfm3ForCausalLM"}),
                         "wk_weights_proj": frozenset({"DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"})}


def _sglang_packs(ctx: FuseContext, packed: str, linear: Node) -> bool:
    if packed == "fused_qkvbfg_a_proj":
        return V._quantization(ctx) is None
    if packed == "qkvb_proj":  # Kimi's KDA packs q, k, v alone when quantized (qkv_proj)
        return not V.kimi_kda(ctx, linear)
    return ctx.graph.meta.architecture not in SGLANG_UNPACKED_ARCHS.get(packed, frozenset())


PACKED_GEMM = Rule("packed_gemm", "layers/linear.py:QKVParallelLinear / MergedColumnParallelLinear; "
                   "models/*.py stacked_params_mapping (SGLANG_PACKED)",
                   V.packed_matcher(SGLANG_PACKED, SGLANG_PACKED_IN, _sglang_packs), V._build_packed)
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
