"""Composite rows: a whole block of kernels priced by one measured row where the profile has one.

An engine module measured as one unit (its projections, norms, rotary and attention core timed in a
single forward) replaces the kernels it covers when the profile holds rows for the block's geometry;
otherwise the kernels are priced one by one, as before. Today's composite is the MLA attention block:

- *Which kernels.* aiconfigurator's vLLM collector times `DeepseekV2MLAAttention.forward(positions,
  hidden_states)` built with vLLM's own modeling code at TP 1 and the per-rank head count
  (ai-dynamo/aiconfigurator collector/vllm/collect_mla_module.py, `_create_attention_module` /
  `run_mla_module`): the q/kv down-projections, q_a and kv_a RMSNorms, q_b projection, rotary, KV-cache
  write, the attention core with its kv_b up-projection, and o_proj — everything under the attention
  module, but not the input layernorm before it nor the TP all-reduce after o_proj (TP 1). So the block
  here is every kernel of a layer whose module scope is the MLA attention kernel's scope or below it,
  collectives excepted (identified from the fused graph's scopes and kinds, never a model name).
- *Geometry.* The row's key (`MlaModuleDecodeKey` / `MlaModulePrefillKey`) is the attention kernel's
  per-rank heads and MLA dims, the hidden size (o_proj's output features), the q LoRA rank (the width
  of the block's RMSNorm other than the kv_a one; 0 without one) and the projections' dtype.
- *Which points.* Decode groups are priced at (batch, kv_len); a prefill group without a cached prefix at
  (batch, q_len, q_len). The imported module prefill rows were all measured without a cached prefix
  (collect_mla_module.py `get_context_test_cases`: MLA context cases carry no prefix length).
- *A chunk after a cached prefix* (n new tokens after p cached, `count` such sequences) is what vLLM's MLA
  prefill runs for chunked prefill and prefix hits (vllm/v1/attention/backends/mla/common.py,
  `MLACommonImpl._forward_prefill` and `_compute_prefill_context`, 0.10.1; the same in 0.19's
  model_executor/layers/attention/mla_attention.py): the block's projections for the n tokens, causal attention
  among them, and for the context a gather of the p cached latents, `kv_b_proj` up-projecting them, one
  non-causal attention of the n queries over the p keys, and `merge_attn_states`. It is priced as the
  difference of two measured module rows, T(count, n + p) − T(count, p): the projections of n tokens and
  the attention pairs n·p + n(n + 1)/2, at the efficiency the measured module reached on those lengths; plus
  the row at (count, 1), the module's fixed cost (launches, one token's work), which the difference cancels
  but the chunk's one run of the module pays; plus the block's `kv_b_proj` GEMM on the p cached latents (in
  a fresh prefill the up-projection covers the new tokens only). A step's time is never below its chunks'
  floor (`KernelRows.floor`): the row at (count, n, n), the chunk without its prefix, plus `kv_b_proj` on the
  p latents and the n·p attention over the cached keys at the fastest attention rate measured on the GPU
  (`context_attention_rate`, `KernelRows.floor_attention_flops`). Short rows are noisy (H200 DeepSeek-R1 TP 8:
  116.3 µs at 16 tokens, 109.7 at 32), so a difference of two of them can fall below the chunk's own row, or
  below zero; and after a long prefix the difference prices the n·p attention at the causal curve's margin,
  faster than any attention kernel (R1 TP 8 on H200 after 24,576 cached: ~960 TFLOP/s, against the H200 tables'
  best FA3 row, 771.5 TFLOP/s, and FlashAttention-3's best published BF16 forward, 740 TFLOP/s on H100, arXiv
  2407.08608). The rows come from the table, so the chunk's source is the table's (measured / interpolated /
  extrapolated), or `derived` where the attention floor binds. Without module rows the chunk is priced by the
  block's kernels, as before.

The composite is one cost-tree leaf whose kernel is named `composite: mla_module`; it is priced per
sequence group like attention (kind `attention`), so the simulator's additive tables treat it as such.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from graphsim.costing.dtypes import PeakClass
from graphsim.costing.hardware import HardwareSpec
from graphsim.costing.interpolate import DERIVED, ROOFLINE
from graphsim.costing.kernel_map import Dtypes, KernelRows, KeyRows, NoKernelKey, StepArrays, kernel_rows
from graphsim.costing.kernels import (
    AttentionPrefillKey, DsaModuleDecodeKey, DsaModulePrefillKey, KernelKey, MlaModuleDecodeKey, MlaModulePrefillKey,
    TableKind,
)
from graphsim.costing.profile_db import ProfileDB
from graphsim.costing.roofline import kernel_work
from graphsim.ir import Graph, Node
from graphsim.ir.geometry import AttentionGeometry, GemmGeometry, IndexerGeometry, NormGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind

COMPOSITE_MLA = "composite: mla_module"
COMPOSITE_DSA = "composite: dsa_module"
HasRows = Callable[[KernelKey], bool]  # does the profile hold measured rows for this key?


@dataclass(frozen=True)
class MlaModuleBlock:
    """One layer's MLA attention block: its geometry and the kernels a module row replaces."""

    attention: KernelAttrs  # the block's MLA attention kernel (per-rank heads, MLA dims)
    hidden_size: int
    q_lora_rank: int  # 0: no low-rank query projection
    gemm_dtype: str  # IR dtype name of the block's projections
    parts: tuple[KernelAttrs, ...]  # every kernel of the block, in launch order
    part_names: tuple[str, ...]  # their node names
    decode_rows: bool = False  # the profile holds module rows for the decode key
    prefill_rows: bool = False  # ... for the prefill key
    indexer: IndexerGeometry | None = None  # a DSA block's indexer (its rows: DSA module rows); None for dense MLA

    def keys(self, dt: Dtypes) -> tuple[MlaModuleDecodeKey, MlaModulePrefillKey]:
        g = self.attention.geometry_as(AttentionGeometry)
        rope = g.qk_rope_head_dim
        geo = (g.num_heads, g.kv_lora_rank, g.head_dim - rope, rope, g.v_head_dim, dt.of(self.attention.dtype), dt.kv,
               self.hidden_size, self.q_lora_rank, dt.of(self.gemm_dtype))
        if self.indexer is not None:
            idx = (self.indexer.num_heads, self.indexer.head_dim, self.indexer.topk)
            return DsaModuleDecodeKey(*geo, *idx), DsaModulePrefillKey(*geo, *idx)
        return MlaModuleDecodeKey(*geo), MlaModulePrefillKey(*geo)

    @property
    def name(self) -> str:
        return COMPOSITE_DSA if self.indexer is not None else COMPOSITE_MLA

    def kv_b_proj(self) -> KernelAttrs | None:
        """The block's up-projection of the latent (the GEMM whose inputs are kv_lora_rank wide), if it has one."""
        rank = self.attention.geometry_as(AttentionGeometry).kv_lora_rank
        return next((p for p in self.parts if p.kind is KernelKind.GEMM and isinstance(p.geometry, GemmGeometry)
                     and p.geometry.k == rank), None)

    @property
    def used(self) -> bool:
        return self.decode_rows or self.prefill_rows

    def attrs(self) -> KernelAttrs:
        """The composite leaf's kernel: the attention kernel renamed, covering every part's ops."""
        covers = tuple(c for p in self.parts for c in p.covers)
        phases = "/".join(p for p, ok in (("decode", self.decode_rows), ("prefill", self.prefill_rows)) if ok)
        rule = (f"{self.name}: measured whole-block rows ({phases}) replace {', '.join(self.part_names)}; "
                "costing/composite.py")
        return KernelAttrs(self.attention.kind, self.name, self.attention.geometry, self.attention.dtype,
                           self.attention.rows, covers, rule)


