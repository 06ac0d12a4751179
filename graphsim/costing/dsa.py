"""Work of DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5) as vLLM runs it, and the rows its
sparse attention is priced at.

vLLM's `Indexer` (model_executor/models/deepseek_v2.py; its `SparseAttnIndexer` op) projects q (H heads of D) and
one key head per token, applies RoPE and quantises both to fp8, writes the key to its fp8 index cache, scores
every query against every earlier key of its sequence (`fp8_mqa_logits` for prefill, `fp8_paged_mqa_logits` for
decode: Σ_h w_h·relu(q_h·k), written as fp32 logits) and keeps the top-k keys per query (`top_k_per_row`). The
indexer kernel is priced in three parts (`kernel_map._indexer_rows`), each an elementwise key whose op names the
geometry (`…/h<heads>.d<head_dim>.k<topk>`):

- `sparse_attn_indexer.prefill`, one row per (prefill query, earlier key) pair: 2·H·D FLOPs (the head products;
  the weighted head sum adds 2·H) and 8 bytes, the fp32 logit written and read back by the top-k; prefill
  reads each key once per block of queries, left out.
- `sparse_attn_indexer.decode`, one row per (decode query, earlier key) pair: the same FLOPs, the 8 logit bytes
  and the key read from the paged fp8 cache (D bytes + a 4-byte scale), once per query.
- `sparse_attn_indexer.tokens`, one row per token: q read in bf16 and written in fp8 (3·H·D), k likewise (3·D)
  and cached (D + 4), the head weights (4·H) and the top-k indices written (4·k).

The sparse attention itself (FlashMLA's sparse kernels, vllm/attention/ops/flashmla.py flash_mla_sparse_prefill /
flash_mla_with_kvcache with indices, v1/attention/backends/mla/flashmla_sparse.py) runs absorbed — q in the
512 + 64 latent, one key head — for prefill and decode alike, each query over min(its context, top-k) keys.
Decode queries are priced on the MLA decode key (measured rows where the profile has them) at that key count;
prefill queries by `attention_work`, their pairs Σ min(p + 1, top-k) (`roofline.attended_pairs` with top-k as
the window) (their picked keys are gathered from a cache
that stays in L2, so a decode row, which streams each query's keys from DRAM, would overcount bytes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

PREFILL = "sparse_attn_indexer.prefill"
DECODE = "sparse_attn_indexer.decode"
TOKENS = "sparse_attn_indexer.tokens"
KINDS = (PREFILL, DECODE, TOKENS)
# sparse MLA prefill (flash_mla_sparse_prefill): per (query, picked key) pair, per query token, per key read
ATTN_PAIRS = "flashmla_sparse.prefill"
ATTN_TOKENS = "flashmla_sparse.prefill_tokens"
ATTN_KEYS = "flashmla_sparse.prefill_keys"
ATTN_KINDS = (ATTN_PAIRS, ATTN_TOKENS, ATTN_KEYS)

_TAG = re.compile(r"^(?P<kernel>[a-z_.]+)/h(?P<h>\d+)\.d(?P<d>\d+)\.k(?P<k>\d+)$")
_ATTN_TAG = re.compile(r"^(?P<kernel>[a-z_.]+)/h(?P<h>\d+)\.l(?P<l>\d+)\.r(?P<r>\d+)\.k(?P<k>\d+)$")


@dataclass(frozen=True)
class IndexerShape:
    heads: int
    head_dim: int
    topk: int

    def tag(self) -> str:
        return f"h{self.heads}.d{self.head_dim}.k{self.topk}"

    @property
    def token_bytes(self) -> float:
        h, d = self.heads, self.head_dim
        return 3.0 * h * d + 3.0 * d + (d + 4.0) + 4.0 * h + 4.0 * self.topk


def op_name(kernel: str, shape: IndexerShape) -> str:
    return f"{kernel}/{shape.tag()}"


def parse(op: str) -> tuple[str, IndexerShape] | None:
    m = _TAG.match(op)
    if m is None or m.group("kernel") not in KINDS:
        return None
    return m.group("kernel"), IndexerShape(int(m.group("h")), int(m.group("d")), int(m.group("k")))


def attention_op_name(kernel: str, heads: int, latent: int, rope: int, topk: int) -> str:
    return f"{kernel}/h{heads}.l{latent}.r{rope}.k{topk}"


# Query heads FlashMLA's sparse kernels take per launch, by the GPU's CUDA major version. vLLM pads a rank's heads
# up to it (vllm/v1/attention/backends/mla/flashmla_sparse.py, FlashMLASparseImpl._bf16_flash_mla_kernel: "kernel
# requires num_local_head to be a multiple of 64 on hopper and 128 on blackwell", q_padded = q.new_empty(...); the
# first release, vLLM 0.11's _forward_bf16_kv, pads to 64): DeepSeek-V3.2's 128 heads at TP 8 run 16 real and 48
# padded heads on an H200, every padded head doing a real head's (query, key) products and its q / output rows.
# The fp8 cache's decode kernel pads to 64 too (FlashMLASparseImpl._compute_fp8_decode_padded_heads). Not stated
# for other majors (no padding).
SPARSE_KERNEL_HEADS = {"9": 64, "10": 128}


def kernel_heads(heads: int, compute_capability: str) -> int:
    """Query heads the sparse MLA kernel runs for a rank's `heads` on a GPU of `compute_capability` ("9.0")."""
    tile = SPARSE_KERNEL_HEADS.get(compute_capability.split(".")[0], 0) if compute_capability else 0
    return -(-heads // tile) * tile if tile else heads


# FlashMLA's sparse prefill kernel (flash_mla_sparse_fwd) measured at up to 640 TFLOP/s in bf16 on an H800 SXM5
# (deepseek-ai/FlashMLA README, "2025.09.29 Release of Sparse Attention Kernels"; its FLOPs count every query head
# the kernel runs), whose dense bf16 peak is an H100's 989.4 TFLOP/s (NVIDIA H100 datasheet; the FlashMLA
# deep-dive, docs/20250422-new-kernel-deep-dive.md, uses 990): 0.647 of the peak. Its (query, key) pair rows
# run at that share of the device's bf16 peak at best (`measured_peak_share`), never at the peak itself.
SPARSE_PREFILL_PEAK_SHARE = 640.0 / 989.4


def measured_peak_share(op: str) -> float | None:
    """The share of the peak FLOP/s a public measurement shows this op's kernel reaching (None: none known)."""
    m = _ATTN_TAG.match(op)
    return SPARSE_PREFILL_PEAK_SHARE if m is not None and m.group("kernel") == ATTN_PAIRS else None


def on_device(op: str, compute_capability: str) -> str:
    """`op` with the heads the device's sparse MLA kernel runs (`kernel_heads`) for its pairs and query-token rows;
    any other op unchanged."""
    m = _ATTN_TAG.match(op)
    if m is None or m.group("kernel") not in (ATTN_PAIRS, ATTN_TOKENS):
        return op
    h = int(m.group("h"))
    padded = kernel_heads(h, compute_capability)
    if padded == h:
        return op
    return attention_op_name(m.group("kernel"), padded, int(m.group("l")), int(m.group("r")), int(m.group("k")))


def attention_work(op: str, rows: np.ndarray, act_bytes: float) -> tuple[np.ndarray, np.ndarray] | None:
    """Sparse MLA prefill, absorbed (q of latent + rope dims per head, one key head, values the latent):
    per pair 2·H·(2·latent + rope) FLOPs; per query token q read and output written (H·(2·latent + rope) elements)
    and its top-k indices (4·k bytes); per key of each prefill sequence one read of its cache row (latent + rope):
    the keys a sequence's queries pick overlap, and its whole cache (MBs) stays in L2, so keys are not read once
    per pair."""
    m = _ATTN_TAG.match(op)
    if m is None or m.group("kernel") not in ATTN_KINDS:
        return None
    h, lat, rope, k = (int(m.group(x)) for x in ("h", "l", "r", "k"))
    kernel = m.group("kernel")
    if kernel == ATTN_PAIRS:
        return rows * 2.0 * h * (2 * lat + rope), np.zeros_like(rows)
    if kernel == ATTN_TOKENS:
        return np.zeros_like(rows), rows * (h * (2 * lat + rope) * act_bytes + 4.0 * k)
    return np.zeros_like(rows), rows * (lat + rope) * act_bytes


def work(op: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(FLOPs, bytes) at `rows` for an indexer op name; None when `op` is not one."""
    parsed = parse(op)
    if parsed is None:
        return None
    kernel, s = parsed
    if kernel == TOKENS:
        return np.zeros_like(rows), rows * s.token_bytes
    flops = 2.0 * s.heads * s.head_dim + 2.0 * s.heads
    nbytes = 8.0 + (s.head_dim + 4.0 if kernel == DECODE else 0.0)
    return rows * flops, rows * nbytes


def state_bytes(op: str, rows: np.ndarray, act_bytes: float) -> np.ndarray | None:
    """The part of `work` / `attention_work`'s bytes that is KV cache (the rest moves activations); None when `op`
    is not one of this module's: the indexer's key read from its fp8 cache per decode pair and its key cached per
    token (D + 4 bytes each), the sparse MLA prefill's key rows read (latent + rope)."""
    parsed = parse(op)
    if parsed is not None:
        kernel, s = parsed
        return rows * (s.head_dim + 4.0) if kernel in (DECODE, TOKENS) else np.zeros_like(rows)
    m = _ATTN_TAG.match(op)
    if m is None or m.group("kernel") not in ATTN_KINDS:
        return None
    if m.group("kernel") != ATTN_KEYS:
        return np.zeros_like(rows)
    return rows * (int(m.group("l")) + int(m.group("r"))) * act_bytes


def causal_pairs(new: np.ndarray, cached: np.ndarray) -> np.ndarray:
    """(query, key) pairs of `new` queries after `cached` keys, each query seeing itself and every earlier key."""
    return new * cached + new * (new + 1) / 2
