"""Context parallel: a sequence's tokens and KV cache spread over ranks (vLLM's `--prefill-context-parallel-size`
and `--decode-context-parallel-size`, vllm/config/parallel.py ParallelConfig; RFC vllm-project/vllm#25749).

A deployment parameter on the same per-rank cost model (`CostModel`), no per-model code:

- **Prefill context parallel (PCP, P ranks, P× the GPUs: vLLM's world size is pp × tp × pcp).** Every sequence's
  new tokens are split into P chunks, one per rank; the per-token kernels of a rank see 1/P of the step's tokens.
  Attention runs as a ring (ring attention, Liu et al. 2023, arXiv:2310.01889): in round r a rank attends its
  query chunk to the KV chunk it holds while it sends that chunk to the next rank and receives the next one,
  so each round is Parallel(compute, send) and the rounds add. With the plain (not load-balanced) split the last
  rank attends to all P chunks — its own causal diagonal, then P − 1 full blocks — and sets the time (Max over
  ranks). A full c × c block is priced as the attention kernel's marginal time for c more cached tokens
  (SeqGroup(c, r·c) − SeqGroup(c, (r−1)·c): exactly c² more (query, key) pairs), never below its own roofline.
  The send moves a chunk's KV rows (c × the layer's KV bytes per token) over one link: latency + bytes / link
  bandwidth of the hardware spec's topology (roofline: no measured send rows). P − 1 sends; the last round
  sends nothing. The KV cache is sharded over the P ranks.
- **Decode context parallel (DCP, D ranks inside the TP group, no extra GPUs: tp % dcp == 0).** The KV cache is
  sharded along tokens over the D ranks that would otherwise hold copies of it (at most the ranks holding one KV
  head: all of TP for MLA); every attention leaf of the tree becomes (`dcp_attention`) an all-gather of the D
  ranks' queries, attention of H/tp × D heads over 1/D of every sequence's cached tokens, and the combine of
  the partial outputs with their log-sum-exp correction (all-gather of the LSEs, reduce-scatter of the
  outputs). The collectives are priced like every other collective of the tree (measured rows where the
  profile has them, the interconnect roofline otherwise). This is a tree transformation, so predict, the
  simulator's tables and search price it alike; KV capacity per rank grows D× (each rank holds 1/D of each
  sequence).

The ring's composition (Σ_r max(compute_r, send_r)) is computed here on top of the tree's own leaf prices; it is not
a node of the compiled tree (`cost_tree.Parallel` overlaps streams of one step, where every leaf is priced at that
step; a ring round prices attention at the round's own chunk).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from graphsim.costing.cost_model import CostModel
from graphsim.costing.cost_tree import Labeled, Leaf, Scale, Sum, Tree, price_leaves
from graphsim.costing.roofline import roofline_us
from graphsim.errors import GraphsimError
from graphsim.ir.geometry import AttentionGeometry, CollectiveGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.workload import SeqGroup, Step


class ContextParallelError(GraphsimError):
    """A context-parallel size the deployment cannot have."""


@dataclass(frozen=True)
class ContextParallel:
    """vLLM's `prefill_context_parallel_size` (extra ranks) and `decode_context_parallel_size` (inside TP)."""

    pcp: int = 1
    dcp: int = 1

    def check(self, tp: int) -> None:
        if self.pcp < 1 or self.dcp < 1:
            raise ContextParallelError(f"context-parallel sizes must be >= 1 (got pcp={self.pcp}, dcp={self.dcp})")
        if tp % self.dcp:
            raise ContextParallelError(f"--decode-context-parallel-size {self.dcp} must divide the tensor-parallel size "
                                       f"{tp} (vLLM shards the KV over ranks of the TP group); use a divisor of {tp}")

    @property
    def kv_capacity_factor(self) -> int:
        """Tokens a rank's KV cache holds, relative to one without context parallelism: 1/(pcp·dcp) of every
        sequence is on each rank."""
        return self.pcp * self.dcp


@dataclass
class RingRound:
    compute_us: float  # attention of the rank's query chunk on one KV chunk, all layers
    send_us: float  # passing that KV chunk on to the next rank, all layers (0 in the last round)

    @property
    def time_us(self) -> float:  # Parallel(compute, send)
        return max(self.compute_us, self.send_us)


