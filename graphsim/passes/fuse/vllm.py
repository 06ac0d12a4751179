"""Fuse target `vllm`: the kernels vLLM (V1 engine, CUDA, bf16) launches per decoder layer.

Each rule cites the vLLM source (0.33.0, paths relative to the `vllm/` package) that decides the
launch; docs/vllm-kernels.md quotes the calls. Rules are ordered: specific patterns claim their
nodes before generic ones.

The target follows vLLM's custom-op path (`enforce_eager`, or `+rms_norm`-style custom ops):
one `_C` kernel per norm, rotary and gated activation. In vLLM's default compiled mode Inductor
generates Triton kernels for those same ops (config/vllm.py VllmConfig: custom_ops "none"), so
their boundaries can differ; a capture settles which (graphsim align, issue 6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from graphsim.ir import (
    AttentionAttrs, ConvAttrs, DType, EmbeddingAttrs, IndexerAttrs, LinearAttentionAttrs, LinearAttrs, MoEAttrs, Node,
    Op,
)
from graphsim.ir.geometry import (
    Conv1dGeometry, ElementwiseGeometry, EmbeddingGeometry, GemmGeometry, Geometry, IndexerGeometry,
    LinearAttentionGeometry, MoeExpertsGeometry, MoeRouterGeometry, NormGeometry, RotaryGeometry,
)
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.ir.ops import OpGroup
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule
from graphsim.passes.fuse.vllm_attn_gate import RULES as ATTN_GATE_RULES
from graphsim.passes.fuse.vllm_attn_scale import RULES as ATTN_SCALE_RULES
from graphsim.passes.fuse.vllm_axk2 import RULES as AXK2_RULES
from graphsim.passes.fuse.vllm_block_sparse import BLOCK_SPARSE_ATTENTION, BLOCK_SPARSE_INDEXER
from graphsim.passes.fuse.vllm_block_sparse import indexer_prep as block_indexer_prep
from graphsim.passes.fuse.vllm_compressed import COMPRESSED_ATTENTION_TARGET
from graphsim.passes.fuse.vllm_compressed import EARLY_RULES as COMPRESSED_EARLY_RULES
from graphsim.passes.fuse.vllm_compressed import RULES as COMPRESSED_RULES
from graphsim.passes.fuse.vllm_compressed import compressed_attention_kernel
from graphsim.passes.fuse.vllm_dead import DEAD_INDEX_OPS
from graphsim.passes.fuse.vllm_elementwise import RULES as ELEMENTWISE_RULES
from graphsim.passes.fuse.vllm_gdn_prep import RULES as GDN_PREP_RULES
from graphsim.passes.fuse.vllm_gemma3n import RULES as GEMMA3N_RULES
from graphsim.passes.fuse.vllm_kda import RULES as KDA_RULES
from graphsim.passes.fuse.vllm_legacy import EARLY_RULES as LEGACY_EARLY_RULES
from graphsim.passes.fuse.vllm_legacy import LATE_RULES as LEGACY_LATE_RULES
from graphsim.passes.fuse.vllm_legacy import RULES as LEGACY_RULES
from graphsim.passes.fuse.vllm_legacy import qkv_split
from graphsim.passes.fuse.vllm_lightning import RULES as LIGHTNING_RULES
from graphsim.passes.fuse.vllm_mamba1 import RULES as MAMBA1_RULES
from graphsim.passes.fuse.vllm_moe_casts import RULES as MOE_CAST_RULES
from graphsim.passes.fuse.vllm_short_conv import RULES as SHORT_CONV_RULES
from graphsim.passes.fuse.vllm_ssm_residual import RULES as SSM_RESIDUAL_RULES
from graphsim.passes.fuse.vllm_swiglu_oai import RULES as SWIGLU_OAI_RULES
from graphsim.passes.fuse.vllm_xielu import RULES as XIELU_RULES
from graphsim.passes.fuse.vllm_zamba2 import RULES as ZAMBA2_RULES
from graphsim.passes.fuse.vllm_zero_experts import ZERO_EXPERTS
from graphsim.quantization import Quantization, parse_quant_config

A = TypeVar("A")

# The checkpoint projections vLLM loads into one GEMM (its model classes' `packed_modules_mapping` and the
# `stacked_params_mapping` of their load_weights), by the names transformers gives the parts. Each part of a merged
# layer keeps its own tp layout: the tp pass splits a MergedColumnParallelLinear part by part, keeps a disable_tp /
# ReplicatedLinear one whole on every rank (partition/tp.py decides that from the GEMM's consumers, as for the parts),
# and QKVParallelLinear keeps whole KV heads (_build_packed records the q/kv split).
# - qkv_proj, gate_up_proj: models/llama.py LlamaForCausalLM.packed_modules_mapping (same in qwen2/qwen3/mistral/
#   mixtral/…);
# - fused_qkv_a_proj: models/deepseek_v2.py DeepseekV2MLAAttention (q_a_proj + kv_a_proj_with_mqa when q_lora_rank is
#   set, MergedColumnParallelLinear(disable_tp=True));
# - in_proj_qkvz, in_proj_ba: models/qwen3_5.py Qwen3_5Model.load_weights (stacked_params_mapping, without LoRA):
#   Qwen3.5's in_proj_qkv + in_proj_z and in_proj_b + in_proj_a (GatedDeltaNetAttention);
# - wk_weights_proj: a DSA indexer's key and per-head weight projections, one MergedColumnParallelLinear(hidden,
#   [head_dim, n_head], quant_config=None, disable_tp=True) (models/deepseek_v2.py Indexer.__init__ "Fused wk +
#   weights_proj: single GEMM"; models/hy_v4/nvidia/attention.py Indexer.__init__ and model.py HYV4ForCausalLM.
#   packed_modules_mapping "wk_weights_proj": ["wk", "weights_proj"], vLLM 0.33.0; 0.19.0 kept two ReplicatedLinear);
# - qkvb_proj, in a Kimi Delta Attention module only: its q, k, v and beta projections, one
#   MergedColumnParallelLinear(hidden, [proj, proj, proj, num_heads]) split part by part (models/bailing_moe_v3.py
#   BailingMoeV3KDAAttention.__init__ and packed_modules_mapping "qkvb_proj", vLLM 0.33.0);
# - in_proj_qkvgfab, in a Kimi Delta Attention module only: the same four with the forget gate's low-rank f_a_proj
#   (transformers keeps it in a `forget_gate` submodule), one _KimiGDNMergedColumnParallelLinear(hidden,
#   [proj, proj, proj, num_heads, head_dim], replicated_shard_id=4) whose f_a part every rank keeps whole
#   (layers/mamba/gdn/kimi_gdn_linear_attn.py KimiGatedDeltaNetAttention.__init__ without use_full_rank_gate;
#   models/kimi_k3/nvidia/model.py KimiLinearModel.packed_modules_mapping "in_proj_qkvgfab", vLLM 0.33.0): the tp
#   pass keeps that part whole and splits the others (partition/packed_parts.py);
# - in_proj_qkvg, in a gated-delta-rule module only: OLMo-Hybrid's q, k, v and output-gate projections, one
#   MergedColumnParallelLinear split part by part, b_proj and a_proj apart (layers/mamba/gdn/olmo_gdn_linear_attn.py
#   OlmoHybridGatedDeltaNetAttention.__init__; models/olmo_hybrid.py packed_modules_mapping "in_proj_qkvg").
# - w13: an MLP's w1 (gate) and w3 (up), one MergedColumnParallelLinear split part by part (models/lfm2.py Lfm2MLP and
#   lfm2_moe.py Lfm2MoeMlp: `self.w13`, packed_modules_mapping "w13": ["w1", "w3"]; internlm2.py and others pack the
#   same two as "gate_up_proj"; LFM3 has no vLLM model file and is priced as LFM2's port, as the short-conv rules do).
# The same leaf names pack differently by the module's recurrence (q/k/v with beta in KDA, with the output gate in
# OLMo's gated delta net, q/k/v alone beside softmax attention): PACKED_IN names the recurrence a group needs.
PACKED = {
    "in_proj_qkvgfab": ("q_proj", "k_proj", "v_proj", "b_proj", "forget_gate.f_a_proj"),
    "qkvb_proj": ("q_proj", "k_proj", "v_proj", "b_proj"),
    "in_proj_qkvg": ("q_proj", "k_proj", "v_proj", "g_proj"),
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
    "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa"),
    "in_proj_qkvz": ("in_proj_qkv", "in_proj_z"),
    "in_proj_ba": ("in_proj_b", "in_proj_a"),
    "wk_weights_proj": ("wk", "weights_proj"),
    "w13": ("w1", "w3"),
}
PACKED_IN = {"in_proj_qkvgfab": "kda", "qkvb_proj": "kda", "in_proj_qkvg": "gated_delta_rule"}


def _absorb(_ctx, _cand):
    return None


# --- rules -----------------------------------------------------------------------------------
def _match_rotary_tables(ctx: FuseContext):
    nodes = [n for n in ctx.graph.nodes if P.ROTARY_CLASS.search(n.module_type or "")]
    return [Candidate(nodes)] if nodes else []


ROTARY_CACHE = Rule(
    "rotary_cos_sin_cache", "model_executor/layers/rotary_embedding/base.py:RotaryEmbedding.__init__ (cos_sin_cache buffer)",
    _match_rotary_tables, _absorb,
)


def _match_fused_add_norm(ctx: FuseContext):
    out = []
    for c in P.norm_units(ctx):
        add = P.residual_add_for(ctx, c)
        if add is not None:
            out.append(Candidate([add, *c.nodes], dict(c.info, add=add)))
    return out


def _build_norm(kind: KernelKind, name: str, rule: str):
    def build(ctx: FuseContext, c: Candidate) -> KernelAttrs:
        dtype = c.nodes[-1].outputs[0].dtype.value
        op_name = "rms_norm_gated" if "Gated" in c.info["class"] else name
        kk = KernelKind.LAYER_NORM if "LayerNorm" in c.info["class"] else kind
        elems, _ = P.per_token(c.nodes[-1].outputs[0])
        # width: elements per token; dim: the normalised vector (dim < width for per-head norms)
        return KernelAttrs(kk, op_name, NormGeometry(width=elems, dim=c.info["width"]), dtype, Rows.TOKENS,
                           tuple(n.name for n in c.nodes), rule)

    return build


FUSED_ADD_RMS_NORM = Rule(
    "fused_add_rms_norm", "model_executor/layers/layernorm.py:RMSNorm.forward_native → kernels/vllm_c.py:fused_add_rms_norm",
    _match_fused_add_norm, _build_norm(KernelKind.FUSED_ADD_RMS_NORM, "fused_add_rms_norm", "fused_add_rms_norm"),
)
RMS_NORM = Rule(
    "rms_norm", "model_executor/layers/layernorm.py:RMSNorm.forward_native → kernels/vllm_c.py:rms_norm",
    P.norm_units, _build_norm(KernelKind.RMS_NORM, "rms_norm", "rms_norm"),
)


def _packed_input(ctx: FuseContext, linear: Node) -> str:
    """The tensor a linear reads in vLLM: its input, or the model-dtype tensor under a free float32 upcast vLLM does
    not run (upcast_input: HunYuan-V4's float32 indexer weights_proj reads the same bf16 hidden states as wk)."""
    cast = upcast_input(ctx, linear)
    return cast.inputs[0] if cast is not None else linear.inputs[0]


def packed_matcher(groups: dict[str, tuple[str, ...]], packed_in: dict[str, str],
                   also: Callable[[FuseContext, str, Node], bool] | None = None) -> Callable[[FuseContext], list[Candidate]]:
    """The packed-GEMM match over an engine's table (`groups`, `packed_in`; vLLM's PACKED / PACKED_IN, the sglang and
    trtllm targets' own): a group with a `packed_in` recurrence packs only inside a linear-attention module of that
    kind (their scopes, read once), the others everywhere; `also(ctx, group, first member)` a further condition the
    engine's model file sets (a checkpoint's quantization, the model file)."""
    def match(ctx: FuseContext) -> list[Candidate]:
        scopes: dict[str, list[str]] = {}
        for la in ctx.graph.nodes:
            if la.op is Op.LINEAR_ATTENTION:
                scopes.setdefault(la.attrs_as(LinearAttentionAttrs).kind, []).append(la.scope + ".")

        def packs_in(packed: str, linear: Node) -> bool:
            kind = packed_in.get(packed)
            return ((kind is None or any(linear.scope.startswith(s) for s in scopes.get(kind, ())))
                    and (also is None or also(ctx, packed, linear)))

        return P.packed_linears(ctx, groups, lambda n: _packed_input(ctx, n), packs_in)

    return match


_match_packed = packed_matcher(PACKED, PACKED_IN)


def kimi_kda(ctx: FuseContext, linear: Node) -> bool:
    """Whether a KDA projection sits in Kimi's KDA module: a low-rank forget gate (`forget_gate.f_a_proj`) beside
    q/k/v/b, where the Bailing hybrid's has a full-rank f_proj; the engines pack the two differently."""
    owner = P.parent(linear.scope)
    return any(n.scope == owner + ".forget_gate.f_a_proj" for n in P.linear_nodes(ctx))




def _router_linears(ctx: FuseContext) -> set[str]:
    """Linears that compute router logits: vLLM runs them unquantised in the model dtype
    (model_executor/layers/fused_moe/router/gate_linear.py:GateLinear, built without a
    quant_config in e.g. model_executor/models/deepseek_v2.py DeepseekV2MoE)."""
    memo = ctx.__dict__.get("_router_linears")
    if memo is None:
        memo = set()
        for e in (n for n in ctx.graph.nodes if n.op is Op.MOE_EXPERTS):
            for v in e.inputs[1:3]:
                p = ctx.producer(v)
                if p is not None:
                    memo |= {a.name for a in P.ancestors_within(ctx, p, {P.parent(e.scope)}) if a.op is Op.LINEAR}
        ctx.__dict__["_router_linears"] = memo
    return memo


def _indexer_weight_linears(ctx: FuseContext) -> set[str]:
    """The linears that compute a sparse-attention indexer's per-head weights (the indexer node's third input:
    `graphsim::dsa_indexer(q, k, weights, ...)`): vLLM builds them without a quant_config, so they run in the
    model dtype whatever the checkpoint quantizes (model_executor/models/deepseek_v2.py Indexer.__init__:
    `self.weights_proj = ReplicatedLinear(hidden_size, self.n_head, bias=False, quant_config=None, ...)`)."""
    memo = ctx.__dict__.get("_indexer_weight_linears")
    if memo is None:
        memo = set()
        for ix in (n for n in ctx.graph.nodes if n.op is Op.SPARSE_INDEXER and len(n.inputs) > 2):
            p = ctx.producer(ix.inputs[2])
            while p is not None and p.op is not Op.LINEAR and p.inputs:  # through views / casts to the projection
                p = ctx.producer(p.inputs[0])
            if p is not None and p.op is Op.LINEAR:
                memo.add(p.name)
        ctx.__dict__["_indexer_weight_linears"] = memo
    return memo


def _compressor_linears(ctx: FuseContext) -> set[str]:
    """The kv and gate projections a KV compressor pools (DeepSeek-V4, the `graphsim::kv_compress` node's first
    two inputs): vLLM fuses them into one layer built without a quant_config, so they run in the model dtype
    whatever the checkpoint quantizes (models/deepseek_v4/compressor.py DeepseekCompressor.__init__:
    `self.fused_wkv_wgate = MergedColumnParallelLinear(..., quant_config=None, ...)`, vLLM 0.33.0)."""
    memo = ctx.__dict__.get("_compressor_linears")
    if memo is None:
        memo = set()
        for c in (n for n in ctx.graph.nodes if n.op is Op.KV_COMPRESS):
            for v in c.inputs[:2]:
                p = ctx.producer(v)
                while p is not None and p.op is not Op.LINEAR and p.inputs:  # through views / casts
                    p = ctx.producer(p.inputs[0])
                if p is not None and p.op is Op.LINEAR:
                    memo.add(p.name)
        ctx.__dict__["_compressor_linears"] = memo
    return memo


def _quantization(ctx: FuseContext) -> Quantization | None:
    """The checkpoint's quantization (graphsim.quantization), parsed once per fuse run."""
    if "_quantization" not in ctx.__dict__:
        raw = ctx.graph.meta.quantization_config
        ctx.__dict__["_quantization"] = parse_quant_config(raw) if raw is not None else None
    return ctx.__dict__["_quantization"]


def _quant_dtype(ctx: FuseContext, nodes: list[Node]) -> str | None:
    """The kernel dtype of a GEMM over `nodes`: the weight scheme's (`fp8`, `fp8_block`, `nvfp4`, `int4_wo`,
    ...) when the checkpoint quantizes every one of its linears the same way; the model dtype otherwise
    (excluded modules, routers, an indexer's weights projection, a KV compressor's projections, mixed packs). vLLM gives a packed layer one quant method for all its
    shards (model_executor/layers/linear.py: QKVParallelLinear / MergedColumnParallelLinear take one
    quant_config; quantization/utils/quant_utils.py is_layer_skipped requires all shards to agree)."""
    if any(n.name in _router_linears(ctx) or n.name in _indexer_weight_linears(ctx) or n.name in _compressor_linears(ctx)
           for n in nodes):
        model = ctx.graph.meta.model_dtype
        return model.value if model is not None else None
    q = _quantization(ctx)
    if q is None:
        return None
    schemes = {q.scheme_for(n.scope) for n in nodes}
    scheme = schemes.pop() if len(schemes) == 1 else None
    return scheme.kernel_dtype if scheme is not None else None


def _build_packed(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    attrs = P.gemm_attrs(ctx, c.nodes, c.info["packed"], "packed_gemm", _quant_dtype(ctx, c.nodes))
    if c.info["packed"] != "qkv_proj":
        return attrs
    # QKVParallelLinear splits q by heads and keeps whole KV heads per rank (replicating them when
    # tp > num_kv_heads): record the q/kv split so the tp pass can do the same
    attn = next((a for a in P.attention_nodes(ctx) if a.scope == P.parent(c.nodes[0].scope)), None)
    q = next((n for n in c.nodes if P.leaf(n.scope) == "q_proj"), None)
    if attn is None or q is None:
        return attrs
    return attrs.with_geometry(replace(attrs.geometry_as(GemmGeometry), q_features=q.attrs_as(LinearAttrs).out_features,
                                       num_kv_heads=attn.attrs_as(AttentionAttrs).num_kv_heads))


PACKED_GEMM = Rule(
    "packed_gemm", "model_executor/layers/linear.py:QKVParallelLinear/MergedColumnParallelLinear; models/llama.py:packed_modules_mapping",
    _match_packed, _build_packed,
)


def upcast_input(ctx: FuseContext, linear: Node) -> Node | None:
    """The free cast of a model-dtype token tensor to float32 that feeds only `linear` (through views), where
    transformers keeps that linear's weight in float32 (HunYuan-V4's `lm_head` and indexer `weights_proj`,
    `nn.Linear(..., dtype=torch.float32)`) and vLLM builds it in the model dtype: no cast kernel there."""
    model = ctx.graph.meta.model_dtype
    c = P.through_views(ctx, linear.inputs[0]) if linear.inputs else None
    if (model is None or c is None or c.op is not Op.CAST or not ctx.is_free(c) or not c.inputs
            or c.outputs[0].dtype is not DType.FLOAT32 or ctx.spec(c.inputs[0]).dtype is not model):
        return None
    return c if P.users_through_views(ctx, c) == [linear] else None


def _match_lm_head(ctx: FuseContext):
    out = []
    for n in P.linear_nodes(ctx):
        if n.layer is None and P.feeds_graph_output(ctx, n):
            cast = upcast_input(ctx, n)
            out.append(Candidate([n, cast] if cast else [n]))
    return out


def _build_lm_head(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    """vLLM's ParallelLMHead holds the model dtype's weight (HunYuan-V4's float32 head included: models/hy_v4/nvidia/
    model.py HYV4ForCausalLM.__init__ "The head stays in the model dtype", LogitsProcessor accumulating into
    float32), so a float32 cast before it is no kernel and the GEMM reads the model dtype."""
    head, cast = c.nodes[0], c.nodes[1:]
    dtype = ctx.spec(cast[0].inputs[0]).dtype.value if cast else None
    attrs = P.gemm_attrs(ctx, [head], "lm_head", "lm_head", dtype, rows=Rows.SEQUENCES)
    return replace(attrs, covers=tuple(n.name for n in c.nodes))


LM_HEAD = Rule(
    "lm_head", "model_executor/layers/logits_processor.py:LogitsProcessor; v1/worker/gpu/model_runner.py (hidden_states[logits_indices])",
    _match_lm_head, _build_lm_head,
)


def _match_indexer_weights_cast(ctx: FuseContext) -> list[Candidate]:
    out = []
    for n in P.linear_nodes(ctx):
        if n.name in _indexer_weight_linears(ctx) and (cast := upcast_input(ctx, n)) is not None:
            out.append(Candidate([cast]))
    return out


INDEXER_WEIGHTS_CAST = Rule(
    "indexer_weights_cast", "models/hy_v4/nvidia/attention.py:Indexer.prepare_inputs (kw, _ = self.wk_weights_proj("
    "hidden_states): weights_proj is a shard of one model-dtype MergedColumnParallelLinear, fed the bf16 hidden "
    "states; transformers' fp32 weights_proj and its input cast are no kernel)",
    _match_indexer_weights_cast, _absorb,
)


def _logits_tail(ctx: FuseContext, head: Node) -> list[Node]:
    """The per-token ops between the LM head and the graph output (softcap, float cast), in order."""
    out, todo, seen = [], [head], set()
    while todo:
        n = todo.pop()
        for v in ctx.outputs_of([n]):
            for u in ctx.users.get(v, []):
                if u.name not in seen and ctx.is_free(u) and (u.op.group is OpGroup.ELEMENTWISE or u.op in P.ABSORBED_OPS):
                    seen.add(u.name)
                    out.append(u)
                    todo.append(u)
    return sorted(out, key=lambda n: ctx.pos[n.name])


def _match_logits_tail(ctx: FuseContext):
    """One kernel per op (vLLM runs the softcap as three torch ops, / cap, tanh, × cap, and the cast as one)."""
    heads = [n for n in P.linear_nodes(ctx) if n.layer is None and P.feeds_graph_output(ctx, n)]
    return [Candidate([n]) for h in heads for n in _logits_tail(ctx, h) if n.op not in P.ABSORBED_OPS]


def _build_logits_tail(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    out = n.outputs[0]
    return KernelAttrs(KernelKind.ELEMENTWISE, n.op.value, ElementwiseGeometry(width=int(out.shape[-1])),
                       out.dtype.value, Rows.SEQUENCES, (n.name,), "logits_tail")


LOGITS_TAIL = Rule(
    "logits_tail", "model_executor/layers/logits_processor.py:LogitsProcessor.forward (soft_cap: logits / cap, tanh, "
    "× cap, on the logits of the sampled rows only, after _gather_logits of hidden_states[logits_indices]); "
    "v1/sample/sampler.py:Sampler.forward (logits.to(torch.float32))", _match_logits_tail, _build_logits_tail,
)


def _match_linear(ctx: FuseContext):
    return [Candidate([n]) for n in P.linear_nodes(ctx)]


GEMM = Rule(
    "gemm", "model_executor/layers/linear.py:UnquantizedLinearMethod.apply (F.linear → cuBLAS); a quantized "
    "checkpoint's linear method instead (quantization/fp8.py, modelopt.py, compressed_tensors, gptq/awq Marlin)",
    _match_linear,
    lambda ctx, c: qkv_split(ctx, c.nodes[0], P.gemm_attrs(ctx, c.nodes, P.leaf(c.nodes[0].scope) or "gemm", "gemm",
                                                         _quant_dtype(ctx, c.nodes))),
)


def _match_rotary(ctx: FuseContext):
    return [c for c in (P.rotary_unit(ctx, a) for a in P.attention_nodes(ctx)) if c is not None]


def _build_rotary(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    a = c.info["attention"].attrs_as(AttentionAttrs)
    rot = c.info["rot_dim"] or a.qk_rope_head_dim or a.head_dim
    kv = 1 if a.kv_lora_rank else a.num_kv_heads
    return KernelAttrs(KernelKind.ROTARY, "rotary_embedding",
                       RotaryGeometry(num_heads=a.num_heads, num_kv_heads=kv, rot_dim=rot, head_dim=a.head_dim),
                       c.info["attention"].outputs[0].dtype.value, Rows.TOKENS, tuple(n.name for n in c.nodes), "rotary")


ROTARY = Rule("rotary", "model_executor/layers/rotary_embedding/base.py:RotaryEmbedding.forward_cuda "
              "(_C.rotary_embedding on q and k in place)", _match_rotary, _build_rotary)


def _match_attention(ctx: FuseContext):
    return [Candidate([a], {"attention": a}) for a in P.attention_nodes(ctx)]


def _build_attention(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    a = c.info["attention"]
    aa = a.attrs_as(AttentionAttrs)
    name = "mla_attention" if aa.kv_lora_rank else "flash_attn_varlen"
    if aa.index_topk:  # DSA: FlashMLA's sparse kernels over the indexer's top-k keys
        name = "flashmla_sparse"
    if aa.index_topk and not aa.kv_lora_rank:  # MiniMax-M3: GQA over its picked key blocks (vllm_block_sparse.py)
        name = BLOCK_SPARSE_ATTENTION
    geometry = P.attention_geometry(aa)
    if a.target == COMPRESSED_ATTENTION_TARGET:  # DeepSeek-V4 (vllm_compressed.py): FlashMLA sparse, fp8_ds_mla rows
        name, geometry = compressed_attention_kernel(aa, geometry)
    return KernelAttrs(KernelKind.ATTENTION, name, geometry, a.outputs[0].dtype.value,
                       Rows.NONE, tuple(n.name for n in c.nodes), "attention")


ATTENTION = Rule(
    "attention", "v1/attention/backends/flash_attn.py:FlashAttentionImpl.forward (reshape_and_cache_flash + "
    "flash_attn_varlen_func); MLA: model_executor/layers/attention/mla_attention.py:MLAAttention.forward_impl",
    _match_attention, _build_attention,
)


def _indexer_unit(ctx: FuseContext, n: Node) -> Candidate:
    """The indexer node with the per-token ops its module runs on q and k before scoring (RoPE, concatenation):
    vLLM's Indexer applies its rotary_emb and fp8-quantises q and k inside the same op (priced per token)."""
    if n.attrs_as(IndexerAttrs).block_size:  # MiniMax-M3: only the ops after its q / k norms
        return Candidate([*block_indexer_prep(ctx, n), n], {"indexer": n})
    prep = [a for a in P.ancestors_within(ctx, n, {n.scope})
            if a.op.group in (OpGroup.ELEMENTWISE, OpGroup.DATA_MOVEMENT) and a.op is not Op.LINEAR]
    return Candidate(sorted([*prep, n], key=lambda m: ctx.pos[m.name]), {"indexer": n})


def _match_mla_key_assembly(ctx: FuseContext):
    """MLA modules that assemble per-head keys by writing into a new tensor (transformers' expand_kv: copy_ of
    k_nope and the roped, expanded k_rot): the writes, and the k_rot RoPE that only feeds them, reach no consumer
    in the traced graph (the attention reads the buffer), so they are dead ends of the attention's scope."""
    out = []
    # dense (DeepSeek-V2/V3) and sparse (DSA) MLA alike
    for a in [n for n in P.attention_nodes(ctx) if n.attrs_as(AttentionAttrs).kv_lora_rank]:
        dead = {n.name: n for n in ctx.nodes_in_scope(a.scope, exact=True)
                if ctx.is_free(n) and ctx.pos[n.name] < ctx.pos[a.name]
                and n.op.group in (OpGroup.ELEMENTWISE, OpGroup.DATA_MOVEMENT)}
        changed = True
        while changed:  # keep only nodes whose every user is itself such a node
            changed = False
            for name, n in list(dead.items()):
                if any(u.name not in dead for v in ctx.outputs_of([n]) for u in ctx.users.get(v, [])):
                    del dead[name]
                    changed = True
        if any(n.op is Op.COPY for n in dead.values()):
            out.append(Candidate(sorted(dead.values(), key=lambda n: ctx.pos[n.name])))
    return out


MLA_KEY_ASSEMBLY = Rule(
    "mla_key_assembly", "model_executor/layers/attention/mla_attention.py:MLAAttention.forward (k_pe is rotated "
    "in the same rotary_emb call as q_pe; the latent and k_pe are written by concat_and_cache_mla; per-head keys "
    "are never assembled: decode absorbs W_UK into q, prefill's kernel reads kv_b_proj's output)",
    _match_mla_key_assembly, _absorb,
)


def _match_token_id_masks(ctx: FuseContext):
    """Integer / bool ops on the token ids before the embedding (a multimodal wrapper masking its image / audio
    placeholder ids: Gemma-4's `input_ids == image_token_id | …` and `where`)."""
    out = []
    for e in [n for n in ctx.graph.nodes if n.op is Op.EMBEDDING]:
        seen, todo, nodes = set(), list(e.inputs), []
        while todo:
            p = ctx.producer(todo.pop())
            if p is None or p.name in seen:
                continue
            seen.add(p.name)
            if ctx.is_free(p) and p.outputs[0].dtype.value in ("bool", "i64", "i32"):
                nodes.append(p)
                todo.extend(p.inputs)
        if nodes:
            out.append(Candidate(sorted(nodes, key=lambda n: ctx.pos[n.name])))
    return out


TOKEN_ID_MASKS = Rule(
    "token_id_masks", "model_executor/models/interfaces.py:SupportsMultiModal.embed_input_ids (a text-only "
    "request has no multimodal embeddings: the ids are embedded as they are, no placeholder masks run)",
    _match_token_id_masks, _absorb,
)


def _build_indexer(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.info["indexer"]
    a = n.attrs_as(IndexerAttrs)
    geometry = IndexerGeometry(num_heads=a.num_heads, head_dim=a.head_dim, topk=a.topk,
                               compress_ratio=a.compress_ratio or 0, block_size=a.block_size or 0)
    if a.block_size:  # MiniMax-M3's block top-k indexer (vllm_block_sparse.py), in the activation dtype
        return KernelAttrs(KernelKind.SPARSE_INDEXER, BLOCK_SPARSE_INDEXER, geometry, ctx.spec(n.inputs[0]).dtype.value,
                           Rows.NONE, tuple(m.name for m in c.nodes), "sparse_indexer")
    return KernelAttrs(KernelKind.SPARSE_INDEXER, "sparse_attn_indexer", geometry, "f8e4m3", Rows.NONE,
                       tuple(m.name for m in c.nodes), "sparse_indexer")


SPARSE_INDEXER = Rule(
    "sparse_indexer", "model_executor/models/deepseek_v2.py:Indexer.forward (wq_b / wk / weights_proj are "
    "ReplicatedLinear: 'no tensor parallel, just replicated'; the fp8 index keys cached; SparseAttnIndexer: "
    "fp8_mqa_logits for prefill / fp8_paged_mqa_logits for decode into fp32 logits, then the per-row top-k)",
    lambda ctx: [_indexer_unit(ctx, n) for n in ctx.graph.nodes if n.op is Op.SPARSE_INDEXER], _build_indexer,
)


def _build_act(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    return KernelAttrs(KernelKind.ACT_AND_MUL, f"{c.info['act']}_and_mul", ElementwiseGeometry(width=c.info["width"]),
                       c.nodes[-1].outputs[0].dtype.value, Rows.TOKENS, tuple(n.name for n in c.nodes), "act_and_mul")


ACT_AND_MUL = Rule("act_and_mul", "model_executor/layers/activation.py:SiluAndMul.forward_cuda / GeluAndMul.forward_cuda",
                   P.act_and_mul_units, _build_act)


def _match_activation(ctx: FuseContext):
    """An ungated activation on a projection's output, with relu's square when it follows (relu²)."""
    out = []
    for n in ctx.graph.nodes:
        p = ctx.producer(n.inputs[0]) if n.inputs else None
        if n.op not in P.ACTIVATIONS or not ctx.is_free(n) or p is None or p.op is not Op.LINEAR:
            continue
        users = ctx.users.get(n.name, [])
        nodes, act = [n], P.ACTIVATIONS[n.op]
        if n.op is Op.RELU and len(users) == 1 and users[0].op is Op.POW and ctx.is_free(users[0]):
            nodes, act = [n, users[0]], "relu2"
        out.append(Candidate(nodes, {"act": act, "width": int(nodes[-1].outputs[0].shape[-1])}))
    return out


def _build_activation(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    return KernelAttrs(KernelKind.ACTIVATION, c.info["act"], ElementwiseGeometry(width=c.info["width"]),
                       c.nodes[-1].outputs[0].dtype.value, Rows.TOKENS, tuple(n.name for n in c.nodes), "activation")


ACTIVATION = Rule("activation", "model_executor/layers/activation.py:get_act_fn (ReLUSquaredActivation 'relu2': "
                  "torch.square(F.relu(x)) in one op; GELU / ReLU / SiLU on an ungated MLP)", _match_activation,
                  _build_activation)


def _match_moe_router(ctx: FuseContext):
    out = []
    for e in [n for n in ctx.graph.nodes if n.op is Op.MOE_EXPERTS]:
        block = P.parent(e.scope)
        routing_inputs = [ctx.producer(v) for v in e.inputs[1:3]]
        # nodes that prepare the router GEMM's or the experts' input are not routing math
        heavy = [n for n in ctx.nodes_in_scope(block) if n.op is Op.LINEAR]
        hidden_in = ctx.producer(e.inputs[0])
        feeds: set[str] = set()
        for h in heavy:
            anc = {a.name for a in P.ancestors_within(ctx, h, {block})}
            if e.name not in anc:  # a projection of the experts' output (latent MoE's fc2_latent_proj) is not fed by
                feeds |= anc  # the routing math behind it (models/nemotron_h.py NemotronHMoE: fc2 after the experts)
        if hidden_in is not None:
            feeds |= {hidden_in.name} | {a.name for a in P.ancestors_within(ctx, hidden_in, {block})}
        nodes: dict[str, Node] = {}
        for p in routing_inputs:
            if p is None:
                continue
            for n in [p, *P.ancestors_within(ctx, p, {block})]:
                if ctx.is_free(n) and n.op not in (Op.LINEAR, Op.MOE_EXPERTS) and n.name not in feeds:
                    nodes[n.name] = n
        if nodes:
            out.append(Candidate(sorted(nodes.values(), key=lambda n: ctx.pos[n.name]), {"experts": e}))
    return out


def _build_router(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    a = c.info["experts"].attrs_as(MoEAttrs)
    grouped = any(n.op is Op.SIGMOID for n in c.nodes)
    return KernelAttrs(KernelKind.MOE_ROUTER, "grouped_topk" if grouped else "topk_softmax",
                       MoeRouterGeometry(num_experts=a.num_experts, top_k=a.top_k), "f32", Rows.TOKENS,
                       tuple(n.name for n in c.nodes), "moe_router")


MOE_ROUTER = Rule("moe_router", "model_executor/layers/fused_moe/router/fused_topk_router.py (topk_softmax) / "
                  "router/grouped_topk_router.py (grouped_topk)", _match_moe_router, _build_router)


def _match_experts(ctx: FuseContext):
    return [Candidate([n]) for n in ctx.graph.nodes if n.op is Op.MOE_EXPERTS]


def _build_experts(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    a = n.attrs_as(MoEAttrs)
    q = _quantization(ctx)
    scheme = q.scheme_for(n.scope) if q is not None else None
    dtype = scheme.kernel_dtype if scheme is not None else n.outputs[0].dtype.value
    geo = MoeExpertsGeometry(hidden_size=a.hidden_size, inter_size=a.intermediate_size, top_k=a.top_k,
                             num_experts=a.num_experts, tp=1, ep=1, activation=a.activation, gated=a.gated,
                             bias=a.has_bias)
    return KernelAttrs(KernelKind.MOE_EXPERTS, "fused_moe", geo, dtype, Rows.TOKENS, (n.name,), "moe_experts")


MOE_EXPERTS = Rule("moe_experts", "model_executor/layers/fused_moe/experts/triton_moe.py:TritonExperts.apply "
                   "(moe_align_block_size, fused_moe_kernel ×2, silu_and_mul, moe_sum)", _match_experts, _build_experts)


def _match_router_cast(ctx: FuseContext):
    """A cast whose only users are router GEMMs: the router's input made float32."""
    routers = _router_linears(ctx)
    return [Candidate([n]) for n in ctx.graph.nodes if n.op is Op.CAST and ctx.is_free(n)
            and (us := ctx.users.get(n.name, [])) and all(u.name in routers for u in us)]


ROUTER_CAST = Rule(
    "router_input_cast", "models/nemotron_h.py:NemotronHMoE.forward (self.gate(hidden_states.to(dtype=torch.float32))"
    "; likewise ernie45_moe.py, afmoe.py): one cast kernel before the fp32 router GEMM",
    _match_router_cast,
    lambda ctx, c: KernelAttrs(KernelKind.ELEMENTWISE, "cast", ElementwiseGeometry(width=int(c.nodes[0].outputs[0].shape[-1])),
                               c.nodes[0].outputs[0].dtype.value, Rows.TOKENS, (c.nodes[0].name,), "router_input_cast"),
)


def _match_moe_shared_sum(ctx: FuseContext):
    """The add of a MoE block's routed experts output and its shared expert's output."""
    out = []
    for e in [n for n in ctx.graph.nodes if n.op is Op.MOE_EXPERTS]:
        mine = P.views_of(ctx, e)  # the experts output and its views
        adds = {u.name: u for v in mine for u in ctx.users.get(v, []) if u.op is Op.ADD and ctx.is_free(u)}
        for u in adds.values():
            others = [ctx.producer(v) for v in u.inputs if v not in mine]
            if len(u.inputs) == 2 and len(others) == 1 and others[0] is not None and others[0].op in (Op.LINEAR, Op.MUL) \
                    and others[0].scope.startswith(P.parent(e.scope) + "."):
                out.append(Candidate([u]))
    return out


MOE_SHARED_SUM = Rule(
    "moe_shared_sum", "models/nemotron_h.py:NemotronHMoE.forward (out = out + shared_output before the one "
    "all-reduce); models/deepseek_v2.py DeepseekV2MoE.forward (final_hidden_states += shared_output)",
    _match_moe_shared_sum,
    lambda ctx, c: KernelAttrs(KernelKind.ELEMENTWISE, "add", ElementwiseGeometry(width=int(c.nodes[0].outputs[0].shape[-1])),
                               c.nodes[0].outputs[0].dtype.value, Rows.TOKENS, (c.nodes[0].name,), "moe_shared_sum"),
)


def _match_gdn_gating(ctx: FuseContext):
    out = []
    for la in _linear_attention(ctx, "gated_delta_rule"):
        gate_inputs = [ctx.producer(v) for v in la.inputs[3:5]]
        nodes: dict[str, Node] = {}
        for p in gate_inputs:
            if p is None:
                continue
            for n in [p, *P.ancestors_within(ctx, p, {la.scope})]:
                if ctx.is_free(n) and n.op.group in (OpGroup.ELEMENTWISE,) and n.scope == la.scope:
                    nodes[n.name] = n
        if nodes:
            out.append(Candidate(sorted(nodes.values(), key=lambda n: ctx.pos[n.name]), {"la": la}))
    return out


GDN_GATING = Rule(
    "gdn_gating", "model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:_forward_core (gating fused in fused_post_conv_prep)", _match_gdn_gating,
    lambda ctx, c: _gdn_gating(c),
)


def _gdn_gating(c: Candidate) -> KernelAttrs:
    heads = c.info["la"].attrs_as(LinearAttentionAttrs).num_v_heads
    return KernelAttrs(KernelKind.ELEMENTWISE, "fused_gdn_gating",
                       ElementwiseGeometry(num_v_heads=heads, width=2 * heads), "f32", Rows.TOKENS, tuple(n.name for n in c.nodes), "gdn_gating")


def _each(op: Op) -> Callable[[FuseContext], list[Candidate]]:
    """Every node of `op`, one candidate each."""
    return lambda ctx: [Candidate([n]) for n in ctx.graph.nodes if n.op is op]


def _kernel_rule(name: str, source: str, match: Callable[[FuseContext], list[Candidate]], kind: KernelKind,
                 kernel: str, attrs: type[A], geometry: Callable[[A], Geometry], rows: Rows) -> Rule:
    """A rule whose candidates are each one `kernel` launch, shaped by the first node's attrs, at that
    node's dtype."""
    def build(ctx: FuseContext, c: Candidate) -> KernelAttrs:
        first = c.nodes[0]
        return KernelAttrs(kind, kernel, geometry(first.attrs_as(attrs)), first.outputs[0].dtype.value, rows,
                           tuple(n.name for n in c.nodes), name)

    return Rule(name, source, match, build)


def _linear_attention(ctx: FuseContext, kind: str) -> list[Node]:
    return [n for n in ctx.graph.nodes if n.op is Op.LINEAR_ATTENTION and n.attrs_as(LinearAttentionAttrs).kind == kind]


# The kernel vLLM launches for each linear-attention kind (prefill's; decode steps run the recurrent form:
# fused_recurrent_gated_delta_rule, selective_state_update, priced per row kind in costing/kernel_map.py).
_LINEAR_ATTENTION_KERNELS = {"gated_delta_rule": "chunk_gated_delta_rule", "mamba2_ssd": "mamba_chunk_scan_combined",
                             "kda": "chunk_kda",  # KDA: model_executor/layers/kda.py (chunk_kda / fused_recurrent_kda)
                             # MiniMax-Text-01: layers/mamba/linear_attn.py (lightning_attention / linear_decode_forward_triton)
                             "lightning": "lightning_attention",
                             # Mamba-1: layers/mamba/mamba_mixer.py (selective_scan_fn / selective_state_update)
                             "mamba1": "selective_scan_fn"}


def _build_linear_attention(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    a = n.attrs_as(LinearAttentionAttrs)
    kind = a.kind if a.kind in _LINEAR_ATTENTION_KERNELS else "gated_delta_rule"
    geo = LinearAttentionGeometry(num_k_heads=a.num_k_heads, num_v_heads=a.num_v_heads, k_head_dim=a.k_head_dim,
                                  v_head_dim=a.v_head_dim, kind=kind, chunk_size=a.chunk_size,
                                  state_dtype=a.state_dtype)
    return KernelAttrs(KernelKind.LINEAR_ATTENTION, _LINEAR_ATTENTION_KERNELS[kind], geo, n.outputs[0].dtype.value,
                       Rows.NONE, (n.name,), "linear_attention")


LINEAR_ATTENTION = Rule(
    "linear_attention", "model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:_forward_core "
    "(chunk_gated_delta_rule / fused_recurrent_gated_delta_rule); Mamba2: model_executor/layers/mamba/mamba_mixer2.py "
    "MambaMixer2 forward (mamba_chunk_scan_combined_varlen for prefill tokens, selective_state_update for decode "
    "tokens; dt_bias, softplus, the dt limit and the D skip inside the kernels)", _each(Op.LINEAR_ATTENTION),
    _build_linear_attention,
)


def _match_ssm_a(ctx: FuseContext):
    """The chain A = -exp(A_log) on parameters that feeds each Mamba2 scan."""
    out = []
    for la in _linear_attention(ctx, "mamba2_ssd"):
        p = ctx.producer(la.inputs[2]) if len(la.inputs) > 2 else None
        if p is None:
            continue
        chain = [n for n in [p, *P.ancestors_within(ctx, p, {la.scope})] if ctx.is_free(n)]
        # only per-head math on parameters: no token dimension anywhere in the chain
        if chain and all(n.op.group is OpGroup.ELEMENTWISE and all(isinstance(d, int) for d in n.outputs[0].shape)
                         for n in chain):
            out.append(Candidate(sorted(chain, key=lambda n: ctx.pos[n.name])))
    return out


SSM_A = Rule(
    "ssm_a_at_load", "model_executor/layers/mamba/mamba_mixer2.py:MambaMixer2.__init__ (A's weight loader: "
    "composed_weight_loader(sharded_weight_loader(0), lambda x: -torch.exp(x.float())): A is stored negated and "
    "exponentiated at load, no kernel per step)", _match_ssm_a, _absorb,
)


def _match_conv(ctx: FuseContext):
    out = []
    for n in ctx.graph.nodes:
        if n.op is not Op.CONV1D:
            continue
        group = [n]
        # the causal conv kernel applies its activation and drops the padding itself
        cur = n
        while True:
            users = ctx.users.get(cur.name, [])
            if len(users) != 1 or users[0].scope != n.scope or users[0].op not in (Op.SLICE, Op.SILU):
                break
            cur = users[0]
            group.append(cur)
        info = {}
        casts = _conv_casts(ctx, n, cur)
        if casts:
            group += casts
            info["dtype"] = ctx.spec(casts[0].inputs[0]).dtype.value
        out.append(Candidate(group, info))
    return out


def _conv_casts(ctx: FuseContext, conv: Node, last: Node) -> list[Node]:
    """A cast of the conv's input to the weights' dtype (the conv its one reader, through views) and the cast of its
    output back (the group's last node's one reader): vLLM's causal_conv1d_fn reads x in the activation dtype with
    weights in their own (float32 in bailing_moe_v3.py's q/k/v_conv1d), accumulates in float32 and writes
    `torch.empty_like(x)` (layers/mamba/ops/causal_conv1d.py), so both casts are inside its one launch. Both or
    neither: a lone cast is left to the rules that know it."""
    before = P.through_views(ctx, conv.inputs[0]) if conv.inputs else None
    if before is None or before.op is not Op.CAST or not ctx.is_free(before) or not before.inputs:
        return []
    users = ctx.users.get(last.name, [])
    if P.users_through_views(ctx, before) != [conv] or len(users) != 1:
        return []
    after = users[0]
    dtype = ctx.spec(before.inputs[0]).dtype
    if after.op is not Op.CAST or not ctx.is_free(after) or after.outputs[0].dtype is not dtype:
        return []
    return [before, after]


def _build_conv(_ctx: FuseContext, c: Candidate) -> KernelAttrs:
    conv = next(n for n in c.nodes if n.op is Op.CONV1D)
    a = conv.attrs_as(ConvAttrs)
    return KernelAttrs(KernelKind.CONV1D, "causal_conv1d", Conv1dGeometry(channels=a.channels, kernel_size=a.kernel_size),
                       c.info.get("dtype", conv.outputs[0].dtype.value), Rows.TOKENS, tuple(n.name for n in c.nodes),
                       "causal_conv1d")


CONV1D = Rule(
    "causal_conv1d", "model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:forward_cuda (causal_conv1d_fn)",
    _match_conv, _build_conv)

EMBEDDING = _kernel_rule(
    "embedding", "model_executor/layers/vocab_parallel_embedding.py:VocabParallelEmbedding.forward",
    _each(Op.EMBEDDING), KernelKind.EMBEDDING, "embedding", EmbeddingAttrs,
    lambda a: EmbeddingGeometry(vocab=a.num_embeddings, width=a.embedding_dim), Rows.TOKENS)

RULES: list[Rule] = [
    ROTARY_CACHE, EMBEDDING, *LEGACY_EARLY_RULES, FUSED_ADD_RMS_NORM, RMS_NORM, PACKED_GEMM, LM_HEAD, GEMM, ROTARY,
    ATTENTION, SPARSE_INDEXER, MLA_KEY_ASSEMBLY, TOKEN_ID_MASKS, *COMPRESSED_EARLY_RULES,
    ACT_AND_MUL, ACTIVATION, MOE_ROUTER, MOE_EXPERTS, ZERO_EXPERTS, ROUTER_CAST, MOE_SHARED_SUM, LOGITS_TAIL, GDN_GATING, SSM_A, *KDA_RULES, *LIGHTNING_RULES,
    *MAMBA1_RULES,
    LINEAR_ATTENTION,
    CONV1D, *SHORT_CONV_RULES, *GDN_PREP_RULES, *SSM_RESIDUAL_RULES, *ATTN_SCALE_RULES, *XIELU_RULES,
    *SWIGLU_OAI_RULES, *MOE_CAST_RULES, *ATTN_GATE_RULES,
    *COMPRESSED_RULES, *LEGACY_RULES,
    DEAD_INDEX_OPS,  # integer / bool results nothing reads: no kernel
    INDEXER_WEIGHTS_CAST,  # the float32 input cast of an indexer's weights projection: no kernel
    *GEMMA3N_RULES,  # no-op casts, self copies, then Gemma-3n's ops as vLLM's port runs them
    *AXK2_RULES,  # A.X-K2's fused sigmoid output gate and q-latent cat
    *ZAMBA2_RULES,  # Zamba2's concatenate, adapter add and embedding clone as its port runs them
    *ELEMENTWISE_RULES,  # last: only what no specific rule fused
    *LEGACY_LATE_RULES,
]


def leftover(ctx: FuseContext, n: Node) -> tuple[KernelAttrs | None, str]:
    """Unclaimed nodes: views and tensor creation are absorbed; the rest become memory-bound
    elementwise placeholders (approximate), one per node."""
    if n.op in P.ABSORBED_OPS or ctx.index_only(n):
        return None, f"absorbed.{n.op.value}"
    width, rows = P.per_token(n.outputs[0], n)
    return (KernelAttrs(KernelKind.ELEMENTWISE, n.op.value, ElementwiseGeometry(width=width), _placeholder_dtype(ctx, n),
                        rows, (n.name,), "elementwise_placeholder", approximate=True),
            f"placeholder.{n.op.value}")


def _placeholder_dtype(ctx: FuseContext, n: Node) -> str:
    """A placeholder's element type: its output's; a comparison's bool output (no kernel table prices bool: the
    step's time was missing, e.g. Apertus's xIELU `where(x > 0, ...)`) is read at its first floating input's."""
    out = n.outputs[0].dtype
    if out is not DType.BOOL:
        return out.value
    for v in n.inputs:
        try:
            dtype = ctx.spec(v).dtype
        except (KeyError, ValueError):  # (a constant operand)
            continue
        if dtype.is_float:
            return dtype.value
    return out.value
