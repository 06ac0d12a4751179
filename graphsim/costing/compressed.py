"""Work of compressed-KV attention and hyper-connections (DeepSeek-V4) as vLLM runs them, and the rows they are
priced at.

vLLM (vllm/model_executor/layers/deepseek_v4_attention.py, deepseek_compressor.py, mhc.py; the backend
vllm/v1/attention/backends/mla/sparse_swa.py) runs, per layer:

- the attention on FlashMLA's sparse fp8 kernels (`flash_mla_with_kvcache` for decode queries with the
  sliding-window indices plus the compressed cache as `extra_k_cache` / `extra_indices_in_kvcache`;
  `flash_mla_sparse_fwd` for prefill over the gathered window and compressed entries): one shared K=V head
  of head_dim D in a 584-byte fp8_ds_mla entry, every query over min(t + 1, W) window keys plus its
  compressed entries (⌊(t + 1)/m⌋ of them; the indexer's top-k on CSA layers). Priced in three parts, each an
  elementwise key whose op names the geometry (`…/h<heads>.d<head_dim>.e<entry bytes>`): `.pairs` one row
  per (query, key) pair, 2·H·2D FLOPs (scores and values over the same D); `.keys` one row per key read,
  the entry's bytes (a decode query reads its own keys; a prefill sequence gathers its window and entries
  once); `.tokens` one row per query, q read and the output written (2·H·D elements);
- the compressor (`DeepseekCompressor.forward`: `_save_partial_states_kernel` writes every token's kv and
  score, fp32, into the state cache; `_fused_kv_compress_norm_rope_insert_*` pools a closed window's
  coff·m slots, norms, rotates, quantises and writes the entry): per token the fp32 projections read
  (2·coff·D·4 B) and stored (2·coff·D·4 B), and each entry's slots read back (coff·m·2·D·4 B per m tokens)
  plus its cache write (E per m tokens); FLOPs the pooling, 2·coff·D per token;
- the indexer (`DeepseekV4Indexer`, vLLM's SparseAttnIndexer as for DeepSeek-V3.2, costing/dsa.py) over
  the compressed keys: its (query, visible entry) pairs, Σ_t ⌊(t + 1)/m⌋, instead of every earlier token;
- the hyper-connections: `mhc_pre` (RMS of the n flattened streams, the fn projection to (2 + n)·n mixes,
  sigmoid / Sinkhorn, the collapse: 2·(2 + n)·n·n·D FLOPs, n·D read and D written per token), `mhc_post`
  (post·x + combᵀ·streams: 2·n·n·D + 2·n·D FLOPs, (2n + 1)·D moved), `hc_head` (the final collapse,
  2·n·n·D FLOPs, (n + 1)·D moved), in the model dtype. Their fn weights (fp32, (2 + n)·n × n·D, read once
  a step) are not priced: a known gap of about 1.5 MB per block at V4-Flash's sizes.

HunYuan-V4's independent hyper-connections (no comb, no Sinkhorn; vllm/models/hy_v4/nvidia/hc.py
HYV4HCPreLayer / HYV4HCPostLayer on the in-tree Triton kernels of triton_ihc.py) are priced the same way:
`triton_ihc_pre` (stage 1: sum of squares and the fn projection to 2n mixes per split of 1024 inputs, stage 2: the
gates and the collapse: 2·2n·n·D + 2·n·D + 2·n·D FLOPs; `ihc_pre_bytes`), `triton_ihc_post` (post·x + streams:
2·n·D FLOPs, (2n + 1)·D moved plus the n fp32 gates). The pre kernel's two launches are one key here, and its fn
weight (fp32, 2n × n·D, a ReplicatedLinear: whole on every tensor-parallel rank) is not priced, as above.
"""

from __future__ import annotations

import re

import numpy as np

ATTN_PAIRS = "flashmla_sparse_swa.pairs"
ATTN_KEYS = "flashmla_sparse_swa.keys"
ATTN_TOKENS = "flashmla_sparse_swa.tokens"
ATTN_KINDS = (ATTN_PAIRS, ATTN_KEYS, ATTN_TOKENS)
COMPRESSOR = "deepseek_compressor"
MHC_PRE, MHC_POST, HC_HEAD = "mhc_pre", "mhc_post", "hc_head"
IHC_PRE, IHC_POST = "triton_ihc_pre", "triton_ihc_post"

_ATTN = re.compile(r"^(?P<kernel>[a-z_.]+)/h(?P<h>\d+)\.d(?P<d>\d+)\.e(?P<e>\d+)$")
_COMP = re.compile(r"^deepseek_compressor/d(?P<d>\d+)\.c(?P<c>\d+)\.m(?P<m>\d+)\.e(?P<e>\d+)$")
_HC = re.compile(r"^(?P<kernel>mhc_pre|mhc_post|hc_head|triton_ihc_pre|triton_ihc_post)/n(?P<n>\d+)\.d(?P<d>\d+)$")
_IHC_BLOCK_K = 1024  # vllm/models/hy_v4/nvidia/triton_ihc.py _BLOCK_K: the pre kernel's split of the n·D inputs


def attention_op(kernel: str, heads: int, head_dim: int, entry_bytes: int) -> str:
    return f"{kernel}/h{heads}.d{head_dim}.e{entry_bytes}"


def compressor_op(head_dim: int, coff: int, ratio: int, entry_bytes: int) -> str:
    return f"{COMPRESSOR}/d{head_dim}.c{coff}.m{ratio}.e{entry_bytes}"


