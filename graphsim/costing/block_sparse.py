"""Work of MiniMax-M3's block top-k indexer, keyed as elementwise rows whose op names the geometry, and the rows its
block-sparse attention is priced at.

The indexer (transformers models/minimax_m3_vl MiniMaxM3VLIndexer; the kernel names in
passes/fuse/vllm_block_sparse.py: no vLLM MiniMax-M3 source was read) projects `Hi` index-head queries and ONE
index key per token (dim D, normed, RoPE), caches the key (MiniMaxM3VLSparseCacheLayer.update_index), scores every
query against every earlier cached key (Hi·D multiply-adds per pair), max-pools the scores per block of B keys and
keeps the top-K blocks per query and index head. Priced in three parts (`kernel_map._block_indexer_rows`), op
names `…/h<Hi>.d<D>.b<B>.k<K>`:

- `block_sparse_indexer.prefill`, one row per (prefill query, earlier key) pair: 2·Hi·D FLOPs; the fp32 block
  maxima written and read back by the top-k, 2·Hi·4 bytes per (query, block): 8·Hi/B per pair (a prefill
  sequence's index keys are read once per sequence, in the token row, not once per pair);
- `block_sparse_indexer.decode`, one row per (decode query, earlier key) pair: the same FLOPs and maxima, and the
  cached index key read from memory once per query (D elements);
- `block_sparse_indexer.tokens`, one row per token: q read (Hi·D), the key read, written to the index cache and
  read back once by its own sequence's scoring (3·D), all in the activation dtype, and the K block indices per
  index head written as int32 (4·Hi·K bytes).

The attention reads, per query, only the keys of its K picked blocks: at most K·B keys (`index_topk` of its
geometry). Decode groups are priced on the layer's dense GQA decode key (measured rows where the profile has them)
at min(context, K·B) keys; prefill sequences on the GQA prefill key with K·B as its window, whose work is the pairs
Σ min(p + 1, K·B) (`roofline.attended_pairs`). Both are upper bounds: the query's own block is only partly filled
(its keys up to the query), so a query past K·B tokens reads (K − 1)·B plus its position in its block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

PREFILL = "block_sparse_indexer.prefill"
DECODE = "block_sparse_indexer.decode"
TOKENS = "block_sparse_indexer.tokens"
KINDS = (PREFILL, DECODE, TOKENS)

_TAG = re.compile(r"^(?P<kernel>[a-z_.]+)/h(?P<h>\d+)\.d(?P<d>\d+)\.b(?P<b>\d+)\.k(?P<k>\d+)$")


@dataclass(frozen=True)
class BlockIndexerShape:
    heads: int
    head_dim: int
    block: int
    topk: int

    def tag(self) -> str:
        return f"h{self.heads}.d{self.head_dim}.b{self.block}.k{self.topk}"


def op_name(kernel: str, shape: BlockIndexerShape) -> str:
    return f"{kernel}/{shape.tag()}"


def parse(op: str) -> tuple[str, BlockIndexerShape] | None:
    m = _TAG.match(op)
    if m is None or m.group("kernel") not in KINDS:
        return None
    return m.group("kernel"), BlockIndexerShape(int(m.group("h")), int(m.group("d")), int(m.group("b")), int(m.group("k")))


def work(op: str, rows: np.ndarray, act_bytes: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(FLOPs, bytes) at `rows` for a block indexer op name; None when `op` is not one."""
    parsed = parse(op)
    if parsed is None:
        return None
    kernel, s = parsed
    if kernel == TOKENS:
        return np.zeros_like(rows), rows * ((s.heads * s.head_dim + 3.0 * s.head_dim) * act_bytes + 4.0 * s.heads * s.topk)
    flops = 2.0 * s.heads * s.head_dim
    nbytes = 8.0 * s.heads / s.block + (s.head_dim * act_bytes if kernel == DECODE else 0.0)
    return rows * flops, rows * nbytes
