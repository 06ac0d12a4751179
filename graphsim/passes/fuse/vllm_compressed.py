"""vLLM fuse rules for compressed-KV attention and hyper-connections (DeepSeek-V4's semantic ops,
graphsim/importers/hf/compressed_ops.py), priced in costing/compressed.py.

- `graphsim::compressed_attention` (an `Op.ATTENTION` node, built by vllm.py's attention rule through
  `compressed_attention_kernel`): vLLM's DeepseekV4MLAAttention runs FlashMLA's sparse fp8 kernels for every
  layer type, sliding-only included (vllm/model_executor/layers/deepseek_v4_attention.py
  DeepseekV4MLAAttention._forward_decode: flash_mla_with_kvcache over the SWA indices plus the compressed cache;
  _forward_prefill: flash_mla_sparse_fwd over the gathered window and entries), one shared K=V head in a
  fixed fp8_ds_mla row: head_dim − rope fp8 nope values, rope bf16 values, one scale byte per 64 nope values
  and a pad byte (DeepseekV4MultiHeadLatentAttentionWrapper.__init__ head_bytes: 584 at head_dim 512).
- `Op.KV_COMPRESS`: DeepseekCompressor.forward (vllm/model_executor/layers/deepseek_compressor.py):
  `_save_partial_states_kernel` then `_fused_kv_compress_norm_rope_insert_{sparse_attn,indexer_attn}`, one
  `deepseek_compressor` kernel per compressor; its kv/score projection (`fused_wkv_wgate`, run in fp32 out) is
  the GEMM before it. The entry it writes: the attention's 584-byte row, or the indexer's fp8 key with an fp32
  scale per 128 values (DeepseekV4Indexer.__init__ k_cache_head_dim) when it feeds an indexer.
- `Op.HYPER_CONNECTION`: vllm/model_executor/layers/mhc.py MHCPreOp (`mhc_pre`: norm, fn projection,
  Sinkhorn and collapse fused), MHCPostOp (`mhc_post`) and HCHeadOp (`hc_head`); vLLM fuses a block's post
  with the next block's pre (MHCFusedPostPreOp), priced here as the two parts it does.
  HunYuan-V4's independent hyper-connections (`graphsim::ihc_pre` / `ihc_post`, no comb) are vLLM's
  triton_ihc_pre / triton_ihc_post (vllm/models/hy_v4/nvidia/triton_ihc.py, vLLM 0.33.0); their fn projection
  is a ReplicatedLinear (hc.py HYV4HCPreLayer.hc_fn), so the node stays whole under tensor parallelism.
"""

from __future__ import annotations

from dataclasses import replace

from graphsim.costing import compressed
from graphsim.ir import AttentionAttrs, Node, Op
from graphsim.ir.geometry import AttentionGeometry, ElementwiseGeometry, GemmGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.ir.ops import OpGroup
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule
from graphsim.quantization import parse_quant_config

COMPRESSED_ATTENTION_TARGET = "graphsim::compressed_attention"
_SOURCE_ATTN = ("model_executor/layers/deepseek_v4_attention.py:DeepseekV4MLAAttention._forward_decode / "
                "_forward_prefill (flash_mla_with_kvcache / flash_mla_sparse_fwd, fp8_ds_mla entries)")


def entry_bytes(head_dim: int, rope_dim: int) -> int:
    """vLLM's fp8_ds_mla row: fp8 nope, bf16 rope, one scale byte per 64 nope values, one pad byte."""
    nope = head_dim - rope_dim
    return nope + 2 * rope_dim + nope // 64 + 1


def index_entry_bytes(head_dim: int) -> int:
    """vLLM's indexer key cache row: fp8 values and one fp32 scale per 128 (quant_block_size 128)."""
    return head_dim + head_dim // 128 * 4


def compressed_attention_kernel(aa: AttentionAttrs, geometry: AttentionGeometry) -> tuple[str, AttentionGeometry]:
    """The kernel name and geometry of a compressed-KV attention node (its storage row stated)."""
    rows = entry_bytes(aa.head_dim, aa.qk_rope_head_dim or 0)
    return "flashmla_sparse_swa", replace(geometry, kv_entry_bytes=rows)