@dataclass
class ContextParallelStep:
    """One step under context parallelism, per rank (the slowest)."""

    spec: str
    baseline_us: float  # the same step without context parallelism (the cost model's tree)
    other_us: float  # every kernel but attention, at the rank's share of the tokens
    attention_us: float  # PCP: Σ rounds; DCP: attention on the KV shard
    collectives_us: float  # DCP: q all-gather + LSE-corrected combine
    rounds: list[RingRound] = field(default_factory=list)
    sources: str = ""

    @property
    def total_us(self) -> float:
        return self.other_us + self.attention_us + self.collectives_us

    def to_json(self) -> dict:
        return {"spec": self.spec, "baseline_us": self.baseline_us, "total_us": self.total_us,
                "other_us": self.other_us, "attention_us": self.attention_us, "collectives_us": self.collectives_us,
                "rounds": [{"compute_us": r.compute_us, "send_us": r.send_us, "time_us": r.time_us}
                           for r in self.rounds], "sources": self.sources}


def ring_time_us(compute_us: np.ndarray, send_us: np.ndarray) -> float:
    """Σ over rounds of Parallel(compute, send): each round lasts as long as the longer of its attention and its
    KV transfer."""
    return float(np.maximum(np.asarray(compute_us, dtype=np.float64), np.asarray(send_us, dtype=np.float64)).sum())


def kv_bytes_per_token(g: AttentionGeometry, kv_elem_bytes: float) -> float:
    """KV-cache bytes one token adds to one layer on one rank: the MLA latent and rope key, or K and V heads."""
    if g.is_mla:
        return (g.kv_lora_rank + g.qk_rope_head_dim) * kv_elem_bytes
    return g.num_kv_heads * (g.head_dim + g.v_head_dim) * kv_elem_bytes


def _link(cm: CostModel) -> tuple[float, float]:
    hw = cm.hardware
    if hw is None or hw.interconnect_bandwidth_bytes_per_s <= 0:
        raise ContextParallelError("context parallel needs the GPU's interconnect to price the KV/query exchange; "
                                   "pass --gpu with a spec that states its interconnect")
    topo = hw.topology()
    return topo.link_bandwidth_bytes_per_s, topo.link_latency_us


def _attention_leaves(cm: CostModel) -> list[tuple[int, Leaf, float]]:
    t = cm.tree
    out = [(i, lf, float(t.multiplicity[i])) for i, lf in enumerate(t.leaves)
           if lf.attrs.kind is KernelKind.ATTENTION and lf.block is None]
    if not out:
        raise ContextParallelError(f"{cm.graph.name} has no softmax-attention kernel; context parallel splits "
                                   "attention (use a model with attention layers)")
    return out


def _non_attention_us(cm: CostModel, step: Step) -> tuple[float, float]:
    """(all kernels but attention, attention) µs of one step on the tree (attention summed over leaves)."""
    ev = cm.evaluate([step])
    t = ev.leaf_time_us[:, 0] * cm.tree.multiplicity
    attn = np.asarray([lf.attrs.kind is KernelKind.ATTENTION for lf in cm.tree.leaves])
    total = float(ev.total_us()[0])
    return total - float(np.nansum(t[attn])), float(np.nansum(t[attn]))


def _split(step: Step, parts: int) -> Step:
    return Step(tuple(SeqGroup(max(1, math.ceil(g.new_tokens / parts)), g.cached_tokens, g.count) for g in step.groups))


