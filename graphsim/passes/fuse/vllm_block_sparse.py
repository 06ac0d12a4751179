"""Kernel names for MiniMax-M3's block-sparse attention and its block top-k indexer (graphsim/importers/hf/
block_sparse_ops.py), priced in costing/block_sparse.py.

No vLLM MiniMax-M3 model file was among the sources read (vllm-project/vllm holds none at the stored commits), so
the kernels are named for what transformers' MiniMaxM3VLIndexer docstring says the deployment runs ("the
deployment block-sparse kernel (MiniMax `topk_sparse`)": per query and KV group, attention over the picked key
blocks only) and priced from their work, never from a measured row of another kernel:

- `block_sparse_attention`: GQA (the layer's q/kv heads, head_dim) where each query reads at most
  topk_blocks × block_size keys (`AttentionGeometry.index_topk`);
- `block_sparse_indexer`: the index heads' scores of every (query, earlier key) pair against one cached index
  key per position, their per-block max and top-k (`IndexerGeometry.block_size`), in the activation dtype.
"""

from __future__ import annotations

from graphsim.ir import Node, Op
from graphsim.ir.ops import OpGroup
from graphsim.passes.fuse.core import FuseContext

BLOCK_SPARSE_ATTENTION = "block_sparse_attention"
BLOCK_SPARSE_INDEXER = "block_sparse_indexer"


def indexer_prep(ctx: FuseContext, n: Node) -> list[Node]:
    """The per-token ops between the block indexer's normed q / k and its node (RoPE, transposes): free
    elementwise or data-movement nodes reached upward from its inputs, stopping at any other node (the norms and
    projections, fused by their own rules)."""
    found: dict[str, Node] = {}
    todo = list(n.inputs)
    while todo:
        p = ctx.producer(todo.pop())
        if p is None or p.name in found or not ctx.is_free(p) or p.op is Op.LINEAR \
                or p.op.group not in (OpGroup.ELEMENTWISE, OpGroup.DATA_MOVEMENT):
            continue
        found[p.name] = p
        todo.extend(p.inputs)
    return sorted(found.values(), key=lambda m: ctx.pos[m.name])
