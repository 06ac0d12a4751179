"""Necessary-work rows: the accountant's work split finely enough to say where each part lands.

A location map assigns *rows* to CostTree locations. A row is the accountant's own work for one
parameter module in one fold region (`attn.qkv:self_attn.q_proj`, weight and bias together), the
weightless attention core of a region (`attn.core:compute`: scores and values or the recurrence,
and the KV/state traffic), or one segment outside the layers (`embed`, `final_norm`, `head`).
Every number comes from the accountant's arithmetic (`graphsim.work`): this module only chooses the
granularity. The rows of a deployment add up, field by field, to the accountant's report for the
same step (`reconcile`), which is what `graphsim work` prints.

Regions are the fold pass's layer tags (`full.dense`, `sliding.moe`, …); a region's rows are the
per-layer work of the accountant's layer spec times the layers the region stands for.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from graphsim.errors import GraphsimError
from graphsim.work.account import _weight_work  # the accountant's per-weight arithmetic, reused as is
from graphsim.work.api import Accounting
from graphsim.work.attention_work import CoreWork, attention_core, compressed_core_parts
from graphsim.work.dtypes import Precision
from graphsim.work.linear_work import block_indexer_core
from graphsim.work.report import SegmentWork, WorkReport
from graphsim.work.specs import (
    AttentionKind, AttentionSpec, CompressedAttention, GqaAttention, LayerGroup, LayerSpec, MlaAttention,
    ParallelMixers, Weight, WeightKind,
)
from graphsim.work.weights import BLOCK_NORMS, PlacedWeight, layer_block_weights
from graphsim.workload import SeqGroup, Step

OUTSIDE = "outside"  # the region of everything before and after the layer stack
OUTSIDE_SEGMENTS = ("embed", "final_norm", "head")
CORE_MODULE = "compute"  # module name of the weightless attention-core row
INDEXER_MODULE = "indexer"  # a DSA / block indexer's scoring and key-cache traffic (`_split_indexer`)
PARALLEL_SSM_MODULE = "ssm"  # the Mamba2 recurrence of a layer that runs it beside attention (`_split_indexer`)
# DeepSeek-V4: each compressor's pooling, entry writes and fp32 state (`_split_indexer`)
COMPRESSOR_MODULE, INDEX_COMPRESSOR_MODULE = "compressor", "index_compressor"
WORK_NUMBERS = tuple(f.name for f in fields(SegmentWork) if f.name != "name")


class UnsupportedDeployment(GraphsimError):
    """The analyzer cannot tie this deployment's kernels to the accountant's work."""


@dataclass(frozen=True)
class Row:
    """One necessary-work row of one region; `ref` is how a location map names it."""

    region: str
    ref: str  # "attn.qkv:self_attn.q_proj", "attn.core:compute", or an outside segment ("head")
    segment: str  # the accountant segment it belongs to ("layers[moe].ffn.routed")
    work: SegmentWork

    @property
    def part(self) -> str:
        """`attn.qkv` of `attn.qkv:self_attn.q_proj`; the segment itself outside the layers."""
        return self.ref.split(":", 1)[0]

    @property
    def key(self) -> tuple[str, str]:
        return self.region, self.ref


@dataclass(frozen=True)
class RowSet:
    rows: tuple[Row, ...]
    report: WorkReport  # the accountant's report for the same step (what `graphsim work` prints)

    def of_region(self, region: str) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.region == region)

    @property
    def regions(self) -> tuple[str, ...]:
        """Each region once, in order of first appearance."""
        return tuple(dict.fromkeys(r.region for r in self.rows))


def region_layers(tags: tuple[str, ...] | list[str]) -> dict[str, tuple[int, ...]]:
    """Fold tag per layer → the layer indices of each tag, in first-appearance order."""
    out: dict[str, list[int]] = {}
    for i, tag in enumerate(tags):
        out.setdefault(tag, []).append(i)
    return {tag: tuple(idx) for tag, idx in out.items()}


def _group_of(groups: tuple[LayerGroup, ...], spec: LayerSpec) -> LayerGroup:
    for g in groups:
        if g.spec == spec:
            return g
    raise AssertionError("layer spec without a group")  # pragma: no cover - groups cover every layer


def _split_indexer(attn: AttentionSpec, seqs: SeqGroup, precision: Precision, core: CoreWork) -> list[tuple[str, CoreWork]]:
    """The core row, or the core without its indexer and the indexer's own row for a layer whose indexer
    vLLM runs as its own kernel; the two always add up to the accountant's core.

    - DSA (DeepSeek-V3.2, GLM-5): vLLM models/deepseek_v2.py Indexer → sparse_attn_indexer, apart from the
      sparse MLA over the top-k positions. The core of the same layer with the indexer marked shared (it
      then reuses another layer's top-k: `DsaIndexer.shared`) is the core without the indexer's scoring
      and key cache, from the accountant's own arithmetic.
    - MiniMax-M3's block indexer (block_sparse_indexer): its part of the core is `block_indexer_core`,
      the same function the accountant's `block_sparse_core` adds in.
    - DeepSeek-V4's compressed attention: the attention (FlashMLA sparse over window + entries), each
      compressor (vLLM's deepseek_compressor kernels: the attention's, and on CSA layers the indexer's) and the
      indexer's scoring (sparse_attn_indexer) are four kernels; `compressed_core_parts` is the accountant's own
      split of `_compressed_core` (which sums it).
    - Falcon-H1's parallel mixers: the attention and the Mamba2 recurrence (flash attention and vLLM's
      mamba_mixer2 kernels), each the accountant's own core of that mixer (`attention_core` sums the two)."""
    if isinstance(attn, ParallelMixers):  # Falcon-H1: attention and Mamba2 side by side, each its own vLLM kernel
        return [(CORE_MODULE, attention_core(attn.attn, seqs, precision)),
                (PARALLEL_SSM_MODULE, attention_core(attn.mamba, seqs, precision))]
    if isinstance(attn, CompressedAttention):
        parts = compressed_core_parts(attn, seqs.new_tokens, seqs.cached_tokens, seqs.count)
        names = {"compute": CORE_MODULE, "compressor": COMPRESSOR_MODULE,
                 "index_compressor": INDEX_COMPRESSOR_MODULE, "indexer": INDEXER_MODULE}
        return [(names[k], w) for k, w in parts.items()]
    if isinstance(attn, MlaAttention) and attn.indexer is not None and not attn.indexer.shared:
        rest = attention_core(replace(attn, indexer=replace(attn.indexer, shared=True)), seqs, precision)
    elif isinstance(attn, GqaAttention) and attn.block_indexer is not None:
        f, r, w = block_indexer_core(attn.block_indexer, seqs.new_tokens, seqs.cached_tokens, seqs.count, precision)
        rest = CoreWork(core.flops - f, core.state_read_bytes - r, core.state_write_bytes - w)
    else:
        return [(CORE_MODULE, core)]
    return [(CORE_MODULE, rest), (INDEXER_MODULE, CoreWork(core.flops - rest.flops,
                                                          core.state_read_bytes - rest.state_read_bytes,
                                                          core.state_write_bytes - rest.state_write_bytes))]


def _add(rows: dict[str, Row], region: str, ref: str, segment: str, work: SegmentWork) -> None:
    work = SegmentWork(segment, **{k: getattr(work, k) for k in WORK_NUMBERS})
    if ref in rows:
        work = rows[ref].work + work
    rows[ref] = Row(region, ref, segment, work)


def necessary_rows(acc: Accounting, step: Step, layer_tags: tuple[str, ...] | list[str]) -> RowSet:
    """The rows of every region of a folded deployment whose layers carry `layer_tags`.

    Raises `UnsupportedDeployment` when the fold and the accountant disagree about the stack
    (different depth, or one fold region holding layers the accountant tells apart)."""
    spec, precision = acc.spec, acc.precision
    layers = spec.stack.layers
    if len(layer_tags) != len(layers):
        raise UnsupportedDeployment(
            f"the folded graph has {len(layer_tags)} layers but the accountant counts {len(layers)}; "
            "no location map can tie them together")
    groups = spec.stack.groups()
    out: list[Row] = []
    for region, indices in region_layers(layer_tags).items():
        if region == OUTSIDE:
            raise UnsupportedDeployment(f"a fold region is named '{OUTSIDE}', which the analyzer reserves")
        specs = {layers[i] for i in indices}
        if len(specs) != 1:
            raise UnsupportedDeployment(
                f"fold region '{region}' holds layers the accountant tells apart "
                f"({', '.join(sorted({spec.stack.schedule()[i] for i in indices}))}); the fold and the accountant "
                "must agree on layer types before a location map can apply")
        layer = layers[indices[0]]
        group = _group_of(groups, layer)
        count = len(indices)
        rows: dict[str, Row] = {}
        prefix = f"model.layers.{group.first_index}"
        for block, weights in layer_block_weights(spec, layer):
            for w in weights:
                segment = group.segment(block, w.part)
                # a LayerNorm's bias where the model has them (`model_weights`: ModelSpec.norm_bias), in its norm's row
                biased = spec.norm_bias and w.kind is WeightKind.NORM and w.module in BLOCK_NORMS
                for one in (w, Weight(w.part, w.module, WeightKind.BIAS, w.shape)) if biased else (w,):
                    placed = PlacedWeight(segment, f"{prefix}.{w.module}", one, count)
                    _add(rows, region, f"{block}.{w.part}:{w.module}", segment,
                         _weight_work(placed, step, precision, spec.vocab))
        core_segment = group.segment("attn", "core")
        for seqs in step.groups if layer.attn.kind is not AttentionKind.NONE else ():
            core = attention_core(layer.attn, seqs, precision)
            for module, w in _split_indexer(layer.attn, seqs, precision, core):
                _add(rows, region, f"attn.core:{module}", core_segment,
                     SegmentWork(core_segment, flops=w.flops * count, state_read_bytes=w.state_read_bytes * count,
                                 state_write_bytes=w.state_write_bytes * count))
        out.extend(rows.values())
    report = acc.step(step)
    for name in OUTSIDE_SEGMENTS:
        try:
            work = report.segment(name)
        except KeyError:
            continue
        out.append(Row(OUTSIDE, name, name, work))
    return RowSet(tuple(out), report)


@dataclass(frozen=True)
class Reconciliation:
    """The analyzer's rows summed per segment against the accountant's report for the same step."""

    ok: bool
    max_relative_deviation: float
    mismatches: tuple[str, ...]  # "segment.field: rows X vs accountant Y"

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "max_relative_deviation": self.max_relative_deviation,
                "mismatches": list(self.mismatches)}


def reconcile(consumed: list[Row] | tuple[Row, ...], report: WorkReport, rel_tol: float = 1e-9) -> Reconciliation:
    """Compare rows (as consumed by a location map) with the accountant's segments, field by field."""
    sums: dict[str, SegmentWork] = {}
    for r in consumed:
        sums[r.segment] = sums[r.segment] + r.work if r.segment in sums else r.work
    worst = 0.0
    bad: list[str] = []
    names = [s.name for s in report.segments]
    for name in names + [n for n in sums if n not in names]:
        want = report.segment(name) if name in names else SegmentWork(name)
        got = sums.get(name, SegmentWork(name))
        for f in WORK_NUMBERS:
            a, b = float(getattr(got, f)), float(getattr(want, f))
            dev = abs(a - b) / max(abs(b), 1.0)
            worst = max(worst, dev)
            if dev > rel_tol:
                bad.append(f"{name}.{f}: rows {a:.6g} vs accountant {b:.6g}")
    return Reconciliation(not bad, worst, tuple(bad))