def prefill_context_parallel(cm: CostModel, step: Step, spec: str, pcp: int) -> ContextParallelStep:
    """A prefill step (no cached prefix) on `pcp` ranks by ring attention (module docstring)."""
    if any(g.new_tokens == 1 or g.cached_tokens for g in step.groups):
        raise ContextParallelError(f"{spec}: prefill context parallel here prices prefill chunks without a cached "
                                   "prefix (e.g. prefill:1x32768); price decode steps with "
                                   "--decode-context-parallel-size")
    base = float(cm.evaluate([step]).total_us()[0])
    other, _ = _non_attention_us(cm, _split(step, pcp))
    bw, lat = _link(cm)
    kv_bytes = cm.dtypes.kv.element_bytes
    rounds = [RingRound(0.0, 0.0) for _ in range(pcp)]
    attn, worst = 0.0, 0
    for _, lf, mult in _attention_leaves(cm):
        comp, send, src = _leaf_rounds(cm, lf, step, pcp, bw, lat, kv_bytes)
        worst = max(worst, src)
        attn += mult * ring_time_us(comp, send)  # each layer's rounds overlap that layer's own transfers
        for r in range(pcp):
            rounds[r].compute_us += mult * comp[r]
            rounds[r].send_us += mult * send[r]
    from graphsim.costing.interpolate import SOURCES

    return ContextParallelStep(spec, base, other, attn, 0.0, rounds,
                               f"attention {SOURCES[worst].value}; KV sends roofline (link {bw / 1e9:,.0f} GB/s, "
                               f"{lat:g} µs)")


def _leaf_rounds(cm: CostModel, lf: Leaf, step: Step, pcp: int, bw: float, lat: float,
                 kv_bytes: float) -> tuple[np.ndarray, np.ndarray, int]:
    """One layer of an attention leaf on the last rank: (compute µs per round, send µs per round, worst source).
    Round 0 is the rank's own causal diagonal; round r ≥ 1 a full c × c block against an earlier chunk, priced
    as the marginal time of c more cached tokens and never below that block's roofline."""
    g = lf.attrs.geometry_as(AttentionGeometry)
    comp, send, worst = np.zeros(pcp), np.zeros(pcp), 0
    for grp in step.groups:
        c = math.ceil(grp.new_tokens / pcp)
        t, s = price_leaves([lf], [Step((SeqGroup(c, r * c, grp.count),)) for r in range(pcp)], cm.pricer, cm.dtypes)
        worst = max(worst, int(s.max()))
        comp[0] += float(t[0, 0])
        for r in range(1, pcp):
            comp[r] += max(float(t[0, r] - t[0, r - 1]), _block_floor(cm, lf, c, grp.count))
        send[: pcp - 1] += lat + grp.count * c * kv_bytes_per_token(g, kv_bytes) / bw * 1e6
    return comp, send, worst


def _block_floor(cm: CostModel, lf: Leaf, c: int, count: int) -> float:
    """Roofline of a full c × c attention block: c² (query, key) pairs, a floor for its marginal time."""
    hw = cm.hardware
    if hw is None:
        return 0.0
    from graphsim.costing.kernel_map import StepArrays, kernel_rows

    total = 0.0
    for probe, sign in ((Step((SeqGroup(c, c, count),)), 1.0), (Step((SeqGroup(c, 0, count),)), -1.0)):
        kr = kernel_rows(lf.attrs, StepArrays.of([probe]), cm.dtypes)
        for part in kr.parts:
            r = roofline_us(hw, part.key, part.coords)
            if r is not None:
                total += sign * float(np.sum(r * part.weight))
    return max(total, 0.0)