def _compressor_geometry(ctx: FuseContext, n: Node) -> tuple[str, int]:
    """(op name, per-token width) of a KV_COMPRESS node from its tensors: kv [B,T,c·d], position_bias [m, c·d],
    output [B,T,d]; the entry format from its consumer (an indexer's keys or the attention's entries)."""
    d = int(n.outputs[0].shape[-1])
    width = int(ctx.spec(n.inputs[0]).shape[-1])
    ratio = int(ctx.spec(n.inputs[2]).shape[0])
    rope = 2 * int(ctx.spec(n.inputs[4]).shape[-1])  # inv_freq: one frequency per rotated pair
    users = [u for v in ctx.outputs_of([n]) for u in ctx.users.get(v, [])]
    to_indexer = any(u.op is Op.SPARSE_INDEXER for u in users)
    e = index_entry_bytes(d) if to_indexer else entry_bytes(d, rope)
    return compressed.compressor_op(d, width // d, ratio, e), width


def _match_compress(ctx: FuseContext):
    return [Candidate([n]) for n in ctx.graph.nodes if n.op is Op.KV_COMPRESS]


def _build_compress(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    op, width = _compressor_geometry(ctx, n)
    return KernelAttrs(KernelKind.ELEMENTWISE, op, ElementwiseGeometry(width=width), "f32", Rows.TOKENS, (n.name,),
                       "kv_compress")


KV_COMPRESS = Rule(
    "kv_compress", "model_executor/layers/deepseek_compressor.py:DeepseekCompressor.forward "
    "(_save_partial_states_kernel, _fused_kv_compress_norm_rope_insert_*)", _match_compress, _build_compress,
)

_HC_KERNELS = {"graphsim::hc_pre": compressed.MHC_PRE, "graphsim::hc_post": compressed.MHC_POST,
               "graphsim::hc_head": compressed.HC_HEAD, "graphsim::ihc_pre": compressed.IHC_PRE,
               "graphsim::ihc_post": compressed.IHC_POST}
_STREAMS_SECOND = ("graphsim::hc_post", "graphsim::ihc_post")  # (out, streams, ...): the streams are input 1


def _match_hc(ctx: FuseContext):
    return [Candidate([n]) for n in ctx.graph.nodes if n.op is Op.HYPER_CONNECTION and n.target in _HC_KERNELS]


def _build_hc(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    streams = ctx.spec(n.inputs[1] if n.target in _STREAMS_SECOND else n.inputs[0])  # [B,T,n,D]
    count, hidden = int(streams.shape[-2]), int(streams.shape[-1])
    op = compressed.hc_op(_HC_KERNELS[n.target], count, hidden)
    return KernelAttrs(KernelKind.ELEMENTWISE, op, ElementwiseGeometry(width=count * hidden), streams.dtype.value,
                       Rows.TOKENS, (n.name,), "hyper_connection")


HYPER_CONNECTION = Rule(
    "hyper_connection", "model_executor/layers/mhc.py:MHCPreOp / MHCPostOp / HCHeadOp (tilelang kernels); "
    "models/hy_v4/nvidia/hc.py:HYV4HCPreLayer / HYV4HCPostLayer (triton_ihc_pre / triton_ihc_post)",
    _match_hc, _build_hc,
)



def _descendants_until(ctx: FuseContext, start: Node, stop: Node) -> list[Node]:
    """Free nodes on a path from `start` to `stop` (both excluded)."""
    down: dict[str, Node] = {}
    todo = [start]
    while todo:
        n = todo.pop()
        for v in ctx.outputs_of([n]):
            for u in ctx.users.get(v, []):
                if u.name not in down and u is not stop and ctx.pos[u.name] < ctx.pos[stop.name]:
                    down[u.name] = u
                    todo.append(u)
    up = {a.name for a in _ancestors(ctx, stop)}
    return sorted((n for n in down.values() if n.name in up and ctx.is_free(n)), key=lambda n: ctx.pos[n.name])


def _ancestors(ctx: FuseContext, node: Node) -> list[Node]:
    seen: dict[str, Node] = {}
    todo = list(node.inputs)
    while todo:
        p = ctx.producer(todo.pop())
        if p is not None and p.name not in seen:
            seen[p.name] = p
            todo.extend(p.inputs)
    return list(seen.values())


def _grouped_output(ctx: FuseContext, attn: Node) -> Node | None:
    """The first batched matmul after a compressed attention in its module: the grouped output projection."""
    later = [n for n in ctx.nodes_in_scope(attn.scope) if ctx.pos[n.name] > ctx.pos[attn.name] and n.op is Op.BMM]
    return min(later, key=lambda n: ctx.pos[n.name]) if later else None


def _match_output_path(ctx: FuseContext):
    """Between a compressed attention and its grouped output projection: the inverse RoPE of the output's rope
    slice (rotation by −sin), the fp8 quantisation and the group reshape."""
    out = []
    for a in (n for n in ctx.graph.nodes if n.op is Op.ATTENTION and n.target == COMPRESSED_ATTENTION_TARGET):
        bmm = _grouped_output(ctx, a)
        if bmm is None:
            continue
        path = [n for n in _descendants_until(ctx, a, bmm) if n.op not in (Op.LINEAR, Op.BMM, Op.ATTENTION)]
        # the −sin it rotates by (and its expansion), computed in the module for this path alone
        before = {x.name for x in _ancestors(ctx, a)}
        names = {n.name for n in path}
        todo = list(path)
        while todo:
            for v in todo.pop().inputs:
                p = ctx.producer(v)
                if (p is not None and ctx.is_free(p) and p.name not in names and p.name not in before
                        and p.scope == a.scope and p.op.group in (OpGroup.ELEMENTWISE, OpGroup.DATA_MOVEMENT)):
                    path.append(p)
                    names.add(p.name)
                    todo.append(p)
        path.sort(key=lambda n: ctx.pos[n.name])
        if path:
            out.append(Candidate(path, {"attention": a, "bmm": bmm}))
    return out


def _build_output_path(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    aa = c.info["attention"].attrs_as(AttentionAttrs)
    return KernelAttrs(KernelKind.ELEMENTWISE, "fused_inv_rope_fp8_quant",
                       ElementwiseGeometry(width=aa.num_heads * aa.head_dim), c.info["attention"].outputs[0].dtype.value,
                       Rows.TOKENS, tuple(n.name for n in c.nodes), "inv_rope_quant")


INV_ROPE_QUANT = Rule(
    "inv_rope_quant", "model_executor/layers/deepseek_v4_attention.py:DeepseekV4MultiHeadLatentAttentionWrapper."
    "forward (fused_inv_rope_fp8_quant: the output's rope slice rotated back and quantised per 128, one kernel)",
    _match_output_path, _build_output_path,
)


def _match_grouped_projection(ctx: FuseContext):
    out = []
    for a in (n for n in ctx.graph.nodes if n.op is Op.ATTENTION and n.target == COMPRESSED_ATTENTION_TARGET):
        bmm = _grouped_output(ctx, a)
        if bmm is not None and ctx.is_free(bmm):
            out.append(Candidate([bmm]))
    return out


def _build_grouped_projection(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    """bmm x [g, T, k] · w [g, k, r] → [g, T, r]: a GEMM of n = g·r outputs over k inputs per group (2·T·g·k·r
    FLOPs, g·k·r weights: the same as GemmGeometry(n = g·r, k))."""
    n = c.nodes[0]
    out, x = n.outputs[0], ctx.spec(n.inputs[0])
    groups, k, r = int(out.shape[0]), int(x.shape[-1]), int(out.shape[-1])
    # wo_a is a quantized weight like any linear of the checkpoint: DeepGEMM's fp8_einsum reads it in fp8
    # (deepseek_v4_attention.py: o_proj hands wo_a.weight with its block scales to deepseek_v4_fp8_einsum)
    raw = ctx.graph.meta.quantization_config
    scheme = parse_quant_config(raw).scheme_for(n.scope) if raw is not None else None
    dtype = scheme.kernel_dtype if scheme is not None else out.dtype.value
    return KernelAttrs(KernelKind.GEMM, "fp8_einsum", GemmGeometry(n=groups * r, k=k, groups=groups), dtype,
                       Rows.TOKENS, (n.name,), "grouped_output_projection")


GROUPED_OUTPUT = Rule(
    "grouped_output_projection", "model_executor/layers/deepseek_v4_attention.py:DeepseekV4MultiHeadLatentAttention"
    "Wrapper.forward (deepseek_v4_fp8_einsum 'bhr,hdr->bhd': wo_a per group of heads, n_local_groups = o_groups / tp)",
    _match_grouped_projection, _build_grouped_projection,
)


def _match_clamped_swiglu(ctx: FuseContext):
    """mul(silu(clamp(g, max=l)), clamp(u, min=−l, max=l)): a SwiGLU with clamped pre-activations."""
    out = []
    for m in ctx.graph.nodes:
        if m.op is not Op.MUL or len(m.inputs) != 2 or not ctx.is_free(m):
            continue
        prods = [ctx.producer(v) for v in m.inputs]
        act = next((p for p in prods if p is not None and p.op is Op.SILU), None)
        other = next((p for p in prods if p is not None and p is not act), None)
        if act is None or other is None or other.op is not Op.CLAMP:
            continue
        inner = ctx.producer(act.inputs[0])
        if inner is None or inner.op is not Op.CLAMP:
            continue
        nodes = [inner, act, other, m]
        if all(ctx.is_free(x) for x in nodes):
            out.append(Candidate(sorted(nodes, key=lambda x: ctx.pos[x.name]), {"width": int(m.outputs[0].shape[-1])}))
    return out


def _build_clamped_swiglu(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    return KernelAttrs(KernelKind.ACT_AND_MUL, "silu_and_mul_with_clamp", ElementwiseGeometry(width=c.info["width"]),
                       c.nodes[-1].outputs[0].dtype.value, Rows.TOKENS, tuple(n.name for n in c.nodes), "act_and_mul")


CLAMPED_SWIGLU = Rule(
    "clamped_swiglu", "model_executor/layers/activation.py:SiluAndMulWithClamp (DeepSeek-V4's shared expert, "
    "model_executor/models/deepseek_v4.py DeepseekV4MLP with swiglu_limit)", _match_clamped_swiglu,
    _build_clamped_swiglu,
)

def _match_stream_lift(ctx: FuseContext):
    """The copy that lifts the embedded tokens into the hyper-connection streams (feeds one)."""
    return [Candidate([n]) for n in ctx.graph.nodes if n.op is Op.COPY and ctx.is_free(n)
            and any(u.op is Op.HYPER_CONNECTION for v in ctx.outputs_of([n]) for u in ctx.users.get(v, []))]


def _build_stream_lift(ctx: FuseContext, c: Candidate) -> KernelAttrs:
    n = c.nodes[0]
    width, rows = P.per_token(n.outputs[0])
    return KernelAttrs(KernelKind.ELEMENTWISE, "repeat", ElementwiseGeometry(width=width), n.outputs[0].dtype.value,
                       rows, (n.name,), "stream_lift")


STREAM_LIFT = Rule(
    "stream_lift", "model_executor/models/deepseek_v4.py:DeepseekV4Model.forward (hidden_states.unsqueeze(1)"
    ".repeat(1, self.hc_mult, 1) on the first pipeline rank)", _match_stream_lift, _build_stream_lift,
)

# before the generic activation rules (the clamped SwiGLU), then after the attention rule
EARLY_RULES = [CLAMPED_SWIGLU]
RULES = [INV_ROPE_QUANT, GROUPED_OUTPUT, KV_COMPRESS, HYPER_CONNECTION, STREAM_LIFT]