def _in_scope(node: Node, scope: str) -> bool:
    return node.scope == scope or node.scope.startswith(scope + ".")


def mla_block(layer_nodes: Sequence[Node], dt: Dtypes, has_rows: HasRows | None) -> MlaModuleBlock | None:
    """The MLA attention block among one layer's kernel nodes (None when the layer has no MLA attention or
    its geometry cannot be read), with whether the profile has module rows for it."""
    attn = next((n for n in layer_nodes if n.kernel.kind is KernelKind.ATTENTION
                 and isinstance(n.kernel.geometry, AttentionGeometry) and n.kernel.geometry.is_mla), None)
    if attn is None or not attn.scope:
        return None
    members = [n for n in layer_nodes if _in_scope(n, attn.scope) and not n.kernel.kind.is_collective]
    o_proj = next((n for n in members if n.kernel.kind is KernelKind.GEMM and attn.name in n.inputs), None)
    gemms = [n for n in members if n.kernel.kind is KernelKind.GEMM]
    indexer = None
    if attn.kernel.geometry_as(AttentionGeometry).index_topk:  # DSA: the sparse MLA and its indexer, one module
        idx = [n.kernel.geometry for n in members if n.kernel.kind is KernelKind.SPARSE_INDEXER]
        if len(idx) != 1 or not isinstance(idx[0], IndexerGeometry) or idx[0].compress_ratio or idx[0].block_size:
            return None  # (no module rows time a compressed or block indexer)
        indexer = idx[0]
        # the indexer's wk + weights_proj GEMM stays in the model dtype whatever the checkpoint quantizes (vLLM
        # deepseek_v2.py Indexer: quant_config=None; so in the module the collector times): the projections' dtype
        # is o_proj's, and the others are it or the attention's
        if o_proj is None or {n.kernel.dtype for n in gemms} - {o_proj.kernel.dtype, attn.kernel.dtype}:
            return None
        gemms = [o_proj]
    if o_proj is None or len({n.kernel.dtype for n in gemms}) != 1:
        return None
    g = attn.kernel.geometry_as(AttentionGeometry)
    norms = [n.kernel.geometry_as(NormGeometry).width for n in members if n.kernel.kind is KernelKind.RMS_NORM]
    if g.kv_lora_rank in norms:
        norms.remove(g.kv_lora_rank)
    block = MlaModuleBlock(attn.kernel, o_proj.kernel.geometry_as(GemmGeometry).n, norms[0] if norms else 0,
                           gemms[0].kernel.dtype, tuple(n.kernel for n in members), tuple(n.name for n in members),
                           indexer=indexer)
    if has_rows is None:
        return block
    try:
        decode, prefill = block.keys(dt)
    except NoKernelKey:
        return block
    return replace(block, decode_rows=has_rows(decode), prefill_rows=has_rows(prefill))