def dcp_attention(leaf: Leaf, dcp: int, tp: int, name: str = "") -> Tree:
    """One attention leaf under decode context parallelism, per rank: Sum(all-gather of the D ranks' queries,
    attention of H/tp × D heads over 1/D of every sequence's cached tokens (`Leaf.kv_shards`), all-gather of the
    partial outputs' LSEs + reduce-scatter of the partial outputs (vLLM's LSE-corrected combine)). MLA attends in
    its latent space (absorbed): queries of kv_lora_rank + rope dims, outputs of kv_lora_rank dims per head."""
    g = leaf.attrs.geometry_as(AttentionGeometry)
    copies = tp if g.is_mla else g.kv_replicas  # ranks of the TP group holding the same KV (MLA: all of them)
    if dcp > copies:
        raise ContextParallelError(
            f"--decode-context-parallel-size {dcp}: at tp={tp} each KV head of {name or 'the model'} is held by "
            f"{copies} rank(s); DCP shards those copies along tokens, so it can be at most {copies} "
            "(vLLM's DCP removes the KV duplication within the TP group)")
    heads = g.num_heads * dcp
    q_dim = g.kv_lora_rank + g.qk_rope_head_dim if g.is_mla else g.head_dim
    o_dim = g.kv_lora_rank if g.is_mla else g.v_head_dim
    act = 2  # bf16 queries and outputs; LSEs fp32

    def coll(kind: KernelKind, what: str, width: int, bytes_per_row: int) -> Leaf:
        geo = CollectiveGeometry(num_gpus=dcp, group="dcp", width=width, bytes_per_row=bytes_per_row, reason=what)
        return Leaf(f"{leaf.name}.dcp_{what}", KernelAttrs(kind, kind.value, geo, "bf16", Rows.TOKENS,
                                                           rule=_DCP_RULE), leaf.layer)

    attn = replace(leaf, attrs=replace(leaf.attrs, geometry=replace(g, num_heads=heads)), kv_shards=dcp)
    return Sum((coll(KernelKind.ALL_GATHER, "q", heads * q_dim, heads * q_dim * act), attn,
                coll(KernelKind.ALL_GATHER, "lse", heads, heads * 4),
                coll(KernelKind.REDUCE_SCATTER, "out", heads * o_dim, heads * o_dim * act)))


_DCP_RULE = ("decode context parallel (vllm/config/parallel.py decode_context_parallel_size): queries all-gathered "
             "over the DCP group, partial outputs combined with their LSE (all-gather of the LSEs, reduce-scatter "
             "of the outputs)")


def _map_leaves(tree: Tree, f) -> Tree:
    if isinstance(tree, Leaf):
        return f(tree)
    if isinstance(tree, (Scale, Labeled)):
        return replace(tree, child=_map_leaves(tree.child, f))
    return replace(tree, children=tuple(_map_leaves(c, f) for c in tree.children))


def with_decode_context_parallel(cm: CostModel, dcp: int) -> CostModel:
    """`cm` with its KV sharded over `dcp` ranks of the TP group: every attention leaf becomes `dcp_attention`
    (MLA blocks priced by their kernels: whole-module rows cannot be sharded). `dcp` 1: `cm` itself."""
    ContextParallel(dcp=dcp).check(cm.tp)
    if dcp == 1:
        return cm
    from graphsim.costing.cost_tree import build_tree, compile_tree

    tree = build_tree(cm.graph, cm.dtypes, None, _streams(cm))
    tree = _map_leaves(tree, lambda lf: dcp_attention(lf, dcp, cm.tp, cm.graph.name)
                       if lf.attrs.kind is KernelKind.ATTENTION else lf)
    note = f"decode context parallel {dcp}: KV sharded over {dcp} ranks of the TP group"
    return replace(cm, tree=compile_tree(tree), data_note=f"{cm.data_note}; {note}" if cm.data_note else note)


def _streams(cm: CostModel):
    from graphsim.costing.streams import StreamSettings

    if cm.graph.meta.fuse_target != "vllm":
        return None
    return cm.stream_settings or StreamSettings(cuda=bool(cm.streams))


def per_kernel(cm: CostModel) -> CostModel:
    """`cm` with every MLA block priced by its kernels (not by composite module rows): context parallelism
    reshapes the attention kernel alone, so the baseline it is compared with is priced the same way."""
    if not any(lf.block is not None for lf in cm.tree.leaves):
        return cm
    from graphsim.costing.cost_tree import build_tree, compile_tree

    return replace(cm, tree=compile_tree(build_tree(cm.graph, cm.dtypes, None, _streams(cm))))


def context_parallel_steps(cm: CostModel, steps: list[Step], specs: list[str], cp: ContextParallel
                           ) -> list[ContextParallelStep]:
    """The prefill steps (no cached prefix) under prefill context parallelism (none when pcp is 1); decode context
    parallelism is in the cost model's tree itself (`with_decode_context_parallel`)."""
    cp.check(cm.tp)
    if cp.pcp == 1:
        return []
    cm = per_kernel(cm)
    return [prefill_context_parallel(cm, step, spec, cp.pcp) for step, spec in zip(steps, specs, strict=True)
            if not any(g.new_tokens == 1 for g in step.groups)]
