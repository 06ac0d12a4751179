"""MiniMax-M3's block top-k indexer as one semantic op, so a trace keeps the token count symbolic and the sparse
attention knows which keys it reads.

transformers (models/minimax_m3_vl `MiniMaxM3VLIndexer.forward`) scores every query against every earlier key
with `index_n_heads` heads (one per KV group) over one shared index key per position, max-pools the scores per
block of `index_block_size` keys (a ceil-div and a pad of the key count: a guard on the token count, so the trace
fell back to a static one), forces the `index_local_blocks` blocks ending at the query's own to be kept, and keeps
the top `index_topk_blocks` blocks per query and index head; `MiniMaxM3VLAttention` then hands those block
indices to the attention interface (`block_indices=`), where only eager / SDPA build a mask from them. While
tracing, a module holding an indexer's fields (`q_proj`, `k_proj`, `q_norm`, `k_norm`, `block_size`,
`topk_blocks`, `local_blocks`, `build_block_mask`; never matched by class name) has its forward swapped: the
projections, norms and RoPE stay aten, the scoring, pooling and top-k are `graphsim::block_indexer`:

    q [B, Hi, S, D], k [B, 1, S, D] (normed, RoPE applied) → int64 [B, Hi, S, topk] block indices, -1 padded

(a fixed width `topk` even when the sequence has fewer blocks, so the token count stays symbolic), and graphsim's
attention (custom_ops.graphsim_attention_forward) passes `block_indices` and the block size to
`graphsim::attention`, whose reference kernel masks every key outside its query's picked blocks. With a cache
(generation) the original forward runs. A tiny random model gives the same logits through these ops as through
transformers' eager path (tests/importers/test_block_sparse.py).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from graphsim.importers.hf.swap import swapped_forwards


@torch.library.custom_op("graphsim::block_indexer", mutates_args=())
def block_indexer_op(q: torch.Tensor, k: torch.Tensor, block_size: int, topk: int, local: int) -> torch.Tensor:
    """q [B,Hi,S,D], k [B,1,S,D] → the int64 indices [B,Hi,S,topk] of the key blocks with the highest max-pooled
    score q·k over each query's causal prefix (queries at positions 0..S-1), the `local` blocks ending at the
    query's own always among them; -1 pads the slots without a visible block."""
    b, h, s, _ = q.shape
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2))  # [B, Hi, S, S]
    pos = torch.arange(s, device=q.device)
    scores = scores.masked_fill(pos[None, None, None, :] > pos[None, None, :, None], float("-inf"))
    blocks = -(-s // block_size)
    pad = blocks * block_size - s
    if pad:
        scores = F.pad(scores, (0, pad), value=float("-inf"))
    block_scores = scores.view(b, h, s, blocks, block_size).amax(dim=-1)
    if local > 0:
        own = pos // block_size
        local_idx = (own[:, None] - torch.arange(local, device=q.device)[None, :]).clamp(min=0)  # [S, local]
        block_scores.scatter_(-1, local_idx.expand(b, h, s, local), float("inf"))
    kept = min(topk, blocks)
    values, idx = block_scores.topk(kept, dim=-1)
    out = torch.full((b, h, s, topk), -1, dtype=torch.int64, device=q.device)
    out[..., :kept] = idx.masked_fill(values == float("-inf"), -1)
    return out


@block_indexer_op.register_fake
def _block_indexer_fake(q, k, block_size, topk, local):
    return q.new_empty((q.shape[0], q.shape[1], q.shape[2], topk), dtype=torch.int64)


def block_keep_mask(block_indices: torch.Tensor, block_size: int, heads: int, keys: int) -> torch.Tensor:
    """[B, heads, S, keys] True where key j's block is among its query's picked blocks (for the query head's index
    head: heads / Hi query heads per index head, as MiniMaxM3VLIndexer.build_block_mask expands them)."""
    b, hi, s, _ = block_indices.shape
    blocks = -(-keys // block_size)
    safe = torch.where(block_indices < 0, blocks, block_indices)
    picked = torch.zeros(b, hi, s, blocks + 1, dtype=torch.bool, device=block_indices.device)
    picked.scatter_(-1, safe, True)
    keep = picked[..., :blocks].repeat_interleave(block_size, dim=-1)[..., :keys]
    return keep.repeat_interleave(heads // hi, dim=1)


def _is_block_indexer(m: torch.nn.Module) -> bool:
    return all(hasattr(m, a) for a in ("q_proj", "k_proj", "q_norm", "k_norm", "block_size", "topk_blocks",
                                       "local_blocks", "build_block_mask"))


def _block_indexer_forward(self, hidden_states, position_embeddings, cache=None, position_ids=None, **kwargs):
    """The indexer's projections, norms and RoPE as transformers writes them, then one `graphsim::block_indexer`
    node (no cache: a fresh sequence, positions 0..S-1)."""
    if cache is not None:
        return type(self).forward(self, hidden_states, position_embeddings, cache, position_ids)
    b, s, _ = hidden_states.shape
    q = self.q_norm(self.q_proj(hidden_states).view(b, s, -1, self.head_dim)).transpose(1, 2)
    k = self.k_norm(self.k_proj(hidden_states).view(b, s, 1, self.head_dim)).transpose(1, 2)
    cos, sin = position_embeddings
    rope = sys.modules[type(self).__module__].apply_rotary_pos_emb
    q, k = rope(q, k, cos[..., : self.head_dim], sin[..., : self.head_dim])
    return torch.ops.graphsim.block_indexer(q, k, int(self.block_size), int(self.topk_blocks), int(self.local_blocks))


@contextlib.contextmanager
def block_sparse_patches(model: torch.nn.Module) -> Iterator[list[str]]:
    """Swap each block indexer's forward for the semantic one; restore after."""
    with swapped_forwards(model, lambda m: _block_indexer_forward if _is_block_indexer(m) else None) as names:
        yield names