def graph_mla_blocks(graph: Graph, dt: Dtypes, has_rows: HasRows | None) -> list[MlaModuleBlock]:
    """The MLA blocks of the graph's layer types (one per representative layer that has one)."""
    reps = graph.schedule.representative.values() if graph.schedule is not None else ()
    blocks = (mla_block([n for n in graph.nodes if n.layer == rep], dt, has_rows) for rep in reps)
    return [b for b in blocks if b is not None]


def _subset(arr: StepArrays, sel: np.ndarray) -> StepArrays:
    """The steps of `arr` holding only the sequence groups `sel` (tokens and sequences recounted)."""
    n = arr.n_steps
    step = arr.g_step[sel]
    tokens = np.bincount(step, weights=arr.g_new[sel] * arr.g_count[sel], minlength=n).astype(np.float64)
    seqs = np.bincount(step, weights=arr.g_count[sel], minlength=n).astype(np.float64)
    return StepArrays(tokens, seqs, step, arr.g_new[sel], arr.g_cached[sel], arr.g_count[sel])


def composite_rows(block: MlaModuleBlock, arr: StepArrays, dt: Dtypes) -> KernelRows:
    """Rows of a composite leaf: module rows for the groups they cover, the parts' rows for the rest."""
    decode_key, prefill_key = block.keys(dt)
    group = np.arange(len(arr.g_step))
    dec = arr.g_new == 1
    pre_whole = ~dec & (arr.g_cached == 0)
    parts: list[KeyRows] = []
    use_dec = dec if block.decode_rows else np.zeros_like(dec)
    dsa = block.indexer is not None
    if dsa:  # every prefill group, after a cached prefix or not, from the DSA rows (`_dsa_prefill_rows`)
        use_pre = ~dec if block.prefill_rows else np.zeros_like(dec)
    else:
        use_pre = pre_whole if block.prefill_rows else np.zeros_like(dec)
    kv_b = block.kv_b_proj()
    use_ctx = (~dec & (arr.g_cached > 0) if block.prefill_rows and kv_b is not None and not dsa
               else np.zeros_like(dec))
    if use_dec.any():
        coords = np.stack([arr.g_count[use_dec], arr.g_cached[use_dec] + 1], axis=1)
        parts.append(KeyRows(decode_key, coords, arr.g_step[use_dec], group[use_dec]))
    offset = len(group)
    floor: list[KeyRows] = []
    if use_pre.any() and dsa:
        pre, fresh = _dsa_prefill_rows(prefill_key, arr, use_pre, group, offset)
        offset += (len(pre) + len(fresh)) * len(group)
        floor = [*parts, *fresh]  # a chunk after a cached prefix never below the same chunk without it
        parts.extend(pre)
    elif use_pre.any():
        coords = np.stack([arr.g_count[use_pre], arr.g_new[use_pre], arr.g_new[use_pre]], axis=1)
        parts.append(KeyRows(prefill_key, coords, arr.g_step[use_pre], group[use_pre]))
    ctx_flops = None
    if use_ctx.any() and kv_b is not None:
        ctx, up = _context_rows(prefill_key, kv_b, arr, use_ctx, group, offset, dt)
        offset += 4 * (len(group) + arr.n_steps)
        # never below the same chunks without their prefix, the module rows at (count, n, n), plus what the chunk
        # runs beyond them: `kv_b_proj` on the p cached latents and the n queries' attention over the p cached keys
        # at the fastest attention rate the GPU was measured at (`context_attention_flops`); the other groups as
        # priced here (rows of one group: a step's floor is the sum of its groups')
        floor = [*parts, KeyRows(prefill_key, np.stack([arr.g_count[use_ctx], arr.g_new[use_ctx], arr.g_new[use_ctx]],
                                                       axis=1), arr.g_step[use_ctx], group[use_ctx]), *up]
        ctx_flops = context_attention_flops(block, arr, use_ctx)
        parts.extend(ctx)
        parts.extend(up)
    rest = ~(use_dec | use_pre | use_ctx)
    if rest.any():
        sub = _subset(arr, rest)
        present = np.zeros(arr.n_steps, dtype=bool)
        present[sub.g_step] = True
        for a in block.parts:
            kr = kernel_rows(a, sub, dt)
            if kr.missing:
                return kr
            for p in kr.parts:
                keep = present[p.step] & (p.coords >= 1).all(axis=1)
                if keep.any():
                    part = KeyRows(p.key, p.coords[keep], p.step[keep], p.order[keep] + offset)
                    parts.append(part)
                    if floor:
                        floor.append(part)
            offset += len(group) + arr.n_steps
    return KernelRows(tuple(parts), floor=tuple(floor), floor_attention_flops=ctx_flops)


