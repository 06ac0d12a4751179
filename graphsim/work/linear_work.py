"""Core work of the linear-attention / recurrent mixers and of MiniMax-M3's block-sparse attention.

Conventions as in `attention_work` (per layer, per sequence of n new tokens after p cached):

- `RecurrentMixer` (Kimi Delta Attention, MiniMax lightning attention, ...): the builder states the
  recurrence's FLOPs per new token (its formula is in the builder, `builders/linear_attn.py`); the
  per-request state (`RecurrentMixer.state`) is read once when p > 0 and written once per sequence,
  as the gated delta net's and Mamba2's.
- Block-sparse attention (MiniMax-M3 `BlockSparseIndexer`, transformers minimax_m3_vl
  MiniMaxM3VLIndexer): the query at (0-based) position t attends to the keys of the `topk` blocks
  of B keys it selects, the block holding t itself always among them (`local` ≥ 1). While t's
  block index is below topk every earlier block is selected: t + 1 keys; after that topk − 1 full
  blocks plus t's own partial block: (topk − 1)·B + (t mod B) + 1 keys. The indexer scores every
  causal (query, key) pair with H_I heads of d_I (2·d_I FLOPs per head and pair; the max-pool per
  block and the top-k are comparisons, not counted), reads every cached index key once and writes
  the new ones. The cached K/V some new token attends to are at most min(p, n·topk·B).
"""

from __future__ import annotations

from graphsim.work.attention_math import causal_pairs
from graphsim.work.dtypes import Precision
from graphsim.work.specs import BlockSparseIndexer, GqaAttention, RecurrentMixer


def block_sparse_keys(t: int, block: int, topk: int) -> int:
    """Keys the query at 0-based position t attends to under block top-k selection (its own block always kept)."""
    if t // block < topk:
        return t + 1
    return (topk - 1) * block + t % block + 1


def block_sparse_pairs(n: int, p: int, block: int, topk: int) -> int:
    """Σ over the new positions t = p … p + n − 1 of `block_sparse_keys`, in closed form per run of positions."""
    total = 0
    start, end = p, p + n  # positions [start, end)
    dense_end = min(end, topk * block)  # positions whose block index is below topk see every earlier key
    if start < dense_end:
        # Σ_{t=start}^{dense_end-1} (t + 1)
        total += (dense_end * (dense_end + 1) - start * (start + 1)) // 2
        start = dense_end
    if start < end:
        full = (topk - 1) * block + 1
        count = end - start
        total += full * count
        # Σ (t mod B) over [start, end): whole cycles contribute B(B−1)/2 each
        def mod_sum(x: int) -> int:  # Σ_{t=0}^{x-1} (t mod B)
            q, r = divmod(x, block)
            return q * block * (block - 1) // 2 + r * (r - 1) // 2
        total += mod_sum(end) - mod_sum(start)
    return total


def block_sparse_core(
    attn: GqaAttention, ix: BlockSparseIndexer, n: int, p: int, c: int, precision: Precision
) -> tuple[int, float, float]:
    """(FLOPs, state read bytes, state write bytes) of one sparse layer for c sequences of n new after p."""
    pairs = block_sparse_pairs(n, p, ix.block, ix.topk)
    flops = 2 * pairs * attn.heads * (attn.head_dim + attn.v_head_dim)
    per_token = attn.kv_elements_per_token * precision.kv.bytes_per_element
    ix_flops, ix_read, ix_written = block_indexer_core(ix, n, p, c, precision)
    read = min(p, n * ix.topk * ix.block) * per_token
    written = n * per_token
    return flops * c + ix_flops, read * c + ix_read, written * c + ix_written


def block_indexer_core(ix: BlockSparseIndexer, n: int, p: int, c: int, precision: Precision) -> tuple[int, float, float]:
    """The indexer's part of `block_sparse_core`: its scores over every earlier key and its index-key cache
    (read for the p cached positions, written for the n new ones), for c sequences."""
    index_key = ix.cache_elements_per_token * precision.kv.bytes_per_element
    return causal_pairs(n, p) * ix.heads * 2 * ix.head_dim * c, p * index_key * c, n * index_key * c


def recurrent_core(attn: RecurrentMixer, n: int, p: int, c: int, precision: Precision) -> tuple[int, float, float]:
    """(FLOPs, state read bytes, state write bytes) of one recurrent layer for c sequences of n new after p."""
    state = sum(part.elements * (part.dtype or precision.state).bytes_per_element for part in attn.state)
    return attn.flops_per_token * n * c, (state if p > 0 else 0.0) * c, state * c