def hc_op(kernel: str, streams: int, hidden: int) -> str:
    return f"{kernel}/n{streams}.d{hidden}"


def ihc_pre_bytes(streams: int, hidden: int, act_bytes: float) -> float:
    """Bytes a token moves through vLLM's triton_ihc_pre (vllm/models/hy_v4/nvidia/triton_ihc.py): stage 1 reads
    the n·D streams once, stage 2 reads them again for the collapse and writes D outputs and n fp32 post gates;
    the fp32 partials (ceil(n·D / 1024) splits of 1 + 2·next_pow2(n) values) are written then read back."""
    n, d = streams, hidden
    splits = -(-n * d // _IHC_BLOCK_K)
    stride = 1 + 2 * (1 << max(n - 1, 0).bit_length())
    return (2 * n + 1) * d * act_bytes + 4.0 * n + 2 * splits * stride * 4.0


def work(op: str, rows: np.ndarray, act_bytes: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(FLOPs, bytes) at `rows` for one of this module's op names; None when `op` is not one."""
    m = _ATTN.match(op)
    if m is not None and m.group("kernel") in ATTN_KINDS:
        h, d, e = int(m.group("h")), int(m.group("d")), int(m.group("e"))
        if m.group("kernel") == ATTN_PAIRS:
            return rows * 4.0 * h * d, np.zeros_like(rows)
        if m.group("kernel") == ATTN_KEYS:
            return np.zeros_like(rows), rows * float(e)
        return np.zeros_like(rows), rows * 2.0 * h * d * act_bytes
    m = _COMP.match(op)
    if m is not None:
        d, c, r, e = (int(m.group(x)) for x in ("d", "c", "m", "e"))
        return rows * 2.0 * c * d, rows * (3 * 2.0 * c * d * 4.0 + e / r)
    m = _HC.match(op)
    if m is not None:
        n, d = int(m.group("n")), int(m.group("d"))
        kernel = m.group("kernel")
        if kernel == MHC_PRE:
            return rows * 2.0 * (2 + n) * n * n * d, rows * ((n + 1) * d * act_bytes + (n + n * n) * 4.0)
        if kernel == MHC_POST:
            return rows * (2.0 * n * n * d + 2.0 * n * d), rows * (2 * n + 1) * d * act_bytes
        if kernel == IHC_PRE:
            return rows * (4.0 * n * n * d + 4.0 * n * d), rows * ihc_pre_bytes(n, d, act_bytes)
        if kernel == IHC_POST:
            return rows * 2.0 * n * d, rows * ((2 * n + 1) * d * act_bytes + 4.0 * n)
        return rows * 2.0 * n * n * d, rows * (n + 1) * d * act_bytes
    return None


def state_bytes(op: str, rows: np.ndarray) -> np.ndarray | None:
    """The part of `work(op, rows)`'s bytes that is KV cache or compressor state (the rest moves activations);
    None when `op` is not one of this module's. The attention's `.keys` rows read cache entries; the compressor
    stores each token's fp32 kv and score, reads a closed window's slots back and writes the entry
    (2·2·coff·D·4 + E/m a token; reading its projection, the other 2·coff·D·4, is an activation)."""
    m = _ATTN.match(op)
    if m is not None and m.group("kernel") in ATTN_KINDS:
        return rows * float(m.group("e")) if m.group("kernel") == ATTN_KEYS else np.zeros_like(rows)
    m = _COMP.match(op)
    if m is not None:
        d, c, r, e = (int(m.group(x)) for x in ("d", "c", "m", "e"))
        return rows * (2 * 2.0 * c * d * 4.0 + e / r)
    return np.zeros_like(rows) if _HC.match(op) else None


def _visible_prefix(x: np.ndarray, ratio: int) -> np.ndarray:
    """Σ_{s=1..x} ⌊s/m⌋ (entries seen by queries at positions 0 .. x−1): x = q·m + r gives m·q(q−1)/2 + q·(r+1)."""
    q, r = np.divmod(x, ratio)
    return ratio * q * (q - 1) / 2 + q * (r + 1)


def compressed_pairs(new: np.ndarray, cached: np.ndarray, ratio: int, topk: int = 0) -> np.ndarray:
    """Σ over new positions t = p .. p+n−1 of min(⌊(t+1)/m⌋, k) (k = 0: no cap): (query, entry) pairs
    (work/attention_math.compressed_pairs, vectorised)."""
    def prefix(x: np.ndarray) -> np.ndarray:
        if not topk:
            return _visible_prefix(x, ratio)
        edge = topk * ratio - 1
        return np.where(x <= edge, _visible_prefix(np.minimum(x, edge), ratio),
                        _visible_prefix(np.full_like(x, edge), ratio) + topk * (x - edge))

    n, p = np.asarray(new, dtype=np.float64), np.asarray(cached, dtype=np.float64)
    return prefix((p + n).astype(np.int64)) - prefix(p.astype(np.int64))


def sliding_pairs(new: np.ndarray, cached: np.ndarray, window: int) -> np.ndarray:
    """Σ_{i=1..n} min(p + i, W) (work/attention_math.causal_pairs with a window, vectorised)."""
    n, p = np.asarray(new, dtype=np.float64), np.asarray(cached, dtype=np.float64)
    full = n * p + n * (n + 1) / 2
    if window <= 0:
        return full
    lo, hi = p + 1, p + n
    growing = np.where(window >= lo, (lo + window) * (window - lo + 1) / 2 + (hi - window) * window, n * window)
    return np.where(window >= hi, full, growing)