# A DSA context row is the eager module's time (collect_mla_module.py run_mla_module: DSA context cases run without a
# CUDA graph), max(host, GPU): on the H200 vLLM table (aiconfigurator-core 0.12, DeepSeek-V3.2, 16 heads, bf16 KV)
# one sequence's row is flat at 1.45-1.67 ms up to 2,048 tokens (the Python of the module's un-compiled forward),
# then grows with the tokens, 0.85-0.93 ms per 1,024 (the GPU's work). A group's GPU time is read where the GPU
# dominates: from the row of m copies of it (m · count · n >= this many tokens, 8x that knee), divided by m. The
# collector's host time is not the server's: vLLM runs the module compiled and launches ahead of the GPU, and
# graphsim prices the engine's CPU apart (serving/host.py).
GPU_BOUND_TOKENS = 16384
MAX_ROW_BATCH = 256  # the collector's largest context batch (aiconfigurator's vLLM module sweep; the H200 table's)


def _dsa_prefill_rows(prefill_key: KernelKey, arr: StepArrays, sel: np.ndarray, group: np.ndarray,
                      offset: int) -> tuple[list[KeyRows], list[KeyRows]]:
    """Rows of the DSA prefill groups `sel` (n new tokens after p cached, `count` such sequences), and their floor.

    Each group's GPU time: the rows of m copies of it, T(m·count, n + p) − T(m·count, p) (the second 0 without a
    prefix: the tokens after p, their indexer scores over every earlier key and their top-k sparse attention), / m,
    with m the smallest making m·count·n >= `GPU_BOUND_TOKENS` (at most `MAX_ROW_BATCH` // count): the host time a
    row of one group carries is hidden there. The floor: the same chunks without their prefix, T(m·count, n) / m."""
    n, p, c, step = arr.g_new[sel], arr.g_cached[sel], arr.g_count[sel], arr.g_step[sel]
    cap = np.maximum(MAX_ROW_BATCH // np.maximum(c, 1), 1)
    m = np.clip(np.ceil(GPU_BOUND_TOKENS / np.maximum(c * n, 1)), 1, cap)
    out: list[KeyRows] = []
    fresh: list[KeyRows] = []
    k = 0
    for scale in np.unique(m):
        at = m == scale
        b, g, nn, pp, st = c[at] * scale, group[sel][at], n[at], p[at], step[at]
        out.append(KeyRows(prefill_key, np.stack([b, nn + pp, nn + pp], axis=1), st, g + offset + k * len(group),
                           weight=1.0 / scale))
        fresh.append(KeyRows(prefill_key, np.stack([b, nn, nn], axis=1), st, g + offset + (k + 1) * len(group),
                             weight=1.0 / scale))
        k += 2
        cached = pp > 0
        if cached.any():
            out.append(KeyRows(prefill_key, np.stack([b[cached], pp[cached], pp[cached]], axis=1), st[cached],
                               g[cached] + offset + k * len(group), weight=-1.0 / scale))
            k += 1
    return out, fresh


def context_attention_flops(block: MlaModuleBlock, arr: StepArrays, sel: np.ndarray) -> np.ndarray:
    """Per step, the FLOPs of the non-causal attention that the prefill groups `sel` (n new tokens after p cached,
    `count` such sequences) run over their cached prefix: 2 · count · heads · n · p · (qk head dim + v head dim)
    (vLLM's `_compute_prefill_context`: every new query against every cached key, un-absorbed)."""
    g = block.attention.geometry_as(AttentionGeometry)
    flops = 2.0 * arr.g_count[sel] * g.num_heads * arr.g_new[sel] * arr.g_cached[sel] * (g.head_dim + g.v_head_dim)
    return np.bincount(arr.g_step[sel], weights=flops, minlength=arr.n_steps).astype(np.float64)


def context_attention_rate(db: ProfileDB | None, hardware: HardwareSpec | None) -> tuple[float, int] | None:
    """(FLOPs per µs, source code) of the fastest attention prefill the GPU was measured at: the best row of the
    profile's attention_prefill table (full attention, any geometry; FLOPs as `roofline.kernel_work` counts them),
    `derived`; without such rows the hardware's bf16 dense peak, `roofline`; None without either. A composite
    MLA chunk's attention over its cached prefix runs no faster than that (KernelRows.floor_attention_flops). E.g.
    aiconfigurator-core 0.12's H200 vLLM tables: 771.5 TFLOP/s (FA3, 16 heads, 2 KV heads, head dim 256, 16,384
    tokens causal); the FlashAttention-3 paper's best BF16 forward on H100 is 740 TFLOP/s (Shah et al. 2024,
    arXiv 2407.08608, abstract)."""
    best = 0.0
    if db is not None:
        memo = (str(db.path), os.stat(db.path).st_mtime_ns)
        if memo not in _RATES:
            _RATES[memo] = _fastest_attention_prefill(db)
        best = _RATES[memo]
    if best > 0:
        return best, DERIVED
    peak = hardware.peak_flops(PeakClass.BF16) if hardware is not None else None
    return (peak / 1e6, ROOFLINE) if peak else None


_RATES: dict[tuple[str, int], float] = {}  # (profile path, mtime) → its fastest attention prefill row, FLOPs per µs


def _fastest_attention_prefill(db: ProfileDB) -> float:
    """FLOPs per µs of the profile's fastest full-attention prefill row (0.0 without one). Read through a connection
    of its own: reading every attention row must not enter `db.keys_read()` (predict checks the rows a prediction
    read, costing/predict.py `_checked_note`)."""
    best = 0.0
    with ProfileDB.open(db.path) as own:
        for key in own.keys(TableKind.ATTENTION_PREFILL):
            if not isinstance(key, AttentionPrefillKey) or key.window:
                continue
            rows = own.rows(key)
            work = kernel_work(key, rows.coords) if len(rows) else None
            if work is not None:
                best = max(best, float(np.max(work.flops / rows.times_us)))
    return best


def _context_rows(prefill_key: KernelKey, kv_b: KernelAttrs, arr: StepArrays, sel: np.ndarray, group: np.ndarray,
                  offset: int, dt: Dtypes) -> tuple[list[KeyRows], list[KeyRows]]:
    """Rows of the prefill groups `sel` (n new tokens after p cached): the module row at (count, n + p) less the
    row at (count, p), plus the row at (count, 1); and apart, `kv_b_proj` on the p cached latents of each sequence
    (see the module docstring)."""
    n, p, c, step = arr.g_new[sel], arr.g_cached[sel], arr.g_count[sel], arr.g_step[sel]
    whole = np.stack([c, n + p, n + p], axis=1)
    prefix = np.stack([c, p, p], axis=1)
    once = np.stack([c, np.ones_like(n), np.ones_like(n)], axis=1)
    out = [KeyRows(prefill_key, whole, step, group[sel] + offset),
           KeyRows(prefill_key, prefix, step, group[sel] + offset + len(group), weight=-1.0),
           KeyRows(prefill_key, once, step, group[sel] + offset + 3 * len(group) + arr.n_steps)]
    up: list[KeyRows] = []
    latents = StepArrays(np.bincount(step, weights=p * c, minlength=arr.n_steps).astype(np.float64),
                         np.bincount(step, weights=c, minlength=arr.n_steps).astype(np.float64),
                         step, p, np.zeros_like(p), c)
    kr = kernel_rows(kv_b, latents, dt)
    present = np.zeros(arr.n_steps, dtype=bool)
    present[step] = True
    for part in kr.parts:
        keep = present[part.step] & (part.coords >= 1).all(axis=1)
        if keep.any():
            up.append(KeyRows(part.key, part.coords[keep], part.step[keep],
                              part.order[keep] + offset + 2 * len(group), part.note, part.weight))
    return out, up


def composite_note(blocks: Sequence[MlaModuleBlock], dt: Dtypes) -> str:
    """A sentence for the data note: which MLA blocks are priced whole and which by parts."""
    if not blocks:
        return ""
    whole = [b for b in blocks if b.used]
    if whole:
        phases = {p for b in whole for p, ok in (("decode", b.decode_rows), ("prefill", b.prefill_rows)) if ok}
        names = "/".join(sorted({b.name for b in whole}))
        return (f"MLA attention blocks: measured {names} rows ({'/'.join(sorted(phases))}) replace their kernels")
    table = "dsa_module" if blocks[0].indexer is not None else "mla_module"
    try:
        key = blocks[0].keys(dt)[0]
        what = (f"heads={key.num_heads} kv_lora_rank={key.kv_lora_rank} hidden={key.hidden_size} "
                f"q_lora_rank={key.q_lora_rank} gemm={key.gemm_dtype.value}")
        if isinstance(key, DsaModuleDecodeKey):
            what += f" index={key.index_n_heads}x{key.index_head_dim} topk={key.index_topk}"
    except NoKernelKey:
        what = "its dtypes"
    return f"MLA attention blocks priced by their kernels (the profile has no {table} rows for {what})"
