"""Fuse target `eager`: no fusion — every aten op is one kernel, as PyTorch eager runs it.

Used to validate on CPU, where the profiler times the same aten ops. View-like ops and tensor
creation launch nothing of their own here either.
"""

from __future__ import annotations

from graphsim.ir import AttentionAttrs, EmbeddingAttrs, IndexerAttrs, LinearAttentionAttrs, MoEAttrs, Node, Op
from graphsim.ir.geometry import (
    ElementwiseGeometry, EmbeddingGeometry, IndexerGeometry, LinearAttentionGeometry, MoeExpertsGeometry,
)
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes.fuse import patterns as P
from graphsim.passes.fuse.core import FuseContext, Rule

RULES: list[Rule] = []


def leftover(ctx: FuseContext, n: Node) -> tuple[KernelAttrs | None, str]:
    if n.op in P.ABSORBED_OPS or ctx.index_only(n):
        return None, f"absorbed.{n.op.value}"
    dtype = n.outputs[0].dtype.value
    covers = (n.name,)
    if n.op is Op.LINEAR:
        return P.gemm_attrs(ctx, [n], "linear", "eager.linear"), "gemm"
    if n.op is Op.ATTENTION:
        geo = P.attention_geometry(n.attrs_as(AttentionAttrs))
        return KernelAttrs(KernelKind.ATTENTION, "attention", geo, dtype, Rows.NONE, covers, "eager.attention"), "attention"
    if n.op is Op.MOE_EXPERTS:
        a = n.attrs_as(MoEAttrs)
        geo = MoeExpertsGeometry(hidden_size=a.hidden_size, inter_size=a.intermediate_size, top_k=a.top_k,
                                 num_experts=a.num_experts, tp=1, ep=1, activation=a.activation, gated=a.gated)
        return KernelAttrs(KernelKind.MOE_EXPERTS, "moe_experts", geo, dtype, Rows.TOKENS, covers,
                           "eager.moe_experts"), "moe_experts"
    if n.op is Op.LINEAR_ATTENTION:
        la = n.attrs_as(LinearAttentionAttrs)
        lgeo = LinearAttentionGeometry(num_k_heads=la.num_k_heads, num_v_heads=la.num_v_heads,
                                       k_head_dim=la.k_head_dim, v_head_dim=la.v_head_dim, kind=la.kind,
                                       chunk_size=la.chunk_size, state_dtype=la.state_dtype)
        return KernelAttrs(KernelKind.LINEAR_ATTENTION, la.kind, lgeo, dtype, Rows.NONE, covers,
                           "eager.linear_attention"), "linear_attention"
    if n.op is Op.SPARSE_INDEXER:
        ia = n.attrs_as(IndexerAttrs)
        igeo = IndexerGeometry(num_heads=ia.num_heads, head_dim=ia.head_dim, topk=ia.topk)
        return KernelAttrs(KernelKind.SPARSE_INDEXER, "dsa_indexer", igeo, ctx.spec(n.inputs[0]).dtype.value,
                           Rows.NONE, covers, "eager.sparse_indexer"), "sparse_indexer"
    if n.op is Op.EMBEDDING:
        e = n.attrs_as(EmbeddingAttrs)
        egeo = EmbeddingGeometry(vocab=e.num_embeddings, width=e.embedding_dim)
        return KernelAttrs(KernelKind.EMBEDDING, "embedding", egeo, dtype, Rows.TOKENS, covers,
                           "eager.embedding"), "embedding"
    width, rows = P.per_token(n.outputs[0])
    in_width = max((P.per_token(ctx.spec(v))[0] for v in n.inputs if v not in ctx.graph.params), default=width)
    return (KernelAttrs(KernelKind.ELEMENTWISE, n.op.value, ElementwiseGeometry(width=width, in_width=in_width), dtype,
                        rows, covers, "eager.op"), f"op.{n.op.value}")
